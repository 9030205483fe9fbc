"""Further pairs where an entry is too wide (--numa-ab max_pairs=M, numabench ab --max-pairs, Stein's
two-stage rule): how many a worker run takes (numabench.ab.extend.pairs_wanted), how entries with
more pairs than others are read and judged (numabench.ab.run), that the rule keeps an A/A's
false verdicts at the interval's confidence where stopping on the running width does not
(synthetic pairs, seeded), and a session that takes them end to end on the CPU (touch: targets
no noise can meet or miss)."""
from __future__ import annotations

import json
import math
import random
import subprocess
from pathlib import Path

import pytest

from numabench.ab.extend import pairs_wanted
from numabench.cases import Case, CaseResult
from numabench.errors import UsageError
from numabench.numa.policy import Policy
from numabench.ab.run import judge_measured, run_ab
from numabench.ab.session import interleaved_medians
from numabench.gate.pairs import UNRESOLVED, judge, pairs_for_target, resolution_pct, t_quantile
from numabench.gate.rule import SAME, SLOWER
from test_ab import _session_run, repo  # noqa: F401  (the scratch repository fixture)
from test_ab_sides import ROOT, SESSION, collected_with

CASE = Case("touch", 1, 1 << 20, Policy.parse("default"), "fp32")


def result(**phases: float) -> CaseResult:
    """One variant's result whose phases took these medians (three rounds each)."""
    return CaseResult(CASE, {ph: [v, v * 1.001, v * 0.999] for ph, v in phases.items()}, [], [], [], "numactl", [])


def test_the_first_pairs_spread_decides_how_many_in_all():
    spread = [1.0, 1.03, 0.97, 1.01]
    s0 = math.sqrt(sum((math.log(r) - sum(map(math.log, spread)) / 4) ** 2 for r in spread) / 3)
    need = math.ceil((t_quantile(0.975, 3) * s0 / math.log1p(0.02)) ** 2)
    assert 4 < need < 20 and pairs_for_target(spread, 2.0, 0.95, 20) == need
    assert pairs_for_target(spread, 2.0, 0.95, 6) == 6  # at most the cap
    assert pairs_for_target([1.0, 1.0001, 0.9999], 2.0, 0.95, 9) == 3  # narrow already: none further
    # a worker run: its widest entry (each variant's each phase) decides, at most the cap
    calm = [([result(a=1.0, b=1.0)], [result(a=1.05, b=1.0 * r)]) for r in (1.0, 1.0001, 0.9999)]
    assert pairs_wanted(calm, 2.0, 0.95, 9) == 3
    noisy = [([result(a=1.0, b=1.0)], [result(a=1.05, b=r)]) for r in spread]
    assert pairs_wanted(noisy, 2.0, 0.95, 40) == need and pairs_wanted(noisy, 2.0, 0.95, 6) == 6


def test_entries_with_further_pairs_are_judged_on_all_of_them():
    a, b, c = "x.py::t[a]", "x.py::t[b]", "x.py::t[c]"
    run = _session_run({a: [1.0] * 4, b: [1.0] * 6, c: [1.0]}, {a: [1.0] * 4, b: [1.0] * 6, c: [1.0]})
    measured = interleaved_medians(run, 4)
    assert len(measured["head"]) == 6 and b in measured["head"][5] and a not in measured["head"][5]
    rows, missing = judge_measured(measured, 1.0, 0.95, pairs=4)
    assert {r.fullname: len(r.base_s) for r in rows} == {a: 4, b: 6} and missing == [c]


def _aa(rng: random.Random, two_stage: bool) -> tuple[str, int]:
    """One synthetic A/A entry (3% log-normal noise): 4 pairs, then up to 10 toward a 2% resolution."""
    ratios = [math.exp(rng.gauss(0.0, 0.03)) for _ in range(4)]
    if two_stage:
        ratios += [math.exp(rng.gauss(0.0, 0.03)) for _ in range(pairs_for_target(ratios, 2.0, 0.95, 10) - 4)]
    else:  # stop as soon as the running interval is narrow enough
        while len(ratios) < 10 and resolution_pct(ratios, 0.95) > 2.0:
            ratios.append(math.exp(rng.gauss(0.0, 0.03)))
    return judge([1.0] * len(ratios), ratios, 0.0, 0.95, first_stage=4 if two_stage else None).verdict, len(ratios)


