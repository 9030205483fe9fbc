"""numabench ab's pairs in passes (numabench.ab.passes): pass p is a session of its own
that times pair p of every worker run; further and confirming pairs are passes over only the
worker runs that need them (--numa-ab runs_of=FILE), numbered on (--numa-ab pair=N). With a fake
session (what each pass was asked and what it measured), the merge of the passes (pairs, CPUs,
the kept session JSON that --rejudge reads), a stop between passes, and the session options end
to end on the CPU."""
from __future__ import annotations

import json
import math
import os
import random
import subprocess
from pathlib import Path

import pytest

from numabench.errors import UsageError
from numabench.gate.rule import FASTER, SAME, SLOWER
from numabench.ab.run import StoppedWithMeasurements, run_ab
from numabench.ab.formats import RUN_KEY, add_run_record, from_json, render_text, to_json
from numabench.ab.budget import RunNeeds, allocate, fill, run_needs
from numabench.ab.passes import invoke_in_passes, merge_session, empty_measured, merge_session_jsons
from numabench.ab.rejudge import rejudge
from numabench.ab.session import session_measured
from numabench.gate.pairs import confirmed_confidence, judge_ratios, t_interval
from test_ab import repo  # noqa: F401  (the scratch repository fixture)
from test_ab_sides import ROOT, SESSION

A, A2, B = "x.py::t[a]", "x.py::t[a2]", "x.py::t[b]"
RUN_OF = {A: "R1", A2: "R1", B: "R2"}  # entry -> its worker run (a run feeds all its entries)


class FakeSessions:
    """Each pass's session: what it was asked (pair number, the entries listed), and what it
    measured: every listed entry's worker run (all of them where none is listed), one pair, the
    head ``ratio(name, pair)`` times the base, written as the session's JSON too."""

    def __init__(self, ratio, stop_in_pass: int | None = None, walls: dict[str, float] | None = None,
                 slower_from_pass: int | None = None) -> None:
        self.ratio = ratio
        self.asked: list[tuple[int, list[str] | None]] = []
        self.stop_in_pass = stop_in_pass
        # each worker run's wall a pair, as the session records it; the clock (``now``) advances by
        # the walls of the runs a pass times, twice that from pass ``slower_from_pass`` (1-based) on
        self.walls = walls or {"R1": 10.0, "R2": 2.0}
        self.slower_from_pass = slower_from_pass
        self.now = 0.0

    def __call__(self, base, head, pytest_args, pairs, json_path: Path) -> dict:
        assert pairs == 1  # one pair of each worker run per pass
        pair = int(next(a for a in pytest_args if a.startswith("--numa-ab=pair=")).split("=")[-1])
        listing = next((a.split("=", 2)[2] for a in pytest_args if a.startswith("--numa-ab=runs_of=")), None)
        listed = Path(listing).read_text().split() if listing else None
        self.asked.append((pair, listed))
        runs = {RUN_OF[n] for n in listed} if listed else set(RUN_OF.values())
        names = [n for n, r in RUN_OF.items() if r in runs]
        run = {"benchmarks": [{
            "fullname": n, "stats": {"median": 1e-3 * self.ratio(n, pair)},
            "extra_info": {"invocation_medians_s": [1e-3 * self.ratio(n, pair)], "invocation_cpus": [[pair]],
                           "ab_base": {"invocation_medians_s": [1e-3], "invocation_cpus": [[pair]],
                                       "confirmation_pairs": 0, "run": RUN_OF[n],
                                       "pair_walls_s": [self.walls[RUN_OF[n]]]}}} for n in names]}
        json_path.write_text(json.dumps(run))
        slow = 2.0 if self.slower_from_pass and len(self.asked) >= self.slower_from_pass else 1.0
        self.now += slow * sum(self.walls[r] for r in runs)
        measured = session_measured(json_path, 1)
        if self.stop_in_pass == len(self.asked):
            raise StoppedWithMeasurements(KeyboardInterrupt(), measured)
        return measured


def noisy(changed: dict[str, float] | None = None, spread: dict[str, float] | None = None):
    """Ratios near 1 (alternating +-0.2%, or +-``spread``), ``changed`` entries that many times more."""
    def ratio(name: str, pair: int) -> float:
        wobble = (spread or {}).get(name, 0.002)
        return (changed or {}).get(name, 1.0) * math.exp(wobble if pair % 2 else -wobble)
    return ratio


