"""The gate in a pytest session on given timings: every verdict of ``pytest benchmarks
--benchmark-compare`` (same, faster, slower and confirmed, slower and not confirmed,
informational, insufficient data on a band of one session, upstream --benchmark-compare-fail)
with its table, its record in extra_info["gate"], the offline compare of that record, and the
exit code. The suite runs as a user runs it, but its worker runs are replaced by a fake clock
(tests/fake_timings.py), so each verdict is decided by the numbers written here, never by the
load of the machine: these tests run in the parallel stage. The gate on real timings:
tests/test_regression_gate.py.

The baseline: touch at 1M, 2M and 4M elements, 2 sessions of 3 invocations each, merged;
``quiet`` (1M) and ``second`` (4M) spread ~0.7% between invocations (gated: threshold 3%),
``noisy`` (2M) ~18% (informational: it cannot detect 10%).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from fake_timings import ENV

from numabench.cases import Case, CaseResult
from numabench.cli import main
from numabench.gate.confirm import MAX_CONFIRM_BATCHES, gate_of_baseline, judge_and_confirm
from numabench.gate.rule import SLOWER, UNRESOLVED
from numabench.gate.table import render, render_markdown
from numabench.numa.policy import Policy
from numabench.results.compare import compare_runs

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.xdist_group("gate-session")  # one worker builds the module's baseline once
CASES = {"quiet": "np1-1M-default-fp32", "noisy": "np1-2M-default-fp32", "second": "np1-4M-default-fp32"}
NAME = {k: f"test_touch[write-{case}]" for k, case in CASES.items()}
BASELINE_RUNS = [{"quiet": [1.00, 1.01, 0.99], "noisy": [1.0, 1.3, 0.8], "second": [1.0, 1.005, 0.995]},
                 {"quiet": [1.005, 0.995, 1.0], "noisy": [1.1, 0.9, 1.2], "second": [1.0, 0.99, 1.01]}]


def session(storage: Path, timings: dict[str, list[float]], *args: str) -> subprocess.CompletedProcess:
    """``pytest benchmarks/test_touch.py`` at the three sizes, each case's invocations scaled by
    ``timings`` (a case left out: 1.0)."""
    env = dict(os.environ)
    env.pop("NUMABENCH_INJECT_SLOWDOWN", None)
    env[ENV] = json.dumps({CASES[k]: timings.get(k, [1.0]) for k in CASES})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "tests"), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "benchmarks/test_touch.py"), f"--rootdir={ROOT}",
           "-c", str(ROOT / "pytest.ini"), "-p", "no:cacheprovider", "-p", "fake_timings", "-q",
           "--numa-policies=default", "--param-sizes=1M,2M,4M", "--numa-rounds=5",
           f"--benchmark-storage=file://{storage}", *args]
    return subprocess.run(cmd, cwd=storage.parent, env=env, capture_output=True, text=True, timeout=300)


def records(path: Path) -> dict[str, dict]:
    """short name -> the entry of a --benchmark-json file."""
    by_name = {b["name"]: b for b in json.loads(path.read_text())["benchmarks"]}
    return {k: by_name[n] for k, n in NAME.items()}


def gate_section(text: str) -> str:
    return text[text.find("numabench regression gate"):]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Path:
    """The merged baseline file, the newest of its storage folder."""
    storage = tmp_path_factory.mktemp("gate-session") / "store"
    for i, timings in enumerate(BASELINE_RUNS):
        out = session(storage, timings, f"--benchmark-save=run{i}", "--benchmark-save-data", "--numa-repeats=3")
        assert out.returncode == 0, out.stdout + out.stderr
    runs = sorted(storage.rglob("000[12]_run*.json"))
    merged = runs[0].parent / "0003_base.json"
    assert main(["merge", str(merged), *map(str, runs)]) == 0
    return merged


def test_unchanged_and_faster_timings_pass(baseline, tmp_path):
    """3.5% above the centre of a band 0.99-1.01 ms is inside its threshold (3% beyond the band's
    top); half the time is faster; the noisy entry is informational. Exit 0, nothing confirmed."""
    out = session(baseline.parent.parent, {"quiet": [1.035], "second": [0.5]},
                  "--benchmark-compare", f"--benchmark-json={tmp_path / 'run.json'}")
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "numabench regression gate" in text and "REGRESSION" not in text
    assert "3 entries: 0 slower, 1 faster, 1 same, 0 insufficient data, 1 informational" in text, gate_section(text)
    gate = {k: r["extra_info"]["gate"] for k, r in records(tmp_path / "run.json").items()}
    assert {k: g["verdict"] for k, g in gate.items()} == {"quiet": "same", "noisy": "informational",
                                                          "second": "faster"}
    assert all(g["confirmation"] is None and g["confirm_invocations"] == 0 for g in gate.values())


def test_a_slowdown_fails_only_where_its_confirmation_agrees(baseline, tmp_path, capsys):
    """1.5x on ``quiet`` (and in its 2 confirmation invocations): a regression, exit 1. 1.5x on
    ``second`` once, its confirmation back at 1.0: judged slower, not confirmed, no failure. 2x on
    ``noisy``: informational (slower), never re-run, never failing. The offline compare of the
    run's JSON judges every entry as the session did."""
    run = tmp_path / "run.json"
    out = session(baseline.parent.parent, {"quiet": [1.5], "second": [1.5, 1.0], "noisy": [2.0]},
                  "--benchmark-compare", f"--benchmark-json={run}")
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    section = gate_section(text)
    assert "REGRESSION: 1 entries slower than the baseline's band" in section, section
    assert "confirmation: 1 of the 2 entries judged slower were slower again" in section, section
    assert "informational (slower)" in section and "not confirmed (same)" in section, section
    assert "1 entries informational (too noisy to detect 10%" in section and NAME["noisy"] in section, section
    got = records(run)
    gate = {k: r["extra_info"]["gate"] for k, r in got.items()}
    assert gate["quiet"]["verdict"] == gate["quiet"]["confirmation"] == SLOWER
    assert (gate["second"]["verdict"], gate["second"]["confirmation"]) == (SLOWER, "same")
    assert (gate["noisy"]["verdict"], gate["noisy"]["confirmation"]) == ("informational", None)
    # only the entries judged slower re-ran (2 fresh invocations each), pooled into what they recorded
    assert {k: g["confirm_invocations"] for k, g in gate.items()} == {"quiet": 2, "second": 2, "noisy": 0}
    assert {k: len(r["extra_info"]["invocation_medians_s"]) for k, r in got.items()} == \
        {"quiet": 3, "second": 3, "noisy": 1}
    offline = compare_runs(baseline, run)
    by = {r.name: r for r in offline.rows}
    assert {k: (by[n].verdict, by[n].confirm_verdict) for k, n in NAME.items()} == \
        {k: (g["verdict"], g["confirmation"]) for k, g in gate.items()}
    assert offline.exit_code == 1
    assert main(["compare", str(baseline), str(run)]) == 1
    assert "REGRESSION: 1 entries" in capsys.readouterr().out


