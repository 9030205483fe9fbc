"""A rank's host state as its family declares it, placed kind by kind (the ``place`` axis).

The family lists its state's buffers (``StateBuffer``: name, tensor kind, bytes) and how often
a step touches each kind; ``PlacedState`` cuts them into segments for the case's ``place``
(numabench.numa.kind_layout), which numabench.toolkit.hostmem.allocate places before the first
touch, and counts each buffer's pages once they are touched (``report``). Without ``place`` it
places nothing itself (the process policy does, as before the axis) and reports nothing.
"""
from __future__ import annotations

import os
from typing import Mapping, Sequence

from numabench.numa.kind_check import KindPlacement, measure_kinds
from numabench.numa.kind_layout import Segment, StateBuffer, buffer_segments
from numabench.numa.place import Place


class PlacedState:
    def __init__(self, place: Place | None, buffers: Sequence[StateBuffer], touches: Mapping[str, float]) -> None:
        self.place = place
        self.buffers = {b.name: b for b in buffers}
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.segments = buffer_segments(place, buffers, touches, self.page) if place is not None else {}

    def segments_of(self, name: str) -> tuple[Segment, ...] | None:
        """Buffer ``name``'s segments for hostmem.allocate; None without ``place``."""
        if name not in self.buffers:
            raise KeyError(f"no state buffer {name!r}: declared {', '.join(self.buffers)}")
        return self.segments.get(name)

    def report(self, addresses: Mapping[str, int]) -> list[KindPlacement] | None:
        """Every declared buffer's pages per kind and policy (``addresses``: name -> its address, every
        page touched); None without ``place``."""
        if self.place is None:
            return None
        missing = sorted(set(self.buffers) - set(addresses))
        if missing:
            raise ValueError(f"no address for state buffer(s) {', '.join(missing)}: every declared buffer is counted")
        return measure_kinds([(self.buffers[n], addresses[n]) for n in self.buffers], self.segments)
