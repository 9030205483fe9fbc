"""What an adam_offload worker's setup reports (torch-free: its worker and its metrics read it)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from numabench.replies import SetupReply
from numabench.numa.placement import PlacementReport


@dataclass(frozen=True)
class AdamOffloadReply(SetupReply):
    numa_maps: PlacementReport  # the host state's pages as numa_maps counts them
    bytes_h2d: int
    bytes_d2h: int
    max_rel_error: dict[str, Any]  # impl -> its check against float64 Adam (this run's or an earlier one's)
    alloc: str  # the host allocator of the placed state (register, torch)
    chunk_elems: int  # the overlap schedule's chunk
    overlap_chunks: int  # chunks of the overlap schedule: 1 runs the serial step
    device_name: str
    # the ceilings measured in this run (GB/s): pinned copies one way, both directions at once, on the
    # device; host copies with every rank of the run copying at the same time
    limit_h2d_GBps: float
    limit_d2h_GBps: float
    limit_d2d_GBps: float
    limit_bidir_h2d_GBps: float
    limit_bidir_d2h_GBps: float