def test_without_confirmation_a_slower_entry_fails_the_run(baseline, tmp_path):
    run = tmp_path / "run.json"
    out = session(baseline.parent.parent, {"second": [1.5, 1.0]}, "--benchmark-compare", "--numa-confirm=0",
                  f"--benchmark-json={run}")
    assert out.returncode == 1, out.stdout + out.stderr
    gate = records(run)["second"]["extra_info"]["gate"]
    assert (gate["verdict"], gate["confirmation"], gate["confirm_invocations"]) == (SLOWER, None, 0)


def test_a_band_of_one_session_is_insufficient_data_and_never_fails(baseline, tmp_path):
    """One session merged with itself (its 3 invocations counted twice, still one session): 2x
    against it is insufficient data, labelled (slower) where 2x is beyond the entry's threshold, with the command that fills the band; exit 0, and
    no confirmation runs (an entry that cannot fail the run is not re-run)."""
    folder = tmp_path / "store" / baseline.parent.name
    folder.mkdir(parents=True)
    [run0] = baseline.parent.glob("0001_run0.json")
    assert main(["merge", "--allow-duplicate-sources", str(folder / "0001_twice.json"), str(run0), str(run0)]) == 0
    run = tmp_path / "run.json"
    out = session(tmp_path / "store", {k: [2.0] for k in CASES}, "--benchmark-compare", f"--benchmark-json={run}")
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    section = gate_section(text)
    assert "0001_twice" in section and "REGRESSION" not in section
    assert "3 entries: 0 slower, 0 faster, 0 same, 3 insufficient data" in section, section
    # the quiet ones say where 2x points; the noisy one's 2x lies inside its own noise (threshold 67%)
    assert section.count("insufficient data (slower)") == 2 and "(6)" in section, section
    assert "WARNING: 3 entries have insufficient data" in section and "refresh-baseline" in section, section
    gate = {k: r["extra_info"]["gate"] for k, r in records(run).items()}
    assert all(g["verdict"] == "insufficient data" and g["confirm_invocations"] == 0 for g in gate.values())
    assert all("band from 1 run" in g["why"] for g in gate.values()), gate


