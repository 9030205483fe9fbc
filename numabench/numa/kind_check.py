"""Did each kind's pages land where its own policy says? Measured in the worker, judged by the parent.

The worker counts the pages of every segment of every buffer (move_pages, page by page) and
reports them per kind and policy (``KindPlacement``). The parent judges each against what it
resolved itself (``judge_kinds``): a named kind against its policy, a kind left out against
the process policy, a budget plan first against the latency-first split recomputed from the
reported sizes, so that a worker cannot plan, place or count its own way unnoticed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from numabench.numa.budget import KindDemand, latency_first
from numabench.numa.kind_layout import Segment, StateBuffer
from numabench.numa.place import Place
from numabench.numa.placement import PlacementReport, Verdict, compare, pages_report
from numabench.numa.policy import Policy


@dataclass(frozen=True)
class KindPlacement:
    """The pages of one kind placed under one policy (None: the process policy), as counted."""

    kind: str
    policy: str | None
    planned_bytes: int
    report: PlacementReport

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "policy": self.policy, "planned_bytes": self.planned_bytes,
                "report": self.report.to_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "KindPlacement":
        return cls(str(d["kind"]), None if d["policy"] is None else str(d["policy"]), int(d["planned_bytes"]),
                   PlacementReport.from_dict(d["report"]))


def measure_kinds(placed: Sequence[tuple[StateBuffer, int]],
                  segments: Mapping[str, Sequence[Segment]]) -> list[KindPlacement]:
    """Count every segment's pages (``placed``: each buffer with its address), per kind and policy,
    in the order the buffers come."""
    groups: dict[tuple[str, str | None], tuple[int, PlacementReport]] = {}
    for buf, address in placed:
        for seg in segments[buf.name]:
            key = (buf.kind, None if seg.policy is None else str(seg.policy))
            report = pages_report([(address + seg.offset, seg.nbytes)])
            planned, total = groups.get(key, (0, PlacementReport({}, source="move_pages")))
            groups[key] = (planned + seg.nbytes, total.merge(report))
    return [KindPlacement(kind, policy, planned, report) for (kind, policy), (planned, report) in groups.items()]


@dataclass(frozen=True)
class KindVerdict:
    """One kind's pages under one policy, judged."""

    placement: KindPlacement
    verdict: Verdict | None  # None: the process policy promises nothing (default, unbound)

    def to_dict(self) -> dict[str, Any]:
        p = self.placement
        d = {"kind": p.kind, "policy": p.policy or "process", "planned_bytes": p.planned_bytes,
             "bytes_by_node": {str(n): b for n, b in sorted(p.report.bytes_by_node.items())},
             "untouched_bytes": p.report.untouched_bytes}
        if self.verdict:
            d.update(ok=self.verdict.ok, deviation_pp=round(self.verdict.deviation_pp, 3), message=self.verdict.message)
        return d


def _fail(p: KindPlacement, message: str) -> KindVerdict:
    return KindVerdict(p, Verdict(False, 100.0, f"kind {p.kind}: {message}"))


def _plan_errors(records: Sequence[KindPlacement], place: Place, touches: Mapping[str, float],
                 page: int) -> dict[tuple[str, str | None], str]:
    """What in the worker's plan differs from the one recomputed here: (kind, policy) -> why."""
    errors: dict[tuple[str, str | None], str] = {}
    if place.budget is None:
        for r in records:
            want = place.policy_of(r.kind)
            if r.policy != (None if want is None else str(want)):
                errors[(r.kind, r.policy)] = (f"placed under {r.policy or 'the process policy'}; place {place} says "
                                              f"{want or 'the process policy'}")
        return errors
    fast, slow = f"bind:{place.budget.fast}", f"bind:{place.budget.slow}"
    sizes: dict[str, int] = {}
    for r in records:
        sizes[r.kind] = sizes.get(r.kind, 0) + r.planned_bytes
        if r.policy not in (fast, slow):
            errors[(r.kind, r.policy)] = f"placed under {r.policy or 'the process policy'}; a budget plan binds to {fast} or {slow}"
    unknown = [k for k in sizes if k not in touches]
    if unknown:
        for r in records:
            if r.kind in unknown:
                errors[(r.kind, r.policy)] = "a kind the family does not hold"
        return errors
    want = {s.kind: s for s in latency_first([KindDemand(k, n, touches[k]) for k, n in sizes.items()],
                                             place.budget.nbytes, page)}
    for r in records:
        s = want[r.kind]
        planned = s.fast_bytes if r.policy == fast else s.slow_bytes
        if r.policy in (fast, slow) and r.planned_bytes != planned:
            errors[(r.kind, r.policy)] = (f"{r.planned_bytes} bytes planned under {r.policy}; the latency-first "
                                          f"split of {place.budget} gives {planned}")
    return errors


def judge_kinds(records: Sequence[KindPlacement], place: Place, process: Policy, cpu_node: int | None,
                touches: Mapping[str, float], page: int, tolerance_pp: float) -> list[KindVerdict]:
    """Each record judged: the plan it was placed by (against the one recomputed here), every page
    touched, the pages within ``tolerance_pp`` of its policy (a kind left out: of ``process``,
    resolved). A kind ``place`` names that no record holds is a failure of its own."""
    plan_errors = _plan_errors(records, place, touches, page)
    out: list[KindVerdict] = []
    for r in records:
        if (r.kind, r.policy) in plan_errors:
            out.append(_fail(r, plan_errors[(r.kind, r.policy)]))
            continue
        if r.report.untouched_bytes:
            out.append(_fail(r, f"{r.report.untouched_bytes} bytes untouched when counted: their node is not known yet"))
            continue
        expected = (process if r.policy is None else Policy.parse(r.policy)).expectation(cpu_node=cpu_node)
        if expected is None:
            out.append(KindVerdict(r, None))
            continue
        v = compare(r.report, expected, tolerance_pp)
        under = r.policy or f"the process policy {process}"
        out.append(KindVerdict(r, Verdict(v.ok, v.deviation_pp, f"kind {r.kind} under {under}: {v.message}")))
    held = {r.kind for r in records}
    for kind in place.named:
        if kind not in held:
            out.append(_fail(KindPlacement(kind, str(place.policy_of(kind)), 0, PlacementReport({})),
                             f"named by place {place}, but the worker placed no buffer of it"))
    return out


def rank_verdict(verdicts: Sequence[KindVerdict]) -> Verdict | None:
    """One verdict of a rank's kinds: ok where every judged one is; the worst miss; the failures named."""
    judged = [v.verdict for v in verdicts if v.verdict is not None]
    if not judged:
        return None
    bad = [v for v in judged if not v.ok]
    worst = max(v.deviation_pp for v in judged)
    if bad:
        return Verdict(False, worst, "; ".join(v.message for v in bad))
    return Verdict(True, worst, f"{len(judged)} kind placement(s) within tolerance, worst off by {worst:.2f} "
                                "percentage points")
