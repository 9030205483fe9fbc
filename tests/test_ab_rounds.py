"""A same-runner A/B takes a family's ``ab_rounds`` where its tier takes fewer (a pair's ratio is
the median of its round-by-round ratios, so rounds narrow a pair where another pair would pay the
set-up again); --numa-rounds still decides, and a plain session keeps the tier's rounds. The time
plan of an A/B (numabench plan --ab-pairs) counts the rounds the A/B takes.

End to end on the CPU with host_membw (ab_rounds 30, the ci tier's cap 10) at 1M elements: the
base checkout is a copy of this package and its kernel sources."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from numabench.families import family
from numabench.gate.pairs import MIN_ROUNDS_FOR_ERROR, RoundTarget, round_ratio_error
from numabench.tiers import CI_MAX_ROUNDS
from numabench.workers.run import wants_round

ROOT = Path(__file__).resolve().parents[1]
SESSION = [sys.executable, "-m", "pytest", "benchmarks/test_host_membw.py", "--numa-tier=ci",
           "--numa-policies=default", "--param-sizes=1M", "--numa-warmup=1", "-k", "copy", "-p",
           "no:cacheprovider", "-q"]


def base_copy(tmp_path: Path) -> Path:
    base = tmp_path / "base"
    for part in ("numabench", "csrc"):
        shutil.copytree(ROOT / part, base / part, ignore=shutil.ignore_patterns("__pycache__"))
    return base


def rounds_taken(tmp_path: Path, *args: str) -> tuple[int, list[int]]:
    """The entry's rounds, and each side's rounds in each pair (none without a base)."""
    out = tmp_path / "out.json"
    proc = subprocess.run([*SESSION, *args, f"--benchmark-json={out}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (entry,) = json.loads(out.read_text())["benchmarks"]
    extra = entry["extra_info"]
    ab = extra.get("ab_base") or {}
    sides = [len(r) for key in ("invocation_rounds_s", "head_invocation_rounds_s") for r in ab.get(key, [])]
    return extra["rounds"], sides


def test_an_ab_session_takes_the_family_s_ab_rounds_and_the_option_still_decides(tmp_path):
    ab_rounds = family("host_membw").ab_rounds
    assert ab_rounds and ab_rounds > CI_MAX_ROUNDS, "host_membw no longer takes more rounds in an A/B: pick another"
    base = base_copy(tmp_path)
    assert rounds_taken(tmp_path, f"--numa-ab=base={base}") == (ab_rounds, [ab_rounds, ab_rounds])
    assert rounds_taken(tmp_path, f"--numa-ab=base={base}", "--numa-rounds=4") == (4, [4, 4])
    assert rounds_taken(tmp_path) == (CI_MAX_ROUNDS, [])  # no base: the tier's


def planned_steps_s(tmp_path: Path, *args: str) -> float:
    """The time plan's seconds of steps, as numabench plan --ab-pairs reads them."""
    figures = tmp_path / "plan.json"
    proc = subprocess.run([*SESSION, *args, "--collect-only"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "NUMABENCH_PLAN_JSON": str(figures)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(figures.read_text())["steps_seconds"]


def test_the_plan_of_an_ab_counts_the_rounds_the_ab_takes(tmp_path):
    warmup = 1  # SESSION's --numa-warmup
    ab = planned_steps_s(tmp_path)
    tier = planned_steps_s(tmp_path, f"--numa-rounds={CI_MAX_ROUNDS}")
    assert ab == pytest.approx(tier * (warmup + family("host_membw").ab_rounds) / (warmup + CI_MAX_ROUNDS))


# -- a pair's rounds to a target (--round-target, --round-cap) ----------------------------------

def test_a_pair_takes_rounds_until_its_ratio_is_known_to_the_target_or_the_cap(tmp_path):
    """--numa-rounds=4 and a target no real pair meets: every pair stops at --round-cap x 4, both
    sides alike (where a pair meets its target: test_a_run_times_rounds_while_a_ratio_is_not_known)."""
    base = base_copy(tmp_path)
    args = (f"--numa-ab=base={base}", "--numa-rounds=4", "--numa-repeats=2")
    cap = 3
    assert rounds_taken(tmp_path, *args, "--numa-ab=round_target=0.000001", f"--numa-ab=round_cap={cap}") == (
        2 * 4 * cap, [4 * cap] * 4)
    assert rounds_taken(tmp_path, *args) == (8, [4] * 4)  # off: the rounds asked for


def test_a_pair_s_ratio_error_reads_the_spread_of_its_round_ratios():
    steady = [1e-3] * 20
    assert round_ratio_error(steady, steady) == 0.0
    assert round_ratio_error(steady[:MIN_ROUNDS_FOR_ERROR - 1], steady[:MIN_ROUNDS_FOR_ERROR - 1]) == math.inf
    # quads (rounds 2j, 2j+1) alternating 1.1 and 1/1.1: sigma (IQR / 1.349) of their logs, as the
    # median's error over the 10 quads
    head = [1e-3 * (1.1 if i % 4 < 2 else 1 / 1.1) for i in range(20)]
    iqr = 2 * math.log(1.1)
    assert round_ratio_error(steady, head) == pytest.approx(1.2533 * iqr / 1.349 / math.sqrt(10), rel=1e-3)
    assert round_ratio_error(steady, [0.0] + head[1:]) == math.inf  # a zero time: nothing known
    # a sawtooth (the side that steps second slower by 10%) cancels in every quad: known exactly
    sawtooth = [1e-3 * (1.1 if i % 2 else 1 / 1.1) for i in range(20)]
    assert round_ratio_error(sawtooth, [1e-3 * 1.1 * 1.1 / (1.1 if i % 2 else 1 / 1.1) for i in range(20)]) < 0.02
    target = RoundTarget(error_pct=6.0, most_rounds=40)
    assert target.met([(steady, steady), (steady, head)])  # about 5.7%
    assert not RoundTarget(error_pct=5.0, most_rounds=40).met([(steady, steady), (steady, head)])
    with pytest.raises(ValueError, match="rounds: allowed as many of each"):
        round_ratio_error(steady, head[:5])


@pytest.mark.parametrize("argv, message", [
    (["--round-target=-1%"], "--round-target -1%: allowed a number from 0% to 100%"),
    (["--round-target", "0.3%", "--round-cap", "0"], "--round-cap 0: allowed a whole number from 1 to 100 times"),
    (["--round-target", "0.3%", "--interleave", "invocations"], "--round-target 0.3%: allowed with "
                                                                 "--interleave=rounds"),
])
def test_bad_round_targets_are_usage_errors(argv, message, capsys):
    from numabench.cli import main

    assert main(["ab", "HEAD", "HEAD", *argv, "--no-passes", "--", "benchmarks/test_touch.py"]) == 2
    assert message in capsys.readouterr().err


def test_a_run_times_rounds_while_a_ratio_is_not_known():
    """run_sides' loop: the rounds asked for, then rounds while some variant's phase is not known to
    the target (under MIN_ROUNDS_FOR_ERROR rounds nothing is), never beyond the most."""
    target = RoundTarget(error_pct=1.0, most_rounds=12)
    steady = [1e-3] * 8
    noisy = [1e-3 * (1.1 if i % 4 < 2 else 1 / 1.1) for i in range(8)]  # quads 1.1, 1/1.1, ...

    def phases(head_step, head_copy):
        return {"base": [{"step": steady, "copy": steady}], "head": [{"step": head_step, "copy": head_copy}]}

    labels = ["base", "head"]
    assert wants_round(3, 4, target, phases(steady[:3], steady[:3]), labels)  # the rounds asked for
    four = {"base": [{"step": steady[:4], "copy": steady[:4]}], "head": [{"step": steady[:4], "copy": steady[:4]}]}
    assert wants_round(4, 4, target, four, labels)  # too few to know
    assert not wants_round(8, 4, target, phases(steady, steady), labels)  # known: 0%
    assert wants_round(8, 4, target, phases(steady, noisy), labels)  # copy about 6% yet
    assert not wants_round(12, 4, target, phases(steady, noisy), labels)  # the most
    assert not wants_round(4, 4, None, phases(steady, noisy), labels)  # no target: the rounds asked for
