"""The site's data from a list of runs: per hardware key its runs (each named once, runs.py),
per family each entry's history (a point only where a run measured the entry: the invocations
that run added, history.new_invocations; its band their range; change points by history.py's
rule, with their direction and what weakens them), the gate's record per run, what changed in
the newest run (verdicts.py), and the NUMA view (numa.py). Plain JSON-able dicts: the pages embed
what they draw and site.js draws from them."""
from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from typing import Any

from numabench.gate.invocations import invocation_machines, invocation_medians, run_machine
from numabench.gate.rule import DEFAULT_THRESHOLD, parse_threshold
from numabench.publish.labels import SERIES_AXES, axes_text, entry_axes, hardware_key, slug
from numabench.publish.numa import numa_page
from numabench.publish.runs import Run, run_info, run_names
from numabench.publish.verdicts import what_changed
from numabench.results import memory_outcomes
from numabench.results.history import Point, change_points, new_invocations
from numabench.results.offload_modes import mode_rows, winner_sentences
from numabench.results.report import combined_run, offload_section

__all__ = ["Run", "family_file", "hardware_key", "numa_file", "offload_file", "site_model", "slug"]
NOT_RECORDED = "not recorded"  # an invocation whose machine the run did not record


def family_file(key_slug: str, family_slug: str) -> str:
    return f"{key_slug}--{family_slug}.html"


def numa_file(key_slug: str) -> str:
    return f"{key_slug}--numa.html"


def offload_file(key_slug: str) -> str:
    return f"{key_slug}--offload.html"


def _has_modes(run: dict) -> bool:
    records = [r["extra_info"] for r in memory_outcomes.out_of_memory(run)]
    return any(x.get("family") == "train_step" and x.get("mode")
               for x in [*(b.get("extra_info") or {} for b in run.get("benchmarks", [])), *records])


def offload_view(kruns: list[Run], names: list[str]) -> dict | None:
    """What a key's offload page shows (None: no train_step modes): the report's offload section over
    the key's runs combined, its winner sentences, and the names of the runs that hold modes."""
    run = combined_run([r for _, r in kruns], machine_of=-1)  # the newest run's machine
    modes = mode_rows(run)
    if not modes:
        return None
    return {"runs": [n for n, (_, r) in zip(names, kruns) if _has_modes(r)], "wins": winner_sentences(modes),
            "section": offload_section(run, modes)}


def _verdict(bench: dict) -> dict | None:
    gate = (bench.get("extra_info") or {}).get("gate")
    if not isinstance(gate, dict):
        return None
    return {k: gate.get(k) for k in ("verdict", "confirmation", "beyond_band_pct", "entry_threshold_pct", "why")}


def _note_changes(changes: list, points: list[dict]) -> list[dict]:
    """Change points as the site shows them: direction (+ slower), and what weakens one: the first
    run of a machine this entry was not measured on before, or the previous value lying inside
    the new run's band."""
    out = []
    for c in changes:
        i = next(i for i, p in enumerate(points) if p["run"] == c.run)
        p = points[i]
        earlier = {m for q in points[:i] for m in q["machines"]}
        joined = sorted(set(p["machines"]) - earlier - {NOT_RECORDED})
        notes = []
        if joined:
            notes.append(f"coincides with {', '.join(joined)} joining: the first run measured on it")
        if p["lo"] <= c.before <= p["hi"]:
            notes.append("the previous value lies inside this run's band")
        if not c.confirmed:
            notes.append("unconfirmed: no later measurement yet")
        out.append({"run": c.run, "before": c.before, "after": c.after, "pct": round(c.change_pct, 2),
                    "dir": "slower" if c.after > c.before else "faster", "notes": notes})
    return out


def entry_history(name: str, by_run: list[dict[str, dict]], machines: list[str | None],
                  threshold_pct: float) -> dict:
    """One entry over a key's runs: a point only where a run measured it (the invocations that run
    adds, history.new_invocations: its median, band = their range, the machines that measured
    them); the runs that only carried it forward by a merge; change points by history's rule
    among the measured points; the gate's record per run that gated it."""
    seen: set = set()
    points: list[dict] = []
    carried: list[int] = []
    gate: dict[int, dict] = {}
    last: dict = {}
    for k, benches in enumerate(by_run):
        bench = benches.get(name)
        if bench is None:
            continue
        last = bench
        if (v := _verdict(bench)) is not None:
            gate[k] = v
        meds = invocation_medians(bench)
        if not meds:
            continue
        new = new_invocations(bench, seen)
        if not new:
            carried.append(k)
            continue
        vals = [meds[i] for i in new]
        hosts = invocation_machines(bench, machines[k])
        points.append({"run": k, "v": statistics.median(vals), "lo": min(vals), "hi": max(vals), "n": len(new),
                       "of": len(meds), "machines": sorted({hosts[i] or NOT_RECORDED for i in new})})
    changes = change_points([Point(p["run"], p["v"], p["lo"], p["hi"]) for p in points], threshold_pct)
    newest_gated = max(gate) if gate else None
    return {"name": name, "points": points, "carried": carried, "changes": _note_changes(changes, points),
            "gate_by_run": gate, "verdict": {**gate[newest_gated], "run": newest_gated} if gate else None,
            "invocations": len(invocation_medians(last)) if last else 0}


