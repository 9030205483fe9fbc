"""What changed in a run: every entry's verdict on it, from the first verdict source that has
verdicts for that run, and the "what changed" block each page leads with.

A verdict source is a function (entries, run, runs, threshold %) -> RunVerdicts | None, reading the
entries' histories (model.entry_history: measured points, the gate's record per run). Today:
the gate's own verdicts where the run was gated (extra_info["gate"]), else each measured entry
against its previous measurement by the change-point rule. Another kind of verdict (an A/B
comparison's) plugs in by adding its function in front of SOURCES."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from numabench.results.history import Point, beyond

SLOWER, FASTER, SAME, NEW = "slower", "faster", "same", "new"
CHANGED = (SLOWER, FASTER)


@dataclass
class Verdict:
    entry: dict  # the entry's history (model.entry_history, with family, title and href)
    verdict: str  # slower / faster / same / new / a gate status (insufficient data, informational, ...)
    pct: float | None  # the signed change the verdict stands on (+ slower)
    note: str = ""

    def as_dict(self) -> dict:
        e = self.entry
        return {"verdict": self.verdict, "pct": self.pct, "note": self.note, "family": e["family"],
                "label": e["label"], "group": e["group"], "href": e["href"]}


@dataclass
class RunVerdicts:
    source: str  # which source judged: "gate", "history"
    run: int
    heading: str  # what the verdicts are, for a reader
    rule: str  # how they were reached, one sentence
    pct_means: str  # what an item's percentage is
    items: list[Verdict] = field(default_factory=list)


# (entries, the run judged, the key's runs (runs.run_info), threshold %)
Source = Callable[[list, int, list, float], Optional[RunVerdicts]]


def gate_verdicts(entries: list[dict], run: int, runs: list[dict], threshold_pct: float) -> RunVerdicts | None:
    """The gate's verdicts the run recorded (a gated session writes them into each entry)."""
    items = []
    for e in entries:
        g = e["gate_by_run"].get(run)
        if not g:
            continue
        pct = g.get("beyond_band_pct") if isinstance(g.get("beyond_band_pct"), (int, float)) else None
        note = ""
        if g.get("verdict") == SLOWER and g.get("confirmation") not in (None, SLOWER):
            note = f"not confirmed: the confirmation re-run was {g['confirmation']}"
        elif g.get("why"):
            note = str(g["why"])
        items.append(Verdict(e, str(g.get("verdict") or "-"), pct, note))
    if not items:
        return None
    return RunVerdicts("gate", run, "the regression gate's verdicts on this run",
                       "each entry against the baseline's band of invocation medians, beyond it by more than the "
                       "entry's own threshold (docs/GATE.md); a slower one re-runs to confirm",
                       "beyond the baseline's band", items)


def history_verdicts(entries: list[dict], run: int, runs: list[dict], threshold_pct: float) -> RunVerdicts | None:
    """Each entry the run measured against its previous measurement (the change-point rule, with
    no later run to confirm it): for a run the gate did not judge, such as a merged baseline."""
    items = []
    for e in entries:
        pts = e["points"]
        i = next((i for i, p in enumerate(pts) if p["run"] == run), None)
        if i is None:
            continue
        p = pts[i]
        if i == 0:
            items.append(Verdict(e, NEW, None, "no earlier measurement"))
            continue
        q = pts[i - 1]
        side = beyond(Point(run, p["v"], p["lo"], p["hi"]), Point(q["run"], q["v"], q["lo"], q["hi"]), threshold_pct)
        items.append(Verdict(e, {1: SLOWER, -1: FASTER}.get(side, SAME), (p["v"] / q["v"] - 1) * 100,
                             f"previous measurement: {runs[q['run']]['name']}"))
    if not items:
        return None
    return RunVerdicts("history", run, "not judged by the gate: each entry this run measured against its previous "
                       "measurement",
                       f"beyond the previous measurement's band by more than {threshold_pct:g}% (the change-point "
                       "rule; no later run has confirmed it)", "change of the median", items)


SOURCES: tuple[Source, ...] = (gate_verdicts, history_verdicts)


def judged_run(entries: list[dict]) -> int | None:
    """The newest run that measured or gated any of ``entries``."""
    runs = [p["run"] for e in entries for p in e["points"]] + [k for e in entries for k in e["gate_by_run"]]
    return max(runs) if runs else None


def _order(v: Verdict) -> tuple:
    # changes first, largest first; then the rest by kind
    return (0 if v.verdict in CHANGED else 1, -abs(v.pct or 0) if v.verdict in CHANGED else 0, v.verdict,
            v.entry["title"])


def what_changed(entries: list[dict], runs: list[dict], threshold_pct: float,
                 sources: tuple[Source, ...] = SOURCES) -> dict | None:
    """The block's data: the newest run that measured or gated any of ``entries`` (named, dated,
    its commit and machine), judged by the first source with verdicts on it; its items sorted
    by the size of their change (slower and faster first), and the count of each verdict."""
    run = judged_run(entries)
    if run is None:
        return None
    judged = next((v for src in sources if (v := src(entries, run, runs, threshold_pct)) is not None), None)
    items = sorted(judged.items, key=_order) if judged else []
    counts: dict[str, int] = {}
    for v in items:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    measured = sum(1 for e in entries if any(p["run"] == run for p in e["points"]))
    carried = sum(1 for e in entries if run in e["carried"])
    last = len(runs) - 1
    return {"run": runs[run], "newest": runs[last] if run != last else None,
            "newest_carried": sum(1 for e in entries if last in e["carried"]),
            "source": judged.source if judged else "none", "heading": judged.heading if judged else "",
            "rule": judged.rule if judged else "", "pct_means": judged.pct_means if judged else "",
            "counts": counts, "measured": measured, "carried": carried,
            "changed": [v.as_dict() for v in items if v.verdict in CHANGED]}
