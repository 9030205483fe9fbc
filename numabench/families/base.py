"""What every family is made of: ``Family`` (the nvbandwidth-testcase shape: a key
users select by, a description and what it needs (``numabench plan --list`` and the
README's family table, numabench.families.listing), its phases (each a pytest-benchmark
entry), its axes' defaults and requirements, from which the skip reason comes, and its
hooks), ``WorkerSpec`` (what the parent tells each rank's worker, parsed once) and ``Worker``
(the worker's side: ``setup() -> SetupReply`` (the family's frozen subclass, named by
``Family.setup_reply``, defined torch-free in ``families/<key>/reply.py``; it crosses to the parent
as JSON and is parsed strictly there: numabench.replies), ``step(variant) -> {phase:
seconds}`` (checked against ``Family.phases`` and ``Family.step_parts`` where the worker makes it),
``close()``). A family whose size axis is a batch (``Family.size_is_batch``) gets its size per
rank in ``WorkerSpec.batch``, the others in ``WorkerSpec.numel``.

``GpuOrCpuFamily``: families that run on GPUs where there are GPUs and on the CPU
otherwise. It keeps ``rank_kind="gpu"`` (the default nprocess axis is {1, number of
GPUs}) and changes how ranks and skip reasons come about:

- GPUs visible: rank i on GPU i, its CPUs on the GPU's nearest CPU node (as
  ``Family.ranks``); nprocess > GPUs is a skip.
- no GPU: every rank on the first CPU node (a CPU-only machine is a CI machine:
  one process group of ``nprocess`` CPU processes on that node's CPUs).
- ``cpu_bind(case)``: ``node`` (default: the rank's node's CPUs, shared by the
  ranks on it), ``rank-cores`` (each rank a disjoint share of the node's physical
  cores, ``numactl --physcpubind``), ``none`` (e.g. the dataloader's
  ``binding=unbound``: the rank keeps its own node (for ``local``) but is not
  CPU-bound, so its worker is started without --cpunodebind and ``default``
  promises no node).
- ``gpu_only(case)``: a reason when that case needs CUDA (FSDP CPU offload, bf16
  autocast, a GPU-sized default).

This module imports no torch: the pytest process reads families without it.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from numabench.cases import (
    DTYPES,
    KNOB_DEFAULT,
    KNOBS,
    Case,
    Rank,
    format_size,
    parse_knob,
)
from numabench.errors import UsageError
from numabench.replies import SetupReply, strict_kwargs
from numabench.numa.budget import KindDemand
from numabench.numa.place import Place
from numabench.numa.policy import Policy

if TYPE_CHECKING:
    from numabench.cases import CaseResult
    from numabench.machine.capabilities import Capabilities
    from numabench.machine.topology import Topology


# The share of host memory a case may plan to use (the rest: the OS, the parent, page cache):
# the one rule both the size option's check and each case's skip apply.
USABLE_HOST_SHARE = 0.8


@dataclass(frozen=True)
class MemoryFit:
    """A family's own verdict on whether a case fits the machine's memory (``Family.memory_fit``):
    ``skip`` says why it is not run; ``out_of_memory`` why it is expected to run out of GPU memory
    (it runs, and an out-of-memory it meets is recorded as its result, not failed)."""

    skip: str | None = None
    out_of_memory: str | None = None


@dataclass(frozen=True)
class WorkerSpec:
    """What one rank's worker is told at set-up (sent as JSON, parsed once in the worker).

    The case's size per rank is ``numel`` (elements) or, for a family whose size axis is a batch
    (``Family.size_is_batch``: the dataloader, train_step), ``batch`` (samples); exactly one is set."""

    numel: int | None = None  # elements per rank
    batch: int | None = None  # samples per rank
    dtype: str = "fp32"
    rank: int = 0
    nprocess: int = 1
    gpu: int | None = None
    policy: Policy | None = None  # the policy this rank runs under, resolved (text across the process boundary)
    place: Place | None = None  # the case's per-kind placement, resolved for this rank (None: the process policy's)
    cpu_node: int | None = None
    cpus: tuple[int, ...] | None = None  # the CPUs it is bound to (None: unbound)
    cpu_share: int = 1  # ranks whose threads share those CPUs
    variants: tuple[Mapping[str, str], ...] = ({},)  # worker-axis values it times, in turn
    # correctness checks an earlier run of this session passed (check key -> its result): the
    # worker skips those (the same kernel, dtype and device) and reports the earlier result
    verified: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)  # the family's own (Family.spec_extra)

    def __post_init__(self) -> None:
        if isinstance(self.policy, str):  # read once, where the spec is made from text
            object.__setattr__(self, "policy", Policy.parse(self.policy))
        if isinstance(self.place, str):
            object.__setattr__(self, "place", Place.parse(self.place))
        if self.dtype not in DTYPES:
            raise UsageError(f"unknown dtype {self.dtype!r}: allowed {', '.join(DTYPES)}")
        if (self.numel is None) == (self.batch is None):
            raise UsageError(f"WorkerSpec got numel={self.numel} and batch={self.batch}: set exactly one "
                             "(batch where the family's size axis is a batch, Family.size_is_batch)")
        for name, value in (("numel", self.numel), ("batch", self.batch)):
            if value is not None and value < 1:
                raise UsageError(f"{name} {value} per rank: must be >= 1")

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype]

    def axis_values(self, axis: str, default: str) -> list[str]:
        """Each variant's value of ``axis`` (``default`` where a variant leaves it out)."""
        return [v.get(axis, default) for v in self.variants or ({},)]

    def knob(self, name: str) -> str | None:
        """Knob ``name``'s value for this worker run (numabench.cases.KNOBS; the case's, in every
        variant alike), or None at its default (the family's own choice)."""
        values = {v.get(name) for v in self.variants or ({},)}
        if len(values) > 1:
            raise ValueError(f"one worker run got variants with different {name} values {sorted(map(str, values))}")
        return values.pop()

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["policy"] = str(self.policy) if self.policy is not None else None
        d["place"] = str(self.place) if self.place is not None else None
        d["cpus"] = list(self.cpus) if self.cpus is not None else None
        d["variants"] = [dict(v) for v in self.variants]
        d["verified"] = dict(self.verified)
        d["extra"] = dict(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "WorkerSpec":
        """The spec ``to_dict`` wrote (JSON across the process boundary). A key that is not a field
        is an error here, where it is read, not a value silently dropped: a family's own values go
        under ``extra``."""
        known = strict_kwargs(cls, d, hint=" (a family's own values go under 'extra')")
        if known.get("cpus") is not None:
            known["cpus"] = tuple(int(c) for c in known["cpus"])
        known["variants"] = tuple(dict(v) for v in (known.get("variants") or [{}]))
        known["verified"] = dict(known.get("verified") or {})
        known["extra"] = dict(known.get("extra") or {})
        for key in ("numel", "batch", "rank", "nprocess", "cpu_share", "gpu", "cpu_node"):
            if known.get(key) is not None:
                known[key] = int(known[key])
        return cls(**known)


class Worker:
    """One rank's side of a family (``families/<key>/worker.py`` defines ``Worker``): ``setup()``
    returns the family's ``SetupReply`` subclass (``Family.setup_reply``), ``step(variant)`` the
    seconds per phase (names from ``Family.phases`` and ``Family.step_parts``), ``close()`` frees.
    numabench.workers.main checks both replies before they cross to the parent."""

    def __init__(self, spec: "WorkerSpec | Mapping[str, Any]") -> None:
        from numabench.toolkit.inject import SlowdownPad

        self.spec = spec if isinstance(spec, WorkerSpec) else WorkerSpec.from_dict(spec)
        self.numel = self.spec.numel  # None where the family's size is a batch (spec.batch)
        self.pad = SlowdownPad()  # pads timed phases where the family injects a slowdown
        self.setup_parts_s: dict[str, float] = {}  # where set-up time went (time plans, docs)
        self.verified_now: dict[str, Any] = {}  # checks run here (see verified_once)

    @contextlib.contextmanager
    def setup_part(self, name: str) -> Iterator[None]:
        """Time a named part of set-up into ``setup_parts_s`` (parts with one name add up)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.setup_parts_s[name] = self.setup_parts_s.get(name, 0.0) + time.perf_counter() - t0

    def verified_once(self, key: str, check: Callable[[], Any]) -> Any:
        """``check()``'s result, or the result an earlier run of the session had for ``key``
        (``spec.verified``); what ran here is reported in ``self.verified_now``."""
        if key in self.spec.verified:
            return self.spec.verified[key]
        result = check()
        self.verified_now[key] = result
        return result

    def torch_dtype(self) -> Any:
        from numabench.toolkit.hostmem import torch_dtype

        return torch_dtype(self.spec.dtype)

    def cuda_device(self) -> Any:
        import torch

        if self.spec.gpu is None:
            raise ValueError(f"rank {self.spec.rank} of a GPU family was given no GPU")
        return torch.device("cuda", self.spec.gpu)

    def cpu_threads(self) -> int:
        """Threads for CPU work: one per CPU the rank is bound to, else torch's default."""
        import torch

        return len(self.spec.cpus) if self.spec.cpus else torch.get_num_threads()

    def setup(self) -> SetupReply:
        """Allocate, place, touch, check correctness; what the parent needs of it (the placement
        report, limits, ...) as an instance of the family's ``Family.setup_reply`` class."""
        raise NotImplementedError

    def step(self, variant: Mapping[str, str] | None = None) -> dict[str, float]:
        """One timed round of ``variant``: seconds per phase (a ``Family.phases`` or
        ``Family.step_parts`` name each, finite, >= 0: numabench.replies.check_step)."""
        raise NotImplementedError

    def close(self) -> None:
        """Free what setup took (the process ends after it)."""


@dataclass
class Family:
    key: str
    # what one round measures, in a sentence or a few (Markdown: `code` reads well in a terminal
    # too); with ``needs`` what `numabench plan --list` prints and the README's family table
    # shows (numabench.families.listing renders both; a test keeps the README equal to it)
    description: str
    phases: tuple[str, ...]
    # what its workers' setup() returns (numabench.replies): the family's own subclass,
    # in families/<key>/reply.py (torch-free: the worker and the family's metrics both read it)
    setup_reply: type[SetupReply] = SetupReply
    # further times a step returns beside ``phases``, which are not entries of their own (e.g.
    # train_step's forward/backward/optimizer): its metrics read them from ``CaseResult.phases``
    step_parts: tuple[str, ...] = ()
    # the size axis is a batch (samples, WorkerSpec.batch), not elements (WorkerSpec.numel)
    size_is_batch: bool = False
    # what a case needs to run, in words ("nothing", "a CUDA GPU per rank", optional packages);
    # the skip reasons (``skip_reason``) are what enforces it
    needs: str = "nothing"
    needs_gpu: bool = False
    min_gpus_per_case: Callable[["Case"], int] = lambda case: 0
    default_sizes: tuple[int, ...] = ()
    default_dtypes: tuple[str, ...] = ("fp32",)
    extra_axes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # every allowed value
    # values a plain run takes where not all of them (e.g. alloc: register only); --numa-axis widens
    default_axis_values: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # extra axes one worker run covers (same placed memory, timed one after another)
    worker_axes: tuple[str, ...] = ()
    # its open-valued axes (numabench.cases.KNOBS): each ``auto`` unless --numa-axis names values;
    # a value other than auto joins the case (after the closed axes), its id and its entry
    knobs: tuple[str, ...] = ()
    # bytes of host memory per element per rank (for the fits-in-memory check)
    host_bytes_per_element: Callable[["Case"], float] = lambda case: case.itemsize
    device_bytes_per_element: Callable[["Case"], float] = lambda case: 0
    # the family's own fits-in-memory check in place of the per-element one: (case, bytes of the
    # smallest of its GPUs (0: not known) or None without GPUs, host bytes) -> MemoryFit
    memory_fit: Callable[["Case", int | None, int], MemoryFit] | None = None
    # which ranks exist: "gpu" (rank i on GPU i) or "cpu-node" (rank i on the i-th CPU node)
    rank_kind: str = "gpu"
    # family-specific reasons (an optional package, an axis combination that means nothing)
    case_skip_reason: Callable[["Case"], str | None] | None = None
    # compiled kernels its workers load (numabench.kernels.prebuild names): built by the
    # parent before any worker starts, so workers only load them
    kernels: tuple[str, ...] = ()
    # which of ``kernels`` a variant (its axis values) needs (None: every one): a variant that
    # needs none runs when a kernel fails to build
    variant_kernels: Callable[[Mapping[str, str]], tuple[str, ...]] | None = None
    # extra_info of one entry beyond the common schema (bytes, GB/s, limits, ...)
    metrics: Callable[["CaseResult", str], dict] = lambda result, phase: {}
    default_rounds: int = 20
    default_warmup: int = 3
    # timed rounds of each invocation in a same-runner A/B, over the tier's cap (None: the tier's),
    # for a family whose pairs spread by round-to-round noise and whose rounds cost little beside
    # its set-up: a pair's ratio is the median of its round-by-round ratios, so more rounds narrow
    # every pair where more pairs would pay the set-up again (docs/GATE.md: rounds of an A/B)
    ab_rounds: int | None = None
    # further fields of every rank's WorkerSpec.extra (e.g. a rendezvous port)
    spec_extra: Callable[["Case"], dict] | None = None
    # its workers pad their timed phases for NUMABENCH_INJECT_SLOWDOWN (real extra work)
    injects_slowdown: bool = False
    # the threads a case's timed step runs on, where that is few and fixed (0: many, or not fixed):
    # in a same-runner A/B (numabench ab --same-cpus, its default) each rank of both sides runs
    # on this many CPUs, the same ones for both sides of a pair (ab_pair_cpus), so that which CPUs
    # the OS gives a fresh worker cannot tell the sides apart
    step_threads: Callable[["Case"], int] = lambda case: 0
    # in a same-runner A/B, every timed step after an untimed one of its own, however long the step
    # (else from the second round on only where it is short: numabench.workers.sides.REWARM_BELOW_S):
    # a step on every CPU of its node whose start meets what the other side's threads left
    rewarm_every_round: bool = False
    # the phases whose times add up to one round (None: all of them); for the time plan
    round_phases: tuple[str, ...] | None = None
    # the host state kinds a case keeps per rank (numabench.numa.place.TENSOR_KINDS), which the
    # ``place`` knob places (empty: none): each kind's bytes per rank (the family's own count:
    # workers place by their real buffers) and the times a step touches each byte
    state_kinds: Callable[["Case"], tuple[KindDemand, ...]] = lambda case: ()
    # the ci tier's narrower choice where the whole default matrix is more than a CI job can
    # afford (numabench.tiers): sizes and axis values (None / absent: the defaults)
    ci_sizes: tuple[int, ...] | None = None
    ci_axis_values: dict[str, tuple[str, ...]] = field(default_factory=dict)
    ci_gpu_dtypes: tuple[str, ...] | None = None  # the ci tier's dtypes where the machine has GPUs

    def step_names(self) -> tuple[str, ...]:
        """The names a step may return: its phases, then its step parts."""
        return self.phases + self.step_parts

    def spec_size(self, per_rank: int) -> dict[str, int]:
        """The WorkerSpec field that carries a case's size per rank: ``batch`` or ``numel``."""
        return {"batch": per_rank} if self.size_is_batch else {"numel": per_rank}

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

    def knob_values(self, overrides: dict[str, list[str]] | None = None) -> dict[str, tuple[str, ...]]:
        """Each of the family's knobs' values for a run, canonical: ``auto`` unless --numa-axis names others."""
        out = {}
        for name in self.knobs:
            if name not in KNOBS:
                raise ValueError(f"family {self.key}: unknown knob {name!r} (numabench.cases.KNOBS)")
            vals = (overrides or {}).get(name) or [KNOB_DEFAULT]
            out[name] = tuple(dict.fromkeys(parse_knob(name, v) for v in vals))
        return out

    def kernels_for(self, variant: Mapping[str, str] | tuple[tuple[str, str], ...]) -> tuple[str, ...]:
        """The compiled kernels ``variant`` (a case's ``extra``, or a dict of axis values) needs."""
        if self.variant_kernels is None:
            return self.kernels
        needs = self.variant_kernels(dict(variant))
        return tuple(k for k in self.kernels if k in needs)

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
                    host_memory_bytes: int | None = None, copies: int = 1) -> str | None:
        """Why ``case`` cannot run on this machine, or None. One clear reason.
        ``host_memory_bytes`` overrides MemTotal (VMs whose memory grows as it is used);
        ``copies``: how many runs of the case are alive at once (2 in a same-runner A/B)."""
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
        place_reason = self.place_skip_reason(case, topology)
        if place_reason:
            return place_reason
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
        twice = f" ({copies} copies alive at once: a same-runner A/B)" if copies > 1 else ""
        if self.memory_fit is not None:  # the family's own verdict, on the host's share of one copy
            share = (host_memory_bytes or sum(n.mem_total_bytes for n in topology.nodes)) // copies \
                if copies > 1 else host_memory_bytes
            return self.memory_verdict(case, topology, share).skip
        host_need = copies * case.numel * self.host_bytes_per_element(case)
        host_have = host_memory_bytes or sum(n.mem_total_bytes for n in topology.nodes)
        if host_need > USABLE_HOST_SHARE * host_have:
            have = (f"--numa-host-memory gives {host_have / 2**30:.1f} GiB" if host_memory_bytes else
                    f"MemTotal reads {host_have / 2**30:.1f} GiB")
            return (f"size {format_size(case.numel)} needs {host_need / 2**30:.1f} GiB of host memory{twice}; "
                    f"{have} ({USABLE_HOST_SHARE:.0%} usable; on a VM whose memory grows as it is used, pass "
                    "--numa-host-memory=GiB)")
        if topology.gpus and self.needs_gpu:
            dev_need = copies * case.numel_per_rank * self.device_bytes_per_element(case)
            dev_have = min(g.memory_bytes for g in topology.gpus[: case.nprocess]) or float("inf")
            if dev_need > 0.9 * dev_have:
                return (f"size {format_size(case.numel)} needs {dev_need / 2**30:.1f} GiB per GPU{twice}; "
                        f"the GPU has {dev_have / 2**30:.1f} GiB")
        return None

    def memory_verdict(self, case: Case, topology: "Topology", host_memory_bytes: int | None = None) -> MemoryFit:
        """The family's ``memory_fit`` for ``case`` on this machine (its GPUs' memory: 0 where the
        driver did not say, None without GPUs; the host's: ``host_memory_bytes`` or MemTotal); an
        empty verdict where the family has none."""
        if self.memory_fit is None:
            return MemoryFit()
        gpus = [g.memory_bytes for g in topology.gpus[: case.nprocess]]
        gpu_bytes = min(gpus) if gpus else None
        host_have = host_memory_bytes or sum(n.mem_total_bytes for n in topology.nodes)
        return self.memory_fit(case, gpu_bytes, host_have)


    def place_skip_reason(self, case: Case, topology: "Topology") -> str | None:
        """Why the case's ``place`` cannot run here (a kind this case does not keep on the host, a
        node the machine lacks), or None (also where the case has no ``place``)."""
        text = case.param("place")
        if text is None:
            return None
        place = Place.parse(text)
        held = [k.kind for k in self.state_kinds(case)]
        if not held:
            return f"place={place}: this {self.key} case keeps no host state of the kinds place places"
        foreign = [k for k in place.named if k not in held]
        if foreign:
            return (f"place={place} names {', '.join(foreign)}, which this {self.key} case does not keep on the host "
                    f"(it keeps {', '.join(held)})")
        err = place.requirement_error(topology)
        if err:
            return err
        locals_ = [k for k, p in place.kinds if p.kind == "local"]
        if locals_ and self.rank_kind == "gpu" and topology.gpus:
            unknown = [g.index for g in topology.gpus[: case.nprocess] if g.numa_node is None]
            if unknown:
                return (f"place={place}: local (kind {locals_[0]}) needs each GPU's NUMA node; unknown for GPU(s) "
                        f"{unknown} (sysfs numa_node=-1)")
        return None


