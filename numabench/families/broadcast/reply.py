"""What a broadcast worker's setup reports (torch-free: its worker and its metrics read it)."""
from __future__ import annotations

from dataclasses import dataclass

from numabench.replies import SetupReply
from numabench.numa.placement import PlacementReport


@dataclass(frozen=True)
class BroadcastReply(SetupReply):
    numa_maps: PlacementReport  # the source's (and staging buffers') pages as numa_maps counts them
    bytes: int  # the source tensor
    ngpus: int
    chunk_bytes: int  # the pipelined and relay methods' chunk
    peer_access: list[bool]  # GPU 0 to GPU i (i >= 1) peer access
    checksum: int  # the source's, every GPU's copy checked against it
    methods: list[str]
    devices: list[str]  # each GPU's name
