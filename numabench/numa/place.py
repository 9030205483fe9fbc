"""How a per-kind placement is described: the ``place`` axis of the offload families.

The whole-process policy (``--numa-policies``) places every page of a worker alike; ``place``
places each kind of host tensor on its own nodes (as the fine-tuning study's
``--numa_aware_allocation`` does for DeepSpeed's ZeRO-Offload), the process policy staying
the default for every kind it does not name. Grammar (the text is also the case id's
``place=...``; ``+`` and ``:`` are word characters of ``pytest -k``, so ``-k moments:bind:2``
selects by one kind's policy)::

    KIND:POLICY[+KIND:POLICY...]   each named kind under its own policy
    budget:SIZE:FAST:SLOW          SIZE bytes (K/M/G binary, e.g. 1536M, 1.5G) of node FAST per rank,
                                   filled latency-first (numabench.numa.budget), the rest on node SLOW

KIND is one of ``TENSOR_KINDS``; POLICY is ``local``, ``bind:N[,M]``, ``preferred:N``,
``preferred-many:N,M`` or ``interleave:N,M|all`` (numabench.numa.policy). ``default`` is what a
kind left out gets, and ``weighted`` needs system-wide weights one case sets for the whole
process: neither is a per-kind policy.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from numabench.errors import PolicyError
from numabench.numerals import integer
from numabench.numa.policy import Policy

if TYPE_CHECKING:
    from numabench.machine.topology import Topology

# What each kind is; families say which of them they keep on the host (Family.state_kinds).
TENSOR_KINDS = {
    "master": "fp32 master weights",
    "grads": "master gradients (fp32, on the host)",
    "moments": "Adam's momentum and variance (exp_avg, exp_avg_sq)",
    "weights": "low-precision (bf16) compute weights kept on the host",
}
PER_KIND_POLICIES = ("local", "bind", "preferred", "preferred-many", "interleave")
_GRAMMAR = ("KIND:POLICY[+KIND:POLICY...] (KIND: " + ", ".join(TENSOR_KINDS) + "; POLICY: local, bind:N[,M], "
            "preferred:N, preferred-many:N,M, interleave:N,M|all) or budget:SIZE:FAST:SLOW (SIZE with K/M/G, "
            "binary, e.g. budget:1536M:0:2)")
_SIZE = re.compile(r"([0-9]+)(?:\.([0-9]+))?([KMG]?)", re.IGNORECASE)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def parse_bytes(text: str) -> int:
    """'1536M' / '1.5G' / '4096' -> bytes (binary multiples, a whole number of bytes)."""
    m = _SIZE.fullmatch(text.strip())
    if not m:
        raise PolicyError(f"bad size {text!r}: allowed a number in ASCII digits with K, M or G (binary), e.g. 1536M")
    whole, frac, unit = m.group(1), m.group(2) or "", m.group(3).upper()
    scale = _UNITS[unit]
    numerator = int(whole + frac) * scale
    denominator = 10 ** len(frac)
    if numerator % denominator:
        raise PolicyError(f"size {text!r} is not a whole number of bytes")
    return numerator // denominator


def format_bytes(nbytes: int) -> str:
    """Bytes in the largest binary unit that divides them: 1610612736 -> '1536M'."""
    for unit in ("G", "M", "K"):
        if nbytes and nbytes % _UNITS[unit] == 0:
            return f"{nbytes // _UNITS[unit]}{unit}"
    return str(nbytes)


@dataclass(frozen=True)
class Budget:
    """``nbytes`` of node ``fast`` per rank for the state, filled latency-first; the rest on ``slow``."""

    nbytes: int
    fast: int
    slow: int

    def __str__(self) -> str:
        return f"budget:{format_bytes(self.nbytes)}:{self.fast}:{self.slow}"


@dataclass(frozen=True)
class Place:
    """A value of the ``place`` axis: per-kind policies (``kinds``, in ``TENSOR_KINDS`` order) or a
    DRAM budget (``budget``); exactly one of them."""

    kinds: tuple[tuple[str, Policy], ...] = ()
    budget: Budget | None = None

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> "Place":
        raw = text
        text = text.strip()
        if not text:
            raise PolicyError(f"empty place value: allowed {_GRAMMAR}")
        if text.startswith("budget:"):
            return cls(budget=cls._parse_budget(text, raw))
        named: dict[str, Policy] = {}
        for part in text.split("+"):
            kind, sep, policy_text = part.strip().partition(":")
            kind = kind.strip().lower()
            if not sep or kind not in TENSOR_KINDS:
                raise PolicyError(f"place {raw!r}: {part.strip()!r} is not KIND:POLICY with KIND one of "
                                  f"{', '.join(TENSOR_KINDS)}; allowed {_GRAMMAR}")
            if kind in named:
                raise PolicyError(f"place {raw!r} names {kind} twice: allowed each kind once")
            try:
                policy = Policy.parse(policy_text)
            except PolicyError as e:
                raise PolicyError(f"place {raw!r}, kind {kind}: {e}") from None
            if policy.kind not in PER_KIND_POLICIES:
                why = ("a kind left out gets the process policy" if policy.kind == "default" else
                       "its weights are system-wide, set for one whole-process policy")
                raise PolicyError(f"place {raw!r}, kind {kind}: policy {policy} is not a per-kind policy ({why}); "
                                  f"allowed {', '.join(PER_KIND_POLICIES)}")
            named[kind] = policy
        return cls(kinds=tuple((k, named[k]) for k in TENSOR_KINDS if k in named))

    @staticmethod
    def _parse_budget(text: str, raw: str) -> Budget:
        parts = text.split(":")
        if len(parts) != 4:
            raise PolicyError(f"place {raw!r}: write budget:SIZE:FAST:SLOW, e.g. budget:1536M:0:2 (1536 MiB of "
                              "node 0 per rank, the rest on node 2)")
        nbytes = parse_bytes(parts[1])
        try:
            fast, slow = integer(parts[2]), integer(parts[3])
        except ValueError:
            raise PolicyError(f"place {raw!r}: FAST and SLOW must be node numbers in ASCII digits") from None
        if fast < 0 or slow < 0 or fast == slow:
            raise PolicyError(f"place {raw!r}: FAST ({fast}) and SLOW ({slow}) must be two different nodes >= 0")
        return Budget(nbytes, fast, slow)

    # -- naming ---------------------------------------------------------------------------
    def __str__(self) -> str:
        if self.budget is not None:
            return str(self.budget)
        return "+".join(f"{k}:{p}" for k, p in self.kinds)

    @property
    def named(self) -> tuple[str, ...]:
        """The kinds a per-kind placement names (a budget plan places every kind the family holds)."""
        return tuple(k for k, _ in self.kinds)

    def policy_of(self, kind: str) -> Policy | None:
        """The policy of a named kind, None where the process policy places it."""
        return dict(self.kinds).get(kind)

    @property
    def nodes(self) -> tuple[int, ...]:
        if self.budget is not None:
            return (self.budget.fast, self.budget.slow)
        return tuple(sorted({n for _, p in self.kinds for n in p.nodes}))

    # -- against a machine ------------------------------------------------------------------
    def requirement_error(self, topology: "Topology") -> str | None:
        """Why this placement cannot run on ``topology`` (a skip reason), or None."""
        have = topology.memory_node_ids
        if self.budget is not None:
            missing = [n for n in (self.budget.fast, self.budget.slow) if n not in have]
            if missing:
                return (f"place {self} needs NUMA node(s) {','.join(map(str, missing))} with memory; this machine "
                        f"has {len(have)} such node(s): {','.join(map(str, have)) or 'none'}")
            return None
        for kind, policy in self.kinds:
            err = policy.requirement_error(topology)
            if err:
                return f"place {self}, kind {kind}: {err}"
        return None

    def resolve(self, topology: "Topology", own_node: int | None) -> "Place":
        """Concrete nodes for this machine and rank (``local``, ``interleave:all``)."""
        if self.budget is not None:
            return self
        return Place(kinds=tuple((k, p.resolve(topology, own_node)) for k, p in self.kinds))
