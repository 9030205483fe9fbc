"""An interrupt that lands while a child is being started (after the fork, before Popen has
returned its pid to the caller) must not orphan the child: the caller's clean-up ends it all
the same. Here the signal is sent from inside Popen, right after the child exists, which is
the window a Ctrl-C or a CI's SIGTERM hits at random."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import psutil
import pytest

from numabench.interrupts import stops_held

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def hup_interrupts():
    """SIGHUP (one of the signals numabench stops on) raises KeyboardInterrupt for the test;
    SIGINT itself is left alone, as a pytest-xdist worker may have it ignored."""
    previous = signal.signal(signal.SIGHUP, signal.default_int_handler)
    yield
    signal.signal(signal.SIGHUP, previous)


@pytest.fixture
def interrupted_at_start(monkeypatch, hup_interrupts):
    """subprocess.Popen, patched: the first child started gets its pid recorded and the
    caller a SIGHUP before Popen returns. Yields the recorded pids; kills any survivor."""
    pids: list[int] = []
    real = subprocess.Popen

    class InterruptedAtStart(real):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            pids.append(self.pid)
            if len(pids) == 1:
                os.kill(os.getpid(), signal.SIGHUP)  # handled before this __init__ can return

    monkeypatch.setattr(subprocess, "Popen", InterruptedAtStart)
    yield pids
    monkeypatch.setattr(subprocess, "Popen", real)
    for pid in pids:
        try:
            p = psutil.Process(pid)
            p.kill()
            p.wait(5)
        except psutil.Error:
            pass


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_signal_inside_the_block_is_raised_at_its_end(hup_interrupts):
    done = []
    with pytest.raises(KeyboardInterrupt):
        with stops_held():
            os.kill(os.getpid(), signal.SIGHUP)
            done.append("rest of the block")
    assert done == ["rest of the block"]
    assert signal.getsignal(signal.SIGHUP) is signal.default_int_handler  # the handler is back


def test_a_block_without_a_signal_leaves_the_handlers_as_they_were(hup_interrupts):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    with stops_held():
        pass
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_signal_at_its_default_or_ignored_is_not_held():
    previous = {signal.SIGHUP: signal.signal(signal.SIGHUP, signal.SIG_IGN),
                signal.SIGTERM: signal.signal(signal.SIGTERM, signal.SIG_DFL)}
    try:
        with stops_held():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def test_outside_the_main_thread_nothing_is_held():
    seen = []

    def body():
        with stops_held():
            seen.append(signal.getsignal(signal.SIGINT))

    before = signal.getsignal(signal.SIGINT)
    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen == [before]


def test_ab_run_child_ends_a_child_started_as_the_interrupt_came(interrupted_at_start, tmp_path):
    from numabench.ab.run import run_child

    with pytest.raises(KeyboardInterrupt):
        run_child(SLEEPER, tmp_path, dict(os.environ), "the sleeper")
    assert len(interrupted_at_start) == 1
    assert not running(interrupted_at_start[0]), "the child was left running"


def test_a_worker_group_ends_a_worker_started_as_the_interrupt_came(interrupted_at_start):
    from numabench.workers.group import WorkerGroup

    with pytest.raises(KeyboardInterrupt):
        WorkerGroup([SLEEPER, SLEEPER], dict(os.environ), timeout_s=30)
    assert len(interrupted_at_start) == 1  # the second worker was never started
    assert not running(interrupted_at_start[0]), "the worker was left running"


def test_a_build_ends_a_builder_started_as_the_interrupt_came(interrupted_at_start, monkeypatch, tmp_path):
    from numabench.kernels import prebuild

    monkeypatch.setitem(prebuild._BUILDERS, "stream", "import time; time.sleep(60)")
    monkeypatch.setenv("NUMABENCH_BUILD_DIR", str(tmp_path))  # not loaded before there: a builder starts
    with pytest.raises(KeyboardInterrupt):
        list(prebuild.build_outcomes(["stream"]))
    assert len(interrupted_at_start) == 1
    assert not running(interrupted_at_start[0]), "the builder was left running"
