"""touch: memset of a policy-placed host buffer; the simplest placed case, no GPU or torch needed."""
from __future__ import annotations

from numabench.cases import CaseResult
from numabench.families.base import Family
from numabench.families.touch.reply import TouchReply


def metrics(result: CaseResult, phase: str) -> dict:
    nbytes = sum(info.bytes for info in result.setup_info)
    med = result.median(phase)
    return {"bytes_per_round": nbytes, "GBps": round(nbytes / med / 1e9, 3)}


FAMILY = Family(
    key="touch",
    description=("memset of every byte of a host buffer placed by the policy (memset bandwidth per node; "
                 "the simplest placed case)"),
    needs="nothing",
    phases=("write",),
    setup_reply=TouchReply,
    rank_kind="cpu-node",
    default_sizes=(64 * 2**20,),
    default_dtypes=("fp32",),
    metrics=metrics,
    injects_slowdown=True,
    step_threads=lambda case: 1,  # one memset on the worker's one thread
)
