"""Waiting for processes to go quiet before another one's timed round.

In an A/B run both sides' workers are alive at once and take turns round by round. A side whose
round has just ended keeps threads running for a while: an OpenMP team spins before it sleeps
(libgomp ~300k spins, Intel's runtime 200 ms), a DataLoader's workers refill their queue. On the
machine's CPUs they slow the other side's round (H100 x1, 16 cores: a STREAM copy of 16 threads
that reads 0.8 ms in a plain run read 5-11 ms in an A/B). So before a side's round the runner
waits until no thread of the other sides' workers, or of their children, is running.
"""
from __future__ import annotations

import os
import time
from collections.abc import Iterable

import psutil

QUIET_POLL_S = 0.0005
QUIET_MAX_S = 0.25  # a thread that never sleeps (a polling runtime) costs at most this per round


def process_tree(pids: Iterable[int]) -> list[int]:
    """``pids`` and their live descendants."""
    out = []
    for pid in pids:
        out.append(pid)
        try:
            out += [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            pass
    return out


def running_threads(pids: Iterable[int]) -> int:
    """How many threads of ``pids`` are running or runnable (state R in /proc/PID/task/TID/stat)."""
    count = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:  # exited
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            # "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ")"
            if stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] == b"R":
                count += 1
    return count


def wait_quiet(pids: Iterable[int], max_s: float = QUIET_MAX_S) -> tuple[float, bool]:
    """Block until no thread of ``pids`` or their descendants runs, or ``max_s`` has passed.
    Returns the seconds waited and whether they went quiet."""
    tree = process_tree(pids)
    t0 = time.perf_counter()
    while True:
        if running_threads(tree) == 0:
            return time.perf_counter() - t0, True
        waited = time.perf_counter() - t0
        if waited >= max_s:
            return waited, False
        time.sleep(QUIET_POLL_S)