def _anchor(name: str, taken: set) -> str:
    base = "e-" + slug(name.split("::")[-1])
    out, k = base, 1
    while out in taken:
        k += 1
        out = f"{base}-{k}"
    taken.add(out)
    return out


def family_page(key: dict, family: str, seen: dict[str, dict], by_run: list[dict[str, dict]],
                machines: list[str | None], threshold_pct: float) -> dict:
    """Entries grouped by phase and the axes other than policy and size (``seen``: each entry's
    extra_info, the newest run's); each with its history, its row's anchor and the link to it."""
    groups: dict[str, list[dict]] = defaultdict(list)
    page = family_file(key["slug"], slug(family))
    taken: set = set()
    for name, x in seen.items():
        axes = entry_axes(x)
        title = (f"{x.get('phase', '?')} " + axes_text(axes, [k for k in axes if k not in SERIES_AXES])).strip()
        h = entry_history(name, by_run, machines, threshold_pct)
        h["label"] = axes_text(axes, SERIES_AXES) or name.split("::")[-1]
        h["family"], h["group"] = family, title
        h["title"] = f"{title}: {h['label']}"
        h["sort"] = [str(axes.get("policy", "")), float(axes.get("numel") or 0)]
        groups[title].append(h)
    out = []
    for title in sorted(groups):
        es = sorted(groups[title], key=lambda h: h.pop("sort"))
        for h in es:
            h["anchor"] = _anchor(h["name"], taken)
            h["href"] = f"{page}#{h['anchor']}"
        out.append({"title": title, "entries": es})
    entries_ = [h for g in out for h in g["entries"]]
    verdicts = Counter(h["verdict"]["verdict"] for h in entries_ if h["verdict"])
    gated_runs = {h["verdict"]["run"] for h in entries_ if h["verdict"]}
    return {"key": key["key"], "family": family, "slug": slug(family), "file": page, "threshold_pct": threshold_pct,
            "groups": out, "verdicts": dict(verdicts), "verdicts_run": max(gated_runs) if gated_runs else None,
            "changes": Counter(c["dir"] for h in entries_ for c in h["changes"]),
            "entries": len(entries_)}


def _finite(obj: Any) -> Any:
    """JSON has no NaN or infinity: they become null (the chart leaves the point out)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def key_model(key: str, kruns: list[Run], threshold_pct: float) -> dict:
    """One hardware key: its runs (named once, runs.run_names), a page per family, what changed in
    its newest run, its NUMA page, and its offload page where it has train_step modes."""
    names = run_names(kruns)
    k_slug = slug(key)
    runs = [run_info(k, n, label, r) for k, (n, (label, r)) in enumerate(zip(names, kruns))]
    by_run = [{b["fullname"]: b for b in r["benchmarks"] if "fullname" in b} for _, r in kruns]
    machines = [run_machine(r) for _, r in kruns]
    by_family: dict[str, dict[str, dict]] = defaultdict(dict)
    for benches in by_run:
        for name, b in benches.items():
            x = b.get("extra_info") or {}
            if x.get("family"):
                by_family[x["family"]][name] = x  # the newest run's axes win
    out = {"key": key, "slug": k_slug, "runs": runs, "numa_file": numa_file(k_slug)}
    if (offload := offload_view(kruns, names)) is not None:
        out.update({"offload_file": offload_file(k_slug), "offload": offload})
    fpages = [family_page(out, f, by_family[f], by_run, machines, threshold_pct) for f in sorted(by_family)]
    every = [h for fp in fpages for g in fp["groups"] for h in g["entries"]]
    for r in runs:
        r["measured"] = sum(1 for h in every if any(p["run"] == r["index"] for p in h["points"]))
        r["carried"] = sum(1 for h in every if r["index"] in h["carried"])
    for fp in fpages:
        fp["changed"] = what_changed([h for g in fp["groups"] for h in g["entries"]], runs, threshold_pct)
    out.update({"families": [{k: fp[k] for k in ("family", "slug", "file", "entries", "changes", "verdicts",
                                                 "verdicts_run", "changed")} for fp in fpages],
                "family_pages": fpages, "changed": what_changed(every, runs, threshold_pct),
                "numa": numa_page(key, kruns)})
    return _finite(out)


def site_model(runs: list[Run], threshold: str | float = DEFAULT_THRESHOLD) -> dict:
    """Everything the site shows, keyed by hardware key (runs of each key oldest first)."""
    threshold_pct = parse_threshold(threshold)
    by_key: dict[str, list[Run]] = defaultdict(list)
    for label, run in runs:
        by_key[hardware_key(run)].append((label, run))
    keys = [key_model(key, sorted(by_key[key], key=lambda r: (str(r[1].get("datetime") or ""), r[0])),
                      threshold_pct) for key in sorted(by_key)]
    return {"threshold_pct": threshold_pct, "keys": keys}
