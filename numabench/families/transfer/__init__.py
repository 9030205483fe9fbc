"""transfer: nvbandwidth-style host<->GPU copies, but from NUMA-placed host memory.

Each rank (GPU i) copies a buffer placed by the policy to its GPU (``h2d``),
back (``d2h``) and both at once on two side streams (``bidir``): copy-engine
copies, ``cudaMemcpyAsync`` through torch ``copy_(non_blocking=True)``, each
bracketed by CUDA events. Axis ``memory``: ``pinned`` (mmap + first touch under
the policy + cudaHostRegister, exact size) or ``pageable`` (the same without
registering: the driver stages through its own pinned bounce buffers). Both
share one worker run (the same placed pages are reused, turn by turn).

Size is the total over the ranks, as in every family: with ``nprocess`` > 1
all GPUs copy their share at once and the per-round time is the slowest rank,
so ``aggregate_GBps`` is what the host memory and root complexes sustain
together. Ranks start a round within about a millisecond of each other (the
parent is the barrier), hence the 1 GiB default: per-GPU copies of several ms.

Default matrix on an 8-GPU two-socket machine: 2 sizes x 2 nprocess (1, 8)
x 8 runnable policies = 32 worker runs (pinned and pageable share a run),
about 5-15 s each (10 rounds): about 5 minutes.
"""
from __future__ import annotations

from numabench.cases import CaseResult
from numabench.families.base import Family
from numabench.families.transfer.reply import TransferReply

DEFAULT_ROUNDS = 10
DEFAULT_WARMUP = 2
PHASES = ("h2d", "d2h", "bidir")
MEMORY = ("pinned", "pageable")


def phase_bytes(numel_per_rank: int, itemsize: int, phase: str) -> int:
    """Bytes one rank moves in ``phase`` (bidir counts both directions)."""
    return numel_per_rank * itemsize * (2 if phase == "bidir" else 1)


def metrics(result: CaseResult, phase: str) -> dict:
    case = result.case
    per_rank = phase_bytes(case.numel_per_rank, case.itemsize, phase)
    med = result.median(phase)
    rank_meds = [sorted(r[phase])[len(r[phase]) // 2] for r in result.per_rank]
    info = result.setup_info[0]
    return {
        "bytes_per_rank": per_rank,
        "bytes": per_rank * case.nprocess,
        "GBps": round(per_rank / med / 1e9, 3),  # one rank's rate in the slowest-rank time
        "aggregate_GBps": round(per_rank * case.nprocess / med / 1e9, 3),
        "GBps_per_rank": [round(per_rank / m / 1e9, 3) for m in rank_meds],
        "unit": "GB/s decimal (1e9 B/s)",
        "memory": case.param("memory", "pinned"),
        "device": info.device_name,
        "copy": "cudaMemcpyAsync (torch copy_ non_blocking) on a side stream, CUDA events",
    }


FAMILY = Family(
    key="transfer",
    description=("H2D, D2H and bidirectional copy-engine copies between policy-placed host memory (pinned "
                 "or pageable) and each GPU; all GPUs at once with nprocess > 1"),
    needs="a CUDA GPU per rank",
    phases=PHASES,
    setup_reply=TransferReply,
    needs_gpu=True,
    default_sizes=(16 * 2**20, 256 * 2**20),  # fp32: 64 MiB and 1 GiB in total
    default_dtypes=("fp32",),
    extra_axes={"memory": MEMORY},
    worker_axes=("memory",),
    # per element: a source and a destination host buffer for each memory kind
    host_bytes_per_element=lambda case: 2 * len(MEMORY) * case.itemsize,
    device_bytes_per_element=lambda case: 2 * case.itemsize,
    rank_kind="gpu",
    metrics=metrics,
    default_rounds=DEFAULT_ROUNDS,
    default_warmup=DEFAULT_WARMUP,
    injects_slowdown=True,
    step_threads=lambda case: 2,  # one thread per direction at most (pageable bidirectional)
)
