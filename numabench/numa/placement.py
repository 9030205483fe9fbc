"""Did the pages land where the policy says? Count them and compare.

Two sources: ``/proc/<pid>/numa_maps`` (per mapping, whole process or the
mappings inside address ranges) and ``move_pages(2)`` with nodes=NULL (per
page, exact for a range). Pages must be touched before counting: an untouched
page has no node. The policy field in numa_maps shows the *mapping's* policy
(often ``default`` for memory placed by the task policy), so placement is
judged by the N<node>= counts, never by that field.
"""
from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from numabench.errors import PlacementError
from numabench.machine.hugepages import huge_page_bytes
from numabench.numa.mempolicy import page_nodes

TOLERANCE_PP = 2.0

# Policy names that contain a space in numa_maps.
_TWO_WORD = ("weighted interleave", "prefer (many)")
_NODE_COUNT = re.compile(r"^N(\d+)=(\d+)$")


@dataclass(frozen=True)
class NumaMapsEntry:
    address: int
    policy: str
    node_pages: dict[int, int]
    page_kb: int
    attrs: dict[str, str] = field(default_factory=dict)

    @property
    def node_bytes(self) -> dict[int, int]:
        return {n: c * self.page_kb * 1024 for n, c in self.node_pages.items()}


def parse_numa_maps_line(line: str) -> NumaMapsEntry:
    addr_s, _, rest = line.strip().partition(" ")
    policy = ""
    for two in _TWO_WORD:
        if rest.startswith(two):
            end = rest.find(" ", len(two))
            policy, rest = (rest, "") if end < 0 else (rest[:end], rest[end + 1:])
            break
    else:
        policy, _, rest = rest.partition(" ")
    nodes: dict[int, int] = {}
    attrs: dict[str, str] = {}
    page_kb = 4
    for tok in rest.split():
        m = _NODE_COUNT.match(tok)
        if m:
            nodes[int(m.group(1))] = int(m.group(2))
            continue
        key, eq, val = tok.partition("=")
        if key == "kernelpagesize_kB":
            page_kb = int(val)
        attrs[key] = val if eq else ""
    return NumaMapsEntry(address=int(addr_s, 16), policy=policy, node_pages=nodes, page_kb=page_kb, attrs=attrs)


def parse_numa_maps(text: str) -> list[NumaMapsEntry]:
    return [parse_numa_maps_line(l) for l in text.splitlines() if l.strip()]


@dataclass
class PlacementReport:
    """Bytes per node (plus untouched bytes) for some memory."""

    bytes_by_node: dict[int, int]
    untouched_bytes: int = 0
    source: str = ""
    # of them in transparent huge pages (None: not known): a suspect of the spread between fresh
    # workers' buffers (docs/GATE.md), recorded per pair by numabench ab
    huge_bytes: int | None = None

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_by_node.values())

    def fractions(self) -> dict[int, float]:
        total = self.total_bytes
        return {n: b / total for n, b in sorted(self.bytes_by_node.items())} if total else {}

    def merge(self, other: "PlacementReport") -> "PlacementReport":
        out = dict(self.bytes_by_node)
        for n, b in other.bytes_by_node.items():
            out[n] = out.get(n, 0) + b
        huge = None if self.huge_bytes is None or other.huge_bytes is None else self.huge_bytes + other.huge_bytes
        return PlacementReport(out, self.untouched_bytes + other.untouched_bytes, self.source or other.source, huge)

    def huge_share(self) -> float | None:
        """The share of its bytes in transparent huge pages (None: not known, or no bytes)."""
        total = self.total_bytes + self.untouched_bytes
        return None if self.huge_bytes is None or not total else self.huge_bytes / total

    def describe(self) -> str:
        fr = self.fractions()
        parts = [f"N{n}={fr[n] * 100:.1f}%" for n in fr]
        mib = self.total_bytes / 2**20
        text = " ".join(parts) + f" of {mib:.1f} MiB"
        if self.untouched_bytes:
            text += f" ({self.untouched_bytes / 2**20:.1f} MiB untouched)"
        return text

    def to_dict(self) -> dict:
        return {"bytes_by_node": {str(k): v for k, v in sorted(self.bytes_by_node.items())},
                "untouched_bytes": self.untouched_bytes, "source": self.source,
                "percent_by_node": {str(k): round(v * 100, 3) for k, v in self.fractions().items()},
                **({"huge_bytes": self.huge_bytes} if self.huge_bytes is not None else {})}

    @classmethod
    def from_dict(cls, d: Mapping) -> "PlacementReport":
        huge = d.get("huge_bytes")
        return cls({int(k): int(v) for k, v in d["bytes_by_node"].items()}, int(d.get("untouched_bytes", 0)),
                   d.get("source", ""), None if huge is None else int(huge))


