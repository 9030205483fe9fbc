"""adam_offload: the core benchmark. Host-resident Adam state placed by a NUMA
policy, copied to the GPU, stepped by a fused kernel, copied back."""
from __future__ import annotations

from numabench.cases import Case, CaseResult
from numabench.families.adam_offload.reply import AdamOffloadReply
from numabench.families.base import Family
from numabench.numa.budget import KindDemand

# Qwen2.5-7B partition sizes, as the seed benchmark uses.
SEED_SIZES = (1835008, 12845056, 67895296, 544997376)
DEFAULT_ROUNDS = 20
DEFAULT_WARMUP = 3


# The host state per rank by tensor kind (the ``place`` axis: numabench.numa.place): which kind each
# buffer is, and how many times a step touches each byte of a kind (the copy in reads all four
# buffers, the copy out writes back param and the moments).
STATE_BUFFERS = {"param": "master", "grad": "grads", "exp_avg": "moments", "exp_avg_sq": "moments"}
TOUCHES = {"master": 2, "moments": 2, "grads": 1}
COPIED = {"h2d": ("param", "grad", "exp_avg", "exp_avg_sq"), "d2h": ("param", "exp_avg", "exp_avg_sq")}


def state_kinds(case: Case) -> tuple[KindDemand, ...]:
    per_tensor = case.numel_per_rank * case.itemsize
    count = {k: list(STATE_BUFFERS.values()).count(k) for k in TOUCHES}
    return tuple(KindDemand(k, count[k] * per_tensor, t) for k, t in TOUCHES.items())


def skip_reason(case: Case) -> str | None:
    if (case.param("place") or "").startswith("budget:") and case.param("alloc") == "torch":
        return (f"place={case.param('place')} splits a kind's buffer between two nodes; allocator torch "
                "(pin_memory) places a buffer under one policy: use alloc register")
    return None


def one_way_bound_s(h2d_bytes: int, d2h_bytes: int, limits: AdamOffloadReply) -> float:
    """The slower of the two transfers, each at its one-way ceiling."""
    return max(h2d_bytes / (limits.limit_h2d_GBps * 1e9), d2h_bytes / (limits.limit_d2h_GBps * 1e9))


def duplex_bound_s(h2d_bytes: int, d2h_bytes: int, limits: AdamOffloadReply) -> float:
    """Both transfers at the rates they reach at once (``limit_bidir_*``) until the one with
    less time left at its rate is done, the rest of the other at its one-way ceiling: the
    step of a pipeline that keeps both directions busy while both have bytes to move."""
    h2d_both, d2h_both = limits.limit_bidir_h2d_GBps * 1e9, limits.limit_bidir_d2h_GBps * 1e9
    t_h2d, t_d2h = h2d_bytes / h2d_both, d2h_bytes / d2h_both
    if t_d2h <= t_h2d:
        return t_d2h + (h2d_bytes - h2d_both * t_d2h) / (limits.limit_h2d_GBps * 1e9)
    return t_h2d + (d2h_bytes - d2h_both * t_h2d) / (limits.limit_d2h_GBps * 1e9)


