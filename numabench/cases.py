"""How a case is described: one point of a family's axes, with a stable id; the
matrix of cases a run selects; what one case's run returns.

Families (numabench.families) say which axes exist and why a case cannot run;
this module crosses the axes into cases and names them.
"""
from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from numabench.errors import UsageError
from numabench.numerals import decimal, integer
from numabench.numa.placement import PlacementReport, Verdict
from numabench.numa.policy import Policy

if TYPE_CHECKING:
    from numabench.numa.kind_check import KindVerdict
    from numabench.numa.numastat import NodeMemory
    from numabench.replies import SetupReply
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
            value = decimal(num) * mult
        except ValueError:
            raise UsageError(f"bad size {part!r} in {text!r}: allowed are positive element counts in ASCII digits, "
                             "optionally with K/M/G (decimal)") from None
        if not math.isfinite(value) or value < 1 or value != int(value):
            raise UsageError(f"bad size {part!r} in {text!r}: must be a positive whole number of elements")
        if value > MAX_NUMEL:
            raise UsageError(f"bad size {part!r} in {text!r}: more than 1e13 elements (40 TB of fp32 per "
                             "tensor) is beyond any machine")
        out.append(int(value))
    _once(out, "size", text)
    return out


def _once(values: list, what: str, text: str) -> None:
    """A value named twice in an axis list is refused: it would run, and be saved, twice."""
    twice = sorted({v for v in values if values.count(v) > 1}, key=str)
    if twice:
        raise UsageError(f"{what} {', '.join(map(str, twice))} named twice in {text!r}: allowed each once")


def parse_dtypes(text: str) -> list[str]:
    out = [t.strip().lower() for t in text.split(",")]
    if not any(out):
        raise UsageError(f"empty dtype list {text!r}: allowed {', '.join(DTYPES)}")
    if not all(out):
        raise UsageError(f"empty entry in dtypes {text!r}: allowed {', '.join(DTYPES)}, comma separated")
    for t in out:
        if t not in DTYPES:
            raise UsageError(f"unknown dtype {t!r}: allowed {', '.join(DTYPES)}")
    _once(out, "dtype", text)
    return out


def parse_ints(text: str, what: str) -> list[int]:
    allowed = "allowed positive integers in ASCII digits, comma separated"
    try:
        out = [integer(t) for t in text.split(",")]  # an empty entry is no integer
    except ValueError:
        raise UsageError(f"bad {what} list {text!r}: {allowed}") from None
    if any(v < 1 for v in out):
        raise UsageError(f"bad {what} list {text!r}: {allowed}")
    _once(out, what, text)
    return out


KNOB_DEFAULT = "auto"  # a knob's value where it is not set: the family's own choice


@dataclass(frozen=True)
class Knob:
    """An open-valued axis: a setting that changes a family's result (a chunk size, a thread
    count, ...), selected by ``--numa-axis NAME=V1,V2`` like the closed axes. At its default
    (``auto``: the family's own choice) it is left out of the case (its id and its entry stay
    as they were before the knob existed); any other value joins the case's ``extra`` and shows
    in its id as ``NAME=VALUE`` and in the entry's extra_info as ``NAME``."""

    name: str
    help: str  # what it sets, and its unit
    parse: Callable[[str], str]  # the value as given -> its canonical text (raises UsageError)
    retired_env: str | None = None  # the environment variable it replaces (an error where set)
    separator: str = ","  # between values in --numa-axis NAME=V1,V2 (";" where a value holds commas)


_ASCII_DIGITS = re.compile(r"[0-9]+")  # str.isdigit() is true of '٣' and '²' too


def _whole(low: int, unit: str):
    def parse(text: str) -> str:
        t = text.strip()
        mult = {"k": 2**10, "m": 2**20, "g": 2**30}.get(t[-1:].lower(), 1) if unit == "bytes" else 1
        num = t[:-1] if mult != 1 else t
        if not _ASCII_DIGITS.fullmatch(num) or int(num) * mult < low:
            suffix = " (K/M/G: binary multiples)" if unit == "bytes" else ""
            raise UsageError(f"{text!r}: allowed auto or a whole number of {unit} >= {low} in ASCII digits{suffix}")
        return str(int(num) * mult)
    return parse