CPU_BINDS = ("node", "rank-cores", "none")


def rank_core_shares(ranks: list[Rank], topology: "Topology") -> dict[int, tuple[int, ...]]:
    """Each rank's own CPUs: the physical cores of its CPU node split into equal, disjoint,
    contiguous shares among the ranks on that node, one CPU (the first SMT sibling) per core,
    as DeepSpeed's ``--bind_cores_to_rank`` does; cores left over stay unused. Empty where a
    node has fewer cores than ranks (a skip reason says so)."""
    shares: dict[int, tuple[int, ...]] = {}
    for node in {r.cpu_node for r in ranks if r.cpu_node is not None}:
        on_node = [r for r in ranks if r.cpu_node == node]
        cores = topology.physical_cores(topology.node(node).cpus)
        per = len(cores) // len(on_node)
        for j, r in enumerate(on_node):
            shares[r.index] = tuple(core[0] for core in cores[j * per:(j + 1) * per])
    return shares


def ab_pair_cpus(ranks: list[Rank], topology: "Topology", allowed: Sequence[int], per_rank: int,
                 pair: int) -> list[Rank]:
    """``ranks`` each narrowed to ``per_rank`` CPUs for pair number ``pair`` of a same-runner A/B:
    physical cores of its own CPUs (its ``cpus``, else its CPU node's, else ``allowed``), the first
    SMT sibling of each (two threads never share a core), ranks of one node on disjoint cores where
    there are enough, and the choice moving on by whole sets from pair to pair, so that the pairs
    sample the machine's cores while both sides of one pair run on the same ones."""
    if per_rank < 1:
        raise ValueError(f"{per_rank} CPUs per rank: allowed 1 or more")
    allowed_set = set(allowed)
    out = []
    for r in ranks:
        own = r.cpus or (topology.node(r.cpu_node).cpus if r.cpu_node is not None else allowed)
        cores = [c[0] for c in topology.physical_cores([c for c in own if c in allowed_set])]
        if not cores:
            raise ValueError(f"rank {r.index}: none of its CPUs {sorted(own)} is allowed here ({sorted(allowed)})")
        sharing = [o.index for o in ranks if (o.cpus or o.cpu_node) == (r.cpus or r.cpu_node)]
        start = (pair * len(sharing) + sharing.index(r.index)) * per_rank
        chosen = tuple(sorted({cores[(start + j) % len(cores)] for j in range(per_rank)}))
        out.append(Rank(r.index, r.gpu, r.own_node, r.cpu_node, chosen))
    return out


