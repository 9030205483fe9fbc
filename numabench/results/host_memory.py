"""Where a run's host memory sat, per NUMA node: each rank's process as ``numastat -p`` shows it
(``node_memory_per_rank``), and under the ``place`` axis each kind of its state (``placement[i]
["kinds"]``): the tables ``numabench report`` prints, so that a placement reads off the results
as the fine-tuning study's logs show it.

One worker run feeds several entries (phases, variants) with the same memory: each is shown once,
named by its first entry's case.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from numabench.numa.numastat import NodeMemory, numastat_table
from numabench.results import storage
from numabench.results.tables import entries


@dataclass
class RankMemory:
    family: str
    case: str  # the first entry's case id (its parameters without the phase)
    rank: int
    memory: NodeMemory | None
    kinds: list[dict] = field(default_factory=list)  # the rank's kinds under place (entry placement[i]["kinds"])


def _case_label(name: str, phase: str) -> str:
    inner = name[name.find("[") + 1:name.rfind("]")] if "[" in name else name
    return inner.removeprefix(f"{phase}-")


def memory_rows(run: str | Path | dict, family: str | None = None, where: dict | None = None) -> list[RankMemory]:
    """A row per rank of every worker run whose entries carry memory per node or kinds."""
    data = run if isinstance(run, dict) else storage.load_run(run)
    extra = {b.get("fullname", b.get("name", "")): b.get("extra_info") or {} for b in data["benchmarks"]}
    seen: set[str] = set()
    out = []
    for e in entries(data, where):
        x = extra.get(e.fullname, {})
        mems = x.get("node_memory_per_rank") or []
        placements = x.get("placement") or []
        kinds = [p.get("kinds") or [] for p in placements if isinstance(p, dict)]
        if (family and e.family != family) or not (mems or any(kinds)):
            continue
        key = json.dumps([e.family, mems, kinds], sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        for rank in range(max(len(mems), len(kinds))):
            mem = mems[rank] if rank < len(mems) else None
            out.append(RankMemory(e.family, _case_label(e.name, e.phase), rank,
                                  NodeMemory.from_dict(mem) if mem else None, kinds[rank] if rank < len(kinds) else []))
    return out


def _md(rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(r) + " |" for r in rows]


def numastat_markdown(rows: list[RankMemory]) -> str:
    """numastat's table for every rank, in one table (MiB; Huge, Heap, Stack, Private, Total by node)."""
    nodes = sorted({n for r in rows if r.memory for n in r.memory.nodes})
    out: list[str] = []
    for r in rows:
        if r.memory is None:
            continue
        table = numastat_table(r.memory, nodes)
        if not out:
            out = _md([["family", "case", "rank", "MiB", *table[0][1:]]])
            out.append("|---|---|---:|---|" + "---:|" * (len(table[0]) - 1))
        for i, row in enumerate(table[1:]):
            first = [r.family, f"`{r.case}`", str(r.rank)] if i == 0 else ["", "", ""]
            out += _md([first + row])
    return "\n".join(out)


def kinds_markdown(rows: list[RankMemory]) -> str:
    """One line per rank and kind under place: its policy, planned MiB, MiB per node, the verdict."""
    nodes = sorted({int(n) for r in rows for k in r.kinds for n in k.get("bytes_by_node", {})})
    head = ["family", "case", "rank", "kind", "policy", "planned MiB", *[f"node {n} MiB" for n in nodes], "check"]
    out = _md([head]) + ["|" + "---|" * 5 + "---:|" * (1 + len(nodes)) + "---|"]
    for r in rows:
        for k in r.kinds:
            by = {int(n): b for n, b in k.get("bytes_by_node", {}).items()}
            check = "-" if "ok" not in k else ("ok" if k["ok"] else "FAILED") + f" ({k.get('deviation_pp', 0):g} pp)"
            out += _md([[r.family, f"`{r.case}`", str(r.rank), k["kind"], k["policy"], f"{k['planned_bytes'] / 2**20:.2f}",
                         *[f"{by.get(n, 0) / 2**20:.2f}" for n in nodes], check]])
    return "\n".join(out)
