"""Honesty: a case whose placement check fails leaves no benchmark entry a compare could
use; every skip says why; the numbers in extra_info come from the very rounds the
stats were computed from."""
from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def suite(*args: str, env_extra: dict | None = None, test: str = "benchmarks/test_touch.py") -> subprocess.CompletedProcess:
    env = dict(os.environ, **(env_extra or {}))
    env.pop("NUMABENCH_INJECT_SLOWDOWN", None)
    cmd = [sys.executable, "-m", "pytest", test, "-p", "no:cacheprovider", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def entries(path: Path) -> list[dict]:
    text = path.read_text() if path.exists() else ""
    return json.loads(text)["benchmarks"] if text.strip() else []


def test_failed_placement_check_leaves_no_entry(tmp_path):
    """NUMABENCH_FAULT=misplace@setup makes the check expect every page on a node that does
    not exist, as if the policy had not been applied: the cases fail, nothing is recorded,
    nothing is saved for a later compare."""
    out = tmp_path / "run.json"
    proc = suite("-q", "--numa-policies=default;bind:0", "--param-sizes=1M", "--numa-rounds=3",
                 f"--benchmark-json={out}", f"--benchmark-storage=file://{tmp_path / 'store'}", "--benchmark-save=bad",
                 env_extra={"NUMABENCH_FAULT": "misplace@setup"})
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text
    assert "2 failed" in text and "PlacementError: rank 0 under bind:0" in text, text
    assert "off by 100.00 percentage points" in text
    assert entries(out) == []
    saved = list((tmp_path / "store").rglob("*.json")) if (tmp_path / "store").exists() else []
    assert all(entries(f) == [] for f in saved), saved


def test_every_skip_says_why():
    proc = suite("benchmarks", "-q", "-rs", "--nprocess=1,2", "--param-sizes=3G", "--numa-host-memory=8",
                 "--numa-policies=default;local;bind:0;bind:1;interleave:all;weighted:0=1,1=3;preferred-many:0,1",
                 test="benchmarks")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert lines and "passed" not in proc.stdout.splitlines()[-1]
    for ln in lines:
        m = re.match(r"SKIPPED \[\d+\] [^:]+(?::\d+)?: (.*)$", ln)
        assert m and len(m.group(1).strip()) > 10, f"skip without a reason: {ln!r}"


def test_extra_info_comes_from_the_same_rounds_as_the_stats(tmp_path):
    out = tmp_path / "run.json"
    proc = suite("-q", "--numa-policies=default;bind:0", "--param-sizes=2M", "--numa-rounds=5", "--numa-warmup=1",
                 f"--benchmark-json={out}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    benches = entries(out)
    assert len(benches) == 2
    for b in benches:
        x, stats = b["extra_info"], b["stats"]
        data = stats["data"]
        assert len(data) == stats["rounds"] == x["rounds"] == 5
        med = statistics.median(data)
        assert stats["median"] == pytest.approx(med, rel=1e-12)
        [rank_med] = x["per_rank_median_s"]  # one rank: the per-round max is that rank's time
        assert rank_med == pytest.approx(med, rel=1e-9)
        assert x["GBps"] == pytest.approx(x["bytes_per_round"] / med / 1e9, abs=0.0015)
        assert x["bytes_per_round"] == 2_000_000 * 4
        assert all(p["ok"] for p in x["placement"] if "ok" in p)
