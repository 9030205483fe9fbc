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
(compare tests on ``stats.data``), and, unless ``allow_duplicates``, two runs that
hold the same run (a file named twice, a copy, a merged run and one it was merged
from): pooled, its invocations would count twice and the band look steadier than
the machine is. ``write_run`` writes the result whole or not at all (numabench.atomic).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from numabench.atomic import write_file
from numabench.errors import UsageError
from numabench.machine.hwkey import run_hardware_key
from numabench.results import memory_outcomes, storage
from numabench.gate.invocations import (
    INVOCATION_MACHINES,
    INVOCATION_SOURCES,
    invocation_labels,
    invocation_machines,
    invocation_medians,
    pool,
    run_machine,
)


@dataclass
class MergeResult:
    run: dict
    again: list[str] = field(default_factory=list)  # fullnames that several runs measured (pooled or replaced)


def merge_runs(paths: Sequence[str | Path], *, allow_foreign: bool = False, require_data: bool = True,
               replace: bool = False, allow_duplicates: bool = False) -> MergeResult:
    """One run holding every benchmark of ``paths`` (in order): an entry in several runs pooled,
    or with ``replace`` the last run's kept. A run given twice to pool (or inside a merged run
    given too) is refused unless ``allow_duplicates``."""
    if not paths:
        raise UsageError("merge needs at least one run file")
    return merge_loaded([(Path(p).name, storage.load_run(p)) for p in paths], allow_foreign=allow_foreign,
                        require_data=require_data, replace=replace, allow_duplicates=allow_duplicates)


def merge_loaded(runs: Sequence[tuple[str, dict]], *, allow_foreign: bool = False, require_data: bool = True,
                 replace: bool = False, allow_duplicates: bool = False) -> MergeResult:
    """``merge_runs`` of runs already loaded, each named (a file name, a run id of a shared index)."""
    if not runs:
        raise UsageError("merge needs at least one run")
    if not allow_duplicates and not replace:  # replaced, an entry is kept once: nothing counts twice
        check_distinct(runs)
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
    merged = [_without_verdict(_joined(name, entries[-1:] if replace else entries))
              for name, entries in measured.items()]
    out["benchmarks"] = sorted(merged, key=lambda b: b.get("fullname") or b.get("name"))
    out["numabench_merged_from"] = sources
    memory = memory_outcomes.combined([r for _, r in runs])  # every run's out-of-memory records, not the newest's alone
    if memory is not None:
        out[memory_outcomes.KEY] = memory
    return MergeResult(out, sorted(n for n, entries in measured.items() if len(entries) > 1))


def _joined(name: str, entries: list[tuple[dict, str, str | None]]) -> dict:
    """One entry from the (entry, source label, machine) of each run that measured it: pooled where
    several did; one run's entry as it is, labelled with its run and machine where it has medians
    (the merged file's machine_info is the newest run's, so the entry must say its own)."""
    if len(entries) > 1:
        for b, source, _ in entries:
            if not invocation_medians(b):
                raise UsageError(f"run {source}: {name} holds no median to pool (a mean-only import): allowed "
                                 "--replace (the last run's entry kept) or runs with medians")
        return pool([b for b, _, _ in entries], [s for _, s, _ in entries], [m for _, _, m in entries])
    bench, source, machine = entries[0]
    if not invocation_medians(bench):
        return bench
    return {**bench, "extra_info": {**(bench.get("extra_info") or {}),
                                    INVOCATION_SOURCES: invocation_labels(bench, source),
                                    INVOCATION_MACHINES: invocation_machines(bench, machine)}}


def _run_sources(name: str, run: dict) -> set[tuple]:
    """What ``run``'s invocations came from: each run merged into it (by file name, time and
    commit, as numabench_merged_from lists them, at any depth), else the run itself (by the same,
    and by its entries' content: a copy under another name is the same run)."""
    def leaves(entries: list) -> set[tuple]:
        out: set[tuple] = set()
        for e in entries:
            if isinstance(e, dict) and isinstance(e.get("merged_from"), list) and e["merged_from"]:
                out |= leaves(e["merged_from"])
            elif isinstance(e, dict):
                out.add(("run", str(e.get("file")), str(e.get("datetime")), str(e.get("commit"))))
        return out

    merged_from = run.get("numabench_merged_from")
    if isinstance(merged_from, list) and merged_from:
        return leaves(merged_from)
    sources = {("run", Path(name).name, str(run.get("datetime")), str((run.get("commit_info") or {}).get("id")))}
    # its content: the entries and, for a case without timings, its out-of-memory records (a run
    # without entries is no copy of another one only because both have none)
    content = {"benchmarks": run.get("benchmarks") or [], "out_of_memory": memory_outcomes.out_of_memory(run)}
    if content["benchmarks"] or content["out_of_memory"]:
        sources.add(("content", hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()))
    return sources


def run_times(name: str, run: dict) -> set[tuple[str, str]]:
    """The runs ``run`` holds the invocations of, by time and commit (a file's name aside: a window
    renames what it learns), merged ones each."""
    return {(s[2], s[3]) for s in _run_sources(name, run) if s[0] == "run"}


def check_distinct(runs: Sequence[tuple[str, dict]]) -> None:
    """Refuse two runs that hold the same run's invocations (a file named twice, a copy of it,
    a merged run and one it was merged from): pooled, each invocation would count twice and
    the band would look steadier than the machine is."""
    seen: dict[tuple, tuple[int, str]] = {}
    for i, (name, run) in enumerate(runs, start=1):
        for source in sorted(_run_sources(name, run), key=lambda s: s[0] != "run"):  # a run named first
            if source in seen and seen[source][0] != i:
                j, first = seen[source]
                what = (f"the same run {source[1]} of {source[2]}" if source[0] == "run"
                        else "the same entries (a copy)")
                raise UsageError(f"merge: runs {j} ({first}) and {i} ({name}) hold {what}: pooled, each of its "
                                 "invocations would count twice; allowed each run once (--allow-duplicate-sources "
                                 "to pool them anyway)")
            seen.setdefault(source, (i, name))


def _without_verdict(entry: dict) -> dict:
    """A baseline entry holds measurements; the gate's verdict on the run it came from
    (extra_info["gate"]) judged that run, not the baseline, and is dropped."""
    extra = entry.get("extra_info") or {}
    if "gate" not in extra:
        return entry
    return {**entry, "extra_info": {k: v for k, v in extra.items() if k != "gate"}}


def write_run(run: dict, path: str | Path) -> Path:
    """Write ``run`` to a new file ``path`` atomically (numabench.atomic.write_file); an existing
    file is an error, not overwritten, and so is a folder or a name ending in a slash."""
    if Path(path).is_dir() or str(path).endswith(("/", os.sep)):
        what = "is a folder" if Path(path).is_dir() else "ends in a slash (a folder's name)"
        raise UsageError(f"{path} {what}: allowed a new file name for the run, e.g. {Path(path) / 'merged.json'}")
    path = Path(path)
    if not path.parent.is_dir():
        raise UsageError(f"folder {path.parent} does not exist")
    if not write_file(path, json.dumps(run, indent=4, ensure_ascii=True).encode(), overwrite=False):
        raise UsageError(f"{path} exists: choose a new name (runs are never overwritten)")
    return path
