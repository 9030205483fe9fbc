"""`numabench ab` judged on given timings: the pair ratios, the ABBA order, the interval,
slower / faster / same only when the whole interval lies beyond the threshold, entries one
side did not measure, the exit code and the text; and the whole flow (worktrees of a scratch
git repository, builds, invocations in ABBA order, their removal) with a fake invocation in
place of pytest. The real suite under ab: tests/test_regression_gate.py."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from numabench.errors import UsageError
from numabench.gate.rule import FASTER, SAME, SLOWER
from numabench.ab.formats import render_text as render
from numabench.ab.session import interleaved_medians
from numabench.gate.pairs import UNRESOLVED
from numabench.ab.run import (
    ABResult,
    Side,
    abba_order,
    bootstrap_interval,
    geometric_mean,
    judge_measured,
    failed_tests,
    judge_pairs,
    measure,
    run_ab,
)

A, B = "benchmarks/test_x.py::test_x[a]", "benchmarks/test_x.py::test_x[b]"


def pairs_of(ratios: list[float], base_s: float = 1e-3) -> tuple[list[float], list[float]]:
    return [base_s] * len(ratios), [base_s * r for r in ratios]


# -- one entry's pairs ------------------------------------------------------------------------

@pytest.mark.parametrize("ratios, verdict", [
    ([1.49, 1.52, 1.50, 1.51], SLOWER),  # a 50% slowdown, pairs that agree
    ([0.60, 0.61, 0.59, 0.62], FASTER),
    ([0.99, 1.02, 1.00, 0.98], SAME),
    # the geometric mean (1.127) lies beyond 10%, the interval does not: not enough pairs agree
    ([1.02, 1.20, 1.05, 1.25], UNRESOLVED),  # and too wide to call it the same
    # pair ratios as a loaded 2-core runner gave a real 50% slowdown (0.17-2.4): no verdict either way
    ([2.4, 0.17, 1.5, 1.6], UNRESOLVED),
], ids=["slower", "faster", "same", "mean-beyond-interval-not", "loaded-runner"])
def test_a_verdict_needs_the_whole_interval_beyond_the_threshold(ratios, verdict):
    row = judge_pairs("x", *pairs_of(ratios), threshold_pct=10, confidence=0.95)
    assert row.verdict == verdict, (row.low, row.high)
    assert row.ratio == pytest.approx(geometric_mean(ratios))
    assert row.low <= row.ratio <= row.high
    if verdict == SLOWER:
        assert row.low > 1.10
    if verdict == FASTER:
        assert row.high < 1 / 1.10


def test_the_ratio_is_per_pair_not_of_the_sides_medians():
    """A drift between pairs that both sides share cancels in each pair's ratio: base and head move
    from 1 to 3 ms together, head always 1.2x its neighbour: slower, ratio exactly 1.2."""
    base = [1e-3, 2e-3, 3e-3, 1.5e-3]
    row = judge_pairs("x", base, [b * 1.2 for b in base], threshold_pct=10, confidence=0.95)
    assert row.verdict == SLOWER and row.ratio == pytest.approx(1.2) and row.low == pytest.approx(1.2)


def test_bootstrap_interval():
    ratios = [1.0, 1.1, 0.95, 1.05, 1.02]
    wide, narrow = bootstrap_interval(ratios, 0.99), bootstrap_interval(ratios, 0.5)
    assert bootstrap_interval(ratios, 0.99) == wide  # seeded: the same pairs, the same interval
    assert wide[0] < narrow[0] <= geometric_mean(ratios) <= narrow[1] < wide[1]
    assert min(ratios) <= wide[0] and wide[1] <= max(ratios)
    assert bootstrap_interval([1.3] * 4, 0.95) == pytest.approx((1.3, 1.3))
    with pytest.raises(ValueError):
        bootstrap_interval([], 0.95)


# -- the pairs of a run -----------------------------------------------------------------------

def test_abba_order():
    assert abba_order(3) == [(0, "base"), (0, "head"), (1, "head"), (1, "base"), (2, "base"), (2, "head")]


def sides(tmp_path: Path, head_env: dict[str, str] | None = None) -> dict[str, Side]:
    return {"base": Side("HEAD~1", "a" * 40, tmp_path / "base", {}),
            "head": Side("HEAD", "b" * 40, tmp_path / "head", head_env or {})}


class Clock:
    """A machine that slows by ``drift`` per invocation, whatever runs; the head side's code by
    its NUMABENCH_INJECT_SLOWDOWN. Records the invocations it ran."""

    def __init__(self, drift: float = 0.0, entries: dict[str, float] | None = None) -> None:
        self.drift = drift
        self.entries = entries or {A: 1e-3, B: 2e-3}
        self.ran: list[tuple[str, str]] = []

    def __call__(self, side: Side, pytest_args, json_path: Path) -> dict[str, float]:
        self.ran.append((side.label, json_path.name))
        factor = float(side.env.get("NUMABENCH_INJECT_SLOWDOWN", 1.0)) * (1 + self.drift * (len(self.ran) - 1))
        return {name: s * factor for name, s in self.entries.items()}


def test_abba_cancels_a_drift_of_the_machine(tmp_path):
    """The machine slows 5% per invocation, the code is the same: in ABBA order each side runs as
    often early as late, the ratio stays ~1 and no entry is judged slower or leans either way: the
    drift is the pairs' spread, which leaves them unresolved (run in AB AB order, head, always
    second, would read ~5% slower in every pair)."""
    clock = Clock(drift=0.05)
    measured = measure(sides(tmp_path), ["benchmarks"], 4, tmp_path, clock)
    assert [f for _, f in clock.ran] == [f"{label}-{i}.json" for i, label in abba_order(4)]
    rows, missing = judge_measured(measured, threshold_pct=3, confidence=0.95)
    assert not missing and [(r.verdict, r.leans) for r in rows] == [(UNRESOLVED, None), (UNRESOLVED, None)]
    assert all(abs(math.log(r.ratio)) < 0.01 for r in rows), [r.ratio for r in rows]
    head_second = [measured["head"][i][A] / measured["base"][i][A] for i in range(0, 4, 2)]
    assert all(r > 1.04 for r in head_second)  # the AB pairs alone: head later, slower by the drift


def test_entries_not_measured_in_every_invocation_are_listed_not_judged(tmp_path):
    measured = {"base": [{A: 1e-3, B: 2e-3}, {A: 1e-3, B: 2e-3}, {A: 1e-3, B: 2e-3}],
                "head": [{A: 1.5e-3, B: 2e-3}, {A: 1.5e-3}, {A: 1.5e-3, B: 2e-3}]}
    rows, missing = judge_measured(measured, threshold_pct=10, confidence=0.95)
    assert missing == [B] and [(r.name, r.verdict) for r in rows] == [("test_x[a]", SLOWER)]
    res = ABResult(*sides(tmp_path).values(), pairs=3, threshold_pct=10, confidence=0.95, rows=rows,
                   missing=missing)
    text = render(res)
    assert f"WARNING: 1 entries not measured in every pair of both sides (NOT JUDGED): {B}" in text
    assert "1 entries: 1 slower, 0 faster, 0 same" in text


def test_exit_code_follows_the_verdicts(tmp_path):
    def result(*ratios_per_entry: list[float]) -> ABResult:
        rows = [judge_pairs(f"e{i}", *pairs_of(r), threshold_pct=10, confidence=0.95)
                for i, r in enumerate(ratios_per_entry)]
        return ABResult(*sides(tmp_path).values(), pairs=4, threshold_pct=10, confidence=0.95, rows=rows)

    slow = result([1.5] * 4, [0.5] * 4, [1.0] * 4)
    assert [r.verdict for r in slow.rows] == [SLOWER, FASTER, SAME] and slow.exit_code == 1
    text = render(slow)
    assert "3 entries: 1 slower, 1 faster, 1 same" in text
    assert "REGRESSION: 1 entries slower by more than 10% with 95% confidence" in text
    fast = result([0.5] * 4, [1.0] * 4)
    assert fast.exit_code == 0 and "REGRESSION" not in render(fast)


# -- the whole flow on fake timings --------------------------------------------------------------

def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("needs git")
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q")
    for i in range(2):
        (r / "f.txt").write_text(f"{i}\n")
        git(r, "add", "f.txt")
        git(r, "commit", "-q", "-m", f"c{i}")
    return r


def worktrees(repo: Path) -> list[str]:
    return [ln for ln in git(repo, "worktree", "list", "--porcelain").splitlines() if ln.startswith("worktree ")]


@pytest.mark.parametrize("head_env, verdicts, code", [
    ({"NUMABENCH_INJECT_SLOWDOWN": "1.5"}, [SLOWER, SLOWER], 1),
    ({}, [SAME, SAME], 0),
], ids=["slowdown", "unchanged"])
def test_run_ab_builds_both_sides_alternates_and_removes_its_worktrees(repo, head_env, verdicts, code):
    before = worktrees(repo)
    built, lines = [], []
    clock = Clock()

    def build_side(side: Side) -> str:
        assert (side.path / "f.txt").read_text() == ("0\n" if side.label == "HEAD~1" else "1\n")
        built.append(side.label)
        return ""

    res = run_ab("HEAD~1", "HEAD", ["benchmarks"], pairs=3, threshold_pct=10, head_env=head_env, cwd=repo,
                 progress=lines.append, invoke_one=clock, build_side=build_side,
                 interleave="invocations")
    assert built == ["HEAD~1", "HEAD"]
    assert [label for label, _ in clock.ran] == ["HEAD~1", "HEAD", "HEAD", "HEAD~1", "HEAD~1", "HEAD"]
    assert res.base.commit == git(repo, "rev-parse", "HEAD~1").strip()
    assert [r.verdict for r in res.rows] == verdicts and res.exit_code == code
    assert sum(ln.startswith("pair ") for ln in lines) == 6
    assert worktrees(repo) == before  # both checkouts removed
    assert not res.base.path.exists()  # and the scratch folder holding them


def test_run_ab_removes_its_worktrees_when_an_invocation_fails(repo):
    before = worktrees(repo)

    def failing(side: Side, pytest_args, json_path: Path) -> dict[str, float]:
        raise UsageError(f"pytest on {side.label} exited 4: bad option")

    with pytest.raises(UsageError, match="exited 4"):
        run_ab("HEAD~1", "HEAD", ["benchmarks"], pairs=2, cwd=repo, invoke_one=failing, build_side=lambda s: "",
               interleave="invocations")
    assert worktrees(repo) == before


def test_head_omitted_is_the_working_tree_as_it_is(repo):
    (repo / "f.txt").write_text("uncommitted\n")
    seen = {}

    def invoke_one(side: Side, pytest_args, json_path: Path) -> dict[str, float]:
        seen[side.label] = (side.path, (side.path / "f.txt").read_text())
        return {A: 1e-3}

    res = run_ab("HEAD", None, ["benchmarks"], pairs=2, cwd=repo, invoke_one=invoke_one, build_side=lambda s: "",
                 interleave="invocations")
    assert seen["worktree"] == (repo, "uncommitted\n") and seen["HEAD"][1] == "1\n"
    assert res.head.commit is None and "head: worktree" in render(res)


# -- rounds interleaved in one session (the default) ------------------------------------------

def _session_run(head: dict[str, list[float]], base: dict[str, list[float]]) -> dict:
    """A rounds-interleaved session's JSON as fixtures.ab_sides writes it."""
    return {"benchmarks": [{"fullname": name, "stats": {"median": meds[0]},
                            "extra_info": {"invocation_medians_s": meds,
                                           "ab_base": {"invocation_medians_s": base[name]}}}
                           for name, meds in head.items()]}