def test_upstream_compare_fail_keeps_working(baseline):
    """pytest-benchmark's own --benchmark-compare-fail fails a 1.5x median although numabench's gate
    was set as wide as it goes (100%); at 1.0 neither fails."""
    args = ["--benchmark-compare", "--benchmark-compare-fail=median:5%", "--numa-confirm=0",
            "--numa-gate-threshold=100%"]
    slow = session(baseline.parent.parent, {"quiet": [1.5]}, *args)
    assert slow.returncode == 1 and "Performance has regressed" in slow.stdout + slow.stderr, slow.stdout + slow.stderr
    assert "REGRESSION" not in slow.stdout + slow.stderr
    same = session(baseline.parent.parent, {}, *args)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "Performance has regressed" not in same.stdout + same.stderr


# -- the confirmation policy, in-process ---------------------------------------------------------

def _result(extra: tuple, medians: list[float]) -> CaseResult:
    """A result of ``len(medians)`` invocations of the step phase, each 3 rounds around its median."""
    case = Case("cpu_adam", 1, 1 << 20, Policy.parse("default"), "fp32", extra)
    invocations = [{"step": [m * 0.999, m, m * 1.001]} for m in medians]
    phases = {"step": [v for inv in invocations for v in inv["step"]]}
    return CaseResult(case, phases, [phases], [], [], "none", [], invocations=invocations)


OURS, TORCH = (("impl", "ours"),), (("impl", "torch"),)


def _gate(confirm_invocations: int):
    base = [{"fullname": f"b.py::t[{x[0][1]}]", "name": f"t[{x[0][1]}]",
             "stats": {"median": 1e-3, "data": [1e-3] * 6},
             "extra_info": {"invocation_medians_s": [1.0e-3, 1.01e-3, 0.99e-3],
                            "invocation_sources": ["a", "b", "a"]}} for x in (OURS, TORCH)]
    return gate_of_baseline("base.json", {"benchmarks": base, "machine_info": {}}, "3%", "10%",
                            confirm_invocations, None)


def _entries():
    return [SimpleNamespace(nodeid=f"b.py::t[{x[0][1]}]", name=f"t[{x[0][1]}]", extra=x, phase="step")
            for x in (OURS, TORCH)]


