"""host_membw: STREAM-style copy and triad bandwidth from a node's threads to policy-placed memory.

With bind:N policies over every node this is the node x node matrix that Intel
MLC prints; ``numabench topo --bandwidth`` prints it.
"""
from __future__ import annotations

from numabench.cases import CaseResult
from numabench.families.base import Family
from numabench.families.host_membw.reply import HostMembwReply
from numabench.kernels.stream import BYTES_PER_ELEMENT  # write-allocate reads are not counted

DEFAULT_ROUNDS = 15
DEFAULT_WARMUP = 2


def metrics(result: CaseResult, phase: str) -> dict:
    kernel = result.case.param("kernel", "triad")
    n = result.case.numel_per_rank * result.case.nprocess
    per_elem = BYTES_PER_ELEMENT[kernel]
    med = result.median(phase)
    return {"bytes": per_elem * n, "GBps": round(per_elem * n / med / 1e9, 3), "write_allocate_counted": False,
            "threads_per_rank": result.setup_info[0].threads}


FAMILY = Family(
    kernels=("stream",),
    key="host_membw",
    description=("STREAM copy, triad and Adam's 4-read/3-write pattern (`csrc/stream.cpp`) from a node's "
                 "threads to policy-placed fp32 arrays: the ceiling cpu_adam is judged by"),
    needs="nothing",
    phases=("time",),
    setup_reply=HostMembwReply,
    rank_kind="cpu-node",
    default_sizes=(128 * 2**20,),  # 512 MiB per array, like cpu_adam's: past a GPU host's L3
    default_dtypes=("fp32",),
    extra_axes={"kernel": ("copy", "triad", "adam_pattern")},
    worker_axes=("kernel",),
    host_bytes_per_element=lambda case: 4 * 4,
    metrics=metrics,
    default_rounds=DEFAULT_ROUNDS,
    ab_rounds=30,  # its pairs' spread is its rounds' (H200 x1: 5.5% a pair at 5 rounds, 3.1% at 10)
    default_warmup=DEFAULT_WARMUP,
    injects_slowdown=True,
    rewarm_every_round=True,  # its threads fill the node's CPUs (docs/GATE.md: the untimed step)
)
