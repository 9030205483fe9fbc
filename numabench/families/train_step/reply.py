"""What a train_step worker's setup reports (torch-free: its worker and its metrics read it)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from numabench.replies import Record, SetupReply
from numabench.numa.placement import PlacementReport


@dataclass(frozen=True)
class GpuIdle(Record):
    """The GPU's idle shares over a few profiled set-up steps (numabench.families.train_step.idle),
    or the error that kept the profiler from measuring them."""

    gpu_idle_fraction: float | None = None
    sm_idle_fraction: float | None = None
    window_s: float | None = None
    profiled_steps: int | None = None
    source: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class TrainStepReply(SetupReply):
    placed: str  # what ``placement`` counts: the host state, or the process's anonymous memory
    mempolicy: dict[str, Any]  # the policy the rank ran under (train_step.applied.running_policy)
    case_policy: str | None
    kernel_max_rel_error: float | None  # streamed on a GPU: our kernel against AdamW
    numa_maps: PlacementReport  # the process's pages as numa_maps counts them
    host_bytes_by_node: PlacementReport  # the process's anonymous memory
    host_state_bytes: int  # the offloaded state's bytes (0 where it stays on the device)
    peak_gpu_bytes: int | None  # the peak allocated over the set-up steps; None on CPU ranks
    setup_losses: list[float]  # the loss over the set-up steps on one fixed batch (falls)
    param_digest: str
    param_digests_all_ranks: list[str]
    n_params: int
    tokens_per_step: int  # over all ranks
    seq_len: int
    batch_per_rank: int
    impl: str  # the mode's implementation, in words
    backend: str  # the process group's (nccl, gloo)
    device_name: str  # "cpu" on CPU ranks
    threads: int  # torch's intra-op threads
    torch: str  # torch's version
    gpu_idle: GpuIdle | None = None  # measured only on GPUs with NUMABENCH_PROFILE_IDLE=1
    peak_gpu_reserved_bytes: int | None = None  # the caching allocator's peak reservation; None on CPU ranks
    gpu_memory_bytes: int | None = None  # the GPU's whole memory as CUDA reports it; None on CPU ranks
    # the process's pinned mappings per node (their share of ``numa_maps``, numastat -p's total)
    host_pinned_by_node: PlacementReport | None = None
    pinned_allocator_bytes: int | None = None  # torch's caching host allocator: pinned blocks it owns
    # private anonymous pages of the rank's helper processes (ZenFlow's optimizer process holds its
    # moments), which ``numa_maps`` of the rank alone does not count
    helper_host_by_node: PlacementReport | None = None
    # the split modes: the share of the optimizer state's elements on the host as the rank split it (the
    # offload_ratio asked, auto resolved, rounded to whole parameters or DeepSpeed's sub-groups)
    offload_ratio: float | None = None
    zenflow: dict[str, Any] | None = None  # deepspeed-zenflow: the zenflow block DeepSpeed was given