@pytest.mark.parametrize("confirm_value, regression", [(1.5e-3, True), (1.0e-3, False)])
def test_only_the_variants_judged_slower_run_again(confirm_value, regression):
    gate = _gate(2)
    calls = []

    def invoke(variants):
        calls.append(list(variants))
        return [_result(v, [confirm_value]) for v in variants]

    pooled = {OURS: _result(OURS, [1.5e-3]), TORCH: _result(TORCH, [1.0e-3])}
    out = judge_and_confirm(gate, _entries(), pooled, invoke)
    assert calls == [[OURS], [OURS]]  # twice, ours only
    assert out[OURS].invocation_medians("step") == [1.5e-3, confirm_value, confirm_value]
    assert out[TORCH].invocation_medians("step") == [1.0e-3]
    res = gate.result(None)
    assert [r.verdict for r in res.rows] == [SLOWER, "same"]
    assert bool(res.regressions) is regression and res.exit_code == int(regression)
    assert gate.record("b.py::t[ours]")["confirm_invocations"] == 2


def test_nothing_slower_or_no_confirmation_runs_nothing_again():
    for confirm_invocations, ours, regression in ((2, 1.0e-3, False), (0, 1.5e-3, True)):
        gate = _gate(confirm_invocations)
        pooled = {OURS: _result(OURS, [ours]), TORCH: _result(TORCH, [1.0e-3])}

        def invoke(variants):
            raise AssertionError(f"re-ran {variants}")

        assert judge_and_confirm(gate, _entries(), pooled, invoke) is pooled
        assert bool(gate.result(None).regressions) is regression


def _invoker(values: list[float], calls: list):
    """invoke(variants): the next of ``values`` as each variant's one invocation median."""
    queue = iter(values)

    def invoke(variants):
        calls.append(list(variants))
        value = next(queue)
        return [_result(v, [value]) for v in variants]
    return invoke


def test_a_noisy_confirmation_is_unresolved_and_runs_another_batch():
    """Two confirming invocations 1.0 and 2.0 ms cannot resolve 10% (unresolved, never same); a
    second batch at 1.5 ms settles it: slower, a regression, all four invocations recorded."""
    gate, calls = _gate(2), []
    pooled = {OURS: _result(OURS, [1.5e-3]), TORCH: _result(TORCH, [1.0e-3])}
    out = judge_and_confirm(gate, _entries(), pooled, _invoker([1.0e-3, 2.0e-3, 1.5e-3, 1.5e-3], calls))
    assert calls == [[OURS]] * 4
    assert out[OURS].invocation_medians("step") == [1.5e-3, 1.0e-3, 2.0e-3, 1.5e-3, 1.5e-3]
    res = gate.result(None)
    assert [(r.verdict, r.confirm_verdict) for r in res.rows] == [(SLOWER, SLOWER), ("same", None)]
    assert res.exit_code == 1 and gate.record("b.py::t[ours]")["confirm_invocations"] == 4


def test_a_confirmation_noisy_to_the_end_fails_nothing_and_says_so():
    """Every batch 0.9/1.6 ms: after MAX_CONFIRM_BATCHES batches the entry stays slower with an
    unresolved confirmation: no regression, exit 0, a warning naming it in text and Markdown."""
    gate, calls = _gate(2), []
    pooled = {OURS: _result(OURS, [1.5e-3]), TORCH: _result(TORCH, [1.0e-3])}
    judge_and_confirm(gate, _entries(), pooled, _invoker([0.9e-3, 1.6e-3] * MAX_CONFIRM_BATCHES, calls))
    assert len(calls) == 2 * MAX_CONFIRM_BATCHES
    res = gate.result(None)
    row = res.rows[0]
    assert (row.verdict, row.confirm_verdict) == (SLOWER, UNRESOLVED) and row.confirm_detectable_pct > 10
    assert not res.regressions and res.exit_code == 0
    text = render(res)
    assert "unresolved (detects" in text and "1 entries judged slower whose confirmation was too noisy" in text
    assert "t[ours]" in render_markdown(res).split("could not be confirmed")[1]
    assert gate.record("b.py::t[ours]")["confirmation"] == UNRESOLVED
