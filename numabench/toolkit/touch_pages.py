"""Touching a large new buffer's pages on several threads, where that places them as one would.

A page's first touch is where the NUMA policy places it, and under the local policy (the
default), a multi-node bind or a preferred node that is full the page goes to (or nearest to)
the node of the CPU that touched it. So threads touch a buffer only where every CPU this thread
may run on is on one node: each of them touches on that node, as the calling thread would. An
interleaving task policy keeps its proportions (each thread interleaves its own pages from its
copy of the policy); a range mbind'ed before the touch places by offset, whoever touches.
Elsewhere, and for small buffers, the calling thread touches alone.
"""
from __future__ import annotations

import ctypes
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from numabench.machine.topology import read_nodes

PARALLEL_FROM_BYTES = 256 << 20  # below this a thread's start costs more than it saves
MOST_THREADS = 16  # page faults of one process stop scaling well beyond this


def touch_threads(nbytes: int, cpus: set[int] | None = None, cpu_node: dict[int, int] | None = None) -> int:
    """How many threads touch a buffer of ``nbytes``: 1 below PARALLEL_FROM_BYTES or where the
    CPUs this thread may run on (``cpus``: its affinity) span several nodes or a CPU's node is not
    known; else one per CPU, at most MOST_THREADS. ``cpu_node``: CPU -> node (default: sysfs)."""
    if nbytes < PARALLEL_FROM_BYTES:
        return 1
    cpus = os.sched_getaffinity(0) if cpus is None else cpus
    cpu_node = cpu_nodes() if cpu_node is None else cpu_node
    nodes = {cpu_node.get(c) for c in cpus}
    if len(nodes) != 1 or None in nodes:
        return 1
    return max(1, min(len(cpus), MOST_THREADS))


def cpu_nodes(root: Path = Path("/")) -> dict[int, int]:
    """CPU -> its NUMA node, from sysfs."""
    return {c: n.id for n in read_nodes(root) for c in n.cpus}


def touch_pages(address: int, nbytes: int, byte: int, threads: int | None = None) -> None:
    """Write ``byte`` over [address, address + nbytes): every page touched, by ``threads``
    threads (default: touch_threads) each taking a contiguous, page-aligned share."""
    threads = touch_threads(nbytes) if threads is None else threads
    if nbytes <= 0:
        return
    if threads <= 1:
        ctypes.memset(address, byte, nbytes)
        return
    page = os.sysconf("SC_PAGE_SIZE")
    share = -(-nbytes // threads // page) * page
    starts = range(address, address + nbytes, share)
    with ThreadPoolExecutor(max_workers=len(starts), thread_name_prefix="numabench-touch") as pool:
        # ctypes lets go of the GIL for the call; list(): an error in a share is raised here
        list(pool.map(lambda start: ctypes.memset(start, byte, min(share, address + nbytes - start)), starts))
