"""Ranks of one worker group meeting at a named point, so that they measure something at
once (e.g. copy ceilings that every rank shares: the host's memory and its root complex).

The parent is the barrier of every step (numabench.workers.group); inside set-up there is
no parent in the loop, so the ranks meet through files in the group's scratch folder
(``NUMABENCH_SCRATCH_DIR``, one per group, removed with it): each rank creates
``<name>.<rank>`` and waits until every rank's file exists. Polls every 0.2 ms: ranks leave
within a fraction of a millisecond of the last arrival.
"""
from __future__ import annotations

import os
import time

SCRATCH_ENV = "NUMABENCH_SCRATCH_DIR"  # numabench.workers.group sets it for every rank
POLL_S = 0.0002


def meet(name: str, rank: int, nprocess: int, timeout_s: float = 300.0, directory: str | None = None) -> float:
    """Wait until all ``nprocess`` ranks reached ``name``; seconds waited. One rank: returns at
    once. ``name`` must be new for each meeting of a group (files are not removed in between)."""
    if nprocess < 1 or not 0 <= rank < nprocess:
        raise ValueError(f"rank {rank} of {nprocess}: allowed 0 <= rank < nprocess, nprocess >= 1")
    if nprocess == 1:
        return 0.0
    if not name or "/" in name:
        raise ValueError(f"meeting name {name!r}: allowed a non-empty name without '/'")
    directory = directory or os.environ.get(SCRATCH_ENV)
    if not directory or not os.path.isdir(directory):
        raise RuntimeError(f"ranks cannot meet at {name!r}: {SCRATCH_ENV} is {directory!r}, not a folder the "
                           f"{nprocess} ranks share (workers are started by numabench.workers.group)")
    with open(os.path.join(directory, f"{name}.{rank}"), "x"):
        pass
    paths = [os.path.join(directory, f"{name}.{r}") for r in range(nprocess)]
    t0 = time.monotonic()
    while True:
        missing = [r for r, p in enumerate(paths) if not os.path.exists(p)]
        if not missing:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"rank {rank} waited {timeout_s:.0f} s at {name!r} for ranks {missing} of {nprocess}")
        time.sleep(POLL_S)
