"""Invocations: the unit of noise that a regression gate must judge by.

Rounds of one run share the worker processes, the placed buffers and the
machine's state at that moment, so they are not independent samples. An
*invocation* is one run of a case with fresh worker processes and fresh
buffers. A benchmark entry keeps its invocations' medians in
``extra_info["invocation_medians_s"]`` (pytest-benchmark's JSON, so upstream
tools still read the file) beside the pooled rounds in ``stats.data``.

Entries saved before invocations were recorded count as one invocation whose
median is ``stats.median``. Entries imported from the seed benchmark's CSV
hold a mean only (``extra_info["stats_from"] == "mean only"``): no median, no
invocation, nothing to judge.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

INVOCATION_MEDIANS = "invocation_medians_s"
INVOCATION_SOURCES = "invocation_sources"  # one label per invocation: which run (machine, date) it came from
# one label per invocation: the machine that measured it (numabench.machine.instance), None unknown
INVOCATION_MACHINES = "invocation_machines"


def invocation_medians(bench: dict[str, Any]) -> list[float]:
    """The entry's per-invocation medians (seconds); one value for entries saved without them."""
    extra = bench.get("extra_info") or {}
    if extra.get("stats_from") == "mean only":
        return []
    meds = extra.get(INVOCATION_MEDIANS)
    if isinstance(meds, list) and meds and all(isinstance(v, (int, float)) and v > 0 for v in meds):
        return [float(v) for v in meds]
    median = (bench.get("stats") or {}).get("median")
    return [float(median)] if isinstance(median, (int, float)) and median > 0 else []


def invocation_machines(bench: dict[str, Any], run_machine: str | None = None) -> list[str | None]:
    """Which machine measured each of the entry's invocations: its own list where it keeps one,
    else ``run_machine`` (the machine of the run it is read from) for every invocation."""
    n = len(invocation_medians(bench))
    own = (bench.get("extra_info") or {}).get(INVOCATION_MACHINES)
    if isinstance(own, list) and len(own) == n:
        return [m if isinstance(m, str) and m else None for m in own]
    return [run_machine] * n


def run_machine(run: dict[str, Any]) -> str | None:
    """The machine a saved run was measured on (machine_info.numabench.machine_instance)."""
    value = ((run.get("machine_info") or {}).get("numabench") or {}).get("machine_instance")
    return value if isinstance(value, str) and value else None


def stats_of(data: Sequence[float]) -> dict[str, Any]:
    """pytest-benchmark's stats block for these durations (one iteration per round), with the data."""
    from pytest_benchmark.stats import Stats

    if not data:
        raise ValueError("no durations")
    st = Stats()
    for value in data:
        st.update(value)
    out = st.as_dict()
    out["iterations"] = 1
    out["data"] = list(data)
    return out


def invocation_labels(bench: dict[str, Any], source: str) -> list[str]:
    """Which run each invocation came from: the entry's own labels where it keeps them (it was
    pooled before), else ``source`` for every invocation."""
    n = len(invocation_medians(bench))
    old = (bench.get("extra_info") or {}).get(INVOCATION_SOURCES)
    return list(old) if isinstance(old, list) and len(old) == n else [source] * n


def pool(entries: Iterable[dict[str, Any]], sources: Iterable[str],
         machines: Iterable[str | None] | None = None) -> dict[str, Any]:
    """One entry holding every invocation of ``entries`` (the same benchmark from several
    runs of one hardware key): rounds pooled into ``stats``, invocation medians listed with
    the run and the machine each came from (``machines``: the machine of each entry's run,
    for entries that do not list their own). The newest entry's other fields are kept."""
    entries = list(entries)
    sources = list(sources)
    machines = list(machines) if machines is not None else [None] * len(entries)
    if not entries or len(entries) != len(sources) or len(machines) != len(entries):
        raise ValueError("pool needs one source label and one machine (or None) per entry")
    data: list[float] = []
    medians: list[float] = []
    labels: list[str] = []
    hosts: list[str | None] = []
    for entry, source, machine in zip(entries, sources, machines):
        meds = invocation_medians(entry)
        if not meds:
            raise ValueError(f"{entry.get('fullname')}: no median to pool")
        labels += invocation_labels(entry, source)
        hosts += invocation_machines(entry, machine)
        medians += meds
        data += list((entry.get("stats") or {}).get("data") or [])
    out = dict(entries[-1])
    out["extra_info"] = {**(entries[-1].get("extra_info") or {}), INVOCATION_MEDIANS: medians,
                         INVOCATION_SOURCES: labels, INVOCATION_MACHINES: hosts}
    if data:
        out["stats"] = stats_of(data)
    return out
