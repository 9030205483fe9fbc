"""The rolling baseline of a hardware key: the last N passing runs, oldest out.

A committed baseline holds the runs of the few machines that measured it; the runners of
a CI fleet differ from each other by more than that (fresh VMs of one kind move host-side
entries by 20-50%). After each passing gated run on main, the CI job folds that run into a
*window*, a folder of the last ``keep`` runs of the key, and the next run is judged
against the window's pooled bands: they learn how much runners of the kind really differ,
as the PyTorch HUD and Conbench judge against a window of recent same-hardware runs.

The folder holds its members as ``NNNN_<label>.json`` (numbered in arrival order; the
committed baseline it was seeded with is the first member and leaves like any other once
``keep`` newer runs have come) and ``baseline.json``, the members merged
(numabench.results.merge: every entry's invocations pooled, each labelled with the run and
the machine it came from), which ``--benchmark-compare=DIR/baseline.json`` judges
against. A run with a confirmed regression, a run without per-round data and a run of
another hardware key are refused: a window learns only what passed.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from numabench.errors import UsageError
from numabench.machine.hwkey import run_hardware_key
from numabench.results import storage
from numabench.results.fleet_run import regressions_of
from numabench.results.merge import merge_loaded, run_times
from numabench.results.storage import exclusive_lock, publish

BASELINE = "baseline.json"
DEFAULT_KEEP = 10
_MEMBER = re.compile(r"^(\d{4})_.+\.json$")


@dataclass
class WindowResult:
    folder: Path
    members: list[str]
    dropped: list[str] = field(default_factory=list)
    entries: int = 0

    @property
    def baseline(self) -> Path:
        return self.folder / BASELINE


def members(folder: Path) -> list[Path]:
    """The window's runs, oldest first."""
    return sorted((p for p in folder.glob("*.json") if _MEMBER.match(p.name)), key=lambda p: p.name)


def _check_member(run: dict[str, Any], what: str, key: str | None) -> None:
    if regressions_of(run):
        raise UsageError(f"{what} has {len(regressions_of(run))} confirmed regression(s) "
                         f"({', '.join(regressions_of(run)[:3])}): a window learns only runs that passed")
    if key is not None and run_hardware_key(run) != key:
        raise UsageError(f"{what} was measured on {run_hardware_key(run)!r}, the window holds {key!r}: "
                         "a window holds one hardware key")
    missing = [b.get("name") for b in run.get("benchmarks", []) if not (b.get("stats") or {}).get("data")]
    if missing:
        raise UsageError(f"{what}: {len(missing)} entries without per-round data ({missing[0]}, ...): "
                         "run with --benchmark-save-data")


def _label(path: Path) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip("-")
    return stem or "run"


def learn(folder: str | Path, run_path: str | Path, *, keep: int = DEFAULT_KEEP,
          seed: str | Path | None = None) -> WindowResult:
    """Fold the run at ``run_path`` into the window at ``folder`` (created, and seeded where it is new
    with the run file ``seed``, or with the newest run of the run's hardware key where ``seed`` is
    a baselines folder), drop the oldest members beyond ``keep`` and rewrite the
    window's baseline. The same run file learnt twice is one member."""
    if keep < 1:
        raise UsageError(f"--keep {keep}: allowed an integer >= 1")
    folder = Path(folder)
    run_path = Path(run_path)
    run = storage.load_run(run_path)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--window {folder} is a file: allowed a folder (new or existing) for the window's runs")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--window {folder}: cannot create it ({e.strerror})") from None
    with exclusive_lock(folder):  # two jobs of one runner learning at once: one after the other
        current = members(folder)
        key = run_hardware_key(storage.load_run(current[0])) if current else None
        if not current and seed is not None:
            seed = _seed_file(Path(seed), run)
            seed_run = storage.load_run(seed)
            _check_member(seed_run, f"seed {seed}", None)
            key = run_hardware_key(seed_run)
            _add(folder, 1, _label(Path(seed)), seed_run)
        _check_member(run, str(run_path), key if key is not None else run_hardware_key(run))
        current = members(folder)
        held = {t: p.name for p in current for t in run_times(p.name, storage.load_run(p))}
        mine = run_times(run_path.name, run)
        if any(storage.load_run(p).get("datetime") == run.get("datetime") and
               _label(run_path) in p.name for p in current) or (mine and mine <= set(held)):
            added = None  # learnt before (itself, or a copy of it under another name)
        elif mine & set(held):  # a merged run holding a member and more: pooled, the member would count twice
            when, commit = sorted(mine & set(held))[0]
            raise UsageError(f"learn {run_path}: it holds the run of {when} (commit {commit[:12]}) the window holds "
                             f"already as {held[(when, commit)]}: pooled, its invocations would count twice; allowed "
                             "a run the window does not hold (learn each run once, not a merge of them)")
        else:
            last = int(_MEMBER.match(current[-1].name).group(1)) if current else 0
            added = _add(folder, last + 1, _label(run_path), run)
        current = members(folder)
        dropped = current[:-keep] if len(current) > keep else []
        for p in dropped:
            p.unlink()
        kept = members(folder)
        # learn() keeps each run once itself (a run learnt before is not added again)
        merged = merge_loaded([(p.name, storage.load_run(p)) for p in kept], allow_duplicates=True).run
        merged["numabench_window"] = {"keep": keep, "members": [p.name for p in kept],
                                      "learnt": added.name if added else None}
        _replace(folder / BASELINE, merged)
    return WindowResult(folder, [p.name for p in kept], [p.name for p in dropped], len(merged["benchmarks"]))


