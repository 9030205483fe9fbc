"""What a worker sends back to the parent, typed both ways (torch-free: the pytest process and
the workers both import it).

- ``SetupReply``: what every family's ``Worker.setup()`` returns (at least the placement report
  of the memory the case measures). Each family subclasses it, frozen, with its own fields
  (``numabench/families/<key>/reply.py``) and names the subclass in ``Family.setup_reply``. The
  worker builds it with its constructor (a misspelt field is a TypeError there), sends it as JSON
  (``to_dict``); the parent parses it with ``from_dict``, strictly: a key that is not a field, or
  a required field that is missing, is a ValueError naming them and the allowed ones.
- ``SetupDone``: what numabench.workers.main adds to every family's reply (the correctness checks
  it ran, the CPUs it runs on, where its start-up and set-up time went: ``SetupTiming``, and its
  memory per NUMA node after set-up as ``numastat -p`` counts it: ``NodeMemory``).
- ``check_step``: a step's ``{phase: seconds}``, checked where the worker makes it: each name
  one of the family's phases or declared step parts, each time a finite number >= 0.

``Record`` gives a frozen dataclass its JSON both ways; ``PlacementReport`` fields (and records
inside a reply, e.g. pinned_alloc's per-allocator reports) cross as their ``to_dict()``.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence, TypeVar

from numabench.numa.kind_check import KindPlacement
from numabench.numa.numastat import NodeMemory
from numabench.numa.placement import PlacementReport

T = TypeVar("T")


def strict_kwargs(cls: type, d: Mapping[str, Any], hint: str = "") -> dict[str, Any]:
    """``d`` as keyword arguments of dataclass ``cls``: a key that is not a field, or a field
    without a default that ``d`` lacks, is a ValueError naming them and the allowed ones (``hint``
    appended: where such a value belongs instead)."""
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    unknown = sorted(set(d) - set(names))
    if unknown:
        raise ValueError(f"{cls.__name__} has no field(s) {', '.join(map(repr, unknown))}: allowed "
                         f"{', '.join(names)}{hint}")
    required = [f.name for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [n for n in required if n not in d]
    if missing:
        raise ValueError(f"{cls.__name__} is missing required field(s) {', '.join(map(repr, missing))}: "
                         f"required {', '.join(required)}")
    return dict(d)


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _encode(value: Any) -> Any:
    """``value`` as JSON-ready data: records and reports as their ``to_dict()``, containers item by item."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return value


def _decode(hint: Any, value: Any) -> Any:
    """``value`` (JSON data) as type ``hint``: a class with ``from_dict`` (a record, a
    ``PlacementReport``) parsed by it, also inside ``X | None``, ``list[X]`` and ``dict[str, X]``."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _decode(inner[0], value) if len(inner) == 1 else value
    if isinstance(hint, type) and hasattr(hint, "from_dict"):
        return hint.from_dict(value)
    if origin is dict and len(args) == 2:
        return {k: _decode(args[1], v) for k, v in value.items()}
    if origin is list and args:
        return [_decode(args[0], v) for v in value]
    return value


class Record:
    """JSON both ways for a frozen dataclass: ``to_dict`` writes every field (records and
    ``PlacementReport``s inside as their ``to_dict()``); ``from_dict`` reads them back by the
    fields' types, strictly (``strict_kwargs``)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _encode(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls: type[T], d: Mapping[str, Any]) -> T:
        hints = _hints(cls)
        return cls(**{k: _decode(hints[k], v) for k, v in strict_kwargs(cls, d).items()})


@dataclass(frozen=True)
class SetupReply(Record):
    """What every family's setup reports: where the memory the case measures landed, and, under the
    ``place`` axis, where each kind of its state landed (numabench.toolkit.placed_state; None: no ``place``)."""

    placement: PlacementReport
    kinds: list[KindPlacement] | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class SetupTiming(Record):
    """Where a worker's start-up and set-up time went (the parent's time plans, ``fixed_parts``)."""

    main_at: float  # time.time() when the worker's main() began (the parent's spawn time minus it: start)
    import_s: float  # the family's worker module and what it imports (torch)
    setup_s: float  # Worker.setup()
    parts_s: dict[str, float] = field(default_factory=dict)  # named parts of setup (Worker.setup_part)


@dataclass(frozen=True)
class SetupDone:
    """One rank's answer to the setup request: its family's reply and what every worker adds."""

    info: SetupReply
    verified: dict[str, Any]  # correctness checks run in this worker (check key -> result)
    affinity: list[int]  # the CPUs this worker may run on
    timing: SetupTiming
    node_memory: NodeMemory | None = None  # the process's memory per node after set-up (numastat -p)

    def to_dict(self) -> dict[str, Any]:
        return {"info": self.info.to_dict(), "verified": dict(self.verified), "affinity": list(self.affinity),
                "timing": self.timing.to_dict(),
                "node_memory": self.node_memory.to_dict() if self.node_memory is not None else None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], reply: type[SetupReply]) -> "SetupDone":
        """The answer ``to_dict`` wrote, its ``info`` parsed as the family's ``reply`` class."""
        kwargs = strict_kwargs(cls, d)
        mem = kwargs.get("node_memory")
        return cls(info=reply.from_dict(kwargs["info"]), verified=dict(kwargs["verified"]),
                   affinity=[int(c) for c in kwargs["affinity"]], timing=SetupTiming.from_dict(kwargs["timing"]),
                   node_memory=NodeMemory.from_dict(mem) if mem is not None else None)


def check_step(times: Mapping[str, Any], allowed: Sequence[str]) -> dict[str, float]:
    """A step's ``{phase: seconds}``, checked: every name one of ``allowed`` (the family's phases
    and step parts), every value a finite number >= 0; else a ValueError naming the bad ones."""
    if not isinstance(times, Mapping):
        raise ValueError(f"a step returned {type(times).__name__}: allowed a dict of phase -> seconds")
    unknown = sorted(set(times) - set(allowed))
    if unknown:
        raise ValueError(f"a step returned unknown phase(s) {', '.join(map(repr, unknown))}: allowed "
                         f"{', '.join(allowed)} (a family declares extra parts in Family.step_parts)")
    bad = {k: v for k, v in times.items()
           if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0}
    if bad:
        raise ValueError(f"a step returned bad time(s) {', '.join(f'{k}={v!r}' for k, v in bad.items())}: "
                         "allowed finite seconds >= 0")
    return {k: float(v) for k, v in times.items()}
