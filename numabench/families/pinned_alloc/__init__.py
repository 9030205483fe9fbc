"""pinned_alloc: what making N bytes of pinned host memory costs, and what it really takes.

Seed 001 (DeepSpeed ZeRO-Offload study) adds "zero-overhead pinned memory" and
"NUMA allocation" extensions because torch's ``pin_memory`` is slow and
wasteful: CUDA's caching host allocator rounds every block up to a power of
two (a 272 MB partition takes 512 MiB of pinned RAM) and its pages are placed
wherever the allocating call happens to put them. This family measures, per
``allocator`` (one worker run times all three, turn by turn):

- ``register``: mmap + first touch under the task policy + cudaHostRegister
  (exact size; what numabench's own buffers use);
- ``torch``: ``torch.empty(n, pin_memory=True)`` (caching host allocator; its
  cache is emptied after each free so every round really allocates);
- ``cudahostalloc``: exact-size ``cudaHostAlloc`` / ``cudaFreeHost``.

Phases: ``alloc`` (until the buffer is usable: allocated, pinned, every page
written) and ``free`` (until the memory is given back). extra_info: requested
vs reserved bytes (the mapping that holds the buffer, its resident pages from
numa_maps, and torch's host allocator stats where torch has them), pages per
node, and ``honours_policy``.

Placement decision: the runner's placement check (which fails the whole case
before anything is timed) is applied to the ``register`` buffer only, because
that allocator claims to honour the policy (we touch the pages ourselves under
it); if it misses, the policy is not applied on this machine and no number is
honest. ``torch`` and ``cudahostalloc`` place pages themselves (the driver
allocates and pins them): whether they honour the task policy is a finding, not
a precondition, so a miss is REPORTED in their extra_info as ``honours_policy:
false`` with the placement and message, and their timings still count. Where
the policy promises nothing (``default`` with no bound CPU node)
``honours_policy`` is null.

Default matrix on an 8-GPU two-socket machine: 2 sizes (the seed's 1.84M and
67.9M fp32 partitions: 7.3 MB and 272 MB) x nprocess 1 and 8 x 8 runnable
policies = 32 worker runs of 10 rounds of 3 allocators (about 1 s per round at
272 MB, torch's 512 MiB block dominating): about 5 minutes.
"""
from __future__ import annotations

from numabench.cases import CaseResult
from numabench.families.base import Family
from numabench.families.pinned_alloc.reply import PinnedAllocReply

DEFAULT_ROUNDS = 10
DEFAULT_WARMUP = 1
ALLOCATORS = ("register", "torch", "cudahostalloc")


def metrics(result: CaseResult, phase: str) -> dict:
    case = result.case
    alloc = case.param("allocator", "register")
    per_rank = [info.allocators[alloc] for info in result.setup_info]
    req = per_rank[0].requested_bytes
    med = result.median(phase)
    honours = [r.honours_policy for r in per_rank]
    return {
        "allocator": alloc,
        "requested_bytes": req,
        "reserved_bytes": per_rank[0].reserved_bytes,
        "resident_bytes": per_rank[0].resident_bytes,
        "reserved_over_requested": round(per_rank[0].reserved_bytes / req, 4),
        "torch_host_stats_bytes": per_rank[0].torch_host_stats_bytes,
        "GBps": round(req * case.nprocess / med / 1e9, 3),  # bytes made usable (or given back) per second
        "honours_policy": None if all(h is None for h in honours) else all(h is not False for h in honours),
        "honours_policy_per_rank": honours,
        "placement_per_rank": [r.placement.to_dict() for r in per_rank],
        "placement_message": [r.message for r in per_rank],
        "how": per_rank[0].how,
    }


FAMILY = Family(
    key="pinned_alloc",
    description=("the cost and real size of pinned host memory: allocate, touch and free N bytes per "
                 "allocator (mmap + touch + cudaHostRegister of placed pages, torch `pin_memory`, "
                 "`cudaHostAlloc`); reserved bytes, and whether each honours the policy"),
    needs="a CUDA GPU per rank",
    injects_slowdown=True,
    step_threads=lambda case: 1,  # allocate, touch and free on the worker's one thread
    phases=("alloc", "free"),
    setup_reply=PinnedAllocReply,
    needs_gpu=True,
    default_sizes=(1835008, 67895296),
    default_dtypes=("fp32",),
    extra_axes={"allocator": ALLOCATORS},
    worker_axes=("allocator",),
    # the torch allocator may take twice the request (power of two), plus the register reference buffer
    host_bytes_per_element=lambda case: 3 * case.itemsize,
    rank_kind="gpu",
    metrics=metrics,
    default_rounds=DEFAULT_ROUNDS,
    default_warmup=DEFAULT_WARMUP,
)
