"""What a host_membw worker's setup reports (torch-free: its worker and its metrics read it)."""
from __future__ import annotations

from dataclasses import dataclass

from numabench.replies import SetupReply
from numabench.numa.placement import PlacementReport


@dataclass(frozen=True)
class HostMembwReply(SetupReply):
    numa_maps: PlacementReport  # the four arrays' pages as numa_maps counts them
    threads: int  # the kernels' OpenMP threads
    bytes_per_array: int