def test_an_interleaved_session_gives_each_side_one_median_per_pair():
    run = _session_run({A: [2e-3, 2.2e-3, 2.1e-3], B: [1e-3, 1e-3]}, {A: [1e-3, 1.1e-3, 1.05e-3], B: [1e-3, 1e-3]})
    measured = interleaved_medians(run, 3)
    assert [m[A] for m in measured["head"]] == [2e-3, 2.2e-3, 2.1e-3]
    assert [m[A] for m in measured["base"]] == [1e-3, 1.1e-3, 1.05e-3]
    rows, missing = judge_measured(measured, threshold_pct=1, confidence=0.95)
    assert [r.fullname for r in rows] == [A] and rows[0].ratio == pytest.approx(2.0) and rows[0].verdict == SLOWER
    assert missing == [B]  # two pairs of three: not judged, listed


def test_an_interleaved_session_that_measured_nothing_is_an_error():
    with pytest.raises(UsageError, match="measured nothing"):
        interleaved_medians({"benchmarks": [{"fullname": A, "stats": {"median": 1e-3},
                                             "extra_info": {"invocation_medians_s": [1e-3, 1e-3]}}]}, 2)


def test_run_ab_by_rounds_runs_one_session_of_the_head_with_the_base_checked_out(repo):
    before = worktrees(repo)
    seen = {}

    def invoke_both(base: Side, head: Side, pytest_args, pairs: int, json_path: Path):
        seen.update(base=(base.label, (base.path / "f.txt").read_text(), dict(base.env)),
                    head=(head.label, (head.path / "f.txt").read_text(), dict(head.env)), pairs=pairs)
        run = _session_run({A: [1.5e-3] * pairs}, {A: [1e-3] * pairs})
        json_path.write_text(json.dumps(run))
        return interleaved_medians(run, pairs)

    def build_side(side: Side) -> str:
        time.sleep(0.3 if side.label == "HEAD" else 0.0)
        return ""

    kept = repo / "session.json"
    res = run_ab("HEAD~1", "HEAD", ["benchmarks"], pairs=3, cwd=repo, head_env={"X": "1"}, build_side=build_side,
                 invoke_both=invoke_both, session_json=kept)
    assert seen == {"base": ("HEAD~1", "0\n", {}), "head": ("HEAD", "1\n", {"X": "1"}), "pairs": 3}
    assert res.interleave == "rounds" and [r.verdict for r in res.rows] == [SLOWER] and res.exit_code == 1
    assert "rounds alternating" in render(res)
    assert worktrees(repo) == before
    # the session's own JSON kept where asked, and where the time went
    assert interleaved_medians(json.loads(kept.read_text()), 3)["head"][0] == {A: 1.5e-3}
    t = res.timings_s
    assert set(t) == {"build_base", "build_head", "measuring", "total"} and t["build_head"] >= 0.3 > t["build_base"]
    assert t["total"] == pytest.approx(t["build_base"] + t["build_head"] + t["measuring"], abs=0.1)
    assert "took " in render(res)


