"""What a cpu_adam worker's setup reports (torch-free: its worker and its metrics read it)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from numabench.replies import SetupReply
from numabench.numa.placement import PlacementReport


@dataclass(frozen=True)
class CpuAdamReply(SetupReply):
    numa_maps: PlacementReport  # the state's pages as numa_maps counts them
    threads: int  # the optimizer's threads
    max_rel_error: dict[str, Any]  # our kernel's check against the reference, per variant (empty: not run)
    simd: str | None  # our kernel's SIMD level; None where no impl of ours runs
    bytes_per_element: dict[str, int]
