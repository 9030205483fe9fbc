"""The site's data from a list of runs: per hardware key its runs (machine, time, commit), per
family each entry's history (band = the range of its invocation medians, change points by
history.py's rule), the newest gate verdicts, and the NUMA view (policies side by side, the
weighted-interleave model beside the measurements, the advisor's table). Plain JSON-able dicts:
the pages embed them and site.js draws from them."""
from __future__ import annotations

import math
import re
import statistics
from collections import Counter, defaultdict
from typing import Any

from numabench.cases import format_size
from numabench.results.advise import Advice, advise, predict
from numabench.gate.rule import DEFAULT_THRESHOLD, parse_threshold
from numabench.results.history import Point, change_points
from numabench.gate.invocations import invocation_machines, invocation_medians, run_machine
from numabench.results.tables import BASE_AXES, entries, family_extra_axes

Run = tuple[str, dict]
UNKNOWN_KEY = "unknown-hardware-key"
# Axes that vary inside one chart or table group; the rest name the group.
SERIES_AXES = ("policy", "numel")


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"


def hardware_key(run: dict) -> str:
    return ((run.get("machine_info") or {}).get("numabench") or {}).get("hardware_key") or UNKNOWN_KEY


def _axes(extra: dict) -> dict:
    extra_axes = family_extra_axes(extra.get("family", ""))  # an unknown family: tables' fallback axes
    return {k: extra[k] for k in (*BASE_AXES, *extra_axes) if k in extra and k != "phase"}


def _text(axes: dict, keys) -> str:
    return " ".join(f"{k}={format_size(axes[k]) if k == 'numel' else axes[k]}" for k in keys if k in axes)


def run_info(index: int, label: str, run: dict) -> dict:
    nb = (run.get("machine_info") or {}).get("numabench") or {}
    benches = run.get("benchmarks", [])
    machines = Counter(m for b in benches for m in invocation_machines(b, run_machine(run)) if m)
    return {"index": index, "label": label, "when": str(run.get("datetime") or "")[:19],
            "commit": ((run.get("commit_info") or {}).get("id") or "unknown")[:12],
            "machine": run_machine(run) or (run.get("machine_info") or {}).get("node") or "unknown",
            "invocation_machines": sorted(machines), "gpus": nb.get("gpus") or nb.get("gpu_models") or [],
            "cpu": nb.get("cpu_model", ""), "kernel": nb.get("kernel", ""), "numa_nodes": nb.get("numa_nodes"),
            "entries": len(benches),
            "gated": sum(1 for b in benches if (b.get("extra_info") or {}).get("gate"))}


def _verdict(bench: dict) -> dict | None:
    gate = (bench.get("extra_info") or {}).get("gate")
    if not isinstance(gate, dict):
        return None
    return {k: gate.get(k) for k in ("verdict", "confirmation", "beyond_band_pct", "entry_threshold_pct", "why")}


def _entry_history(name: str, runs: list[Run], threshold_pct: float) -> dict:
    points: list[Point] = []
    machines: list[list[str]] = []
    last: dict = {}
    verdict: dict | None = None  # the newest gated run's verdict on this entry
    for k, (_, run) in enumerate(runs):
        bench = next((b for b in run["benchmarks"] if b.get("fullname") == name), None)
        if bench is None:
            continue
        if (v := _verdict(bench)) is not None:
            verdict = {**v, "run": k}
        meds = invocation_medians(bench)
        if not meds:
            continue
        points.append(Point(k, statistics.median(meds), min(meds), max(meds)))
        machines.append(sorted({m or "not recorded" for m in invocation_machines(bench, run_machine(run))}))
        last = bench
    changes = change_points(points, threshold_pct)
    return {"name": name,
            "points": [{"run": p.run, "v": p.value, "lo": p.low, "hi": p.high, "machines": m}
                       for p, m in zip(points, machines)],
            "changes": [{"run": c.run, "before": c.before, "after": c.after, "pct": round(c.change_pct, 2)}
                        for c in changes],
            "verdict": verdict,
            "invocations": len(invocation_medians(last)) if last else 0}