@pytest.mark.parametrize("totals, warned", [((5.6, 98.3), True), ((125.8, 125.9), False)], ids=["grew", "steady"])
def test_a_vm_whose_memory_grew_while_measuring_is_named(repo, monkeypatch, totals, warned):
    """MemTotal read when the measuring begins and ends: where it grew (a lent VM starts at a few
    GiB), the summary says that entries allocating fresh memory vary with it; the JSON keeps both."""
    import numabench.ab.run as ab
    from numabench.ab.formats import from_json, render_as, to_json

    readings = iter(totals)
    monkeypatch.setattr(ab, "mem_total_gib", lambda: next(readings))

    def invoke_both(base: Side, head: Side, pytest_args, pairs: int, json_path: Path):
        run = _session_run({A: [1e-3] * pairs}, {A: [1e-3] * pairs})
        return interleaved_medians(run, pairs)

    res = run_ab("HEAD~1", "HEAD", ["benchmarks"], pairs=2, cwd=repo, build_side=lambda s: "",
                 invoke_both=invoke_both)
    assert res.mem_total_gib == totals
    line = f"WARNING: MemTotal grew from {totals[0]:.1f} to {totals[1]:.1f} GiB while measuring"
    assert (line in render(res)) is warned and (line in render_as(res, "markdown")) is warned
    assert res.exit_code == 0  # a warning, not a verdict
    again = from_json(json.loads(json.dumps(to_json(res))))
    assert again.mem_total_gib == totals
    data = to_json(res)
    data["mem_total_gib"] = [5.6]
    with pytest.raises(ValueError, match=r"mem_total_gib is \[5.6\]: allowed \[GiB when the measuring began"):
        from_json(data)
    data["mem_total_gib"] = None  # not read, or saved before it was
    assert from_json(data).mem_total_gib is None