def test_pass_p_times_pair_p_of_every_worker_run(tmp_path):
    fake = FakeSessions(noisy())
    measured = invoke_in_passes(fake, None, None, ["benchmarks"], 3, tmp_path, confirm_pairs=3)
    assert fake.asked == [(0, None), (1, None), (2, None)]  # nothing changed: no confirming pass
    assert [sorted(m) for m in measured["base"]] == [sorted([A, A2, B])] * 3
    assert measured["confirming"] == {} and measured["cpus"][A] == {"base": [[0], [1], [2]], "head": [[0], [1], [2]]}
    kept = json.loads((tmp_path / "ab.json").read_text())
    assert [len(b["extra_info"]["invocation_medians_s"]) for b in kept["benchmarks"]] == [3, 3, 3]
    assert all(b["extra_info"]["ab_base"]["invocation_cpus"] == [[0], [1], [2]] for b in kept["benchmarks"])


def test_confirming_passes_time_the_changed_entries_worker_runs_only(tmp_path, repo):  # noqa: F811
    fake = FakeSessions(noisy(changed={A: 1.3}))
    kept = tmp_path / "session.json"
    res = run_ab("HEAD~1", "HEAD", ["benchmarks"], pairs=3, cwd=repo, build_side=lambda s: "", invoke_both=fake,
                 confirm_pairs=3, passes=True, session_json=kept)
    # pairs 3-5: a's worker run only, which a2 shares (its entries are timed together)
    assert fake.asked == [(0, None), (1, None), (2, None), (3, [A]), (4, [A]), (5, [A])]
    rows = {r.fullname: r for r in res.rows}
    assert (rows[A].verdict, len(rows[A].base_s), rows[A].confirmation_pairs) == (SLOWER, 6, 3)
    assert (rows[A2].verdict, len(rows[A2].base_s), rows[A2].confirmation_pairs) == (SAME, 6, 3)
    assert (rows[B].verdict, len(rows[B].base_s), rows[B].confirmation_pairs) == (SAME, 3, 0)
    assert rows[A].base_cpus == [[p] for p in range(6)] and rows[B].base_cpus == [[0], [1], [2]]
    text = render_text(res)
    assert "pair p of every worker run in a session of its own (pass p)" in text
    assert "confirming pairs of fresh workers from fresh servers (passes of their own)" in text
    assert from_json(json.loads(json.dumps(to_json(res)))).passes
    again = rejudge(json.loads(kept.read_text()), str(kept))  # the passes kept as one session
    assert {r.fullname: (r.verdict, len(r.base_s), r.confirmation_pairs) for r in again.rows} == {
        A: (SLOWER, 6, 3), A2: (SAME, 6, 3), B: (SAME, 3, 0)}


def test_further_passes_time_only_the_worker_runs_too_spread(tmp_path):
    """b's pairs differ by +-5%: Stein's first stage asks for more pairs of its worker run alone,
    numbered on from the first passes; a's are within 0.2% and take none."""
    fake = FakeSessions(noisy(spread={B: 0.05}))
    measured = invoke_in_passes(fake, None, None, ["benchmarks"], 3, tmp_path, max_pairs=6, target_pct=3.0)
    assert fake.asked == [(0, None), (1, None), (2, None), (3, [B]), (4, [B]), (5, [B])]
    assert [sum(n in m for m in measured["base"]) for n in (A, A2, B)] == [3, 3, 6]


def test_the_budget_buys_the_needs_that_bring_most_entries_per_second():
    """R1 (10 s a pair) has two entries that need 5 pairs and one that needs 20; R2 (2 s) one that
    needs 9. Per second, R1 to 5 (2 entries for 20 s) beats R2 to 9 (1 for 12 s); 20 pairs of R1
    never fit. A pass's own start counts once per further pass."""
    runs = {"R1": RunNeeds(10.0, (5, 5, 20)), "R2": RunNeeds(2.0, (9,))}
    assert allocate(runs, 3, 30.0) == {"R1": 5, "R2": 3}  # R2's 12 s more would make 32 s
    assert allocate(runs, 3, 40.0) == {"R1": 5, "R2": 9}
    assert allocate(runs, 3, 37.0, pass_overhead_s=1.0) == {"R1": 5, "R2": 3}  # 32 s + 6 passes' starts
    assert allocate(runs, 3, 38.0, pass_overhead_s=1.0) == {"R1": 5, "R2": 9}
    assert allocate(runs, 3, 0.0) == {"R1": 3, "R2": 3}
    assert allocate({"R1": RunNeeds(10.0, ())}, 3, 1e6) == {"R1": 3}  # nothing to reach: no pairs bought


