"""Pooling a session's invocations: every invocation of one case and variant in one result,
its rounds pooled and each invocation kept, so that the entry pytest-benchmark records holds
its invocation medians (numabench.gate.invocations) beside the pooled rounds."""
from __future__ import annotations

import dataclasses
from typing import Iterable

from numabench.cases import CaseResult


def pool_invocations(runs: list[CaseResult]) -> CaseResult:
    """One result from several invocations of the same case and variant: rounds pooled
    (invocation by invocation), placement and set-up of the first, every invocation kept."""
    if not runs:
        raise ValueError("no invocations to pool")
    first = runs[0]
    if any(r.case != first.case for r in runs):
        raise ValueError(f"invocations of different cases: {sorted({r.case.id for r in runs})}")
    invocations = [inv for r in runs for inv in (r.invocations or [r.phases])]
    phases = {ph: [v for inv in invocations for v in inv[ph]] for ph in first.phases}
    per_rank = [{ph: [v for r in runs for v in r.per_rank[i][ph]] for ph in first.per_rank[i]}
                for i in range(len(first.per_rank))]
    cpus = [c for r in runs for c in r.invocation_cpus]
    return dataclasses.replace(first, phases=phases, per_rank=per_rank, invocations=invocations,
                               invocation_cpus=cpus, rewarmed=[w for r in runs for w in r.rewarmed],
                               invocation_huge_shares=[h for r in runs for h in r.invocation_huge_shares],
                               invocation_walls_s=[w for r in runs for w in r.invocation_walls_s])


def pool_by_variant(invocations: Iterable[list[CaseResult]]) -> dict[tuple, CaseResult]:
    """Invocations of one worker run (each a result per variant) pooled variant by variant."""
    by_variant: dict[tuple, list[CaseResult]] = {}
    for runs in invocations:
        for r in runs:
            by_variant.setdefault(r.case.extra, []).append(r)
    return {x: pool_invocations(rs) for x, rs in by_variant.items()}