@pytest.mark.parametrize("arg", ["--numa-repeats=3", "--numa-ab=base=/x", "--benchmark-compare"])
def test_run_ab_refuses_the_options_it_sets_itself(repo, arg):
    with pytest.raises(UsageError, match=f"pytest argument {arg}: numabench ab sets it"):
        run_ab("HEAD~1", "HEAD", ["benchmarks", arg], pairs=2, cwd=repo, build_side=lambda s: "")


def test_head_axis_judges_a_setting_against_its_default_case_by_case(repo):
    """--head-axis: the head runs with a knob's value, the base at auto, one revision; each head
    entry is judged against the base entry of the same case (its name without the knob)."""
    place = "master:bind:0+grads:bind:0+moments:bind:0"
    base_name = "benchmarks/test_adam_offload.py::test_adam_offload[h2d-np1-67.9M-bind:0-fp32-ours-serial-register]"
    head_name = base_name.replace("-register]", f"-register-place={place}]")
    args_seen = {}

    def invoke_one(side: Side, pytest_args, json_path: Path) -> dict[str, float]:
        args_seen[side.label] = list(pytest_args)
        return {head_name if "place=" in " ".join(pytest_args) else base_name: 1e-3}

    res = run_ab("HEAD", None, ["benchmarks/test_adam_offload.py"], pairs=2, cwd=repo, invoke_one=invoke_one,
                 build_side=lambda s: "", head_axis="place=moments:bind:0+master:bind:0+grads:bind:0")
    assert args_seen["HEAD"] == ["benchmarks/test_adam_offload.py"]
    assert args_seen[f"worktree --numa-axis place={place}"][-2:] == ["--numa-axis", f"place={place}"]
    [row] = res.rows
    assert row.fullname == base_name and row.verdict == SAME and not res.missing
    for bad, message in (("place=auto", "runs place at auto already"), ("nosuch=1", "allowed NAME=VALUE with NAME a knob"),
                         ("place=master:bind:x", "--numa-axis place")):
        with pytest.raises(UsageError, match=message):
            run_ab("HEAD", None, ["benchmarks"], pairs=2, cwd=repo, invoke_one=invoke_one, build_side=lambda s: "",
                   head_axis=bad)
    with pytest.raises(UsageError, match="the pytest arguments select place too"):
        run_ab("HEAD", None, ["benchmarks", "--numa-axis", "place=master:bind:0"], pairs=2, cwd=repo,
               invoke_one=invoke_one, build_side=lambda s: "", head_axis=f"place={place}")