def test_a_need_beyond_max_pairs_or_without_walls_buys_nothing():
    measured = {"runs": {A: "R1", B: "R2"}, "walls": {A: [10.0, 12.0], B: [2.0]}}
    ratios = {A: [0.95, 1.05, 0.95], B: [0.98, 1.02, 0.98], A2: [0.9, 1.1, 0.9]}  # A2: no run recorded
    runs = run_needs(measured, [A, A2, B], [3.0, 10.0], 0.95, None, ratios.get)
    assert set(runs) == {"R1", "R2"} and runs["R1"].cost_s == 11.0
    assert len(runs["R1"].entry_pairs) == 2 and min(runs["R1"].entry_pairs) > 3  # A: both resolutions
    assert len(runs["R2"].entry_pairs) == 1  # B: within 10% already, not within 3%
    capped = run_needs(measured, [A, A2, B], [3.0, 10.0], 0.95, 8, ratios.get)
    assert capped["R1"].entry_pairs == tuple(n for n in runs["R1"].entry_pairs if n <= 8)


def test_further_passes_within_the_time_budget(tmp_path):
    """b's pairs differ by +-5%: 7 pairs bring it within the coarsest 10%, 71 within 3%. The first
    3 passes take 36 s of a 60 s budget; 4 further passes of b's run (2 s each) fit, 68 do not."""
    fake = FakeSessions(noisy(spread={B: 0.05}))
    lines: list[str] = []
    measured = invoke_in_passes(fake, None, None, ["benchmarks"], 3, tmp_path, target_pct=3.0, coarsest_pct=10.0,
                                time_budget_s=60.0, clock=lambda: fake.now, progress=lines.append)
    assert fake.asked == [(0, None), (1, None), (2, None), (3, [B]), (4, [B]), (5, [B]), (6, [B])]
    assert [sum(n in m for m in measured["base"]) for n in (A, A2, B)] == [3, 3, 7]
    assert any(ln.startswith("time budget 60 s, 36 s taken: further pairs for 1 of 2 worker runs (up to 7 pairs)")
               for ln in lines), lines
    assert fake.now <= 60.0


def test_a_further_pass_that_would_end_after_the_budget_is_not_started(tmp_path):
    """From the 5th pass on every pass takes twice its recorded time: the 7th would end after the
    budget, and is not started; the budget stops only further pairs, never the first ones."""
    fake = FakeSessions(noisy(spread={B: 0.05}), slower_from_pass=5)
    lines: list[str] = []
    invoke_in_passes(fake, None, None, ["benchmarks"], 3, tmp_path, target_pct=3.0, coarsest_pct=10.0,
                     time_budget_s=45.0, clock=lambda: fake.now, progress=lines.append)
    # 36 s, then b's run: 2 s (38), 4 s (42), 4 s (46 > 45 - 2: the next is not started)
    assert fake.asked == [(0, None), (1, None), (2, None), (3, [B]), (4, [B]), (5, [B])]
    assert "time budget 45 s: the next further pass would end after it; none more" in lines
    fake = FakeSessions(noisy(spread={B: 0.05}))
    invoke_in_passes(fake, None, None, ["benchmarks"], 3, tmp_path, time_budget_s=1.0, clock=lambda: fake.now)
    assert fake.asked == [(0, None), (1, None), (2, None)]


def test_run_ab_takes_a_time_budget_in_passes_only(tmp_path, repo):  # noqa: F811
    fake = FakeSessions(noisy(spread={B: 0.05}))
    res = run_ab("HEAD~1", "HEAD", ["benchmarks"], pairs=3, cwd=repo, build_side=lambda s: "", invoke_both=fake,
                 passes=True, time_budget_s=600.0, target_pct=3.0)
    assert res.time_budget_s == 600.0 and res.target_pct == 3.0
    assert {r.fullname: len(r.base_s) for r in res.rows}[B] > 3
    assert "within a time budget of 600 s" in render_text(res)
    assert from_json(json.loads(json.dumps(to_json(res)))).time_budget_s == 600.0
    for bad in ({"passes": False, "time_budget_s": 600.0}, {"passes": True, "time_budget_s": 0.0}):
        with pytest.raises(UsageError, match="--time-budget"):
            run_ab("HEAD~1", "HEAD", ["benchmarks"], pairs=3, cwd=repo, build_side=lambda s: "", invoke_both=fake,
                   **bad)


