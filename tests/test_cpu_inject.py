"""The injected slowdown of a CPU phase: the phase takes the asked-for factor longer, and while
it waits the process's other threads run (a DataLoader's pin-memory thread needs the GIL; a pad
that spun would hold it and delay the next phase's batches, which the gate would then read as a
far larger slowdown than the one injected)."""
from __future__ import annotations

import threading
import time

from numabench.toolkit.inject import SlowdownPad

WORK_S = 0.2


def busy(seconds: float) -> int:
    t0 = time.perf_counter_ns()
    while time.perf_counter_ns() - t0 < seconds * 1e9:
        pass
    return t0


def test_a_cpu_pad_makes_the_phase_take_the_factor_longer():
    pad = SlowdownPad(1.5)
    t0 = busy(WORK_S)
    pad.cpu(t0)
    took = (time.perf_counter_ns() - t0) * 1e-9
    # never short of the factor; the upper side allows a loaded runner's late wake-up
    assert WORK_S * 1.5 <= took < WORK_S * 1.5 + 0.05, took


def test_a_cpu_pad_lets_the_process_s_other_threads_run():
    """A thread that takes the GIL briefly every 0.5 ms (as a pin-memory thread does per batch)
    wakes ~900 times during a 0.5 s pad when the pad sleeps; a spinning pad holds the GIL
    for the interpreter's whole switch interval (5 ms) at a time, so it would wake at most ~100 times."""
    wakes = 0
    stop = threading.Event()

    def waker() -> None:
        nonlocal wakes
        while not stop.is_set():
            time.sleep(0.0005)
            wakes += 1

    pad = SlowdownPad(3.5)
    t0 = time.perf_counter_ns()
    time.sleep(0.2)  # the work: 0.2 s (a sleep, so the waker's count before the pad does not matter)
    thread = threading.Thread(target=waker, daemon=True)
    thread.start()
    pad.cpu(t0)  # pads the phase to 0.7 s: 0.5 s of waiting
    during = wakes
    stop.set()
    thread.join()
    assert during > 300, f"the other thread woke {during} times during a 0.5 s pad"


def test_a_gpu_pad_is_sized_from_the_phase_s_typical_time():
    """A phase that takes 10 ms in most rounds and 6 ms in some (a training step) is padded by
    (F - 1) x 10 ms, so that its median takes F times as long; sized from its fastest round it
    would get (F - 1) x 6 ms, 3% instead of 5%. A piece of an overlapped schedule keeps the least
    seen: its measured time less its pad can include what its pad slowed beside it."""
    pad = SlowdownPad(1.05)
    assert pad.pad_seconds("step") is None  # nothing observed: no pad yet
    for took in (0.010, 0.006, 0.010, 0.011, 0.006, 0.010, 0.009):
        pad.observe("step", took)
    assert abs(pad.pad_seconds("step") - 0.05 * 0.010) < 1e-12
    assert abs(pad.pad_seconds("step", share=0.25) - 0.25 * 0.05 * 0.010) < 1e-12
    assert abs(pad.pad_seconds("step", overlapped=True) - 0.05 * 0.006) < 1e-12
    # the pad asked for in a round is taken off that round's time before it is remembered
    pad._pad_s["step"] = 0.0005
    pad.observe("step", 0.0105)
    assert abs(pad.pad_seconds("step") - 0.05 * 0.010) < 1e-12
    # the median of the last rounds: a phase that settles at a new time is padded for it
    for _ in range(20):
        pad.observe("step", 0.020)
    assert abs(pad.pad_seconds("step") - 0.05 * 0.020) < 1e-12
    assert SlowdownPad(1.0).pad_seconds("step") is None  # no factor: nothing remembered
