"""A process group for the ranks of one worker group, without a port race.

Rank 0 binds a ``torch.distributed.TCPStore`` on port 0 and keeps it: the kernel picks a free
port and nobody else can take it meanwhile (picking a port by binding port 0, closing it and
handing the number on lets any other process on the machine take it first: EADDRINUSE). The
port reaches the other ranks through a file in the group's scratch folder
(``NUMABENCH_SCRATCH_DIR``, one per group, as for :mod:`numabench.toolkit.rank_barrier`),
written to a temporary name and renamed, so a rank never reads half a number.
"""
from __future__ import annotations

import datetime
import os
import time
from typing import Any

from numabench.toolkit.rank_barrier import SCRATCH_ENV

PORT_FILE = "process-group.port"
ADDR = "127.0.0.1"  # one host: the ranks of a worker group are children of one parent
POLL_S = 0.005


def publish_port(directory: str, port: int) -> str:
    """Write ``port`` to the group's port file atomically; its path."""
    path = os.path.join(directory, PORT_FILE)
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "x") as f:
        f.write(str(port))
    os.rename(tmp, path)
    return path


def read_port(directory: str, timeout_s: float, what: str = "rank 0") -> int:
    """Wait for the group's port file; the port in it."""
    path = os.path.join(directory, PORT_FILE)
    t0 = time.monotonic()
    while not os.path.exists(path):
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"{what} published no process-group port in {path} within {timeout_s:.0f} s")
        time.sleep(POLL_S)
    text = open(path).read().strip()
    if not text.isascii() or not text.isdigit() or not 0 < int(text) < 65536:
        raise RuntimeError(f"{path} holds {text!r}: allowed a TCP port 1..65535")
    return int(text)


def scratch_dir(directory: str | None = None) -> str:
    directory = directory or os.environ.get(SCRATCH_ENV)
    if not directory or not os.path.isdir(directory):
        raise RuntimeError(f"no process-group rendezvous: {SCRATCH_ENV} is {directory!r}, not a folder the ranks "
                           "share (workers are started by numabench.workers.group)")
    return directory


def init_process_group(backend: str, rank: int, world_size: int, timeout_s: float = 300.0,
                       directory: str | None = None, **kwargs: Any) -> tuple[str, int]:
    """``torch.distributed.init_process_group`` on a store rank 0 holds; (address, port) of
    that store, for libraries that read ``MASTER_ADDR`` / ``MASTER_PORT``."""
    import torch.distributed as dist

    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} of {world_size}: allowed 0 <= rank < world_size, world_size >= 1")
    directory = scratch_dir(directory)
    timeout = datetime.timedelta(seconds=timeout_s)
    if rank == 0:
        store = dist.TCPStore(ADDR, 0, world_size, is_master=True, timeout=timeout, wait_for_workers=False)
        port = store.port
        publish_port(directory, port)
    else:
        port = read_port(directory, timeout_s)
        store = dist.TCPStore(ADDR, port, world_size, is_master=False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout, **kwargs)
    return ADDR, port
