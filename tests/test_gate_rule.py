"""The gate's rule on synthetic baselines: thresholds from each band's measured noise, the
statuses that never fail a run (insufficient data, informational), and the rolling window
whose bands learn how the machines of a hardware key differ."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from test_compare import KEY, bench, run, write

from numabench.cli import main
from numabench.errors import UsageError
from numabench.gate.band import GATED, INFORMATIONAL, INSUFFICIENT, Band, GateRule, spread_pct
from numabench.gate.rule import SAME, SLOWER, confirm, judge_entry
from numabench.gate.table import render_github, render_markdown, to_json
from numabench.results.compare import compare_runs
from numabench.gate.invocations import INVOCATION_MACHINES, INVOCATION_MEDIANS, INVOCATION_SOURCES
from numabench.results.merge import merge_runs
from numabench.results.window import BASELINE, learn, members

RULE = GateRule()


def entry(invocations: list[float], machines: list[str | None] | None = None, runs: int = 2,
          rounds: list[float] | None = None) -> dict:
    b = bench("h2d", 1, "default", rounds or [invocations[0]] * 3, invocations=invocations, runs=runs)
    if machines is not None:
        b["extra_info"][INVOCATION_MACHINES] = machines
    return b


# -- the noise of a band and the threshold it sets -------------------------------------------

def test_spread_is_the_standard_deviation_of_invocations_floored_by_the_rounds():
    assert spread_pct([1.0, 1.0, 1.0]) == 0.0
    assert spread_pct([0.99, 1.00, 1.01]) == pytest.approx(1.0)
    # invocations that agree by chance: the rounds (sigma ~10%, 25 per invocation) say a median moves ~2.5%
    rng = random.Random(1)
    rounds = [1 + rng.gauss(0, 0.10) for _ in range(75)]
    assert 2.0 < spread_pct([1.0, 1.0, 1.0], rounds) < 3.2


def test_thin_wide_and_quiet_bands():
    quiet = Band.of_entry(entry([1.00e-3, 1.01e-3, 0.995e-3]))
    assert RULE.status_of(quiet, None) == (GATED, "")
    assert RULE.threshold_of(quiet) == 3.0  # its own noise (0.8%) x 3 is below the floor
    assert RULE.detectable_of(quiet) == pytest.approx((1.01 / 1.0 * 1.03 - 1) * 100)
    wide = Band.of_entry(entry([1.00e-3, 1.04e-3, 0.97e-3, 1.02e-3]))
    assert RULE.threshold_of(wide) == pytest.approx(3 * wide.spread_pct) and RULE.threshold_of(wide) > 8
    status, why = RULE.status_of(Band.of_entry(entry([1.0e-3, 1.1e-3, 0.9e-3])), None)
    assert status == INFORMATIONAL and "spread 10.0%" in why and "coarser than 10%" in why
    assert RULE.status_of(Band.of_entry(entry([1.0e-3, 1.01e-3])), None)[0] == INSUFFICIENT  # 2 invocations
    status, why = RULE.status_of(Band.of_entry(entry([1.0e-3, 1.01e-3, 1.0e-3], runs=1)), None)
    assert status == INSUFFICIENT and "1 run" in why  # one session: the drift between sessions is unknown


def test_one_machine_judges_only_itself():
    one = Band.of_entry(entry([1.00e-3, 1.01e-3, 0.995e-3], machines=["a", "a", "a"]))
    assert RULE.status_of(one, "a")[0] == GATED
    status, why = RULE.status_of(one, "b")
    assert status == INSUFFICIENT and "one machine" in why
    two = Band.of_entry(entry([1.00e-3, 1.01e-3, 0.995e-3], machines=["a", "c", "c"]))
    assert RULE.status_of(two, "b")[0] == GATED
    unknown = Band.of_entry(entry([1.00e-3, 1.01e-3, 0.995e-3]))  # saved before machines were recorded
    assert RULE.status_of(unknown, "b")[0] == GATED


def test_a_change_inside_an_entrys_own_noise_is_not_flagged_and_a_real_one_is():
    rule = GateRule(coarsest_pct=15.0)
    wide = entry([1.00e-3, 1.04e-3, 0.97e-3, 1.02e-3])  # spread 3%: threshold ~9% beyond 1.04
    assert RULE.status_of(Band.of_entry(wide), None)[0] == INFORMATIONAL  # detects 14%: not by default
    assert judge_entry("n", "f", wide, [1.10e-3], rule).verdict == SAME  # +10% vs centre: inside its noise
    row = judge_entry("n", "f", wide, [1.20e-3], rule)
    assert row.verdict == SLOWER and row.regression and row.threshold_pct == pytest.approx(rule.threshold_of(
        Band.of_entry(wide)))
    quiet = entry([1.00e-3, 1.005e-3, 0.998e-3])
    assert judge_entry("n", "f", quiet, [1.06e-3], RULE).verdict == SLOWER  # 6% beyond a quiet band


def test_a_noisy_new_run_is_judged_with_its_own_noise():
    """The same +8% new value: flagged when its rounds are tight, not when they scatter (a
    neighbour on a shared runner) as much as its excess; the confirmation likewise."""
    quiet = entry([1.00e-3, 1.005e-3, 0.998e-3])
    tight = [1.08e-3 * (1 + 0.002 * (i % 5 - 2)) for i in range(10)]
    scattered = [1.08e-3 * (1 + 0.15 * (i % 5 - 2)) for i in range(10)]
    assert judge_entry("n", "f", quiet, [1.08e-3], RULE, new_rounds=tight).verdict == SLOWER
    row = judge_entry("n", "f", quiet, [1.08e-3], RULE, new_rounds=scattered)
    assert row.verdict == SAME and row.threshold_pct > 10
    flagged = judge_entry("n", "f", quiet, [1.08e-3], RULE, new_rounds=tight)
    assert not confirm(flagged, [1.08e-3], scattered).regression
    assert confirm(judge_entry("n", "f", quiet, [1.08e-3], RULE), [1.08e-3], tight).regression


def test_statuses_never_fail_a_run_and_every_output_says_so():
    base = run([bench("h2d", 1, "default", [1e-3] * 3, invocations=[1.0e-3, 1.01e-3, 1.0e-3]),
                bench("d2h", 1, "default", [1e-3] * 3, invocations=[1.0e-3]),  # one invocation
                bench("step", 1, "default", [1e-3] * 3, invocations=[1.0e-3, 1.2e-3, 0.8e-3])])  # 20% spread
    new = run([bench("h2d", 1, "default", [1e-3] * 3, invocations=[1.0e-3]),
               bench("d2h", 1, "default", [2e-3] * 3, invocations=[2.0e-3]),
               bench("step", 1, "default", [2e-3] * 3, invocations=[2.0e-3])])
    res = compare_runs(base, new)
    assert [r.verdict for r in res.rows] == [SAME, INSUFFICIENT, INFORMATIONAL]
    assert [r.direction for r in res.rows] == [None, SLOWER, SLOWER] and res.exit_code == 0
    md = render_markdown(res)
    assert "> [!WARNING]" in md and "refresh-baseline" in md and "insufficient data (slower)" in md
    gh = render_github(res)
    assert "::error" not in gh and gh.count("::warning title=numabench: not gated::") == 2
    data = to_json(res)
    assert data["exit_code"] == 0 and len(data["warnings"]) == 2
    by = {e["name"].split("[")[1].split("-")[0]: e for e in data["entries"]}
    assert by["d2h"]["gated"] is False and by["d2h"]["why"].startswith("band of 1 invocation")
    assert by["step"]["spread_pct"] == pytest.approx(20.0) and by["h2d"]["detectable_pct"] < 5


def test_recorded_rule_is_the_offline_default():
    base = run([bench("h2d", 1, "default", [1e-3] * 3, invocations=[1.0e-3, 1.01e-3, 1.0e-3])])
    new = run([bench("h2d", 1, "default", [1.1e-3] * 3, invocations=[1.1e-3])])
    assert compare_runs(base, new).exit_code == 1
    new["benchmarks"][0]["extra_info"]["gate"] = {"threshold_pct": 20.0, "coarsest_pct": 30.0}
    res = compare_runs(base, new)
    assert res.rule.threshold_pct == 20.0 and res.rule.coarsest_pct == 30.0 and res.exit_code == 0
    assert compare_runs(base, new, threshold="3%").exit_code == 1


def test_merge_labels_each_invocation_with_its_machine(tmp_path):
    a = run([bench("h2d", 1, "default", [1e-3] * 3, invocations=[1.0e-3, 1.01e-3], runs=1)])
    a["machine_info"]["numabench"]["machine_instance"] = "vm-a"
    b = run([bench("h2d", 1, "default", [1e-3] * 3, invocations=[1.02e-3], runs=1),
             bench("d2h", 1, "default", [1e-3] * 3, invocations=[1.0e-3], runs=1)])
    b["machine_info"]["numabench"]["machine_instance"] = "vm-b"
    b["datetime"] = "2026-11-22T00:00:00"
    for b_ in (*a["benchmarks"], *b["benchmarks"]):
        b_["extra_info"].pop(INVOCATION_SOURCES)
    merged = merge_runs([write(tmp_path, "a.json", a), write(tmp_path, "b.json", b)]).run
    by = {x["extra_info"]["phase"]: x["extra_info"] for x in merged["benchmarks"]}
    assert by["h2d"][INVOCATION_MACHINES] == ["vm-a", "vm-a", "vm-b"]
    assert len(set(by["h2d"][INVOCATION_SOURCES])) == 2
    assert by["d2h"][INVOCATION_MACHINES] == ["vm-b"]  # one run's entry keeps its own machine
    band = Band.of_entry(merged["benchmarks"][1])
    assert band.runs == 2 and band.machines == {"vm-a", "vm-b"} and not band.unknown_machines


# -- the rolling window ---------------------------------------------------------------------------

def _gated_run(tmp_path: Path, name: str, machine: str, when: str, values: dict[str, float],
               verdict: str = "same") -> str:
    """A gated CI run as .ci/gate-job writes it: one invocation per entry, its verdict recorded."""
    r = run([bench(phase, 1, "default", [v] * 3, invocations=[v], runs=1) for phase, v in values.items()])
    for b in r["benchmarks"]:
        b["extra_info"].pop(INVOCATION_SOURCES)
        b["extra_info"]["gate"] = {"verdict": verdict, "confirmation": verdict if verdict == SLOWER else None,
                                   "threshold_pct": 3.0}
    r["machine_info"]["numabench"]["machine_instance"] = machine
    r["datetime"] = when
    return write(tmp_path, name, r)


def test_window_learns_how_machines_differ_and_forgets_the_oldest(tmp_path):
    seed = run([bench("h2d", 1, "default", [1e-3] * 3, invocations=[1.0e-3, 1.005e-3, 1.002e-3], runs=1)])
    seed["machine_info"]["numabench"]["machine_instance"] = "vm-0"
    seed_path = write(tmp_path, "0001_committed.json", seed)
    window = tmp_path / "window"
    # the seed: one run of one machine; a fresh runner gets "insufficient data" against it
    first = _gated_run(tmp_path, "run1.json", "vm-1", "2026-11-23T01:00:00", {"h2d": 1.06e-3})
    new = json.loads(Path(first).read_text())
    row = compare_runs(seed, new).rows[0]
    assert row.verdict == INSUFFICIENT
    res = learn(window, first, keep=3, seed=seed_path)
    assert [m.split("_", 1)[0] for m in res.members] == ["0001", "0002"] and res.entries == 1
    pooled = json.loads((window / BASELINE).read_text())
    band = Band.of_entry(pooled["benchmarks"][0])
    assert band.invocations == 4 and band.runs == 2 and band.machines == {"vm-0", "vm-1"}
    assert "gate" not in pooled["benchmarks"][0]["extra_info"]  # members keep measurements, not verdicts
    # learnt twice: one member
    assert learn(window, first, keep=3).members == res.members
    # the window now knows 6% between machines: a third machine 6% slow is within its noise
    second = _gated_run(tmp_path, "run2.json", "vm-2", "2026-11-23T02:00:00", {"h2d": 1.06e-3})
    row = compare_runs(pooled, json.loads(Path(second).read_text())).rows[0]
    assert row.verdict in (SAME, INFORMATIONAL) and not row.regression
    learn(window, second, keep=3)
    third = _gated_run(tmp_path, "run3.json", "vm-3", "2026-11-23T03:00:00", {"h2d": 1.03e-3, "d2h": 2e-3})
    res = learn(window, third, keep=3)
    assert res.dropped == [res.dropped[0]] and res.dropped[0].startswith("0001_")  # the seed left first
    assert len(members(window)) == 3
    pooled = json.loads((window / BASELINE).read_text())
    meds = {b["extra_info"]["phase"]: b["extra_info"][INVOCATION_MEDIANS] for b in pooled["benchmarks"]}
    assert meds == {"h2d": [1.06e-3, 1.06e-3, 1.03e-3], "d2h": [2e-3]}


def test_window_refuses_what_did_not_pass(tmp_path, capsys):
    window = tmp_path / "w"
    bad = _gated_run(tmp_path, "bad.json", "vm-1", "2026-11-23T01:00:00", {"h2d": 2e-3}, verdict=SLOWER)
    with pytest.raises(UsageError, match="confirmed regression"):
        learn(window, bad)
    ok = _gated_run(tmp_path, "ok.json", "vm-1", "2026-11-23T01:00:00", {"h2d": 1e-3})
    learn(window, ok)
    foreign = json.loads(Path(ok).read_text())
    foreign["machine_info"]["numabench"]["hardware_key"] = "H200x2_other_1node_cuda13"
    foreign["datetime"] = "2026-11-23T05:00:00"
    with pytest.raises(UsageError, match="one hardware key"):
        learn(window, write(tmp_path, "foreign.json", foreign))
    nodata = json.loads(Path(ok).read_text())
    nodata["datetime"] = "2026-11-23T06:00:00"
    del nodata["benchmarks"][0]["stats"]["data"]
    assert main(["learn", write(tmp_path, "nodata.json", nodata), "--window", str(window)]) == 2
    assert "--benchmark-save-data" in capsys.readouterr().err
    assert main(["learn", ok, "--window", str(window), "--keep", "0"]) == 2
    assert len(members(window)) == 1


def test_window_seeded_from_a_baselines_folder(tmp_path, capsys):
    store = tmp_path / "baselines" / KEY / "Linux-CPython-3.12-64bit"
    store.mkdir(parents=True)
    seed = run([bench("h2d", 1, "default", [1e-3] * 3, invocations=[1.0e-3, 1.01e-3, 1.0e-3])])
    (store / "0001_old.json").write_text(json.dumps(seed))
    (store / "0002_new.json").write_text(json.dumps(seed))
    ok = _gated_run(tmp_path, "ok.json", "vm-1", "2026-11-23T01:00:00", {"h2d": 1e-3})
    assert main(["learn", ok, "--window", str(tmp_path / "w"), "--seed", str(tmp_path / "baselines")]) == 0
    out = capsys.readouterr().out
    assert "0001_0002_new.json" in out and "0002_ok.json" in out and "--benchmark-compare=" in out


def test_window_keeps_a_run_once_whatever_it_is_handed_as(tmp_path):
    """A copy under another name is learnt before; a merge of a member and another run is refused
    (it was pooled: the member's invocations counted twice)."""
    window = tmp_path / "w"
    first = _gated_run(tmp_path, "run1.json", "vm-1", "2026-11-23T01:00:00", {"h2d": 1.0e-3})
    res = learn(window, first)
    copy = tmp_path / "renamed.json"
    copy.write_text(Path(first).read_text())
    again = learn(window, copy)
    assert again.members == res.members and len(members(window)) == 1
    other = _gated_run(tmp_path, "run2.json", "vm-2", "2026-11-23T02:00:00", {"h2d": 1.01e-3})
    merged = tmp_path / "merged.json"
    merged.write_text(json.dumps(merge_runs([first, other]).run))
    with pytest.raises(UsageError, match=r"it holds the run of 2026-11-23T01:00:00 .* the window holds already as "
                                         r"0001_run1\.json"):
        learn(window, merged)
    assert len(members(window)) == 1
