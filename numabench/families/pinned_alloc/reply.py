"""What a pinned_alloc worker's setup reports (torch-free: its worker and its metrics read it)."""
from __future__ import annotations

from dataclasses import dataclass

from numabench.replies import Record, SetupReply
from numabench.numa.placement import PlacementReport


@dataclass(frozen=True)
class AllocatorReport(Record):
    """One allocator's buffer, made once at set-up and measured."""

    requested_bytes: int
    reserved_bytes: int  # from the buffer to the end of the mapping that holds it
    resident_bytes: int  # of those, pages resident (numa_maps)
    torch_host_stats_bytes: int | None  # torch's host allocator stats' growth (torch only)
    placement: PlacementReport  # the requested bytes' pages
    honours_policy: bool | None  # None: the policy promises no node
    message: str  # the placement verdict's words
    how: str  # what the allocator does, in words


@dataclass(frozen=True)
class PinnedAllocReply(SetupReply):
    allocators: dict[str, AllocatorReport]  # allocator name -> its report
    bytes: int
    device_name: str
