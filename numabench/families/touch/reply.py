"""What a touch worker's setup reports (torch-free: its worker and its metrics read it)."""
from __future__ import annotations

from dataclasses import dataclass

from numabench.replies import SetupReply
from numabench.numa.placement import PlacementReport


@dataclass(frozen=True)
class TouchReply(SetupReply):
    numa_maps: PlacementReport  # the buffer's pages as numa_maps counts them
    bytes: int  # the buffer, written once per round
