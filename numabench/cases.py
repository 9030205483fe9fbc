"""How a case is described: one point of a family's axes, with a stable id.

``Family`` is the nvbandwidth-testcase shape: a key users select by, a
description, its phases (each a pytest-benchmark entry), its axes' defaults
and its requirements, from which the skip reason comes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from .errors import UsageError
from .policy import Policy

if TYPE_CHECKING:
    from .capabilities import Capabilities
    from .topology import Topology

DTYPES = {"fp32": 4, "fp16": 2, "bf16": 2}


def format_size(numel: int) -> str:
    """1835008 -> '1.84M', 12845056 -> '12.8M', 544997376 -> '545M'."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if numel >= div:
            return f"{numel / div:.3g}{suffix}"
    return str(numel)


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
        if value < 1 or value != int(value):
            raise UsageError(f"bad size {part!r} in {text!r}: must be a positive whole number of elements")
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


def parse_axis_option(text: str) -> tuple[str, list[str]]:
    """'alloc=register,torch' -> ('alloc', ['register', 'torch'])."""
    name, eq, values = text.partition("=")
    vals = [v.strip() for v in values.split(",") if v.strip()]
    if not eq or not name.strip() or not vals:
        raise UsageError(f"bad --numa-axis {text!r}: write AXIS=VALUE[,VALUE], e.g. alloc=register,torch")
    return name.strip(), vals


@dataclass
class Rank:
    """Where one rank runs: its GPU (if any), the node it calls its own, the CPUs' node."""

    index: int
    gpu: int | None
    own_node: int | None
    cpu_node: int | None


@dataclass
class Family:
    key: str
    description: str
    phases: tuple[str, ...]
    needs_gpu: bool = False
    min_gpus_per_case: Callable[["Case"], int] = lambda case: 0
    default_sizes: tuple[int, ...] = ()
    default_dtypes: tuple[str, ...] = ("fp32",)
    extra_axes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # every allowed value
    # values a plain run takes where not all of them (e.g. alloc: register only); --numa-axis widens
    default_axis_values: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # extra axes one worker run covers (same placed memory, timed one after another)
    worker_axes: tuple[str, ...] = ()
    # bytes of host memory per element per rank (for the fits-in-memory check)
    host_bytes_per_element: Callable[["Case"], float] = lambda case: case.itemsize
    device_bytes_per_element: Callable[["Case"], float] = lambda case: 0
    # which ranks exist: "gpu" (rank i on GPU i) or "cpu-node" (rank i on the i-th CPU node)
    rank_kind: str = "gpu"
    # family-specific reasons (an optional package, an axis combination that means nothing)
    case_skip_reason: Callable[["Case"], str | None] | None = None
    # compiled kernels its workers load (numabench.kernels.prebuild names): built by the
    # parent before any worker starts, so workers only load them
    kernels: tuple[str, ...] = ()

    def axis_values(self, overrides: dict[str, list[str]] | None = None) -> dict[str, tuple[str, ...]]:
        """The extra axes' values for a run: defaults, or what --numa-axis names (validated)."""
        out = {a: self.default_axis_values.get(a, vals) for a, vals in self.extra_axes.items()}
        for axis, vals in (overrides or {}).items():
            if axis not in self.extra_axes:
                continue  # an axis of another family
            bad = [v for v in vals if v not in self.extra_axes[axis]]
            if bad:
                raise UsageError(f"--numa-axis {axis}: unknown value(s) {', '.join(bad)} for {self.key}; "
                                 f"allowed {', '.join(self.extra_axes[axis])}")
            out[axis] = tuple(vals)
        return out

    def ranks(self, case: Case, topology: "Topology") -> list[Rank]:
        ranks = []
        for i in range(case.nprocess):
            if self.rank_kind == "gpu" and topology.gpus:
                g = topology.gpu(i)
                own = g.numa_node
                cpu = topology.nearest_cpu_node(own) if own is not None else None
                ranks.append(Rank(i, g.index, own, cpu))
            else:
                cpu_nodes = topology.cpu_node_ids
                node = cpu_nodes[i % len(cpu_nodes)]
                ranks.append(Rank(i, None, node, node))
        return ranks

    def skip_reason(self, case: Case, topology: "Topology", caps: "Capabilities",
                    host_memory_bytes: int | None = None) -> str | None:
        """Why ``case`` cannot run on this machine, or None. One clear reason.
        ``host_memory_bytes`` overrides MemTotal (VMs whose memory grows as it is used)."""
        ngpu = len(topology.gpus)
        if self.needs_gpu and ngpu == 0:
            return f"{self.key} needs a CUDA GPU; none is visible (no NVIDIA driver or CUDA_VISIBLE_DEVICES empty)"
        if self.rank_kind == "gpu" and self.needs_gpu and case.nprocess > ngpu:
            return f"nprocess={case.nprocess} needs {case.nprocess} GPUs; this machine has {ngpu}"
        if self.rank_kind == "cpu-node" and case.nprocess > len(topology.cpu_node_ids):
            return (f"nprocess={case.nprocess} needs {case.nprocess} NUMA nodes with CPUs (one rank per node); "
                    f"this machine has {len(topology.cpu_node_ids)}")
        need = self.min_gpus_per_case(case)
        if need > ngpu:
            return f"{self.key} needs {need} GPUs; this machine has {ngpu}"
        family_reason = self.case_skip_reason(case) if self.case_skip_reason else None
        if family_reason:
            return family_reason
        err = case.policy.requirement_error(topology)
        if err:
            return err
        if case.policy.kind == "local" and self.rank_kind == "gpu" and self.needs_gpu:
            unknown = [g.index for g in topology.gpus[: case.nprocess] if g.numa_node is None]
            if unknown:
                return f"policy local needs each GPU's NUMA node; unknown for GPU(s) {unknown} (sysfs numa_node=-1)"
        if case.policy.kind == "weighted":
            reason = caps.weighted_skip_reason()
            if reason:
                return reason
        if case.policy.kind == "preferred-many" and not caps.preferred_many_kernel:
            return f"preferred-many needs Linux >= 5.15; kernel {caps.kernel_release} rejected MPOL_PREFERRED_MANY"
        host_need = case.numel * self.host_bytes_per_element(case)
        host_have = host_memory_bytes or sum(n.mem_total_bytes for n in topology.nodes)
        if host_need > 0.8 * host_have:
            have = (f"--numa-host-memory gives {host_have / 2**30:.1f} GiB" if host_memory_bytes else
                    f"MemTotal reads {host_have / 2**30:.1f} GiB")
            return (f"size {format_size(case.numel)} needs {host_need / 2**30:.1f} GiB of host memory; "
                    f"{have} (80% usable; on a VM whose memory grows as it is used, pass --numa-host-memory=GiB)")
        if topology.gpus and self.needs_gpu:
            dev_need = case.numel_per_rank * self.device_bytes_per_element(case)
            dev_have = min(g.memory_bytes for g in topology.gpus[: case.nprocess]) or float("inf")
            if dev_need > 0.9 * dev_have:
                return (f"size {format_size(case.numel)} needs {dev_need / 2**30:.1f} GiB per GPU; "
                        f"the GPU has {dev_have / 2**30:.1f} GiB")
        return None
