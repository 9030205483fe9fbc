"""The regression gate works both ways: a saved run, an injected 4x slowdown that
--benchmark-compare-fail catches, a clean rerun that passes, and a baseline
from other hardware that is refused.

This CPU machine is noisy (clean reruns vary by up to ~1.8x), so the gate is
set at +100% and the injected slowdown at 4x; the point is that it can fail.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_suite(storage: Path, *args: str, slowdown: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("NUMABENCH_INJECT_SLOWDOWN", None)
    if slowdown:
        env["NUMABENCH_INJECT_SLOWDOWN"] = slowdown
    # Run from the storage's parent: pytest-benchmark prints storage paths relative to the cwd.
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "benchmarks/test_touch.py"), f"--rootdir={ROOT}",
           "-c", str(ROOT / "pytest.ini"), "-p", "no:cacheprovider", "-q",
           "--numa-policies=default;bind:0", "--param-sizes=32M", "--numa-rounds=15",
           f"--benchmark-storage=file://{storage}", *args]
    return subprocess.run(cmd, cwd=storage.parent, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    storage = tmp_path_factory.mktemp("baselines")
    out = run_suite(storage, "--benchmark-save=base")
    assert out.returncode == 0, out.stdout + out.stderr
    [saved] = list(storage.rglob("0001_base.json"))
    data = json.loads(saved.read_text())
    assert data["machine_info"]["numabench"]["hardware_key"]
    assert len(data["benchmarks"]) == 2
    return storage


def test_injected_slowdown_fails_the_gate(saved):
    out = run_suite(saved, "--benchmark-compare=0001", "--benchmark-compare-fail=median:100%", slowdown="4.0")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Performance has regressed" in out.stdout + out.stderr


def test_clean_rerun_passes_the_gate(saved):
    out = run_suite(saved, "--benchmark-compare=0001", "--benchmark-compare-fail=median:100%")
    assert out.returncode == 0, out.stdout + out.stderr


def test_baseline_from_other_hardware_is_refused(saved, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("foreign")
    [src] = list(saved.rglob("0001_base.json"))
    data = json.loads(src.read_text())
    data["machine_info"]["numabench"]["hardware_key"] = "H200x2_other-cpu_2node_cuda13"
    foreign = tmp_path / src.parent.name
    foreign.mkdir()
    (foreign / "0001_foreign.json").write_text(json.dumps(data))
    out = run_suite(tmp_path, "--benchmark-compare=0001")
    assert out.returncode != 0
    assert "refusing to compare" in out.stdout + out.stderr
    ok = run_suite(tmp_path, "--benchmark-compare=0001", "--numa-allow-foreign-baseline")
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_merged_baseline_is_what_compare_reads(saved, tmp_path_factory):
    """A baseline merged from two runs (numabench merge) is the newest run, so a plain
    --benchmark-compare loads it, and its entries gate: the 4x slowdown fails against it."""
    import shutil

    from numabench.cli import main

    tmp = tmp_path_factory.mktemp("merged")
    [src] = list(saved.rglob("0001_base.json"))
    folder = tmp / src.parent.relative_to(saved)
    folder.mkdir(parents=True)
    shutil.copy(src, folder / src.name)
    other = json.loads(src.read_text())
    for b in other["benchmarks"]:  # another family's run of the same machine
        b["name"] = b["name"].replace("test_touch", "test_elsewhere")
        b["fullname"] = b["fullname"].replace("test_touch", "test_elsewhere")
    (tmp / "other.json").write_text(json.dumps(other))
    # (the module's saved run has no per-round data: --allow-no-data)
    assert main(["merge", str(folder / "0002_merged.json"), str(folder / src.name), str(tmp / "other.json"),
                 "--allow-no-data"]) == 0
    assert len(json.loads((folder / "0002_merged.json").read_text())["benchmarks"]) == 4
    out = run_suite(tmp, "--benchmark-compare", "--benchmark-compare-fail=median:100%", slowdown="4.0")
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "0002_merged" in text and "Performance has regressed" in text, text