@pytest.mark.parametrize("text, seconds", [("900", 900.0), ("900s", 900.0), ("15m", 900.0), ("1h", 3600.0)])
def test_time_budget_durations(text, seconds):
    from numabench.ab.settings import parse_duration_s
    assert parse_duration_s(text, "--time-budget") == seconds


@pytest.mark.parametrize("text", ["0", "-5m", "15min", "m", "inf"])
def test_bad_time_budgets_are_usage_errors(text):
    from numabench.ab.settings import parse_duration_s
    with pytest.raises(UsageError, match=f"--time-budget {text}: allowed a time > 0"):
        parse_duration_s(text, "--time-budget")


def test_a_stop_keeps_every_finished_pass_and_the_stopped_ones_runs(tmp_path, repo):  # noqa: F811
    fake = FakeSessions(noisy(), stop_in_pass=3)
    res = run_ab("HEAD~1", "HEAD", ["benchmarks"], pairs=4, cwd=repo, build_side=lambda s: "", invoke_both=fake,
                 confirm_pairs=0, passes=True)
    assert [p for p, _ in fake.asked] == [0, 1, 2]
    assert res.stopped_by is not None and res.exit_code == 128 + res.stopped_by
    assert all(len(r.base_s) == 3 for r in res.rows)  # judged on the 3 pairs there are


def test_an_entry_without_cpus_in_one_pass_has_none():
    merged = empty_measured()
    for cpus in ({A: {"base": [[0]], "head": [[0]]}, B: {"base": [[0]], "head": [[0]]}},
                 {A: {"base": [[1]], "head": [[1]]}}):
        merge_session(merged, {"base": [{A: 1.0, B: 1.0}], "head": [{A: 1.0, B: 1.0}], "cpus": cpus})
    assert merged["cpus"] == {A: {"base": [[0], [1]], "head": [[0], [1]]}}  # B's could not match its pairs


def test_the_kept_session_extends_each_entrys_per_pair_lists():
    def run(names: list[str], median: float) -> dict:
        return {"benchmarks": [{"fullname": n, "extra_info": {
            "invocation_medians_s": [median], "invocation_cpus": [[0]],
            "ab_base": {"invocation_medians_s": [1.0], "invocation_rounds_s": [[1.0, 1.0]],
                        "head_invocation_rounds_s": [[median, median]], "rewarmed_pairs": [True]}}} for n in names]}

    merged = merge_session_jsons([run([A], 2.0), run([A, B], 3.0)], {A: 1})
    a, b = merged["benchmarks"]
    assert a["extra_info"]["invocation_medians_s"] == [2.0, 3.0] and a["extra_info"]["invocation_cpus"] == [[0], [0]]
    assert a["extra_info"]["ab_base"]["head_invocation_rounds_s"] == [[2.0, 2.0], [3.0, 3.0]]
    assert a["extra_info"]["ab_base"]["rewarmed_pairs"] == [True, True]
    assert [x["extra_info"]["ab_base"]["confirmation_pairs"] for x in (a, b)] == [1, 0]
    assert b["extra_info"]["invocation_medians_s"] == [3.0]  # first seen in the second pass


def test_run_ab_refuses_passes_where_there_is_no_session_per_pair(repo):  # noqa: F811
    for kwargs in ({"interleave": "invocations"}, {"head_axis": "place=master:bind:0"}):
        with pytest.raises(UsageError, match="--passes runs the rounds mode's session once per pair"):
            run_ab("HEAD~1", "HEAD", ["benchmarks"], pairs=3, cwd=repo, build_side=lambda s: "", passes=True,
                   **kwargs)
    for taken in ("--numa-ab=pair=2", "--numa-ab=runs_of=x.txt"):
        with pytest.raises(UsageError, match="numabench ab sets it"):
            run_ab("HEAD~1", "HEAD", ["benchmarks", taken], pairs=3, cwd=repo, build_side=lambda s: "")


