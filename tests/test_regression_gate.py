"""The regression gate end to end on the CPU families (touch, host_membw, cpu_adam at a small
size), as `pytest benchmarks --benchmark-compare` runs it: a baseline of 3 invocations per
case, A/A runs of unchanged code that pass, a real injected slowdown of 20% that fails the
run with most entries flagged and confirmed, `numabench ab` both ways, and the errors that
replace a silent pass.

This CPU machine is noisy (invocations of unchanged code differ by up to ~6%, and xdist
neighbours would add more), so these tests run alone (marker ``serial``, a second pytest
run in .ci/test) and judge with a 7% threshold; GPU figures are in docs/GATE.md.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.serial
FAMILIES = ["benchmarks/test_touch.py", "benchmarks/test_host_membw.py", "benchmarks/test_cpu_adam.py"]
SELECT = ["--numa-policies=default", "--param-sizes=4M", "--numa-axis", "impl=ours"]
THRESHOLD = "--numa-gate-threshold=7%"
ENTRIES = 5  # touch 1 + host_membw 3 kernels + cpu_adam 1 impl


def run_suite(storage: Path, *args: str, slowdown: str | None = None,
              files: list[str] = FAMILIES) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("NUMABENCH_INJECT_SLOWDOWN", None)
    if slowdown:
        env["NUMABENCH_INJECT_SLOWDOWN"] = slowdown
    # Run from the storage's parent: pytest-benchmark prints storage paths relative to the cwd.
    cmd = [sys.executable, "-m", "pytest", *(str(ROOT / f) for f in files), f"--rootdir={ROOT}",
           "-c", str(ROOT / "pytest.ini"), "-p", "no:cacheprovider", "-q", *SELECT,
           f"--benchmark-storage=file://{storage}", *args]
    return subprocess.run(cmd, cwd=storage.parent, env=env, capture_output=True, text=True, timeout=900)


def gate_counts(text: str) -> str:
    lines = [ln for ln in text.splitlines() if " entries: " in ln and "slower" in ln]
    assert lines, text
    return lines[-1]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    storage = tmp_path_factory.mktemp("baselines")
    out = run_suite(storage, "--benchmark-save=base", "--benchmark-save-data", "--numa-repeats=3")
    assert out.returncode == 0, out.stdout + out.stderr
    [saved] = list(storage.rglob("0001_base.json"))
    data = json.loads(saved.read_text())
    assert data["machine_info"]["numabench"]["hardware_key"]
    assert len(data["benchmarks"]) == ENTRIES
    for b in data["benchmarks"]:
        meds = b["extra_info"]["invocation_medians_s"]
        assert len(meds) == 3 and all(m > 0 for m in meds)
        assert b["stats"]["rounds"] == b["extra_info"]["rounds"] == len(b["stats"]["data"])
        assert b["stats"]["rounds"] % 3 == 0  # the rounds of all three invocations, pooled
    return storage


def test_unchanged_code_passes_three_times(saved):
    for _ in range(3):
        out = run_suite(saved, "--benchmark-compare", THRESHOLD)
        text = out.stdout + out.stderr
        assert out.returncode == 0, text
        assert "numabench regression gate" in text and "REGRESSION" not in text
        assert gate_counts(text).startswith(f"{ENTRIES} entries: ")


def test_real_twenty_percent_slowdown_fails_the_run_confirmed(saved):
    """3 invocations per case, judged by their median. Touch's first touch moves by up to ~15%
    between invocations on this VM (seen in CI: one invocation at 0.553 ms of work against a
    0.636 ms baseline median, which hides a 20% pad; another whose confirmation fell back inside
    the band), so per entry the test asks for most, not all: the run fails, at least 4 of the 5
    entries are judged slower, at least 3 confirmed, none judged faster."""
    out = run_suite(saved, "--benchmark-compare", THRESHOLD, "--numa-repeats=3", slowdown="1.2")
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    counts = re.match(rf"{ENTRIES} entries: (\d+) slower, 0 faster, (\d+) same, 0 no baseline", gate_counts(text))
    assert counts, text
    slower = int(counts.group(1))
    assert slower >= ENTRIES - 1, text
    confirmed = re.search(rf"confirmation: (\d+) of the {slower} entries judged slower were slower again", text)
    assert confirmed and int(confirmed.group(1)) >= ENTRIES - 2, text
    assert f"REGRESSION: {confirmed.group(1)} entries" in text, text


def test_upstream_compare_fail_keeps_working(saved):
    out = run_suite(saved, "--benchmark-compare", "--benchmark-compare-fail=median:5%", "--numa-confirm=0",
                    "--numa-gate-threshold=1000%", slowdown="2.0", files=FAMILIES[:1])
    text = out.stdout + out.stderr
    assert out.returncode == 1 and "Performance has regressed" in text, text
    assert "REGRESSION" not in text  # numabench's own gate was set far off: upstream failed the run


def test_no_baseline_is_an_error_before_anything_runs(tmp_path):
    empty = tmp_path / "nothing"
    t0 = time.monotonic()
    out = run_suite(empty, "--benchmark-compare")
    assert out.returncode == 4, out.stdout + out.stderr
    assert "--benchmark-compare: no baseline run in" in out.stderr
    assert time.monotonic() - t0 < 60 and "passed" not in out.stdout
    assert not empty.exists()  # the check creates no storage folder


def test_no_baseline_for_this_hardware_key_names_the_keys(tmp_path):
    """The default storage layout, baselines/<hardware key>/: the error names this key and those
    that have baselines."""
    from numabench.machine.hwkey import hardware_key
    from numabench.machine.topology import discover

    root = tmp_path / "baselines"
    other = root / "H200x2_other_1node_cuda13" / "Linux-CPython-3.12-64bit"
    other.mkdir(parents=True)
    (other / "0001_x.json").write_text(json.dumps({"benchmarks": []}))
    key = hardware_key(discover("/"))
    out = run_suite(root / key, "--benchmark-compare", files=FAMILIES[:1])
    assert out.returncode == 4
    assert f"no baseline for this machine's hardware key {key!r}" in out.stderr
    assert "keys with baselines: H200x2_other_1node_cuda13" in out.stderr


def test_baseline_from_another_python_version_is_found(saved, tmp_path):
    [src] = list(saved.rglob("0001_base.json"))
    folder = tmp_path / "store" / "Linux-CPython-3.99-64bit"
    folder.mkdir(parents=True)
    shutil.copy(src, folder / src.name)
    out = run_suite(tmp_path / "store", "--benchmark-compare", THRESHOLD, files=FAMILIES[:1])
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "Linux-CPython-3.99-64bit/0001_base" in text and "numabench regression gate" in text
    assert "Can't compare" not in text


def test_baseline_from_other_hardware_is_refused(saved, tmp_path):
    [src] = list(saved.rglob("0001_base.json"))
    data = json.loads(src.read_text())
    data["machine_info"]["numabench"]["hardware_key"] = "H200x2_other-cpu_2node_cuda13"
    foreign = tmp_path / src.parent.name
    foreign.mkdir()
    (foreign / "0001_foreign.json").write_text(json.dumps(data))
    out = run_suite(tmp_path, "--benchmark-compare=0001", files=FAMILIES[:1])
    assert out.returncode != 0
    assert "refusing to compare" in out.stdout + out.stderr


def test_merged_baseline_pools_and_gates(saved, tmp_path):
    """Two saved runs merged (numabench merge) pool their invocations into one band; as the
    newest run it is what a plain --benchmark-compare loads, and it gates."""
    from numabench.cli import main

    [src] = list(saved.rglob("0001_base.json"))
    folder = tmp_path / "store" / src.parent.name
    folder.mkdir(parents=True)
    shutil.copy(src, folder / src.name)
    assert main(["merge", str(folder / "0002_merged.json"), str(folder / src.name), str(src)]) == 0
    merged = json.loads((folder / "0002_merged.json").read_text())
    assert all(len(b["extra_info"]["invocation_medians_s"]) == 6 for b in merged["benchmarks"])
    out = run_suite(tmp_path / "store", "--benchmark-compare", THRESHOLD, slowdown="1.3", files=FAMILIES[:1])
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "0002_merged" in text and "(6)" in text and "REGRESSION: 1 entries" in text


@pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None, reason="needs a git checkout")
def test_ab_finds_an_injected_slowdown_and_passes_unchanged_code():
    args = ["--", "benchmarks/test_touch.py", "benchmarks/test_host_membw.py", "--numa-policies=default",
            "--param-sizes=4M"]
    cmd = [sys.executable, "-m", "numabench.cli", "ab", "HEAD", "HEAD", "--pairs", "4", "--threshold", "10%"]
    slow = subprocess.run(cmd + ["--head-env", "NUMABENCH_INJECT_SLOWDOWN=1.3", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert slow.returncode == 1, slow.stdout + slow.stderr
    # touch's first touch can move ~15% between invocations here: 3 of the 4 entries at least
    counts = re.search(r"4 entries: (\d) slower, 0 faster, (\d) same", slow.stdout)
    assert counts and int(counts.group(1)) >= 3, slow.stdout
    same = subprocess.run(cmd + args, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "0 slower" in same.stdout and "REGRESSION" not in same.stdout
    worktrees = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True)
    assert "numabench-ab-" not in worktrees.stdout  # both checkouts removed
