"""Before one A/B side's round the runner waits until the other sides' workers (and their
children) have no running thread: an OpenMP team that spins after its round, a DataLoader's
workers refilling their queue, would otherwise take the CPUs the timed round runs on."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from numabench.workers.quiet import running_threads, wait_quiet

SPIN_THEN_SLEEP = "import time\nt = time.time() + {spin}\nwhile time.time() < t: pass\nprint('slept', flush=True)\ntime.sleep(60)"
PARENT_OF_SPINNER = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time\\nt = time.time() + {spin}\\nwhile time.time() < t: pass\\n"
    "time.sleep(60)'])\nprint('started', flush=True)\ntime.sleep(60)")


@pytest.fixture
def spawn():
    procs = []

    def start(code: str) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_a_sleeping_process_is_quiet_at_once(spawn):
    p = spawn(SPIN_THEN_SLEEP.format(spin=0))
    assert p.stdout.readline().strip() == "slept"
    time.sleep(0.05)
    waited, quiet = wait_quiet([p.pid], max_s=5)
    assert quiet and waited < 0.5, waited


def test_the_wait_lasts_until_the_spin_ends(spawn):
    p = spawn(SPIN_THEN_SLEEP.format(spin=0.6))
    time.sleep(0.1)  # the interpreter is up and spinning
    t0 = time.perf_counter()
    waited, quiet = wait_quiet([p.pid], max_s=10)
    assert quiet, waited
    assert p.stdout.readline().strip() == "slept"  # it went quiet because its spin ended
    assert 0.2 < waited and time.perf_counter() - t0 < 5, waited
    assert running_threads([p.pid]) == 0


def test_a_child_that_spins_is_waited_for_and_the_wait_is_bounded(spawn):
    p = spawn(PARENT_OF_SPINNER.format(spin=30))
    assert p.stdout.readline().strip() == "started"
    time.sleep(0.2)
    import psutil

    [child] = psutil.Process(p.pid).children()
    try:
        waited, quiet = wait_quiet([p.pid], max_s=0.3)
        assert not quiet and 0.3 <= waited < 3, waited  # never quiet: bounded by max_s
    finally:
        child.kill()  # a zombie until its parent's end: no thread of it runs
    waited, quiet = wait_quiet([p.pid], max_s=5)
    assert quiet and waited < 1, waited


def test_an_exited_process_is_quiet():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert wait_quiet([p.pid], max_s=1) == (pytest.approx(0, abs=0.5), True)
