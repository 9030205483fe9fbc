"""What a transfer worker's setup reports (torch-free: its worker and its metrics read it)."""
from __future__ import annotations

from dataclasses import dataclass

from numabench.replies import SetupReply
from numabench.numa.placement import PlacementReport


@dataclass(frozen=True)
class TransferReply(SetupReply):
    numa_maps: PlacementReport  # the host buffers' pages as numa_maps counts them
    memory: list[str]  # the memory kinds this run placed (pinned, pageable)
    bytes: int  # one buffer
    device_name: str
    checked: bool  # every copy direction compared bit for bit before timing