def metrics(result: CaseResult, phase: str) -> dict:
    infos = result.setup_info
    info = infos[0]
    itemsize = result.case.itemsize
    n = result.case.numel_per_rank * result.case.nprocess
    med = result.median(phase)
    moved = {"h2d": len(COPIED["h2d"]) * n * itemsize, "d2h": len(COPIED["d2h"]) * n * itemsize,
             "compute": 7 * n * itemsize, "step": 7 * n * itemsize}[phase]
    out = {
        "bytes": moved,
        "GBps": round(moved / med / 1e9, 3),
        "limit_h2d_GBps_per_rank": [round(i.limit_h2d_GBps, 2) for i in infos],
        "limit_d2h_GBps_per_rank": [round(i.limit_d2h_GBps, 2) for i in infos],
        "limit_d2d_GBps_per_rank": [round(i.limit_d2d_GBps, 1) for i in infos],
        "limit_bidir_h2d_GBps_per_rank": [round(i.limit_bidir_h2d_GBps, 2) for i in infos],
        "limit_bidir_d2h_GBps_per_rank": [round(i.limit_bidir_d2h_GBps, 2) for i in infos],
        "max_rel_error": info.max_rel_error,
        "alloc": info.alloc,
        "chunk_elems": info.chunk_elems,
        "device": info.device_name,
    }
    if phase == "compute":
        out["pct_of_d2d"] = round(100 * (moved / result.case.nprocess / med / 1e9) / info.limit_d2d_GBps, 1)
    elif phase in ("h2d", "d2h"):
        limit = info.limit_h2d_GBps if phase == "h2d" else info.limit_d2h_GBps
        out[f"pct_of_pinned_{phase}"] = round(100 * (moved / result.case.nprocess / med / 1e9) / limit, 1)
    elif phase == "step":
        # The slowest rank's bounds (the step is the max over the ranks). One-way: the step
        # cannot beat the slower of its two one-way transfers (PCIe is full duplex).
        per_rank = result.case.numel_per_rank * itemsize
        out["lower_bound_s"] = bound = max(one_way_bound_s(4 * per_rank, 3 * per_rank, i) for i in infos)
        out["ratio_to_lower_bound"] = round(med / bound, 3)
        # Duplex is not free: with the rates both directions reach at once.
        out["duplex_bound_s"] = duplex = max(duplex_bound_s(4 * per_rank, 3 * per_rank, i) for i in infos)
        out["ratio_to_duplex_bound"] = round(med / duplex, 3)
    if result.case.param("schedule") == "overlap":
        out["overlap_chunks"] = info.overlap_chunks
        out["schedule_ran"] = "overlap" if info.overlap_chunks > 1 else "serial"
    return out


FAMILY = Family(
    kernels=("cuda_adam",),
    variant_kernels=lambda v: ("cuda_adam",) if v.get("impl", "ours") == "ours" else (),
    key="adam_offload",
    description=("one offloaded optimizer step over host-resident Adam state placed by the policy: H2D of "
                 "param/grad/moments, fused Adam on the GPU, D2H of param/moments; each phase (h2d, "
                 "compute, d2h, step) its own entry, max over the concurrent ranks; axes `impl` (ours: "
                 "`csrc/fused_adam.cu`, torch's fused kernel), `schedule` (serial, overlap: chunked "
                 "three-stream pipeline, chunk `--numa-axis chunk_numel=N`, default 8 MiB per tensor) and "
                 "`alloc` (the placed state pinned by cudaHostRegister, or torch's `pin_memory` on "
                 "request)"),
    needs="a CUDA GPU per rank",
    phases=("h2d", "compute", "d2h", "step"),
    setup_reply=AdamOffloadReply,
    round_phases=("step",),
    ci_axis_values={"impl": ("ours",)},  # torch's kernel is a reference, compared in the full tier
    needs_gpu=True,
    default_sizes=SEED_SIZES,
    default_dtypes=("fp32", "bf16"),
    # alloc (hostmem allocator of the placed state: register = mmap + touch + cudaHostRegister,
    # torch = pin_memory) changes the placed memory, so it is not a worker axis: each value is
    # its own worker run, and the worker reads it from the variants it is given.
    extra_axes={"impl": ("ours", "torch"), "schedule": ("serial", "overlap"), "alloc": ("register", "torch")},
    worker_axes=("impl", "schedule"),
    knobs=("chunk_numel", "place"),  # the overlap schedule's chunk (auto: worker.auto_chunk); per-kind placement
    state_kinds=state_kinds,
    case_skip_reason=skip_reason,
    # torch's pinned allocator is measured with --numa-axis alloc=register,torch (doubles the matrix)
    default_axis_values={"alloc": ("register",)},
    # torch's caching host allocator rounds each buffer up to a power of two (up to 2x)
    host_bytes_per_element=lambda case: 4 * case.itemsize * (2 if case.param("alloc") == "torch" else 1),
    device_bytes_per_element=lambda case: 4 * case.itemsize,  # + 2.25 GiB for the copy-limit buffers
    rank_kind="gpu",
    metrics=metrics,
    default_rounds=DEFAULT_ROUNDS,
    default_warmup=DEFAULT_WARMUP,
    injects_slowdown=True,
)