def family_page(key: str, family: str, runs: list[Run], threshold_pct: float) -> dict:
    """Entries grouped by phase and the axes other than policy and size; each with its history."""
    seen: dict[str, dict] = {}
    for _, run in runs:
        for b in run["benchmarks"]:
            x = b.get("extra_info") or {}
            if x.get("family") == family and "fullname" in b:
                seen[b["fullname"]] = x  # the newest run's axes win
    groups: dict[str, list[dict]] = defaultdict(list)
    for name, x in seen.items():
        axes = _axes(x)
        title = f"{x.get('phase', '?')} " + _text(axes, [k for k in axes if k not in SERIES_AXES])
        h = _entry_history(name, runs, threshold_pct)
        h["label"] = _text(axes, SERIES_AXES) or name.split("::")[-1]
        h["sort"] = [str(axes.get("policy", "")), float(axes.get("numel") or 0)]
        groups[title.strip()].append(h)
    out = []
    for title in sorted(groups):
        es = sorted(groups[title], key=lambda h: h.pop("sort"))
        out.append({"title": title, "entries": es})
    verdicts = Counter(h["verdict"]["verdict"] for g in out for h in g["entries"] if h["verdict"])
    return {"key": key, "family": family, "threshold_pct": threshold_pct,
            "runs": [run_info(k, label, run) for k, (label, run) in enumerate(runs)],
            "groups": out, "verdicts": dict(verdicts),
            "changes": sum(len(h["changes"]) for g in out for h in g["entries"])}


def newest_view(runs: list[Run]) -> dict:
    """One run of the key's newest value of every entry (a key measured in pieces, e.g. its plain
    and its weighted cases in two runs, is seen whole), with the newest run's machine_info."""
    by_name: dict[str, dict] = {}
    for _, run in runs:
        for b in run["benchmarks"]:
            by_name[b.get("fullname") or b.get("name", "")] = b
    return {"machine_info": runs[-1][1].get("machine_info") or {}, "benchmarks": list(by_name.values())}


def _policy_charts(view: dict) -> list[dict]:
    """Per family, phase and the other axes: time against size, one series per policy (the
    newest values, bars from the invocations' range); only where two policies or more were run."""
    groups: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for e in entries(view):
        if "policy" not in e.axes:
            continue
        rest = {k: v for k, v in e.axes.items() if k not in SERIES_AXES}
        gkey = (e.family, e.phase, _text(rest, list(rest)))
        lo, hi = e.spread() or (e.median_s, e.median_s)
        x = float(e.axes.get("numel") or 1)
        groups[gkey][str(e.axes["policy"])].append([x, e.median_s, lo, hi])
    charts = []
    for (fam, phase, rest), by_policy in sorted(groups.items()):
        if len(by_policy) < 2:
            continue
        series = [{"name": pol, "points": sorted(pts)} for pol, pts in sorted(by_policy.items())]
        xs = {p[0] for s in series for p in s["points"]}
        charts.append({"title": f"{fam} {phase} {rest}".strip(), "family": fam, "xlabel": "elements (numel)",
                       "ylabel": "median time (ms)", "xlog": len(xs) > 1, "ylog": True, "yscale": 1e3,
                       "kind": "xy", "series": series})
    return charts


