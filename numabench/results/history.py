"""The history of a hardware key: its saved runs in time order, each entry's series, and
where it changed.

A change point is the gate's own rule applied between consecutive saved runs: a run whose
value (the median of its invocation medians) lies beyond the previous run's band (the range
of its invocation medians; a run without them: its value) by more than the threshold, and
the next run, where there is one, on the same side (the gate's confirmation). Baseline
histories are short (a handful of runs, each already a summary of several invocations), too
short for a segmentation method such as E-Divisive to have power; judging them the way CI
judges a run keeps the history and the gate in agreement. A change at the newest run has no
next run to agree with: it is reported as unconfirmed.

A history is of one hardware key: runs of different keys differ by their hardware, not by a
change, so ``history`` refuses a folder holding several (listing them) and ``histories``
gives one History per key. Each run is one measurement, once: the versions of one saved run
that git holds (before and after a relabelling, a rename of the file) are one run, its
newest version read; a merged baseline's entries that only carry invocations of earlier runs
forward are marked ``carried`` and judged by no change point, and a pooled entry is judged by
the invocations it adds (``new_invocations``). Entries renamed since (numabench.results.ids) keep one series.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from numabench.errors import UsageError
from numabench.results import storage
from numabench.gate.rule import DEFAULT_THRESHOLD, parse_threshold
from numabench.results.ids import current_id
from numabench.gate.invocations import INVOCATION_SOURCES, invocation_medians


@dataclass
class SavedRun:
    path: Path
    when: str
    commit: str
    benchmarks: dict[str, dict]  # by today's id (numabench.results.ids.current_id)
    key: str = ""  # the hardware key the run was measured under
    versions: int = 1  # how many committed versions of this one run there were (history --git)


@dataclass
class Point:
    run: int  # index into History.runs
    value: float
    low: float
    high: float
    carried: bool = False  # only invocations of earlier runs, carried forward by a merge: not measured again


@dataclass
class Change:
    run: int
    before: float
    after: float
    confirmed: bool = True  # False: at the newest run, no next run yet to agree

    @property
    def change_pct(self) -> float:
        return (self.after / self.before - 1) * 100


@dataclass
class Series:
    name: str
    family: str
    points: list[Point] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)


@dataclass
class History:
    folder: str  # where the runs came from: a folder, or an index and a hardware key
    runs: list[SavedRun]
    series: list[Series]
    threshold_pct: float
    key: str = ""


def _key_of(data: dict, path: Path, root: Path) -> str:
    """The run's hardware key: as it records it, else the folder under ``root`` it lies in."""
    key = (data.get("machine_info") or {}).get("numabench", {}).get("hardware_key")
    if key:
        return str(key)
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        parts = path.parts
    return parts[0] if len(parts) > 2 else root.name


def _benchmarks(data: dict) -> dict[str, dict]:
    return {current_id(b["fullname"], b.get("extra_info")): b for b in data.get("benchmarks", []) if "fullname" in b}


def load_runs(folder: str | Path) -> list[SavedRun]:
    root = Path(folder)
    files = storage.run_files(root)
    if not files:
        raise UsageError(f"history: no saved runs (NNNN_name.json) under {root}")
    runs = []
    for f in files:
        try:
            data = storage.load_run(f)
        except UsageError as e:  # storage's error names the file and what is wrong: say which command read it
            raise UsageError(f"history: {e}") from None
        commit = (data.get("commit_info") or {}).get("id") or "unknown"
        runs.append(SavedRun(f, str(data.get("datetime") or ""), commit[:12], _benchmarks(data),
                             _key_of(data, f, root)))
    return sorted(runs, key=lambda r: (r.when, r.path.name))


