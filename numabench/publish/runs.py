"""A run as the site names and describes it. Every page, chart axis, tooltip and table names a
run by ``run_names``: the saved file's number (or the source's own label) and the run's date,
unique among the runs of one hardware key. The file it came from (with the git commit that
holds that version) is its source, shown beside the name in the runs table only."""
from __future__ import annotations

import re
from collections import Counter

from numabench.gate.invocations import invocation_machines, run_machine

Run = tuple[str, dict]
NUMBERED = re.compile(r"^(\d{4})_")
LABEL_CHARS = 14  # a label that is not a saved run's file name, shortened to this on an axis


def _stem(label: str) -> str:
    base = label.split("@", 1)[0]  # runs_from_git: FILE@COMMIT
    if m := NUMBERED.match(base):
        return m.group(1)
    base = base.removesuffix(".json")
    return base if len(base) <= LABEL_CHARS else base[:LABEL_CHARS - 1] + "…"


def _stamp(when: str, with_year: bool) -> str:
    """'2026-11-24T04:59:00.1+00:00' -> '11-24 04:59' (with the year where a key's runs span
    several)."""
    if len(when) < 16:
        return when
    return f"{when[:10] if with_year else when[5:10]} {when[11:16]}"


def run_names(runs: list[Run]) -> list[str]:
    """One name per run of a key, in the order given: file number and date ('0005 11-24 04:59');
    runs that would share one are told apart by '#1', '#2' in the order given."""
    whens = [str(r.get("datetime") or "") for _, r in runs]
    with_year = len({w[:4] for w in whens if w}) > 1
    names = [f"{_stem(label)} {_stamp(w, with_year)}".strip() for (label, _), w in zip(runs, whens)]
    total, count, used, out = Counter(names), Counter(), set(), []
    for n in names:
        count[n] += 1
        name = f"{n} #{count[n]}" if total[n] > 1 else n
        while name in used:  # a label that already reads 'NAME #k'
            count[n] += 1
            name = f"{n} #{count[n]}"
        used.add(name)
        out.append(name)
    return out


def run_info(index: int, name: str, label: str, run: dict) -> dict:
    """What the site says of a run: its name, source, time, commit, machines and hardware."""
    nb = (run.get("machine_info") or {}).get("numabench") or {}
    benches = run.get("benchmarks", [])
    machines = Counter(m for b in benches for m in invocation_machines(b, run_machine(run)) if m)
    return {"index": index, "name": name, "source": label, "when": str(run.get("datetime") or "")[:19],
            "commit": ((run.get("commit_info") or {}).get("id") or "unknown")[:12],
            "machine": run_machine(run) or (run.get("machine_info") or {}).get("node") or "unknown",
            "invocation_machines": sorted(machines), "gpus": nb.get("gpus") or nb.get("gpu_models") or [],
            "cpu": nb.get("cpu_model", ""), "kernel": nb.get("kernel", ""), "numa_nodes": nb.get("numa_nodes"),
            "entries": len(benches),
            "gated": sum(1 for b in benches if (b.get("extra_info") or {}).get("gate"))}
