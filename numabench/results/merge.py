"""Merge saved runs into one baseline file.

pytest-benchmark's ``--benchmark-compare`` (no argument) compares against the
newest run in the storage folder only. A GPU machine lent for minutes at a time
measures one family per call, so each hardware key's baseline is put together
from several runs: ``merge_runs`` joins their benchmarks by ``fullname`` into
one run that compares like a single saved session, and records where every
entry came from. An entry that several runs measured is *pooled*: its
invocations from every run (and so from every machine of the hardware key)
widen the band that the gate judges by (numabench.gate.invocations.pool). With
``replace`` a later run's entry replaces an earlier one's instead (a baseline
re-measured after an accepted change).

Runs from different hardware are refused (a baseline mixes one machine's
numbers only), as are runs without per-round data when ``require_data`` is set
(compare tests on ``stats.data``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from numabench.errors import UsageError
from numabench.machine.hwkey import run_hardware_key
from numabench.results import storage
from numabench.gate.invocations import (
    INVOCATION_MACHINES,
    INVOCATION_SOURCES,
    invocation_labels,
    invocation_machines,
    invocation_medians,
    pool,
    run_machine,
)
from numabench.results.storage import publish


@dataclass
class MergeResult:
    run: dict
    again: list[str] = field(default_factory=list)  # fullnames that several runs measured (pooled or replaced)


def merge_runs(paths: Sequence[str | Path], *, allow_foreign: bool = False, require_data: bool = True,
               replace: bool = False) -> MergeResult:
    """One run holding every benchmark of ``paths`` (in order): an entry in several runs pooled,
    or with ``replace`` the last run's kept."""
    if not paths:
        raise UsageError("merge needs at least one run file")
    return merge_loaded([(Path(p).name, storage.load_run(p)) for p in paths], allow_foreign=allow_foreign,
                        require_data=require_data, replace=replace)


def merge_loaded(runs: Sequence[tuple[str, dict]], *, allow_foreign: bool = False, require_data: bool = True,
                 replace: bool = False) -> MergeResult:
    """``merge_runs`` of runs already loaded, each named (a file name, a run id of a shared index)."""
    if not runs:
        raise UsageError("merge needs at least one run")
    keys = {name: run_hardware_key(r) for name, r in runs}
    if not allow_foreign and len(set(keys.values())) > 1:
        listing = ", ".join(f"{name}: {key}" for name, key in keys.items())
        raise UsageError(f"runs from different hardware ({listing}): a baseline holds one machine's numbers "
                         "(pass --allow-foreign to merge anyway)")
    measured: dict[str, list[tuple[dict, str, str | None]]] = {}
    sources = []
    for source, run in runs:
        label = f"{source} ({(run.get('machine_info') or {}).get('node', '?')}, {run.get('datetime', '?')})"
        machine = run_machine(run)
        for b in run["benchmarks"]:
            name = b.get("fullname") or b.get("name")
            if not name:
                raise UsageError(f"run {source} has a benchmark without 'fullname' or 'name'")
            if require_data and not (b.get("stats") or {}).get("data"):
                raise UsageError(f"run {source}: {name} has no per-round data (save runs with "
                                 "--benchmark-save-data; compare tests on it)")
            measured.setdefault(name, []).append((b, label, machine))
        entry = {"file": source, "datetime": run.get("datetime"),
                 "commit": (run.get("commit_info") or {}).get("id"), "benchmarks": len(run["benchmarks"])}
        if run.get("numabench_merged_from"):  # a merged baseline merged again keeps where its entries came from
            entry["merged_from"] = run["numabench_merged_from"]
        sources.append(entry)
    newest = runs[-1][1]
    out = {k: v for k, v in newest.items() if k != "benchmarks"}
    merged = [_without_verdict(_joined(entries[-1:] if replace else entries)) for entries in measured.values()]
    out["benchmarks"] = sorted(merged, key=lambda b: b.get("fullname") or b.get("name"))
    out["numabench_merged_from"] = sources
    return MergeResult(out, sorted(n for n, entries in measured.items() if len(entries) > 1))


def _joined(entries: list[tuple[dict, str, str | None]]) -> dict:
    """One entry from the (entry, source label, machine) of each run that measured it: pooled where
    several did; one run's entry as it is, labelled with its run and machine where it has medians
    (the merged file's machine_info is the newest run's, so the entry must say its own)."""
    if len(entries) > 1:
        return pool([b for b, _, _ in entries], [s for _, s, _ in entries], [m for _, _, m in entries])
    bench, source, machine = entries[0]
    if not invocation_medians(bench):
        return bench
    return {**bench, "extra_info": {**(bench.get("extra_info") or {}),
                                    INVOCATION_SOURCES: invocation_labels(bench, source),
                                    INVOCATION_MACHINES: invocation_machines(bench, machine)}}


def _without_verdict(entry: dict) -> dict:
    """A baseline entry holds measurements; the gate's verdict on the run it came from
    (extra_info["gate"]) judged that run, not the baseline, and is dropped."""
    extra = entry.get("extra_info") or {}
    if "gate" not in extra:
        return entry
    return {**entry, "extra_info": {k: v for k, v in extra.items() if k != "gate"}}


def write_run(run: dict, path: str | Path) -> Path:
    """Write ``run`` to a new file ``path`` atomically; an existing file is an error, not overwritten."""
    path = Path(path)
    if not path.parent.is_dir():
        raise UsageError(f"folder {path.parent} does not exist")
    if not publish(path, json.dumps(run, indent=4, ensure_ascii=True).encode()):
        raise UsageError(f"{path} exists: choose a new name (runs are never overwritten)")
    return path