def load_runs_from_git(folder: str | Path) -> list[SavedRun]:
    """Every saved run that was ever committed under ``folder`` (baselines are merged and the
    merged files removed, so the history of a key lives in git), each once: the versions of one
    run (same hardware key and date: relabelled, renamed) are one run, its newest version read."""
    import subprocess

    root = Path(folder).resolve()

    cwd = root if root.is_dir() else root.parent

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
        if out.returncode != 0:
            raise UsageError(f"history --git: git {' '.join(args[:2])} failed: {out.stderr.strip()[:300]}")
        return out.stdout

    top = Path(git("rev-parse", "--show-toplevel").strip())
    rel = str(root.relative_to(top))
    cwd = top
    seen: set[str] = set()
    runs = []
    by_identity: dict[tuple[str, str], SavedRun] = {}
    for line in git("log", "--format=%H %cI", "--", rel).splitlines():  # newest commit first
        commit, when = line.split(" ", 1)
        for entry in git("ls-tree", "-r", commit, "--", rel).splitlines():
            meta, path = entry.split("\t", 1)
            blob = meta.split()[2]
            name = Path(path).name
            if blob in seen or not (name[:4].isdigit() and name.endswith(".json")):
                continue
            seen.add(blob)
            try:
                data = storage.run_from_text(git("cat-file", "-p", blob), f"{path} (commit {commit[:12]})")
            except UsageError as e:
                raise UsageError(f"history --git: {e}") from None
            first_commit = (data.get("commit_info") or {}).get("id") or commit
            key = _key_of(data, top / path, root)
            identity = (key, str(data.get("datetime") or when))
            if identity in by_identity:  # an older version of a run already read
                by_identity[identity].versions += 1
                continue
            run = SavedRun(Path(path), identity[1], first_commit[:12], _benchmarks(data), key)
            by_identity[identity] = run
            runs.append(run)
    if not runs:
        raise UsageError(f"history --git: no saved run was ever committed under {rel}")
    return sorted(runs, key=lambda r: (r.when, r.path.name))


def load_runs_from_index(url: str, key: str) -> list[SavedRun]:
    """The runs of hardware key ``key`` in a fleet's index (numabench.results.fleet), oldest first."""
    from numabench.results.fleet import fleet_runs  # an index, or a PostgreSQL database (postgresql://)
    from numabench.redact import redact_url

    runs = [SavedRun(Path(rid), str(run.get("datetime") or ""), ((run.get("commit_info") or {}).get("id")
                                                                  or "unknown")[:12],
                     _benchmarks(run), key)
            for rid, run in fleet_runs(url, key)]
    if not runs:
        raise UsageError(f"history: no runs of hardware key {key!r} in {redact_url(url)}")
    return runs


def new_invocations(bench: dict, seen: set) -> list[int]:
    """Which of the entry's invocations this run adds to its series, as indices (``seen``: what
    earlier runs of the entry held; updated here). A merge labels each invocation with the run it
    came from (``invocation_sources``) and copies its median: a labelled invocation is new when
    no earlier run held the same label and median, nor the same median unlabelled (an entry
    saved before merges labelled them, then carried into a merged one); an entry without labels
    is carried when its whole list of medians is an earlier run's, else new."""
    meds = invocation_medians(bench)
    labels = (bench.get("extra_info") or {}).get(INVOCATION_SOURCES)
    whole = ("whole", tuple(sorted(meds)))
    if isinstance(labels, list) and len(labels) == len(meds):
        pairs = [(str(lab), m) for lab, m in zip(labels, meds)]
        new = [i for i, (pair, m) in enumerate(zip(pairs, meds))
               if pair not in seen and (None, m) not in seen and whole not in seen]
        seen.update(pairs)
    else:
        new = [] if whole in seen else list(range(len(meds)))
        seen.update((None, m) for m in meds)
    seen.add(whole)
    return new


