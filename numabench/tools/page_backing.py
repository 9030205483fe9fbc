"""``python -m numabench.tools.page_backing [--mib N] [--rounds R] [--repeats K]``: what a host
buffer's mapping and page size do to a copy over it, on this process's CPUs and memory policy.

Three kinds of buffer, fresh for each repeat, in turns:

- ``shared``: numabench's own host buffers (numabench.toolkit.hostmem: a shared anonymous
  mapping, which the kernel backs with shmem; its huge pages follow ``shmem_enabled``);
- ``private``: private anonymous memory, what ``torch.empty`` and a ZeRO-Offload user's pageable
  tensors get (its huge pages follow ``enabled``);
- ``private-huge``: the same, madvised for transparent huge pages (``MADV_HUGEPAGE``).

Each row: the buffers' share in huge pages (``/proc/self/smaps``) and the copy's rate
(``dst.copy_(src)``, bytes read and written over the median round, decimal GB/s), the median over
the repeats. Every mapping is unmapped before the next.
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import mmap
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

from numabench.machine.hugepages import SMAPS, smaps_huge_bytes, thp_setting

KINDS = ("shared", "private", "private-huge")
PROT_READ_WRITE = 0x1 | 0x2
MAP_PRIVATE_ANONYMOUS = 0x02 | 0x20
MADV_HUGEPAGE = 14


@dataclass(frozen=True)
class Backing:
    """One kind's figures, the median over its repeats."""
    kind: str
    huge_share: float
    gbps: float


class _Buffer:
    """A mapping of ``nbytes`` of one kind, every page touched; ``close`` unmaps it."""

    def __init__(self, kind: str, nbytes: int) -> None:
        if kind not in KINDS:
            raise ValueError(f"buffer kind {kind!r}: allowed {', '.join(KINDS)}")
        self.nbytes = nbytes
        self._shared: mmap.mmap | None = None
        if kind == "shared":
            self._shared = mmap.mmap(-1, nbytes)
            self.address = ctypes.addressof(ctypes.c_char.from_buffer(self._shared))
        else:
            libc = _libc()
            address = libc.mmap(None, nbytes, PROT_READ_WRITE, MAP_PRIVATE_ANONYMOUS, -1, 0)
            if address in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), f"mmap of {nbytes} bytes failed")
            self.address = address
            if kind == "private-huge" and libc.madvise(address, nbytes, MADV_HUGEPAGE) != 0:
                libc.munmap(address, nbytes)
                raise OSError(ctypes.get_errno(), "madvise(MADV_HUGEPAGE) failed: no transparent huge pages here")
        ctypes.memset(self.address, 1, nbytes)

    def tensor(self):
        import torch

        return torch.frombuffer((ctypes.c_char * self.nbytes).from_address(self.address), dtype=torch.uint8)

    def close(self) -> None:
        if self._shared is not None:
            self._shared.close()
        else:
            _libc().munmap(self.address, self.nbytes)


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def one_repeat(kind: str, nbytes: int, rounds: int,
               clock: Callable[[], float] = time.perf_counter) -> tuple[float, float]:
    """(huge-page share, GB/s) of a copy between two fresh buffers of ``kind``."""
    src, dst = _Buffer(kind, nbytes), _Buffer(kind, nbytes)
    try:
        a, b = src.tensor(), dst.tensor()
        b.copy_(a)  # untimed: the first copy meets cold caches and TLBs
        times = []
        for _ in range(rounds):
            started = clock()
            b.copy_(a)
            times.append(clock() - started)
        huge = smaps_huge_bytes([(src.address, nbytes), (dst.address, nbytes)], SMAPS.read_text())
        return huge / (2 * nbytes), 2 * nbytes / statistics.median(times) / 1e9
    finally:
        src.close()
        dst.close()


def measure(nbytes: int, rounds: int, repeats: int, kinds: tuple[str, ...] = KINDS) -> list[Backing]:
    """Each kind's median over ``repeats`` repeats, the kinds taking turns (so a drift of the
    machine meets them all)."""
    if nbytes < mmap.PAGESIZE or rounds < 1 or repeats < 1:
        raise ValueError(f"nbytes {nbytes}, rounds {rounds}, repeats {repeats}: allowed a page or more, 1 or more, "
                         "1 or more")
    seen: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for _ in range(repeats):
        for kind in kinds:
            seen[kind].append(one_repeat(kind, nbytes, rounds))
    return [Backing(k, statistics.median(s for s, _ in v), statistics.median(g for _, g in v)) for k, v in seen.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m numabench.tools.page_backing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=512, help="MiB per buffer (two a copy; default 512)")
    parser.add_argument("--rounds", type=int, default=15, help="timed copies a repeat (default 15)")
    parser.add_argument("--repeats", type=int, default=3, help="fresh buffers of each kind, in turns (default 3)")
    args = parser.parse_args(argv)
    try:
        rows = measure(args.mib << 20, args.rounds, args.repeats)
    except (ValueError, OSError) as e:
        print(f"page_backing: {e}", file=sys.stderr)
        return 2
    print(f"transparent huge pages: {thp_setting() or 'none'}; {args.mib} MiB a buffer, {args.rounds} copies, "
          f"median of {args.repeats} repeats")
    print(f"{'buffer':<14} {'huge pages':>10} {'copy GB/s':>10}")
    for r in rows:
        print(f"{r.kind:<14} {r.huge_share:>10.0%} {r.gbps:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
