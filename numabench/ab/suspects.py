"""What moves with a pair, set beside its ratio: a suspect of an entry's between-pair spread
(numabench.ab.noise) read from a kept session (numabench ab --session-json), measuring nothing.

Each pair's fresh workers place fresh buffers. The share of them in transparent huge pages
(``invocation_huge_shares``, per side and pair: numabench.numa.placement) may differ from pair to
pair and between the sides, and a copy or step over 4 KiB pages walks more page tables than one
over 2 MiB pages. Where the head's share minus the base's moves with the pair's log ratio
(Pearson's r over the pairs), the pages explain that part of the spread; where the shares never
differ, they explain none of it.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from numabench.gate.formats import format_table
from numabench.gate.pairs import MIN_PAIRS, quad_ratio


@dataclass(frozen=True)
class HugePageLink:
    """One entry's pairs: each side's huge-page share and the pair's ratio (quad ratio of its rounds)."""
    name: str
    head_shares: tuple[float, ...]
    base_shares: tuple[float, ...]
    ratios: tuple[float, ...]

    @property
    def correlation(self) -> float | None:
        """Pearson's r of the pairs' log ratios with head minus base share (None: either is constant)."""
        diffs = [h - b for h, b in zip(self.head_shares, self.base_shares)]
        logs = [math.log(r) for r in self.ratios]
        if len(diffs) < MIN_PAIRS + 1 or statistics.pstdev(diffs) == 0 or statistics.pstdev(logs) == 0:
            return None
        return statistics.correlation(diffs, logs)


def huge_page_links(run: Mapping[str, Any]) -> list[HugePageLink]:
    """Every entry of a kept session whose pairs recorded both sides' huge-page shares and rounds."""
    out = []
    for bench in run.get("benchmarks") or []:
        extra = bench.get("extra_info") or {}
        ab = extra.get("ab_base") or {}
        head, base = extra.get("invocation_huge_shares"), ab.get("invocation_huge_shares")
        base_rounds, head_rounds = ab.get("invocation_rounds_s"), ab.get("head_invocation_rounds_s")
        lists = (head, base, base_rounds, head_rounds)
        if not all(isinstance(x, list) for x in lists) or len({len(x) for x in lists}) != 1 or len(head) < MIN_PAIRS:
            continue
        if any(s is None for s in (*head, *base)):
            continue
        out.append(HugePageLink(str(bench.get("fullname") or bench.get("name")), tuple(head), tuple(base),
                                tuple(quad_ratio(b, h) for b, h in zip(base_rounds, head_rounds))))
    return out


def link_table(links: Sequence[HugePageLink]) -> list[str]:
    """Each entry's shares (lowest-highest over its pairs) and r, as text lines."""
    def span(values: Sequence[float]) -> str:
        return f"{min(values) * 100:.1f}-{max(values) * 100:.1f}"

    rows = [[link.name.split("::")[-1], str(len(link.ratios)), span(link.head_shares), span(link.base_shares),
             span([h - b for h, b in zip(link.head_shares, link.base_shares)]),
             "-" if link.correlation is None else f"{link.correlation:+.2f}"] for link in links]
    return format_table(["entry", "pairs", "head huge %", "base huge %", "head - base pp", "r with log ratio"], rows)