def _point(k: int, bench: dict, seen: set) -> Point | None:
    """The run's point from the invocations it adds to the series (``new_invocations``). Only
    carried invocations: the point of them all, marked carried."""
    meds = invocation_medians(bench)
    if not meds:
        return None
    new = [meds[i] for i in new_invocations(bench, seen)]
    if not new:
        return Point(k, statistics.median(meds), min(meds), max(meds), carried=True)
    return Point(k, statistics.median(new), min(new), max(new))


def beyond(p: Point, ref: Point, threshold_pct: float) -> int:
    """+1 above ref's band by more than the threshold, -1 below, 0 within."""
    if p.value > ref.high * (1 + threshold_pct / 100):
        return 1
    if p.value < ref.low * (1 - threshold_pct / 100):
        return -1
    return 0


def change_points(points: list[Point], threshold_pct: float) -> list[Change]:
    """Changes between consecutive measured points (carried points are not measurements); one
    at the last measured point is unconfirmed."""
    measured = [p for p in points if not p.carried]
    out = []
    for i in range(1, len(measured)):
        side = beyond(measured[i], measured[i - 1], threshold_pct)
        if side == 0:
            continue
        last = i + 1 == len(measured)
        if not last and beyond(measured[i + 1], measured[i - 1], threshold_pct) != side:
            continue  # not confirmed by the next run
        out.append(Change(measured[i].run, measured[i - 1].value, measured[i].value, confirmed=not last))
    return out


def history(folder: str | Path | None, threshold: str | float = DEFAULT_THRESHOLD, *, from_git: bool = False,
            index: str | None = None, key: str | None = None) -> History:
    """The history of the saved runs under ``folder`` (with ``from_git``: every run ever committed
    there), or of hardware key ``key`` in the fleet index ``index``. Runs of several hardware
    keys under ``folder``: ``key`` picks one, else a UsageError lists them (see ``histories``)."""
    hists = histories(folder, threshold, from_git=from_git, index=index, key=key)
    if len(hists) > 1:
        raise UsageError(f"history: {folder} holds runs of {len(hists)} hardware keys "
                         f"({', '.join(h.key for h in hists)}); a history is of one key: name its folder "
                         f"(baselines/<hardware key>/) or pick one with key=")
    return hists[0]


def histories(folder: str | Path | None, threshold: str | float = DEFAULT_THRESHOLD, *, from_git: bool = False,
              index: str | None = None, key: str | None = None) -> list[History]:
    """One History per hardware key of the runs under ``folder`` (only ``key``'s where given),
    keys in name order; or the one of ``key`` in the fleet index ``index``."""
    threshold_pct = parse_threshold(threshold)
    if index is not None:
        if folder is not None or from_git or not key:
            raise UsageError("history: a folder or an index with a hardware key, not both")
        from numabench.redact import redact_url

        runs, source = load_runs_from_index(index, key), f"{redact_url(index)} [{key}]"
    elif folder is None:
        raise UsageError("history: name a folder (baselines/<hardware key>/) or an index (--index URL)")
    else:
        runs, source = (load_runs_from_git(folder) if from_git else load_runs(folder)), str(folder)
        keys = sorted({r.key for r in runs})
        if key is not None:
            if key not in keys:
                raise UsageError(f"history: no runs of hardware key {key!r} under {folder}; keys there: "
                                 f"{', '.join(keys)}")
            keys = [key]
        if len(keys) > 1:
            return [_history(f"{source} [{k}]", [r for r in runs if r.key == k], threshold_pct, k) for k in keys]
        runs = [r for r in runs if r.key == keys[0]]
        key = keys[0]
    return [_history(source, runs, threshold_pct, key or "")]


def _history(source: str, runs: list[SavedRun], threshold_pct: float, key: str) -> History:
    names = sorted({n for r in runs for n in r.benchmarks})
    series = []
    for name in names:
        seen: set = set()
        points = [p for k, r in enumerate(runs) if name in r.benchmarks
                  and (p := _point(k, r.benchmarks[name], seen))]
        family = next(((r.benchmarks[name].get("extra_info") or {}).get("family", "") for r in runs
                       if name in r.benchmarks), "")
        series.append(Series(name, family, points, change_points(points, threshold_pct)))
    return History(source, runs, series, threshold_pct, key)