def test_the_two_stage_rule_keeps_an_aa_at_its_confidence():
    """Judged at threshold 0 (any interval off 1 counts): Stein's rule stays at the 5% that 95%
    claims; stopping on the running width does not (the reason for the rule)."""
    runs = 4000
    for two_stage, low, high in ((True, 0.035, 0.065), (False, 0.065, 1.0)):
        rng = random.Random(38)
        outcomes = [_aa(rng, two_stage) for _ in range(runs)]
        false = sum(v not in (SAME, UNRESOLVED) for v, _ in outcomes) / runs
        assert sum(n > 4 for _, n in outcomes) > runs / 2  # further pairs were taken
        assert low < false < high, (two_stage, false)


def test_run_ab_asks_the_session_for_further_pairs_only_when_allowed(repo):  # noqa: F811
    seen = []

    def invoke_both(base, head, pytest_args, pairs, json_path: Path):
        seen.append(list(pytest_args))
        return interleaved_medians(_session_run({"x.py::t[a]": [1.5e-3] * 5}, {"x.py::t[a]": [1e-3] * 5}), pairs)

    res = run_ab("HEAD~1", "HEAD", ["benchmarks"], pairs=3, cwd=repo, build_side=lambda s: "",
                 invoke_both=invoke_both, max_pairs=8, target_pct=2.0, workers="exec")
    assert seen[-1] == ["benchmarks", "--numa-ab=max_pairs=8", "--numa-ab=target_resolution=2%", "--numa-ab=confidence=0.95"]
    assert res.selection == ["benchmarks"] and (res.max_pairs, res.target_pct) == (8, 2.0)
    assert [len(r.base_s) for r in res.rows] == [5] and res.rows[0].verdict == SLOWER
    run_ab("HEAD~1", "HEAD", ["benchmarks"], pairs=3, cwd=repo, build_side=lambda s: "", invoke_both=invoke_both,
           workers="exec")
    assert seen[-1] == ["benchmarks"]
    for kwargs, message in (({"max_pairs": 2}, "allowed a number >= --pairs"),
                            ({"max_pairs": 8, "interleave": "invocations"}, "with --interleave=rounds")):
        with pytest.raises(UsageError, match=message):
            run_ab("HEAD~1", "HEAD", ["benchmarks"], pairs=3, cwd=repo, build_side=lambda s: "", **kwargs)
    with pytest.raises(UsageError, match="numabench ab sets it"):
        run_ab("HEAD~1", "HEAD", ["benchmarks", "--numa-ab=max_pairs=9"], pairs=3, cwd=repo, build_side=lambda s: "")


@pytest.mark.parametrize("target, pairs", [("0.00001%", 3), ("10000%", 2)], ids=["never-met", "met-at-once"])
def test_a_session_takes_further_pairs_while_the_target_is_not_met(tmp_path, target, pairs):
    """8 rounds a pair (SESSION's 3 make one quad: under a loaded runner two pairs of 0.1 ms touch
    steps once differed by 2x, beyond even the widest target's reach)."""
    out = tmp_path / "ab.json"
    proc = subprocess.run([*SESSION, "--numa-rounds=8", "--numa-repeats=2", f"--numa-ab=base={ROOT}",
                           "--numa-ab=max_pairs=3",
                           f"--numa-ab=target_resolution={target}", f"--benchmark-json={out}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (entry,) = json.loads(out.read_text())["benchmarks"]
    extra = entry["extra_info"]
    assert len(extra["invocation_medians_s"]) == len(extra["ab_base"]["invocation_medians_s"]) == pairs


@pytest.mark.parametrize("args, message", [
    (["--numa-ab=max_pairs=1"], "--numa-ab max_pairs=1: allowed 0"),
    (["--numa-ab=max_pairs=x"], "--numa-ab max_pairs=x: allowed 0"),
    (["--numa-ab=max_pairs=4", "--numa-ab=target_resolution=0%"], "--numa-ab target_resolution=0%: allowed a number > 0% and at most 10000%"),
    (["--numa-ab=max_pairs=4", "--numa-ab=confidence=1.5"], "--numa-ab confidence=1.5: allowed a number > 0 and below 1"),
], ids=["too-few", "not-a-number", "zero-target", "confidence"])
def test_bad_further_pair_options_are_usage_errors(args, message):
    proc = collected_with(f"--numa-ab=base={ROOT}", *args)
    assert proc.returncode == 4 and message in proc.stderr, proc.stderr[-2000:]


def test_further_pairs_need_a_base():
    proc = collected_with("--numa-ab=max_pairs=4")
    assert proc.returncode == 4 and "--numa-ab: allowed with base=CHECKOUT" in proc.stderr