def test_tests_that_failed_in_the_session_are_listed_not_left_out(repo):
    def invoke_both(base: Side, head: Side, pytest_args, pairs: int, json_path: Path):
        measured = interleaved_medians(_session_run({A: [1e-3] * pairs}, {A: [1e-3] * pairs}), pairs)
        measured["failed"] = failed_tests("..F\nFAILED benchmarks/test_x.py::test_x[b] - WorkerError: rank 0: boom\n"
                                          "1 failed, 1 passed\n")
        return measured

    lines = []
    res = run_ab("HEAD~1", "HEAD", ["benchmarks"], pairs=2, cwd=repo, build_side=lambda s: "", invoke_both=invoke_both,
                 progress=lines.append)
    assert res.missing == [f"FAILED {B} - WorkerError: rank 0: boom"]
    assert f"not measured: FAILED {B} - WorkerError: rank 0: boom" in lines
    assert "NOT JUDGED" in render(res) and B in render(res)


def test_each_row_keeps_where_each_sides_workers_ran_pair_by_pair():
    from numabench.ab.run import attach_cpus
    from numabench.ab.session import pair_cpus
    from numabench.ab.formats import from_json, to_json

    run = _session_run({A: [2e-3, 2e-3, 2e-3], B: [1e-3, 1e-3, 1e-3]}, {A: [1e-3, 1e-3, 1e-3], B: [1e-3] * 3})
    run["benchmarks"][0]["extra_info"]["invocation_cpus"] = [[3], [5], [7]]
    run["benchmarks"][0]["extra_info"]["ab_base"]["invocation_cpus"] = [[4], [5], [None]]
    cpus = pair_cpus(run)
    assert cpus == {A: {"base": [[4], [5], [None]], "head": [[3], [5], [7]]}}  # B's sides did not say
    rows, _ = judge_measured(interleaved_medians(run, 3), threshold_pct=1, confidence=0.95)
    attach_cpus(rows, cpus)
    by_name = {r.fullname: r for r in rows}
    assert (by_name[A].base_cpus, by_name[A].head_cpus) == ([[4], [5], [None]], [[3], [5], [7]])
    assert by_name[B].base_cpus is None and by_name[B].head_cpus is None
    res = ABResult(Side("main", "abc", None, {}), Side("HEAD", "def", None, {}), 3, 1.0, 0.95, rows=rows)
    data = json.loads(json.dumps(to_json(res)))
    again = {r.fullname: r for r in from_json(data).rows}
    assert again[A].head_cpus == [[3], [5], [7]] and again[B].base_cpus is None
    data["entries"][0]["base_cpus"] = [["x"]]
    with pytest.raises(ValueError, match=r"base_cpus\[0\]\[0\] is \"x\": allowed a list per pair of a CPU"):
        from_json(data)


