"""The latency-first split of a rank's host state under a budget of fast (DRAM) memory.

Each kind of host tensor is touched a known number of times per step (read or written, per
byte: Adam's moments are read and written, the master gradients of adam_offload only read by
the copy in). The fast node is filled with the most-touched kinds first (ties: the order the
family lists its kinds); the kind at the edge of the budget is split at a page boundary, its
first bytes on the fast node; everything after it goes to the slow node. Pure: the worker
places by it, the parent checks the worker's plan by it, the advisor predicts with it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class KindDemand:
    """One kind of a rank's state: its bytes (its buffers' pages) and how often a step touches each byte."""

    kind: str
    nbytes: int
    touches: float


@dataclass(frozen=True)
class KindSplit:
    """Where a kind goes under the budget: ``fast_bytes`` on the fast node, the rest on the slow one."""

    kind: str
    nbytes: int
    fast_bytes: int

    @property
    def slow_bytes(self) -> int:
        return self.nbytes - self.fast_bytes


def latency_first(demands: Sequence[KindDemand], budget_bytes: int, page: int) -> list[KindSplit]:
    """The split, in fill order (most-touched first). A kind's fast part is a whole number of
    pages unless the whole kind fits."""
    if budget_bytes < 0:
        raise ValueError(f"budget {budget_bytes} bytes: allowed >= 0")
    if page < 1:
        raise ValueError(f"page {page} bytes: allowed >= 1")
    bad = [d for d in demands if d.nbytes < 0 or d.touches < 0]
    if bad:
        raise ValueError(f"kinds {', '.join(d.kind for d in bad)} with negative bytes or touches: allowed >= 0")
    kinds = [d.kind for d in demands]
    if len(set(kinds)) != len(kinds):
        raise ValueError(f"kinds {kinds}: each kind once")
    order = sorted(range(len(demands)), key=lambda i: (-demands[i].touches, i))
    left = budget_bytes
    spilled = False  # the edge was reached: every later kind on the slow node
    out = []
    for i in order:
        d = demands[i]
        if spilled:
            fast = 0
        elif d.nbytes <= left:
            fast = d.nbytes
        else:
            fast, spilled = left - left % page, True
        out.append(KindSplit(d.kind, d.nbytes, fast))
        left -= fast
    return out
