"""Ctrl-C (SIGINT) and SIGTERM to a pytest run sitting inside a weighted case: the weights
(and the auto-tuning switch) end as they were before, and no worker is left running. The
suite runs for real in a subprocess, its weighted policy applied by the kernel; a worker
fault (NUMABENCH_FAULT=hang@step2) keeps it inside the weighted case until the signal
comes. The weights it writes are a fake sysfs tree (NUMABENCH_WEIGHTS_DIR): tests never
write the machine's real weights (a write there can switch auto mode off for good)."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from numabench.machine.capabilities import probe
from numabench.numa.weights import auto_mode_file, read_weights

ROOT = Path(__file__).resolve().parents[1]
CAPS = probe()

pytestmark = pytest.mark.skipif(not CAPS.weighted_interleave_kernel,
                                reason="needs a kernel with weighted interleave (Linux >= 6.9)")


def snapshot(wdir: Path) -> dict:
    auto = auto_mode_file(wdir)
    return {"weights": read_weights(wdir), "auto": auto.read_text().strip() if auto else None}


@pytest.fixture
def sysfs_guard(tmp_path):
    """A fake weights tree, as the kernel lays it out (node0, auto mode on)."""
    wdir = tmp_path / "weighted_interleave"
    wdir.mkdir()
    (wdir / "node0").write_text("1\n")
    (wdir / "auto").write_text("true\n")
    return wdir


def workers_of(pid: int) -> list[psutil.Process]:
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for p in kids:
        with contextlib.suppress(psutil.Error):
            if any("numabench.workers.main" in a for a in p.cmdline()):
                out.append(p)
    return out


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.weighted
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_in_weighted_case_restores_weights_and_ends_workers(sig, sysfs_guard):
    wdir = sysfs_guard
    before = snapshot(wdir)
    weight = 7
    env = dict(os.environ, NUMABENCH_FAULT="hang@step2", NUMABENCH_WEIGHTS_DIR=str(wdir))
    cmd = [sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "-p", "no:cacheprovider", "-q",
           f"--numa-policies=weighted:0={weight}", "--param-sizes=1M", "--numa-rounds=3", "--numa-warmup=1",
           "--numa-timeout=300", "--numa-allow-weight-writes"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen: list[psutil.Process] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            seen = workers_of(proc.pid)
            if seen and read_weights(wdir).get(0) == weight:
                break
            time.sleep(0.05)
        assert seen and read_weights(wdir).get(0) == weight, "the run never got inside the weighted case"
        time.sleep(1.0)  # the worker reaches step 2 and hangs there
        assert proc.poll() is None, "the run ended before the signal"
        inside = snapshot(wdir)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert inside["weights"][0] == weight
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert ("Terminated: SIGTERM received" if sig == signal.SIGTERM else "KeyboardInterrupt") in out, out
    after = snapshot(wdir)
    assert after == before, out
    assert not [p.pid for p in seen if alive(p)], "workers outlived the interrupted run"
    assert not workers_of(proc.pid)