def _advice_chart(a: Advice) -> dict:
    case = _text(a.case, sorted(a.case, key=str))
    model = [[f, predict(f, a.t_fast, a.t_slow, a.floor)] for f in (i / 50 for i in range(51))]
    measured = sorted([[p.share_fast, p.measured_s] for p in a.predictions if p.measured_s is not None]
                      + [[f, t] for f, t in a.extra_measured.items()])
    # the grid's predictions split by what they stand on (advise.Advice.basis): a reader sees at
    # once which ratios a measurement backs and which the model reaches beyond the measured ones
    backed, beyond = [], []
    for p in a.predictions:
        kind, _ = a.basis(p.share_fast)
        point = [p.share_fast, p.predicted_s, None, None, f"weighted:{p.weights}: {a.basis_text(p.share_fast)}"]
        (backed if kind in ("measured", "interpolated") else beyond).append(point)
    bound = [[1.0, a.t_fast, None, None, f"bind:{a.fast}"], [0.0, a.t_slow, None, None, f"bind:{a.slow}"]]
    return {"title": f"{a.family} {a.phase} {case}", "family": a.family, "kind": "xy", "yscale": 1e3,
            "xlabel": f"share of pages on node {a.fast} (the faster)", "ylabel": "time (ms)", "xlog": False,
            "ylog": False,
            "series": [{"name": "model t(f)", "points": model, "line": True, "marker": "none"},
                       {"name": "model at the grid: measured or interpolated", "points": backed, "line": False,
                        "marker": "hollow"},
                       {"name": f"measured bind:{a.fast} / bind:{a.slow}", "points": bound, "line": False},
                       {"name": "measured weighted", "points": measured, "line": False},
                       {"name": "model at the grid: extrapolated or model only", "points": beyond, "line": False,
                        "marker": "hollow", "color": "#9a9a9a"}]}


def _advice_row(a: Advice) -> dict:
    errs = [abs(p.error_pct) for p in a.predictions if p.error_pct is not None]
    choice, seconds, choice_basis = a.fastest
    room, room_basis = a.room
    return {"case": f"{a.family} {a.phase} " + _text(a.case, sorted(a.case, key=str)),
            "fast": a.fast, "slow": a.slow, "t_fast_ms": a.t_fast * 1e3, "t_slow_ms": a.t_slow * 1e3,
            "link_bound": a.link_bound, "best": choice, "best_ms": seconds * 1e3, "best_basis": choice_basis,
            "max_slow_share": room, "room_basis": room_basis, "measured": len(errs),
            "max_error_pct": max(errs) if errs else None}


def numa_page(key: str, runs: list[Run]) -> dict:
    view = newest_view(runs)
    advices = advise(view)
    nb = (view["machine_info"].get("numabench") or {})
    return {"key": key, "nodes": nb.get("nodes") or [], "numa_nodes": nb.get("numa_nodes"),
            "policy_charts": _policy_charts(view), "advice_charts": [_advice_chart(a) for a in advices],
            "advice": [_advice_row(a) for a in advices]}


def _finite(obj: Any) -> Any:
    """JSON has no NaN or infinity: they become null (the chart leaves the point out)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def site_model(runs: list[Run], threshold: str | float = DEFAULT_THRESHOLD) -> dict:
    """Everything the site shows, keyed by hardware key (runs of each key oldest first)."""
    threshold_pct = parse_threshold(threshold)
    by_key: dict[str, list[Run]] = defaultdict(list)
    for label, run in runs:
        by_key[hardware_key(run)].append((label, run))
    keys = []
    for key in sorted(by_key):
        kruns = sorted(by_key[key], key=lambda r: (str(r[1].get("datetime") or ""), r[0]))
        families = sorted({(b.get("extra_info") or {}).get("family") for _, r in kruns for b in r["benchmarks"]}
                          - {None})
        fpages = [family_page(key, f, kruns, threshold_pct) for f in families]
        keys.append(_finite({
            "key": key, "slug": slug(key), "runs": [run_info(k, l, r) for k, (l, r) in enumerate(kruns)],
            "families": [{"name": p["family"], "slug": slug(p["family"]),
                          "entries": sum(len(g["entries"]) for g in p["groups"]), "changes": p["changes"],
                          "verdicts": p["verdicts"]} for p in fpages],
            "family_pages": fpages, "numa": numa_page(key, kruns)}))
    return {"threshold_pct": threshold_pct, "keys": keys}
