"""dataloader: NUMA-pinned data loading (seed 003): a DataLoader's workers decode and
augment synthetic images on the CPU; the trainer copies each batch to its GPU
(or, on a CPU-only machine, into placed host memory). ``binding`` bound: the
trainer and its loader workers on the GPU's node, re-bound in worker_init_fn;
unbound: left to the scheduler.

The size axis is the global batch in samples (split over the ranks, as a
data-parallel global batch is). Defaults: 32 and 256; 256 is a GPU-machine size
and skips on CPU-only machines (there the 32-sample case, 2 loader workers and
4 batches per round keep a case to a few seconds on 2 cores). See
numabench/families/dataloader/worker.py for the loader settings.
"""
from __future__ import annotations

import statistics

from numabench.cases import CaseResult
from numabench.families.base import GpuOrCpuFamily
from numabench.families.dataloader.reply import DataloaderReply

DEFAULT_ROUNDS = 10
DEFAULT_WARMUP = 2
CPU_MAX_BATCH = 64


def gpu_only(case) -> str | None:
    if case.numel > CPU_MAX_BATCH:
        return f"global batch {case.numel} is a GPU-machine size (on the CPU only batches up to {CPU_MAX_BATCH} run)"
    return None


def skip_reason(case) -> str | None:
    if case.dtype != "fp32":
        return "dataloader batches are fp32 images; dtype is not an axis of this family (fp32 only)"
    return None


def metrics(result: CaseResult, phase: str) -> dict:
    infos = result.setup_info
    info = infos[0]
    per_batch = [t for t in result.phases[phase]]
    samples = info.batch_per_rank * result.case.nprocess
    med = result.median(phase)
    rates = [samples / t for t in per_batch]
    h2d = statistics.median(result.phases["h2d"]) if "h2d" in result.phases else None
    return {
        "samples_per_s": round(samples / med, 2),
        "samples_per_s_mean": round(statistics.mean(rates), 2),
        "samples_per_s_std": round(statistics.stdev(rates), 2) if len(rates) > 1 else 0.0,
        "batch_per_rank": info.batch_per_rank, "image_side": info.image_side,
        "bytes_per_batch_per_rank": info.bytes_per_batch,
        "GBps": round(info.bytes_per_batch * result.case.nprocess / med / 1e9, 3),
        "copy_median_s": h2d,
        "copy_GBps": round(info.bytes_per_batch / h2d / 1e9, 3) if h2d else None,
        "num_workers": info.num_workers, "batches_per_round": info.batches_per_round,
        "drain_batches": info.drain_batches,
        "pin_memory": info.pin_memory, "device": info.device_name, "binding": info.binding,
        "loader_worker_affinity_per_rank": [sorted({c for r in i.loader_workers for c in r.affinity})
                                            for i in infos],
        "loader_worker_mempolicy_per_rank": [sorted({r.mempolicy_mode_name for r in i.loader_workers})
                                             for i in infos],
    }


FAMILY = GpuOrCpuFamily(
    key="dataloader",
    description=("a synthetic image DataLoader with its workers bound to the rank's node (re-bound in "
                 "`worker_init_fn`) or unbound; samples/s into the GPU, or into host memory without one"),
    needs="nothing (GPU optional)",
    injects_slowdown=True,
    # its loader's processes on the node's CPUs: in an A/A on an H200 without the untimed step
    # before each round (and with torch._dynamo preloaded in the fork servers, since undone too)
    # its batches took 16-19 ms against 14-15 ms, their resolution wider (docs/GATE.md)
    rewarm_every_round=True,
    phases=("batch",),
    setup_reply=DataloaderReply,
    step_parts=("h2d",),  # the copy of each batch to its destination (copy_median_s, copy_GBps)
    size_is_batch=True,
    rank_kind="gpu",
    default_sizes=(32, 256),
    default_dtypes=("fp32",),
    extra_axes={"binding": ("bound", "unbound")},
    worker_axes=(),
    knobs=("loader_workers", "loader_batches", "loader_drain", "image_px"),  # auto: worker.loader_settings
    host_bytes_per_element=lambda case: 3 * 224 * 224 * 4 * 8,  # a batch ~ 8 times over (prefetch, pin, dest)
    device_bytes_per_element=lambda case: 3 * 224 * 224 * 4,
    case_skip_reason=skip_reason,
    ci_sizes=(32,),
    cpu_bind=lambda case: "node" if case.param("binding", "bound") == "bound" else "none",
    gpu_only=gpu_only,
    metrics=metrics,
    default_rounds=DEFAULT_ROUNDS,
    default_warmup=DEFAULT_WARMUP,
)
