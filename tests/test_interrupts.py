"""Ctrl-C (SIGINT) and SIGTERM to a pytest run sitting inside a weighted case: the weights
(and the auto-tuning switch) end as they were before, and no worker is left running. The
suite runs for real in a subprocess, its weighted policy applied by the kernel; a worker
fault (NUMABENCH_FAULT=hang@step2) keeps it inside the weighted case until the signal
comes. The weights it writes are a fake sysfs tree (NUMABENCH_WEIGHTS_DIR): tests never
write the machine's real weights (a write there can switch auto mode off for good).
A run whose caller ignores SIGINT (`trap '' INT`, a background job of a non-interactive
shell) stops on it all the same."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import end_child, finish, scratch_left, start_child, wait_for_workers, workers_of

from numabench.interrupts import DEFAULTS, put_back, restore_interrupts
from numabench.machine.capabilities import probe
from numabench.machine.weights_sysfs import auto_mode_file, read_weights

ROOT = Path(__file__).resolve().parents[1]
CAPS = probe()

needs_weighted = pytest.mark.skipif(not CAPS.weighted_interleave_kernel,
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


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def ignores(pid: int, sig: signal.Signals) -> bool:
    """Whether the process ignores ``sig`` (its SigIgn mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    raise AssertionError(f"no SigIgn line for process {pid}")


SIGNALS = [pytest.param(signal.SIGINT, (), id="SIGINT"),
           pytest.param(signal.SIGINT, (signal.SIGINT,), id="SIGINT-ignored-by-caller"),
           pytest.param(signal.SIGTERM, (), id="SIGTERM")]
PROMPT_S = 30.0  # signal to exit; the run's per-request timeout is 300 s


@needs_weighted
@pytest.mark.weighted
@pytest.mark.parametrize("sig, ignored", SIGNALS)
def test_signal_in_weighted_case_restores_weights_and_ends_workers(sig, ignored, sysfs_guard, tmp_path):
    wdir = sysfs_guard
    before = snapshot(wdir)
    weight = 7
    tmpdir = tmp_path / "tmp"  # the run's TMPDIR: its workers' scratch folders go here
    tmpdir.mkdir()
    env = dict(os.environ, NUMABENCH_FAULT="hang@step2", NUMABENCH_WEIGHTS_DIR=str(wdir), TMPDIR=str(tmpdir))
    cmd = [sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "-p", "no:cacheprovider", "-q",
           f"--numa-policies=weighted:0={weight}", "--param-sizes=1M", "--numa-rounds=3", "--numa-warmup=1",
           "--numa-timeout=300", "--numa-allow-weight-writes"]
    proc = start_child(cmd, ignored=ignored, cwd=ROOT, env=env)
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
        assert not [p.pid for p in [psutil.Process(proc.pid), *seen] if ignores(p.pid, sig)], \
            f"the run or its workers ignore {sig.name}"
        inside = snapshot(wdir)
        proc.send_signal(sig)
        sent = time.monotonic()
        out, _ = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        end_child(proc)
    assert inside["weights"][0] == weight
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert took < PROMPT_S, f"the run took {took:.1f} s to stop\n{out}"
    assert ("Terminated: SIGTERM received" if sig == signal.SIGTERM else "KeyboardInterrupt") in out, out
    after = snapshot(wdir)
    assert after == before, out
    assert not [p.pid for p in seen if alive(p)], "workers outlived the interrupted run"
    assert not workers_of(proc.pid)
    assert not scratch_left(tmpdir), out


def test_restore_interrupts_gives_ignored_signals_their_defaults_and_puts_them_back():
    before = {sig: signal.getsignal(sig) for sig in DEFAULTS}
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        replaced = restore_interrupts()
        assert {sig: signal.getsignal(sig) for sig in DEFAULTS} == DEFAULTS
        assert replaced == {signal.SIGINT: signal.SIG_IGN, signal.SIGTERM: signal.SIG_IGN}
        put_back(replaced)
        assert {sig: signal.getsignal(sig) for sig in DEFAULTS} == dict.fromkeys(DEFAULTS, signal.SIG_IGN)

        def handler(signum: int, frame: object) -> None:
            pass

        signal.signal(signal.SIGINT, handler)
        assert restore_interrupts() == {signal.SIGTERM: signal.SIG_IGN}  # a handler someone set stays
        assert signal.getsignal(signal.SIGINT) is handler
    finally:
        for sig, previous in before.items():
            signal.signal(sig, previous)


def test_a_worker_started_with_interrupts_ignored_takes_them_again():
    """A worker's caller may be anything (numactl, a tool): it gives SIGINT and SIGTERM their
    defaults itself before it waits for its first request."""
    proc = start_child([sys.executable, "-m", "numabench.workers.main", "touch"],
                       ignored=(signal.SIGINT, signal.SIGTERM), cwd=ROOT, stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (ignores(proc.pid, signal.SIGINT) or ignores(proc.pid, signal.SIGTERM)):
            time.sleep(0.05)
        assert not ignores(proc.pid, signal.SIGINT) and not ignores(proc.pid, signal.SIGTERM)
        proc.send_signal(signal.SIGTERM)
        finish(proc, 30)
    finally:
        end_child(proc)
    assert proc.returncode == -signal.SIGTERM


def test_the_cli_started_with_interrupts_ignored_takes_them_again():
    # `numabench ab` and the bandwidth tools start children of their own: under nohup or a
    # background job they must still stop on Ctrl-C.
    probe_code = ("import signal; from numabench.cli import main; main(['topo', '--key']); "
                  "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, "
                  "signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)")
    ignore = lambda: [signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)]  # noqa: E731
    out = subprocess.run([sys.executable, "-c", probe_code], preexec_fn=ignore, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert out.splitlines()[-1] == "True True", out


def touch_run(tmpdir: Path, *args: str, fault: str | None = None) -> subprocess.Popen:
    """`pytest benchmarks/test_touch.py` on one 1M default case, its TMPDIR ``tmpdir``."""
    env = {k: v for k, v in os.environ.items() if k != "NUMABENCH_FAULT"}
    env.update(TMPDIR=str(tmpdir), **({"NUMABENCH_FAULT": fault} if fault else {}))
    return start_child([sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "-p", "no:cacheprovider", "-q",
                        "--numa-policies=default", "--param-sizes=1M", "--numa-rounds=2", *args], cwd=ROOT, env=env)


def test_a_killed_runs_scratch_folder_is_removed_by_the_next_run_and_a_live_runs_is_not(tmp_path):
    """SIGKILL leaves no clean-up to run: the killed run's scratch folder stays until the next
    run in the same TMPDIR removes it (its owner is dead); a live run's is left alone."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    killed = touch_run(tmpdir, fault="hang@step1")
    try:
        wait_for_workers(killed)
        os.kill(killed.pid, signal.SIGKILL)  # the run alone: its workers die with it (PR_SET_PDEATHSIG)
        killed.wait(timeout=30)
    finally:
        end_child(killed)
    left = scratch_left(tmpdir)
    assert len(left) == 1, left  # what a SIGKILLed run leaves
    live = touch_run(tmpdir, fault="hang@step1")
    try:
        wait_for_workers(live)
        theirs = [name for name in scratch_left(tmpdir) if name not in left]
        nxt = touch_run(tmpdir)
        out = finish(nxt, 300)
        assert nxt.returncode == 0, out
        assert scratch_left(tmpdir) == theirs, "the next run removed a live run's folder or kept a dead one's"
        live.send_signal(signal.SIGINT)
        out = finish(live, 60)
    finally:
        end_child(live)
    assert live.returncode == pytest.ExitCode.INTERRUPTED, out
    assert not scratch_left(tmpdir)
