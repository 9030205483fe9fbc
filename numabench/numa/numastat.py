"""A process's resident memory per NUMA node, as ``numastat -p PID`` counts it.

numastat reads ``/proc/PID/numa_maps`` line by line: a mapping whose line has a word starting
with ``huge`` (a hugetlb mapping) counts as Huge, else ``heap`` as Heap, else ``stack`` as
Stack, else Private (anonymous memory, mmap'd and pinned buffers, file pages); each ``N<node>=``
count is pages of the mapping's page size. The fine-tuning study's logs print this table per
rank, so an entry that carries it reads as they do. Torch-free.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from numabench.numa.placement import NumaMapsEntry, read_numa_maps

CATEGORIES = ("huge", "heap", "stack", "private")  # numastat's rows, in its order


def category(entry: NumaMapsEntry) -> str:
    """numastat's category of one numa_maps line: the first word (in line order) that starts with
    huge, heap or stack decides; none: private."""
    for word in (entry.policy, *entry.attrs):
        for name in CATEGORIES[:3]:
            if word.startswith(name):
                return name
    return "private"


@dataclass(frozen=True)
class NodeMemory:
    """Bytes per node in each of numastat's categories (``by_category[category][node]``)."""

    by_category: dict[str, dict[int, int]]

    def total_by_node(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for nodes in self.by_category.values():
            for n, b in nodes.items():
                out[n] = out.get(n, 0) + b
        return dict(sorted(out.items()))

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(sorted({n for nodes in self.by_category.values() for n in nodes}))

    def to_dict(self) -> dict[str, Any]:
        return {c: {str(n): b for n, b in sorted(self.by_category.get(c, {}).items())} for c in CATEGORIES}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "NodeMemory":
        unknown = sorted(set(d) - set(CATEGORIES))
        if unknown:
            raise ValueError(f"node memory has unknown categories {unknown}: allowed {', '.join(CATEGORIES)}")
        return cls({c: {int(n): int(b) for n, b in (d.get(c) or {}).items()} for c in CATEGORIES})


def node_memory(pid: int | str = "self", entries: Iterable[NumaMapsEntry] | None = None) -> NodeMemory:
    """The process's memory per node and category (``entries``: parsed numa_maps lines instead of the
    process's own)."""
    out: dict[str, dict[int, int]] = {c: {} for c in CATEGORIES}
    for e in entries if entries is not None else read_numa_maps(pid):
        into = out[category(e)]
        for n, b in e.node_bytes.items():
            into[n] = into.get(n, 0) + b
    return NodeMemory(out)


def helper_memory(pid: int | str = "self") -> dict[int, int]:
    """Bytes per node of the private anonymous pages of ``pid``'s descendant processes (a library's
    helper, e.g. DeepSpeed ZenFlow's optimizer process, whose Adam moments live there): numastat -p
    of the rank alone misses them. Only mappings without a file and with no page mapped twice
    (``mapmax``) count, so memory a helper shares with the rank (shared tensors, pages a fork has
    not copied yet) is not counted twice. A helper that ends while it is read is skipped."""
    import psutil

    root = psutil.Process() if pid == "self" else psutil.Process(int(pid))
    out: dict[int, int] = {}
    for child in root.children(recursive=True):
        try:
            entries = read_numa_maps(child.pid)
        except OSError:  # gone, or not ours to read
            continue
        for e in entries:
            if "anon" not in e.attrs or "file" in e.attrs or int(e.attrs.get("mapmax", "1")) > 1:
                continue
            for n, b in e.node_bytes.items():
                out[n] = out.get(n, 0) + b
    return dict(sorted(out.items()))


def numastat_table(mem: NodeMemory, nodes: Iterable[int] | None = None) -> list[list[str]]:
    """numastat's table in MiB (its "MBs"), two decimals: a header row, then Huge, Heap, Stack,
    Private and Total, each with one column per node and a Total column."""
    cols = sorted(set(nodes or ()) | set(mem.nodes)) or [0]
    rows = [["", *[f"Node {n}" for n in cols], "Total"]]
    totals = [0] * (len(cols) + 1)
    for c in CATEGORIES:
        vals = [mem.by_category.get(c, {}).get(n, 0) for n in cols]
        vals.append(sum(vals))
        totals = [a + b for a, b in zip(totals, vals)]
        rows.append([c.capitalize(), *[f"{v / 2**20:.2f}" for v in vals]])
    rows.append(["Total", *[f"{v / 2**20:.2f}" for v in totals]])
    return rows
