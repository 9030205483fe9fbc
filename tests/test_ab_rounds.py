"""A same-runner A/B takes a family's ``ab_rounds`` where its tier takes fewer (a pair's ratio is
the median of its round-by-round ratios, so rounds narrow a pair where another pair would pay the
set-up again); --numa-rounds still decides, and a plain session keeps the tier's rounds. The time
plan of an A/B (numabench plan --ab-pairs) counts the rounds the A/B takes.

End to end on the CPU with host_membw (ab_rounds 30, the ci tier's cap 10) at 1M elements: the
base checkout is a copy of this package and its kernel sources."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from numabench.families import family
from numabench.tiers import CI_MAX_ROUNDS

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