@dataclass
class GpuOrCpuFamily(Family):
    # how ranks are CPU-bound (CPU_BINDS): "node" (the node's CPUs, shared by the ranks on it),
    # "rank-cores" (a disjoint share of its physical cores per rank), "none" (unbound)
    cpu_bind: Callable[[Case], str] = lambda case: "node"
    # reason a case cannot run without a GPU (None: it runs on the CPU too)
    gpu_only: Callable[[Case], str | None] = lambda case: None

    def ranks(self, case: Case, topology: "Topology") -> list[Rank]:
        if topology.gpus:
            ranks = Family.ranks(self, case, topology)
        else:
            node = (topology.cpu_node_ids or (0,))[0]
            ranks = [Rank(i, None, node, node) for i in range(case.nprocess)]
        bind = self.cpu_bind(case)
        if bind not in CPU_BINDS:
            raise UsageError(f"cpu_bind {bind!r} for {case.id}: allowed {', '.join(CPU_BINDS)}")
        if bind == "none":
            ranks = [Rank(r.index, r.gpu, r.own_node, None) for r in ranks]
        elif bind == "rank-cores":
            shares = rank_core_shares(ranks, topology)
            ranks = [Rank(r.index, r.gpu, r.own_node, r.cpu_node, shares.get(r.index) or None) for r in ranks]
        return ranks

    def skip_reason(self, case: Case, topology: "Topology", caps: "Capabilities",
                    host_memory_bytes: int | None = None, copies: int = 1) -> str | None:
        ngpu = len(topology.gpus)
        if ngpu and case.nprocess > ngpu:
            return f"nprocess={case.nprocess} needs {case.nprocess} GPUs; this machine has {ngpu}"
        if ngpu and case.policy.kind == "local":
            unknown = [g.index for g in topology.gpus[: case.nprocess] if g.numa_node is None]
            if unknown:
                return f"policy local needs each GPU's NUMA node; unknown for GPU(s) {unknown} (sysfs numa_node=-1)"
        if not ngpu:
            if not topology.cpu_node_ids:
                return f"{self.key} on the CPU needs a NUMA node with CPUs; this machine reports none"
            reason = self.gpu_only(case)
            if reason:
                return f"{reason}; no CUDA GPU is visible (needs a CUDA GPU)"
        if self.cpu_bind(case) == "rank-cores" and not (ngpu and case.nprocess > ngpu):
            ranks = self.ranks(case, topology)
            short = sorted({r.cpu_node for r in ranks if r.cpu_node is not None and not r.cpus})
            if short:
                cores = {n: len(topology.physical_cores(topology.node(n).cpus)) for n in short}
                return (f"cpu_bind rank-cores needs a physical core per rank; node(s) "
                        + ", ".join(f"{n} ({c} cores)" for n, c in cores.items())
                        + f" have fewer than the {case.nprocess} ranks placed there")
        return super().skip_reason(case, topology, caps, host_memory_bytes, copies)