@pytest.mark.parametrize("args, expected", [
    ([], True), (["--no-passes"], False), (["--passes"], True),
    (["--interleave", "invocations"], False), (["--head-axis", "place=master:bind:0"], False),
], ids=["default", "no-passes", "passes", "invocations", "head-axis"])
def test_numabench_ab_takes_its_pairs_in_passes_by_default_in_rounds_mode(args, expected):
    from numabench.cli import build_parser
    from numabench.ab.settings import passes
    assert passes(build_parser().parse_args(["ab", "HEAD", *args])) is expected


def test_numabench_ab_refuses_passes_with_whole_invocations():
    from numabench.cli import build_parser
    from numabench.ab.settings import passes
    with pytest.raises(UsageError, match="--passes runs the rounds mode's session once per pair"):
        passes(build_parser().parse_args(["ab", "HEAD", "--passes", "--interleave", "invocations"]))


TWO_FAMILIES = [*SESSION[:3], "benchmarks/test_touch.py", "benchmarks/test_host_membw.py", *SESSION[4:]]


def test_runs_of_keeps_every_entry_of_the_listed_entries_worker_runs(tmp_path):
    """host_membw's three kernels are one worker run: listing its copy entry keeps all three;
    touch's run is deselected."""
    listing = tmp_path / "runs-of.txt"
    listing.write_text("benchmarks/test_host_membw.py::test_host_membw[time-np1-1M-default-fp32-copy]\n")
    proc = subprocess.run([*TWO_FAMILIES, f"--numa-ab=base={ROOT}", f"--numa-ab=runs_of={listing}",
                           "--collect-only"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ids = sorted(ln for ln in proc.stdout.splitlines() if "::" in ln)
    assert ids == [f"benchmarks/test_host_membw.py::test_host_membw[time-np1-1M-default-fp32-{k}]"
                   for k in ("adam_pattern", "copy", "triad")], proc.stdout
    assert "1 deselected" in proc.stdout, proc.stdout  # touch's one entry


@pytest.mark.parametrize("args, message", [
    (["--numa-ab=pair=1"], "--numa-ab: allowed with base=CHECKOUT"),
    (["--numa-ab=runs_of=x.txt"], "--numa-ab: allowed with base=CHECKOUT"),
    ([f"--numa-ab=base={ROOT}", "--numa-ab=pair=-1"], "--numa-ab pair=-1: allowed a whole number >= 0"),
    ([f"--numa-ab=base={ROOT}", "--numa-ab=runs_of=/nonexistent/list"], "--numa-ab runs_of=/nonexistent/list: "),
], ids=["pair-without-base", "runs-of-without-base", "negative-pair", "missing-list"])
def test_bad_pass_options_are_usage_errors(args, message):
    proc = subprocess.run([*SESSION, *args, "--collect-only"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4 and message in proc.stderr, proc.stderr[-2000:]


def test_a_pass_s_pair_number_picks_the_pair_s_cpus(tmp_path):
    """--numa-ab pair=1 with same_cpus=1: the session's one pair runs on pair 1's CPU, as
    the second pair of a session of two would."""
    from numabench.cases import Case
    from numabench.families import family
    from numabench.families.base import ab_pair_cpus
    from numabench.machine.topology import discover
    from numabench.numa.policy import parse_policies

    out = tmp_path / "ab.json"
    proc = subprocess.run([*SESSION, "--numa-repeats=1", f"--numa-ab=base={ROOT}", "--numa-ab=same_cpus=1",
                           "--numa-ab=pair=1", f"--benchmark-json={out}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (entry,) = json.loads(out.read_text())["benchmarks"]
    topo = discover("/")
    ranks = family("touch").ranks(Case("touch", 1, 1 << 20, parse_policies("default")[0], "fp32"), topo)
    want = [[ab_pair_cpus(ranks, topo, sorted(os.sched_getaffinity(0)), 1, 1)[0].cpus[0]]]
    assert entry["extra_info"]["invocation_cpus"] == entry["extra_info"]["ab_base"]["invocation_cpus"] == want


def test_a_head_older_than_the_session_option_is_told_to_run_invocations(tmp_path):
    """A head checkout whose pytest knows only the A/B session's earlier options (--numa-ab-base and
    its mirror), not --numa-ab: the session runs in the head's checkout, so numabench ab says what
    to run instead."""
    from numabench.ab.run import Side, invoke_interleaved

    head = tmp_path / "head"
    head.mkdir()
    (head / "conftest.py").write_text(
        "def pytest_addoption(parser):\n"
        "    for name in ('--numa-repeats', '--numa-ab-base'):\n"
        "        parser.addoption(name)\n"
        "    for name in ('--numa-ab-base-env', '--numa-ab-head-env'):\n"
        "        parser.addoption(name, action='append', default=[])\n")
    side = Side("old", None, head, {})
    with pytest.raises(UsageError, match=r"the head \(old\) predates --numa-ab, which the rounds mode runs its "
                                         r"session with: allowed --interleave=invocations for it"):
        invoke_interleaved(side, side, ["--numa-ab=pair=0"], 1, tmp_path / "ab.json")


def test_a_stop_between_passes_keeps_the_finished_ones(tmp_path):
    """A stop that reaches numabench ab outside a session (as a pass ends, before the next one
    starts) still judges the passes that finished; a stop before any finished is raised as it is."""
    class StopBefore(FakeSessions):
        def __call__(self, base, head, pytest_args, pairs, json_path):
            if len(self.asked) == self.stop_in_pass - 1:
                self.asked.append((-1, None))
                raise KeyboardInterrupt()
            return super().__call__(base, head, pytest_args, pairs, json_path)

    with pytest.raises(StoppedWithMeasurements) as stopped:
        invoke_in_passes(StopBefore(noisy(), stop_in_pass=3), None, None, ["benchmarks"], 4, tmp_path)
    assert [sorted(m) for m in stopped.value.measured["base"]] == [sorted([A, A2, B])] * 2
    assert len(json.loads((tmp_path / "ab.json").read_text())["benchmarks"][0]["extra_info"]
               ["invocation_medians_s"]) == 2
    with pytest.raises(KeyboardInterrupt) as first:
        invoke_in_passes(StopBefore(noisy(), stop_in_pass=1), None, None, ["benchmarks"], 4, tmp_path / "x")
    assert not isinstance(first.value, StoppedWithMeasurements)


def _gate_with_offset(rng, true_ratio: float, noise: float, offset_sd: float, passes: bool) -> str:
    """One synthetic entry judged as the gate's default judges it (3 pairs; 3 confirming where they
    judge a change, all 6 judged at 97.5%), its log pair ratios the change + an offset + the pair's
    own noise. Back to back every pair shares one offset (the minute they ran in); in passes each
    pair has its own."""
    shared = rng.gauss(0.0, offset_sd)

    def pair() -> float:
        return true_ratio * math.exp((rng.gauss(0.0, offset_sd) if passes else shared) + rng.gauss(0.0, noise))

    ratios = [pair() for _ in range(3)]
    if judge_ratios(ratios, 1.0, 0.95).verdict not in (SLOWER, FASTER):
        return judge_ratios(ratios, 1.0, 0.95).verdict
    ratios += [pair() for _ in range(3)]
    return judge_ratios(ratios, 1.0, confirmed_confidence(0.95)).verdict


def test_passes_keep_a_shared_offset_from_reading_as_a_change():
    """cpu_adam torch-foreach on H200 x1: run means 2.7% apart beyond what the pairs predict, pairs
    2% apart (docs/GATE.md). Back to back such an unchanged entry is judged slower in about 5% of
    runs; in passes, where each pair meets its own offset, under 0.1% (seeded, 6000 runs each)."""
    rng = random.Random(61)
    runs = 6000
    false = {p: sum(_gate_with_offset(rng, 1.0, 0.02, 0.027, p) == SLOWER for _ in range(runs)) / runs
             for p in (False, True)}
    assert false[False] > 0.04 and false[True] < 0.005, false


def test_a_session_kept_with_its_run_record_is_named_as_the_run_was(tmp_path, repo):  # noqa: F811
    """numabench ab --session-json keeps how the run ran (numabench_ab) once it is judged: a rejudge
    names its base by revision and commit, not by the temporary checkout it ran from, and says it ran
    in passes within a budget; a record that is not one is refused, named."""
    fake = FakeSessions(noisy(changed={A: 1.3}))
    kept_path = tmp_path / "session.json"
    res = run_ab("HEAD~1", "HEAD", ["benchmarks", "-k", "x"], pairs=3, cwd=repo, build_side=lambda s: "",
                 invoke_both=fake, confirm_pairs=3, passes=True, session_json=kept_path, time_budget_s=600.0,
                 head_env={"NUMABENCH_INJECT_SLOWDOWN": "1.05"})
    add_run_record(kept_path, res)  # as numabench ab does once the run is judged
    run = json.loads(kept_path.read_text())
    assert run[RUN_KEY]["base"]["label"] == "HEAD~1" and "entries" not in run[RUN_KEY]
    again = rejudge(run, str(kept_path))
    assert (again.base.label, again.base.commit) == ("HEAD~1", res.base.commit) and again.base.commit
    assert (again.head.label, again.head.commit, again.head.env) == ("HEAD", res.head.commit, res.head.env)
    assert again.passes and again.time_budget_s == 600.0 and again.workers == res.workers
    assert again.selection == ["benchmarks", "-k", "x"] and again.timings_s == {}  # nothing measured now
    assert [(r.fullname, r.verdict) for r in again.rows] == [(r.fullname, r.verdict) for r in res.rows]
    text = render_text(again)
    assert f"base: HEAD~1 ({res.base.commit[:12]})" in text and "numabench-ab-" not in text
    with pytest.raises(UsageError, match=f"s.json's {RUN_KEY}: base.label is missing: required"):
        rejudge({**run, RUN_KEY: {**run[RUN_KEY], "base": {}}}, "s.json")


def test_a_focus_gives_the_budget_s_further_pairs_to_its_families_runs_only(tmp_path):
    """Both runs' entries are too spread for 1%; with the focus on R2's family only its run takes
    further passes, toward the threshold, and the progress names it."""
    def passes(focus):
        fake = FakeSessions(noisy(spread={A: 0.01, A2: 0.01, B: 0.01}), walls={"R1": 2.0, "R2": 2.0})
        lines: list[str] = []
        measured = invoke_in_passes(fake, None, None, ["benchmarks"], 3, tmp_path, target_pct=1.0,
                                    time_budget_s=200.0, focus=focus, clock=lambda: fake.now, progress=lines.append)
        return fake.asked[3:], measured, lines

    further, _, _ = passes(())
    assert {n for _, listed in further for n in listed} == {A, A2, B}  # unfocused: both runs' entries
    further, measured, lines = passes(("R2",))
    assert len(further) > 3 and all(listed == [B] for _, listed in further), further
    assert [sum(n in m for m in measured["base"]) for n in (A, A2, B)] == [3, 3, 3 + len(further)]
    # the focused run's first stage is 6 pairs (3 more passes), its Stein's needs taken from all 6
    assert measured["first_stage"] == {B: 6}
    assert [ln for ln in lines if "first-stage pair" in ln] == [
        f"pass {p}: a first-stage pair of the worker runs of R2, whose own code changed" for p in (4, 5, 6)]
    assert any("worker runs of R2 (up to" in ln for ln in lines), lines
    kept = json.loads((tmp_path / "ab.json").read_text())
    assert {b["fullname"]: b["extra_info"]["ab_base"].get("first_stage_pairs") for b in kept["benchmarks"]} == {
        A: None, A2: None, B: 6}


def test_the_rest_of_a_focus_budget_buys_pairs_for_the_runs_still_short_of_their_need():
    """R1 (10 s a pair) needs 40 pairs, beyond any budget here; R2 (5 s) needs nothing more: the
    rest goes to R1, a pair at a time while it fits (a further pass's start counted), and stops
    where every need is met."""
    runs = {"R1": RunNeeds(10.0, (40,)), "R2": RunNeeds(5.0, ())}
    assert allocate(runs, 3, 35.0) == {"R1": 3, "R2": 3}  # the need itself never fits
    assert fill({"R1": 3, "R2": 3}, runs, 3, 35.0) == {"R1": 6, "R2": 3}
    assert fill({"R1": 3, "R2": 3}, runs, 3, 35.0, pass_overhead_s=2.0) == {"R1": 5, "R2": 3}  # 3 more: 36 s
    assert fill({"R1": 3}, {"R1": RunNeeds(10.0, (5,))}, 3, 1e6) == {"R1": 5}
    assert fill({"R1": 3, "R2": 3}, runs, 3, 5.0) == {"R1": 3, "R2": 3}


def test_a_focus_whose_threshold_is_beyond_its_budget_still_spends_it_on_the_focused_run(tmp_path):
    """The focused run's entry spreads +-5%: 1% would take hundreds of pairs, far beyond a 60 s
    budget at 2 s a pair. Its first stage of 6, then further pairs of it while the budget holds;
    the unfocused run none."""
    fake = FakeSessions(noisy(spread={A: 0.05, A2: 0.05, B: 0.05}), walls={"R1": 2.0, "R2": 2.0})
    lines: list[str] = []
    measured = invoke_in_passes(fake, None, None, ["benchmarks"], 3, tmp_path, target_pct=1.0,
                                time_budget_s=60.0, focus=("R2",), clock=lambda: fake.now, progress=lines.append)
    further = fake.asked[3:]
    assert all(listed == [B] for _, listed in further), further
    # 12 s for the first 3 passes, 6 s for the first stage's 3, then a pair of 2 s each while it fits
    assert len(further) == 3 + 21 and measured["first_stage"] == {B: 6}
    assert fake.now <= 60.0
    assert [sum(n in m for m in measured["base"]) for n in (A, A2, B)] == [3, 3, 27]


def test_run_ab_focuses_the_budget_on_the_families_whose_own_code_changed(tmp_path, repo):  # noqa: F811
    """A diff that touches one family's own code (its benchmark module): in passes, with the smoke
    tier and no --time-budget, that family's runs take further pairs toward the threshold within
    --focus-budget; a diff of shared code, a given --time-budget or a focus budget of 0 do not."""
    from numabench.ab import run as ab_run

    touched = {"R2": ("benchmarks/test_R2.py",)}
    scoped = ab_run.Scope(families=touched)
    calls = []

    def scope_of(paths, kernels):
        calls.append(paths)
        return scoped

    def run(**kw):
        fake = FakeSessions(noisy(spread={B: 0.01}))
        return fake, run_ab("HEAD~1", "HEAD", ["benchmarks", "--numa-tier=smoke"], pairs=3, cwd=repo,
                            build_side=lambda s: "", invoke_both=fake, passes=True, **kw)

    orig = ab_run.scope_of
    ab_run.scope_of = scope_of
    try:
        fake, res = run(focus_budget_s=120.0)
        assert res.focus == ["R2"] and res.time_budget_s == 120.0 and res.target_pct == res.threshold_pct
        assert len(fake.asked) > 6 and all(listed == [B] for _, listed in fake.asked[3:])
        row = next(r for r in res.rows if r.fullname == B)
        # judged with Stein's width from its first 6 pairs, as its needs were taken
        low, high, _ = t_interval(row.pair_ratios, res.confidence, 6, row.pair_errors)
        assert (row.low, row.high) == pytest.approx((low, high))
        kept = tmp_path / "kept.json"  # judged again from the kept session: the same first stage
        fake, res = run(focus_budget_s=120.0, session_json=kept)
        again = rejudge(json.loads(kept.read_text()), str(kept))
        assert [(r.fullname, r.low, r.high, r.verdict) for r in again.rows] == pytest.approx(
            [(r.fullname, r.low, r.high, r.verdict) for r in res.rows])
        assert "focus: further pairs for R2 toward a resolution of 1%, within 120 s of measuring" in res.scope
        text = render_text(res)
        assert "entries of R2 (their own code changed) to a resolution of 1% per second" in text
        assert "within a time budget of 120 s, the rest of it a pair at a time for their runs still short of that" in text
        assert from_json(json.loads(json.dumps(to_json(res)))).focus == ["R2"]
        for kw in ({"focus_budget_s": 0.0}, {"focus_budget_s": 120.0, "time_budget_s": 600.0}):
            _, res = run(**kw)
            assert res.focus == [], kw
        scoped = ab_run.Scope(whole=True, shared=("conftest.py",))
        fake, res = run(focus_budget_s=120.0)
        assert res.focus == [] and res.time_budget_s is None and len(fake.asked) == 3
    finally:
        ab_run.scope_of = orig


@pytest.mark.parametrize("text, seconds", [("0", 0.0), ("0.0", 0.0), ("0m", 0.0), ("9m", 540.0), ("600", 600.0)])
def test_focus_budgets_are_a_duration_or_0_for_off(text, seconds):
    from numabench.ab.settings import SETTINGS
    assert SETTINGS["focus_budget"].parse(text) == seconds


@pytest.mark.parametrize("text", ["-1", "0x", "9min", "inf"])
def test_bad_focus_budgets_are_usage_errors(text):
    from numabench.ab.settings import SETTINGS
    with pytest.raises(UsageError, match=f"--focus-budget {text}: allowed 0 \\(off\\) or a time > 0"):
        SETTINGS["focus_budget"].parse(text)
