"""What a dataloader worker's setup reports (torch-free: its worker and its metrics read it)."""
from __future__ import annotations

from dataclasses import dataclass

from numabench.replies import Record, SetupReply
from numabench.numa.placement import PlacementReport


@dataclass(frozen=True)
class LoaderWorkerReport(Record):
    """What one DataLoader worker saw of itself in ``worker_init_fn`` (after re-binding)."""

    worker_id: int
    pid: int
    affinity: list[int]
    mempolicy_mode: int
    mempolicy_mode_name: str
    mempolicy_nodes: list[int]


@dataclass(frozen=True)
class DataloaderReply(SetupReply):
    numa_maps: PlacementReport  # the whole trainer process's pages as numa_maps counts them
    loader_workers: list[LoaderWorkerReport]
    binding: str  # bound, unbound
    batch_per_rank: int
    bytes_per_batch: int  # one rank's batch of images
    device: str  # where batches go (cuda:N, cpu)
    pin_memory: bool
    main_affinity: list[int]  # the trainer process's CPUs
    device_name: str
    # the loader's settings (worker.loader_settings)
    num_workers: int
    batches_per_round: int
    image_side: int
    drain_batches: int = 0  # taken untimed before each round (0 in replies from before it existed)