def render(hist: History, show: str = "changes") -> str:
    lines = [f"history of {hist.folder}: {len(hist.runs)} saved runs, {len(hist.series)} entries; change point: "
             f"beyond the previous run's band by more than {hist.threshold_pct:g}%, the next run agreeing "
             "(a change at the newest run: unconfirmed); values marked * were carried forward by a merge, "
             "not measured again, and are judged by no change point", ""]
    for k, r in enumerate(hist.runs):
        versions = f"  ({r.versions} committed versions, the newest read)" if r.versions > 1 else ""
        lines.append(f"  run {k}: {r.path.name}  [{r.key or '?'}]  {r.when[:19]}  commit {r.commit}{versions}")
    lines.append("")
    changed = [s for s in hist.series if s.changes]
    for s in hist.series if show == "all" else changed:
        values = " -> ".join(f"{p.value * 1e3:.4g}{'*' if p.carried else ''}" for p in s.points)
        lines.append(f"{s.name}: {values} ms")
        for c in s.changes:
            r = hist.runs[c.run]
            note = "" if c.confirmed else "; unconfirmed: no later run yet"
            lines.append(f"  change at run {c.run} ({r.path.name}, commit {r.commit}): {c.before * 1e3:.4g} -> "
                         f"{c.after * 1e3:.4g} ms ({c.change_pct:+.1f}%{note})")
    unconfirmed = sum(1 for s in changed if all(not c.confirmed for c in s.changes))
    tail = f" ({unconfirmed} only at the newest run, unconfirmed)" if unconfirmed else ""
    lines += ["", f"{len(changed)} of {len(hist.series)} entries changed{tail}"]
    return "\n".join(lines) + "\n"


def render_all(hists: list[History], show: str = "changes") -> str:
    """One section per hardware key."""
    if len(hists) == 1:
        return render(hists[0], show)
    head = (f"{len(hists)} hardware keys ({', '.join(h.key for h in hists)}): one history each; runs of "
            "different keys are never compared\n\n")
    return head + "\n".join(render(h, show) for h in hists)


def trend_plots(hist: History, out: str | Path) -> list[Path]:
    """Per family: each entry's value over the runs, relative to its first, change points marked
    with the run's commit."""
    from numabench.results.plots import _plt, _save, _slug

    plt = _plt()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for fam in sorted({s.family for s in hist.series if s.points}):
        fs = [s for s in hist.series if s.family == fam and s.points]
        fig, ax = plt.subplots(figsize=(9, 5))
        for s in fs:
            base = s.points[0].value
            ax.plot([p.run for p in s.points], [p.value / base for p in s.points], alpha=0.5, linewidth=1,
                    marker="o" if s.changes else None, markersize=3)
        marks = sorted({c.run for s in fs for c in s.changes})
        for k in marks:
            n = sum(1 for s in fs for c in s.changes if c.run == k)
            ax.axvline(k, color="red", alpha=0.4, linestyle="--")
            ax.text(k, ax.get_ylim()[1], f" {hist.runs[k].commit[:8]} ({n})", rotation=90, va="top", fontsize=8)
        ax.set_xticks(range(len(hist.runs)), [r.path.name.split("_", 1)[0] for r in hist.runs], fontsize=8)
        ax.set_xlabel("saved run (time order)")
        ax.set_ylabel("median of invocation medians / first run (x)")
        ax.set_title(f"{fam}: {len(fs)} entries over {len(hist.runs)} runs, change points at the dashed lines "
                     f"(commit, entries changed)", fontsize=10)
        ax.grid(True, alpha=0.3)
        written.append(_save(fig, out / f"{_slug(fam)}_history.png", top_legend=False))
    return written