def _seed_file(seed: Path, run: dict[str, Any]) -> Path:
    """``seed`` itself, or where it is a baselines folder the newest run of ``run``'s hardware key in it."""
    if not seed.is_dir():
        return seed
    key = run_hardware_key(run)
    return storage.check_baselines(seed / str(key), True, key, what="--seed",
                           hint="name a run file, or a baselines folder that holds runs of the run's key")[0]


def _without_gate(run: dict[str, Any]) -> dict[str, Any]:
    """A member keeps measurements, not the verdicts of the run it was (they judged another baseline)."""
    return {**run, "benchmarks": [{**b, "extra_info": {k: v for k, v in (b.get("extra_info") or {}).items()
                                                        if k != "gate"}} for b in run["benchmarks"]]}


def _add(folder: Path, number: int, label: str, run: dict[str, Any]) -> Path:
    path = folder / f"{number:04d}_{label}.json"
    if not publish(path, json.dumps(_without_gate(run), indent=1).encode()):
        raise UsageError(f"{path} exists: the window folder is being written by another job")
    return path


def _replace(path: Path, run: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(run, indent=1))
    os.replace(tmp, path)


@dataclass
class FleetWindowResult:
    url: str  # redacted
    key: str
    learnt: str | None  # the run id stored now (None: it was stored before)
    seeded: str | None  # the seed's run id where the key's window started now
    members: list[str]  # labels of the runs the window holds now (the newest ``keep`` passing runs), oldest first
    entries: int


def learn_fleet(url: str, run_path: str | Path, *, keep: int = DEFAULT_KEEP,
                seed: str | Path | None = None) -> FleetWindowResult:
    """``learn`` for a fleet whose window is kept in a PostgreSQL database (numabench.results.fleet_pg):
    the run is pushed (refused on the same grounds as a folder's member) and the window is the newest
    ``keep`` passing runs of its hardware key there, which ``numabench fleet pull --passed --last
    KEEP`` pulls. A key without passing runs there starts from ``seed`` (as a new folder does)."""
    from numabench.results.fleet_pg import FleetDB

    if keep < 1:
        raise UsageError(f"--keep {keep}: allowed an integer >= 1")
    run_path = Path(run_path)
    run = storage.load_run(run_path)
    key = run_hardware_key(run)
    _check_member(run, str(run_path), key)
    with FleetDB(url) as db:
        seeded = None
        if seed is not None and not db.runs(key, 1, passed_only=True):
            seed_path = _seed_file(Path(seed), run)
            seed_run = storage.load_run(seed_path)
            _check_member(seed_run, f"seed {seed_path}", key)
            seeded = db.push(_without_gate(seed_run), Path(seed_path).name)[0]
        rid, _count, new = db.push(_without_gate(run), run_path.name)
        window = db.pull(key, keep, passed_only=True)
        members_now = [m["file"] for m in window.run["numabench_merged_from"]]
        return FleetWindowResult(db.shown, key, rid if new else None, seeded, members_now,
                                 len(window.run["benchmarks"]))