def _choice(*allowed: str):
    def parse(text: str) -> str:
        if text.strip() not in allowed:
            raise UsageError(f"{text!r}: allowed auto, {', '.join(allowed)}")
        return text.strip()
    return parse


def _fraction(text: str) -> str:
    """A share in (0, 1], canonical as the shortest decimal (``0.50`` -> ``0.5``, ``1.0`` -> ``1``)."""
    t = text.strip()
    try:
        value = float(t)
    except ValueError:
        value = float("nan")
    if not re.fullmatch(r"[0-9]*\.?[0-9]+", t) or not 0 < value <= 1:
        raise UsageError(f"{text!r}: allowed auto or a share greater than 0 and at most 1, e.g. 0.25")
    return f"{value:g}"


def _place(text: str) -> str:
    from numabench.numa.place import Place

    return str(Place.parse(text))


# Every knob of every family (the one table; a family names its own in ``Family.knobs``).
# Names differ from every metric key of an entry's extra_info (e.g. ``chunk_elems`` there is
# the chunk used, whatever chose it), so an entry's axes read back unambiguously.
KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob("chunk_numel", "adam_offload: elements per pipeline chunk of the overlap schedule (auto: about "
         "8 MiB per tensor, at least 8 chunks)", _whole(1, "elements"), "NUMABENCH_CHUNK_ELEMS"),
    Knob("loader_workers", "dataloader: DataLoader workers per rank (auto: 2 on the CPU, min(8, CPUs / "
         "nprocess) with a GPU)", _whole(1, "workers"), "NUMABENCH_LOADER_WORKERS"),
    Knob("loader_batches", "dataloader: batches per timed round (auto: 4 on the CPU, 8 with a GPU)",
         _whole(1, "batches"), "NUMABENCH_LOADER_BATCHES"),
    Knob("image_px", "dataloader: image side in pixels (auto: 224)", _whole(1, "pixels"), "NUMABENCH_IMAGE_SIDE"),
    Knob("loader_drain", "dataloader: batches taken untimed at the start of each round, so that the timed "
         "ones are made during the round, not prefetched while the worker waited (auto: the prefetch depth, "
         "loader workers x 2; 0: none)", _whole(0, "batches")),
    Knob("rank_threads", "train_step: torch intra-op threads per rank, 0: torch's default (auto: the rank's "
         "CPUs divided by the ranks sharing them)", _whole(0, "threads"), "NUMABENCH_RANK_THREADS"),
    Knob("simd_level", "cpu_adam: SIMD level of our kernel (auto: the best this CPU has)",
         _choice("scalar", "avx2", "avx512"), "NUMABENCH_CPU_ADAM_SIMD"),
    Knob("chunk_nbytes", "broadcast: bytes per chunk of the pipelined and relay methods (auto: 16 MiB, at "
         "least 8 chunks, never under 1 MiB)", _whole(1, "bytes"), "NUMABENCH_BCAST_CHUNK_BYTES"),
    Knob("offload_ratio", "train_step (deepspeed-zero3, streamed-split): the share of the fp32 master weights "
         "and moments kept on the host, DeepSpeed's offload_optimizer.ratio; the rest stays on the GPU (auto: "
         "deepspeed-zero3 offloads all, 1; streamed-split keeps on the GPU the largest share that fits its "
         "memory after activations)", _fraction),
    Knob("zenflow_topk", "train_step (deepspeed-zenflow): ZenFlow's topk_ratio, the share of gradient columns "
         "updated on the GPU every step (auto: 0.05, DeepSpeed's tutorial)", _fraction),
    Knob("zenflow_update_interval", "train_step (deepspeed-zenflow): ZenFlow's update_interval, the steps between "
         "the CPU's updates of the other columns (auto: 4, DeepSpeed's tutorial)", _whole(1, "steps")),
    Knob("place", "adam_offload, cpu_adam, train_step (streamed, deepspeed-*): each kind of host tensor under its "
         "own policy, KIND:POLICY[+KIND:POLICY] (kinds master, grads, moments, weights), or a DRAM budget per "
         "rank, budget:SIZE:FAST:SLOW (numabench.numa.place; auto: the process policy places everything); "
         "values separated by ';'", _place, separator=";"),
)}


