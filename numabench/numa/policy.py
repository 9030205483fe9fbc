"""How a NUMA policy is described: parse, validate against a topology, name.

Grammar (the string is also the pytest id, so ``-k weighted`` selects weighted
cases and ``-k interleave`` plain interleave ones)::

    default                 the kernel's default (local allocation, wherever the CPU runs)
    local                   bind to the rank's own node (its GPU's node; for CPU ranks, its CPU node)
    bind:N[,M...]           MPOL_BIND to the set
    preferred:N             MPOL_PREFERRED, falls back elsewhere when N is full
    preferred-many:N,M...   MPOL_PREFERRED_MANY (Linux >= 5.15)
    interleave:N,M...|all   MPOL_INTERLEAVE, equal shares
    weighted:N=W,M=W...     MPOL_WEIGHTED_INTERLEAVE with sysfs weights W in 1..255 (Linux >= 6.9)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from numabench.errors import PolicyError, UsageError
from numabench.machine.nodelist import parse_list
from numabench.numa import mempolicy
from numabench.numerals import integer
from numabench.numa.placement import Expectation

if TYPE_CHECKING:
    from numabench.machine.topology import Topology

KINDS = ("default", "local", "bind", "preferred", "preferred-many", "interleave", "weighted")
MAX_NODE = 1023  # Linux has at most 1024 NUMA nodes (NODES_SHIFT <= 10)
_ALLOWED = "default, local, bind:N[,M], preferred:N, preferred-many:N,M, interleave:N,M|all, weighted:N=W,M=W"

_MODE = {
    "default": mempolicy.MPOL_DEFAULT,
    "local": mempolicy.MPOL_BIND,
    "bind": mempolicy.MPOL_BIND,
    "preferred": mempolicy.MPOL_PREFERRED,
    "preferred-many": mempolicy.MPOL_PREFERRED_MANY,
    "interleave": mempolicy.MPOL_INTERLEAVE,
    "weighted": mempolicy.MPOL_WEIGHTED_INTERLEAVE,
}


@dataclass(frozen=True)
class Policy:
    kind: str
    nodes: tuple[int, ...] = ()
    weights: tuple[int, ...] = ()  # weighted only, aligned with nodes
    all_nodes: bool = False  # interleave:all, resolved against a topology

    # -- construction --------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> "Policy":
        raw = text
        text = text.strip()
        kind, sep, arg = text.partition(":")
        kind = kind.strip().lower()
        if kind not in KINDS:
            raise PolicyError(f"unknown policy kind {kind!r} in {raw!r}: allowed {_ALLOWED}")
        if kind in ("default", "local"):
            if sep:
                raise PolicyError(f"policy {kind!r} takes no nodes, got {raw!r}")
            return cls(kind)
        if not arg.strip():
            raise PolicyError(f"policy {kind!r} needs nodes after ':', got {raw!r}: allowed {_ALLOWED}")
        if kind == "weighted":
            return cls._parse_weighted(arg, raw)
        if kind == "interleave" and arg.strip() == "all":
            return cls(kind, all_nodes=True)
        try:
            nodes = parse_list(arg, "node", unique=True, most=MAX_NODE)
        except UsageError as e:
            raise PolicyError(f"policy {raw!r}: {e}") from None
        if not nodes:
            raise PolicyError(f"policy {kind!r} needs at least one node, got {raw!r}")
        if kind == "preferred" and len(nodes) != 1:
            raise PolicyError(f"preferred takes exactly one node, got {arg!r} in {raw!r}; "
                              "use preferred-many:N,M for several")
        return cls(kind, nodes)

    @classmethod
    def _parse_weighted(cls, arg: str, raw: str) -> "Policy":
        pairs = []
        for part in arg.split(","):
            node_s, eq, w_s = part.strip().partition("=")
            if not eq:
                raise PolicyError(f"weighted entry {part!r} in {raw!r} lacks '=W': write weighted:N=W,M=W")
            try:
                node, w = integer(node_s), integer(w_s)
            except ValueError:
                raise PolicyError(f"weighted entry {part!r} in {raw!r} is not NODE=WEIGHT with integers "
                                  "(ASCII digits 0-9)") from None
            if not 0 <= node <= MAX_NODE:
                raise PolicyError(f"node {node} in {raw!r}: allowed nodes 0 to {MAX_NODE}")
            if not 1 <= w <= 255:
                raise PolicyError(f"weight {w} for node {node} in {raw!r} is out of range: allowed 1..255")
            pairs.append((node, w))
        nodes = [n for n, _ in pairs]
        dup = sorted({n for n in nodes if nodes.count(n) > 1})
        if dup:
            raise PolicyError(f"node {','.join(map(str, dup))} listed twice in {raw!r}: give each node one weight")
        pairs.sort()
        return cls("weighted", tuple(n for n, _ in pairs), tuple(w for _, w in pairs))

    # -- naming --------------------------------------------------------------
    def __str__(self) -> str:
        if self.kind in ("default", "local"):
            return self.kind
        if self.kind == "weighted":
            return "weighted:" + ",".join(f"{n}={w}" for n, w in zip(self.nodes, self.weights))
        if self.all_nodes:
            return f"{self.kind}:all"
        return f"{self.kind}:" + ",".join(map(str, self.nodes))

    @property
    def id(self) -> str:
        """Stable pytest id: the canonical string."""
        return str(self)

    @property
    def mode(self) -> int:
        return _MODE[self.kind]

    @property
    def weight_map(self) -> dict[int, int]:
        return dict(zip(self.nodes, self.weights))

    # -- against a machine ---------------------------------------------------
    def requirement_error(self, topology: "Topology") -> str | None:
        """Why this policy cannot run on ``topology`` (a skip reason), or None."""
        if self.kind in ("default", "local") or self.all_nodes:
            return None
        have = topology.memory_node_ids
        missing = [n for n in self.nodes if n not in have]
        if missing:
            return (f"policy {self} needs NUMA node(s) {','.join(map(str, missing))} with memory; "
                    f"this machine has {len(have)} such node(s): {','.join(map(str, have)) or 'none'}")
        return None

    def validate(self, topology: "Topology") -> None:
        err = self.requirement_error(topology)
        if err:
            raise PolicyError(err)

    def resolve(self, topology: "Topology", own_node: int | None) -> "Policy":
        """Concrete nodes for this machine and rank: ``local`` -> bind to ``own_node``, ``all`` -> nodes."""
        if self.kind == "local":
            if own_node is None:
                raise PolicyError("policy 'local' needs the rank's NUMA node, which is unknown on this machine "
                                  "(the GPU's sysfs numa_node is -1 and there are several nodes)")
            return Policy("bind", (own_node,))
        if self.all_nodes:
            return Policy(self.kind, topology.memory_node_ids)
        self.validate(topology)
        return self

    def expectation(self, cpu_node: int | None = None) -> "Expectation | None":
        """Where the pages of a resolved policy must land; None where nothing is promised.

        ``default`` promises the CPU's node when the rank is bound to one;
        bind and preferred-many promise only the set; interleave equal shares;
        weighted shares by weight (the kernel interleaves page by page).
        """
        if self.kind == "local" or self.all_nodes:
            raise PolicyError(f"policy {self} must be resolved against a topology first")
        if self.kind == "default":
            return Expectation(within=(cpu_node,)) if cpu_node is not None else None
        if self.kind in ("bind", "preferred", "preferred-many"):
            return Expectation(within=self.nodes)
        if self.kind == "interleave":
            return Expectation(shares={n: 1.0 / len(self.nodes) for n in self.nodes})
        total = sum(self.weights)
        return Expectation(shares={n: w / total for n, w in zip(self.nodes, self.weights)})


def parse_policies(text: str) -> list[Policy]:
    """A ';'-separated list (policies contain commas): 'bind:0;interleave:0,1'."""
    items = [s.strip() for s in text.split(";")]
    if not any(items):
        raise PolicyError(f"empty policy list {text!r}: write e.g. 'default;bind:0;interleave:all'")
    if not all(items):
        raise PolicyError(f"empty entry in policies {text!r}: write e.g. 'default;bind:0;interleave:all'")
    policies = [Policy.parse(t) for t in items]
    twice = sorted({str(p) for p in policies if [str(q) for q in policies].count(str(p)) > 1})
    if twice:  # each would run and be saved twice, as ids no baseline matches
        raise PolicyError(f"policy {', '.join(twice)} named twice in {text!r}: allowed each once")
    return policies
