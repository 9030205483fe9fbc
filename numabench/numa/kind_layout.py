"""Which range of which host buffer goes where under a ``place`` value (numabench.numa.place).

A family declares its state as buffers, each of one tensor kind (``StateBuffer``); this module
cuts each buffer into page-aligned segments, each with the policy its pages are placed under
(``None``: nothing bound, the process policy places them). A per-kind placement gives each
buffer of a named kind one segment under that kind's policy; a budget plan
(numabench.numa.budget) gives the fast node's bytes of a kind to its first buffers, in the
order the family lists them, and splits the buffer at the edge. Torch-free: the worker places
by it, the parent and the tests read it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, NamedTuple, Sequence

from numabench.numa.budget import KindDemand, KindSplit, latency_first
from numabench.numa.place import Place
from numabench.numa.policy import Policy


@dataclass(frozen=True)
class StateBuffer:
    """One host buffer of a rank's state: its name (the family's), its tensor kind, its bytes."""

    name: str
    kind: str
    nbytes: int


class Segment(NamedTuple):
    """Bytes [offset, offset + nbytes) of a buffer, placed under ``policy`` (None: the process policy)."""

    offset: int
    nbytes: int
    policy: Policy | None


def page_bytes(nbytes: int, page: int) -> int:
    """The bytes of the whole pages a buffer of ``nbytes`` occupies."""
    return -(-nbytes // page) * page


def kind_demands(buffers: Sequence[StateBuffer], touches: Mapping[str, float], page: int) -> list[KindDemand]:
    """Each kind's bytes (whole pages of its buffers), in the order the kinds first appear."""
    sizes: dict[str, int] = {}
    for b in buffers:
        sizes[b.kind] = sizes.get(b.kind, 0) + page_bytes(b.nbytes, page)
    missing = [k for k in sizes if k not in touches]
    if missing:
        raise ValueError(f"no touches per step given for kind(s) {', '.join(missing)}: the family must say how "
                         "often a step touches each kind it holds")
    return [KindDemand(k, n, touches[k]) for k, n in sizes.items()]


def budget_splits(place: Place, buffers: Sequence[StateBuffer], touches: Mapping[str, float],
                  page: int) -> list[KindSplit]:
    """The latency-first split of these buffers under ``place``'s budget (empty without one)."""
    if place.budget is None:
        return []
    return latency_first(kind_demands(buffers, touches, page), place.budget.nbytes, page)


def buffer_segments(place: Place | None, buffers: Sequence[StateBuffer], touches: Mapping[str, float],
                    page: int) -> dict[str, tuple[Segment, ...]]:
    """Each buffer's segments, covering its whole pages; ``place`` None: one unbound segment each."""
    names = [b.name for b in buffers]
    if len(set(names)) != len(names):
        raise ValueError(f"buffer names {names}: each name once")
    out: dict[str, tuple[Segment, ...]] = {}
    if place is None or place.budget is None:
        for b in buffers:
            policy = place.policy_of(b.kind) if place is not None else None
            out[b.name] = (Segment(0, page_bytes(b.nbytes, page), policy),)
        return out
    fast, slow = Policy("bind", (place.budget.fast,)), Policy("bind", (place.budget.slow,))
    left = {s.kind: s.fast_bytes for s in budget_splits(place, buffers, touches, page)}
    for b in buffers:
        size = page_bytes(b.nbytes, page)
        on_fast = min(size, left[b.kind])
        left[b.kind] -= on_fast
        segs = [Segment(0, on_fast, fast), Segment(on_fast, size - on_fast, slow)]
        out[b.name] = tuple(s for s in segs if s.nbytes)
    return out