def parse_knob(name: str, text: str) -> str:
    """``text`` as knob ``name``'s canonical value (``auto`` for its default)."""
    if text.strip() == KNOB_DEFAULT:
        return KNOB_DEFAULT
    try:
        return KNOBS[name].parse(text)
    except UsageError as e:
        raise UsageError(f"--numa-axis {name}: {e}") from None


def retired_env_error(env: Any = None) -> str | None:
    """Why the environment cannot run a benchmark: a variable that once set a knob (it no longer
    does: the knob is an axis, so that it shows in the case's id and entry), or None."""
    import os

    env = os.environ if env is None else env
    for k in KNOBS.values():
        if k.retired_env and env.get(k.retired_env, "").strip() not in ("", KNOB_DEFAULT):
            return (f"{k.retired_env} is no longer read: the setting is the axis {k.name} "
                    f"(--numa-axis {k.name}=VALUE, shown in the case id); unset {k.retired_env}")
    return None


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
        parts += [f"{k}={v}" if k in KNOBS else v for k, v in self.extra]
        return "-".join(parts)

    def param(self, name: str, default: str | None = None) -> str | None:
        return dict(self.extra).get(name, default)

    def __str__(self) -> str:  # what pytest-benchmark's --group-by=param:numa_case shows
        return self.id


def parse_axis_option(text: str) -> tuple[str, list[str]]:
    """'alloc=register,torch' -> ('alloc', ['register', 'torch']); a knob whose values hold commas
    separates them by its own separator ('place=master:bind:0;budget:1G:0:2')."""
    name, eq, values = text.partition("=")
    knob = KNOBS.get(name.strip())
    sep = knob.separator if knob else ","
    vals = [v.strip() for v in values.split(sep)]
    if not eq or not name.strip() or not all(vals):
        example = ("place=master:bind:0+moments:bind:2;budget:1G:0:2" if sep == ";" else "alloc=register,torch")
        raise UsageError(f"bad --numa-axis {text!r}: write AXIS=VALUE[{sep}VALUE], e.g. {example}")
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
    # under the ``place`` axis: each kind's pages judged against its own policy (``verdict`` is theirs)
    kinds: list["KindVerdict"] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = {"rank": self.rank, "policy": self.policy, **self.report.to_dict()}
        if self.verdict:
            d.update(ok=self.verdict.ok, deviation_pp=round(self.verdict.deviation_pp, 3),
                     message=self.verdict.message)
        if self.kinds:
            d["kinds"] = [k.to_dict() for k in self.kinds]
        return d


@dataclass
class CaseResult:
    case: Case
    phases: dict[str, list[float]]  # seconds per round, max over ranks
    per_rank: list[dict[str, list[float]]]
    setup_info: list["SetupReply"]  # each rank's, of its family's Family.setup_reply class
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
    # the CPUs each rank's worker ran on (numabench.replies.SetupDone.affinity)
    affinity: list[list[int]] = field(default_factory=list)
    # each rank's memory per NUMA node after set-up, as numastat -p counts it (SetupDone.node_memory)
    node_memory: list["NodeMemory | None"] = field(default_factory=list)
    # per invocation, the CPU each rank ran most of its timed steps on (None: its worker did not
    # say): fresh workers that differ by where the OS put them show it here
    invocation_cpus: list[list[int | None]] = field(default_factory=list)
    # per invocation, the share of its ranks' host buffers in transparent huge pages (None: not
    # known): fresh workers' buffers that differ by their pages show it here
    invocation_huge_shares: list[float | None] = field(default_factory=list)
    # per invocation of a rewarmed A/B session (numabench.workers.run.run_sides): whether the timed
    # rounds after the first still came after an untimed step (empty: not such a session)
    rewarmed: list[bool] = field(default_factory=list)
    # per invocation: its wall time apart from its steps, and its steps' (fixed_s and steps of
    # each pair, where fixed_s and step_wall_s hold the first's): where an A/B's time went
    invocation_walls_s: list[tuple[float, float]] = field(default_factory=list)

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