def test_a_stopped_session_is_judged_on_its_finished_runs_and_exits_with_the_signals_code(repo, tmp_path):
    """SIGTERM (a CI job's timeout) while the session runs: its finished worker runs' entries are
    judged and written, the table says the rest were not measured, and the exit code is the
    signal's (128 + 15), never 0."""
    import signal

    from numabench.interrupts import Stopped
    from numabench.ab.run import StoppedWithMeasurements
    from numabench.ab.formats import from_json, render_as, to_json

    def invoke_both(base: Side, head: Side, pytest_args, pairs: int, json_path: Path):
        run = _session_run({A: [1e-3] * pairs}, {A: [1e-3] * pairs})
        json_path.write_text(json.dumps(run))
        raise StoppedWithMeasurements(Stopped(signal.SIGTERM), interleaved_medians(run, pairs))

    lines: list[str] = []
    kept = tmp_path / "session.json"
    res = run_ab("HEAD~1", "HEAD", ["benchmarks"], pairs=2, cwd=repo, build_side=lambda s: "",
                 invoke_both=invoke_both, session_json=kept, progress=lines.append)
    assert [(r.fullname, r.verdict) for r in res.rows] == [(A, SAME)]
    assert res.stopped_by == signal.SIGTERM and res.exit_code == 128 + signal.SIGTERM
    assert any(line.startswith("stopped (SIGTERM): judging the entries of the worker runs that finished")
               for line in lines)
    text = render(res)
    assert text.startswith("numabench A/B: STOPPED (SIGTERM) before the session's end") and "NOT MEASURED" in text
    assert "exit 143" in text.splitlines()[0] and kept.is_file()
    assert render_as(res, "github").startswith("::error title=numabench A/B stopped::STOPPED (SIGTERM)")
    assert "**stopped (SIGTERM)**" in render_as(res, "markdown")
    again = from_json(json.loads(json.dumps(to_json(res))))
    assert again.stopped_by == signal.SIGTERM and again.exit_code == 143
    assert from_json(json.loads(json.dumps(to_json(ABResult(res.base, res.head, 2, 1.0, 0.95))))).stopped_by is None


@pytest.mark.parametrize("written", ["two runs", "nothing", "cut short"])
def test_a_stopped_sessions_json_becomes_its_measurements_or_the_stop_goes_on(monkeypatch, tmp_path, written):
    """invoke_interleaved, its session stopped (run_child ended it and raised the interrupt): what
    the session wrote is judged on; where it wrote nothing readable the interrupt goes on as it was."""
    import signal

    from numabench.interrupts import Stopped
    from numabench.ab import run as ab
    from numabench.ab.run import StoppedWithMeasurements, invoke_interleaved

    out = tmp_path / "ab.json"

    def stopped_child(cmd, cwd, env, what, on_line=None):
        if written == "two runs":
            out.write_text(json.dumps(_session_run({A: [1e-3, 1e-3], B: [2e-3, 2e-3]},
                                                   {A: [1e-3, 1e-3], B: [2e-3, 2e-3]})))
        elif written == "cut short":
            out.write_text('{"benchmarks": [{"fullname": ')
        raise Stopped(signal.SIGTERM)

    monkeypatch.setattr(ab, "run_child", stopped_child)
    side = Side("HEAD", "0" * 40, tmp_path, {})
    with pytest.raises(Stopped) as stop:
        invoke_interleaved(side, side, ["benchmarks"], 2, out)
    assert stop.value.signum == signal.SIGTERM
    if written == "two runs":
        assert isinstance(stop.value, StoppedWithMeasurements)
        assert [sorted(m) for m in stop.value.measured["head"]] == [[A, B], [A, B]]
        assert stop.value.measured["failed"] == []
    else:
        assert not isinstance(stop.value, StoppedWithMeasurements)
