"""How a case is described: one point of a family's axes, with a stable id; the
matrix of cases a run selects; what one case's run returns.

Families (numabench.families) say which axes exist and why a case cannot run;
this module crosses the axes into cases and names them.
"""
from __future__ import annotations

import math

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from numabench.errors import UsageError
from numabench.numa.placement import PlacementReport, Verdict
from numabench.numa.policy import Policy

if TYPE_CHECKING:
    from numabench.machine.topology import Topology

DTYPES = {"fp32": 4, "fp16": 2, "bf16": 2}


def format_size(numel: int) -> str:
    """1835008 -> '1.84M', 12845056 -> '12.8M', 544997376 -> '545M'."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if numel >= div:
            return f"{numel / div:.3g}{suffix}"
    return str(numel)


MAX_NUMEL = 10**13  # 40 TB of fp32 in one tensor: a typo (1e99), not a case


def parse_sizes(text: str) -> list[int]:
    """'1835008,12.8M,1G' -> element counts; suffixes K/M/G are decimal."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise UsageError(f"empty entry in sizes {text!r}: write e.g. 1835008,12845056 or 16M")
        mult = {"k": 1e3, "m": 1e6, "g": 1e9}.get(part[-1].lower(), 1)
        num = part[:-1] if mult != 1 else part
        try:
            value = float(num) * mult
        except ValueError:
            raise UsageError(f"bad size {part!r} in {text!r}: allowed are positive element counts, "
                             "optionally with K/M/G (decimal)") from None
        if not math.isfinite(value) or value < 1 or value != int(value):
            raise UsageError(f"bad size {part!r} in {text!r}: must be a positive whole number of elements")
        if value > MAX_NUMEL:
            raise UsageError(f"bad size {part!r} in {text!r}: more than 1e13 elements (40 TB of fp32 per "
                             "tensor) is beyond any machine")
        out.append(int(value))
    return out


def parse_dtypes(text: str) -> list[str]:
    out = [t.strip().lower() for t in text.split(",") if t.strip()]
    for t in out:
        if t not in DTYPES:
            raise UsageError(f"unknown dtype {t!r}: allowed {', '.join(DTYPES)}")
    if not out:
        raise UsageError(f"empty dtype list {text!r}: allowed {', '.join(DTYPES)}")
    return out


def parse_ints(text: str, what: str) -> list[int]:
    try:
        out = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UsageError(f"bad {what} list {text!r}: allowed positive integers, comma separated") from None
    if not out or any(v < 1 for v in out):
        raise UsageError(f"bad {what} list {text!r}: allowed positive integers, comma separated")
    return out


@dataclass(frozen=True)
class Case:
    family: str
    nprocess: int
    numel: int
    policy: Policy
    dtype: str
    extra: tuple[tuple[str, str], ...] = ()  # further axes (impl, schedule, ...) in id order

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype]

    @property
    def numel_per_rank(self) -> int:
        return -(-self.numel // self.nprocess)

    @property
    def id(self) -> str:
        parts = [f"np{self.nprocess}", format_size(self.numel), self.policy.id, self.dtype]
        parts += [v for _, v in self.extra]
        return "-".join(parts)

    def param(self, name: str, default: str | None = None) -> str | None:
        return dict(self.extra).get(name, default)

    def __str__(self) -> str:  # what pytest-benchmark's --group-by=param:numa_case shows
        return self.id


def parse_axis_option(text: str) -> tuple[str, list[str]]:
    """'alloc=register,torch' -> ('alloc', ['register', 'torch'])."""
    name, eq, values = text.partition("=")
    vals = [v.strip() for v in values.split(",") if v.strip()]
    if not eq or not name.strip() or not vals:
        raise UsageError(f"bad --numa-axis {text!r}: write AXIS=VALUE[,VALUE], e.g. alloc=register,torch")
    return name.strip(), vals


@dataclass
class Rank:
    """Where one rank runs: its GPU (if any), the node it calls its own, the CPUs' node, and
    (``cpus``) its own CPUs on that node where it does not share the node's (None: all of them)."""

    index: int
    gpu: int | None
    own_node: int | None
    cpu_node: int | None
    cpus: tuple[int, ...] | None = None


@dataclass
class RankPlacement:
    rank: int
    policy: str
    report: PlacementReport
    verdict: Verdict | None  # None: the policy promises nothing (default, unbound)

    def to_dict(self) -> dict[str, Any]:
        d = {"rank": self.rank, "policy": self.policy, **self.report.to_dict()}
        if self.verdict:
            d.update(ok=self.verdict.ok, deviation_pp=round(self.verdict.deviation_pp, 3),
                     message=self.verdict.message)
        return d


@dataclass
class CaseResult:
    case: Case
    phases: dict[str, list[float]]  # seconds per round, max over ranks
    per_rank: list[dict[str, list[float]]]
    setup_info: list[dict[str, Any]]
    placement: list[RankPlacement]
    launcher: str
    commands: list[list[str]]
    slowdown: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)
    # Each invocation's rounds per phase (fresh workers, fresh buffers); empty: one, ``phases``
    invocations: list[dict[str, list[float]]] = field(default_factory=list)
    # the invocation's wall time apart from its steps (start, set-up, checks, teardown), and the
    # mean wall time of one step request (any variant): what a time plan needs
    fixed_s: float = 0.0
    step_wall_s: float = 0.0
    # where ``fixed_s`` went: start (interpreter, imports), import (the family's worker module,
    # torch), setup (the slowest rank's) and its own parts, checks (the parent's), close
    fixed_parts_s: dict[str, float] = field(default_factory=dict)

    def median(self, phase: str) -> float:
        return statistics.median(self.phases[phase])

    def invocation_medians(self, phase: str) -> list[float]:
        return [statistics.median(inv[phase]) for inv in (self.invocations or [self.phases])]


def default_policies(topology: Topology) -> list[Policy]:
    mem = list(topology.memory_node_ids) or [0]
    cpu = list(topology.cpu_node_ids) or [0]
    cxl = list(topology.cpuless_node_ids)
    near = cpu[0]
    # The "far" node: a CPU-less (CXL) node if there is one, else the next node, else node 1 (a template).
    far = cxl[0] if cxl else next((n for n in mem if n != near), 1)
    texts = ["default", "local"]
    texts += [f"bind:{n}" for n in mem]
    if len(mem) < 2:
        texts.append(f"bind:{far}")  # shows as skipped: no second node
    texts += [f"preferred:{far}", f"preferred-many:{near},{far}", "interleave:all", f"interleave:{near},{far}",
              f"weighted:{near}=1,{far}=1", f"weighted:{near}=1,{far}=3"]
    # DRAM-heavy ratios: where a slower (CXL) node can hold part of the state for little cost
    texts += [f"weighted:{near}={w},{far}=1" for w in (2, 3, 4)]
    if len(cxl) > 1:
        texts.append("interleave:" + ",".join(map(str, [near, *cxl])))
    seen: dict[str, Policy] = {}
    for t in texts:
        p = Policy.parse(t)
        seen.setdefault(p.id, p)
    return list(seen.values())
