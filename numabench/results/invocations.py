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

import statistics
from typing import Any, Iterable, Sequence

INVOCATION_MEDIANS = "invocation_medians_s"
INVOCATION_SOURCES = "invocation_sources"  # one label per invocation: which run (machine, date) it came from


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


def medians_of(invocations: Sequence[Sequence[float]]) -> list[float]:
    """Median of each invocation's rounds."""
    if not invocations or any(not rounds for rounds in invocations):
        raise ValueError("every invocation needs at least one round")
    return [statistics.median(rounds) for rounds in invocations]


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


def pool(entries: Iterable[dict[str, Any]], sources: Iterable[str]) -> dict[str, Any]:
    """One entry holding every invocation of ``entries`` (the same benchmark from several
    runs of one hardware key): rounds pooled into ``stats``, invocation medians listed with
    the run each came from. The newest entry's other fields are kept."""
    entries = list(entries)
    sources = list(sources)
    if not entries or len(entries) != len(sources):
        raise ValueError("pool needs one source label per entry")
    data: list[float] = []
    medians: list[float] = []
    labels: list[str] = []
    for entry, source in zip(entries, sources):
        meds = invocation_medians(entry)
        if not meds:
            raise ValueError(f"{entry.get('fullname')}: no median to pool")
        old = (entry.get("extra_info") or {}).get(INVOCATION_SOURCES)
        labels += list(old) if isinstance(old, list) and len(old) == len(meds) else [source] * len(meds)
        medians += meds
        data += list((entry.get("stats") or {}).get("data") or [])
    out = dict(entries[-1])
    out["extra_info"] = {**(entries[-1].get("extra_info") or {}), INVOCATION_MEDIANS: medians,
                         INVOCATION_SOURCES: labels}
    if data:
        out["stats"] = stats_of(data)
    return out