@dataclass(frozen=True)
class Expectation:
    """What a policy promises: per-node shares, or only that every page is within a set."""

    shares: dict[int, float] | None = None
    within: tuple[int, ...] | None = None

    def describe(self) -> str:
        if self.shares is not None:
            return " ".join(f"N{n}={s * 100:.1f}%" for n, s in sorted(self.shares.items()))
        assert self.within is not None
        return "100% on node" + ("s " if len(self.within) > 1 else " ") + ",".join(map(str, self.within))


@dataclass(frozen=True)
class Verdict:
    ok: bool
    deviation_pp: float  # worst miss, in percentage points
    message: str


def compare(report: PlacementReport, expected: Expectation, tolerance_pp: float = TOLERANCE_PP) -> Verdict:
    """Judge a report against what the policy promised."""
    fr = report.fractions()
    if not fr:
        return Verdict(False, 100.0, "no touched pages found to check")
    if expected.shares is not None:
        nodes = set(fr) | set(expected.shares)
        dev = max(abs(fr.get(n, 0.0) - expected.shares.get(n, 0.0)) * 100 for n in nodes)
    else:
        assert expected.within is not None
        dev = (1.0 - sum(fr.get(n, 0.0) for n in expected.within)) * 100
    ok = dev <= tolerance_pp + 1e-9  # float noise must not fail an exact 2.00 pp miss
    msg = (f"placement {report.describe()}; expected {expected.describe()}; "
           f"off by {dev:.2f} percentage points (tolerance {tolerance_pp:g})")
    return Verdict(ok, dev, msg)


def require(report: PlacementReport, expected: Expectation, tolerance_pp: float = TOLERANCE_PP) -> Verdict:
    verdict = compare(report, expected, tolerance_pp)
    if not verdict.ok:
        raise PlacementError(verdict.message)
    return verdict


def read_numa_maps(pid: int | str = "self") -> list[NumaMapsEntry]:
    with open(f"/proc/{pid}/numa_maps") as f:
        return parse_numa_maps(f.read())


def numa_maps_report(pid: int | str = "self", ranges: Sequence[tuple[int, int]] | None = None,
                     entries: Iterable[NumaMapsEntry] | None = None) -> PlacementReport:
    """Pages per node of the whole process, or of the mappings that start inside ``ranges``
    ((address, length) pairs); buffers that are their own mapping (big pinned or
    mmap'd allocations) are counted exactly this way."""
    totals: dict[int, int] = {}
    for e in entries if entries is not None else read_numa_maps(pid):
        if ranges is not None and not any(a <= e.address < a + n for a, n in ranges):
            continue
        for node, b in e.node_bytes.items():
            totals[node] = totals.get(node, 0) + b
    return PlacementReport(totals, source=f"/proc/{pid}/numa_maps")


def pinned_report(entries: Iterable[NumaMapsEntry], is_pinned: Callable[[int], bool]) -> PlacementReport:
    """Pages per node of the mappings whose first byte ``is_pinned`` says is page-locked for the GPU
    (CUDA's pinned allocations and registered buffers are each their own mapping): the pinned
    share of what ``numa_maps_report`` (numastat -p's total) counts."""
    totals: dict[int, int] = {}
    for e in entries:
        if e.node_pages and is_pinned(e.address):
            for node, b in e.node_bytes.items():
                totals[node] = totals.get(node, 0) + b
    return PlacementReport(totals, source="/proc/self/numa_maps, pinned mappings")


def pages_report(ranges: Sequence[tuple[int, int]]) -> PlacementReport:
    """Exact per-page count of this process's ranges through move_pages."""
    page = os.sysconf("SC_PAGE_SIZE")
    totals: dict[int, int] = {}
    untouched = 0
    for address, length in ranges:
        for status, pages in Counter(page_nodes(address, length)).items():  # counted in C, not page by page
            if status >= 0:
                totals[status] = totals.get(status, 0) + pages * page
            else:
                untouched += pages * page
    return PlacementReport(dict(sorted(totals.items())), untouched, source="move_pages",
                           huge_bytes=huge_page_bytes(ranges))
