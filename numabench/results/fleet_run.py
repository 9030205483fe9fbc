"""What a fleet store and the gate's window check of a saved run before they keep it: its id,
its hardware key (with per-round data to pool) and whether it recorded a confirmed regression.
Below both stores (Elasticsearch, PostgreSQL) and the window, which all use it."""
from __future__ import annotations

import hashlib
from typing import Any

from numabench.errors import UsageError
from numabench.machine.hwkey import run_hardware_key


def pushable_key(run: dict, store: str) -> str:
    """The hardware key of a run a fleet ``store`` ("index", "database") can take: one that
    names its key and carries per-round data (pulled baselines pool rounds)."""
    key = run_hardware_key(run)
    if not key:
        raise UsageError("the run has no hardware key in machine_info (numabench.hardware_key): runs of a "
                         "fleet are told apart by it; save runs with numabench's pytest plugin")
    bare = [b.get("fullname") or b.get("name") for b in run["benchmarks"] if not (b.get("stats") or {}).get("data")]
    if bare:
        raise UsageError(f"{len(bare)} entries have no per-round data, e.g. {bare[0]}: a baseline pulled from the "
                         f"{store} needs it (save runs with --benchmark-save-data)")
    return key


def run_id(run: dict) -> str:
    """A saved run's id in the index: its time, its machine and a digest of its entries' names
    (two runners saving at the same second stay apart)."""
    names = "\n".join(sorted(b.get("fullname") or b.get("name", "") for b in run.get("benchmarks", [])))
    node = (run.get("machine_info") or {}).get("node", "?")
    digest = hashlib.sha1(f"{node}\n{run.get('datetime')}\n{names}".encode()).hexdigest()[:12]
    return f"{run.get('datetime', 'undated')}_{node}_{digest}"


def regressions_of(run: dict[str, Any]) -> list[str]:
    """Entries a gated run recorded as confirmed regressions (extra_info.gate)."""
    out = []
    for b in run.get("benchmarks", []):
        gate = (b.get("extra_info") or {}).get("gate") or {}
        if gate.get("verdict") == "slower" and gate.get("confirmation") in (None, "slower"):
            out.append(b.get("name") or b.get("fullname"))
    return out
