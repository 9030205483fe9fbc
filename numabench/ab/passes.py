"""A same-runner A/B's pairs in passes (``numabench ab``'s default in the rounds mode): pass p is
one pytest session that times pair p of every selected worker run (fixtures.ab_sides,
``--numa-ab pair=p``), so that one entry's pairs lie a whole pass apart instead of back to back.

Why: on the lent GPU VMs an entry whose step allocates (cpu_adam's torch-foreach, pinned_alloc)
moves by a few percent between runs of unchanged code, an offset that the pairs of one minute
share, fresh workers and fresh fork servers included (docs/GATE.md): pairs taken back to back
measure that minute's offset as if it were a change, and their interval, built from their
spread alone, does not know it. Pairs a pass apart sample the offset as it moves, and their
spread counts it.

Further pairs (Stein's rule, ``max_pairs``) and confirming pairs (``confirm_pairs``) are passes
too, each a session over only the worker runs that need them (``--numa-ab runs_of=FILE``); a
confirming pass's session starts its own fork servers, as every session does. With a time budget
(``time_budget_s``) the further pairs are the ones that fit it, where they bring the most entries
to the target resolution per second (numabench.ab.budget); with ``focus`` (families) only those
families' worker runs take them, after a first stage of twice the pairs (what numabench ab's
--focus-budget gives the families whose own code changed).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from numabench.ab.budget import allocate, fill, pass_cost_s, run_needs
from numabench.ab.session import AB_BASE_KEY, StoppedWithMeasurements
from numabench.ab.extend import changed_names, entry_pair_errors, entry_pair_ratios, further_wanted
from numabench.ab.settings import DEFAULTS, session_items

# invoke_interleaved's shape: (base, head, pytest args, pairs, JSON path) -> what one session measured
InvokeSession = Callable[[Any, Any, Sequence[str], int, Path], dict[str, Any]]

# an entry's per-pair lists in a session's JSON, extended pass by pass in the kept session
HEAD_PER_PAIR = ("invocation_medians_s", "invocation_machines", "invocation_cpus", "invocation_walls_s",
                 "invocation_huge_shares")
BASE_PER_PAIR = ("invocation_medians_s", "invocation_cpus", "invocation_rounds_s", "head_invocation_rounds_s",
                 "rewarmed_pairs", "pair_walls_s", "invocation_huge_shares")


def empty_measured() -> dict[str, Any]:
    return {"base": [], "head": [], "ratios": [], "errors": [], "failed": [], "confirming": {}, "first_stage": {},
            "cpus": {}, "runs": {}, "walls": {},
            "passes_done": 0, "_no_cpus": set()}


def merge_session(merged: dict[str, Any], session: dict[str, Any]) -> None:
    """One session's measurements (invoke_interleaved's) appended to ``merged``: its pairs after
    the pairs so far, its failed tests once each, each entry's CPUs per pair where every pair the
    entry has says (else none for it: attach_cpus matches them to pairs by position)."""
    pairs = len(session.get("base") or [])
    ratios = session.get("ratios") or [{} for _ in range(pairs)]
    before = len(merged["base"])
    merged["base"].extend(session.get("base") or [])
    merged["head"].extend(session.get("head") or [])
    merged["ratios"].extend(ratios)
    merged["errors"].extend(session.get("errors") or [{} for _ in range(pairs)])
    merged["failed"].extend(f for f in session.get("failed") or [] if f not in merged["failed"])
    merged["runs"].update(session.get("runs") or {})
    for name, walls in (session.get("walls") or {}).items():
        merged["walls"].setdefault(name, []).extend(walls)
    cpus = session.get("cpus") or {}
    for name in set().union(*(session.get("base") or [])):
        if name in merged["_no_cpus"]:
            continue
        had = sum(name in m for m in merged["base"][:before])
        got, entry = cpus.get(name), merged["cpus"].get(name)
        if got is None or len(entry["base"] if entry else []) != had:
            merged["cpus"].pop(name, None)
            merged["_no_cpus"].add(name)
            continue
        entry = merged["cpus"].setdefault(name, {"base": [], "head": []})
        entry["base"].extend(got["base"])
        entry["head"].extend(got["head"])


def invoke_in_passes(invoke_session: InvokeSession, base: Any, head: Any, pytest_args: Sequence[str], pairs: int,
                     scratch: Path, *, max_pairs: int = DEFAULTS.max_pairs,
                     target_pct: float = DEFAULTS.target_resolution, confirm_pairs: int = 0,
                     threshold_pct: float = DEFAULTS.threshold, confidence: float = DEFAULTS.confidence, time_budget_s: float | None = None,
                     coarsest_pct: float | None = None, focus: Sequence[str] = (),
                     progress: Callable[[str], None] = lambda line: None,
                     clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """``pairs`` passes of the whole selection, then further passes (Stein's rule, up to
    ``max_pairs`` pairs an entry; with ``time_budget_s``, those that fit that many seconds from the
    first pass's start, toward ``target_pct`` and ``coarsest_pct``, uncapped where ``max_pairs`` is
    0; with ``focus``, only the worker runs of those families) and ``confirm_pairs`` confirming passes (beyond any budget: a change is never judged on
    fewer) over the worker runs that need them: what they measured merged as one session's
    (invoke_interleaved's shape, "confirming": each entry's confirming pairs), and the kept session
    (``scratch / "ab.json"``) merged likewise.
    Stopped (Ctrl-C, SIGTERM, SIGHUP) during a pass or between two: StoppedWithMeasurements with
    every finished pass's measurements and the stopped pass's finished worker runs."""
    merged = empty_measured()
    jsons: list[Path] = []
    try:
        _passes(invoke_session, base, head, pytest_args, pairs, scratch, merged, jsons, max_pairs=max_pairs,
                target_pct=target_pct, confirm_pairs=confirm_pairs, threshold_pct=threshold_pct,
                confidence=confidence, time_budget_s=time_budget_s, coarsest_pct=coarsest_pct, focus=focus,
                progress=progress, clock=clock)
    except KeyboardInterrupt as stop:
        if isinstance(stop, StoppedWithMeasurements):  # the stopped pass's finished worker runs
            merge_session(merged, stop.measured)
        _keep_session(scratch, jsons, merged)
        if not any(merged["base"]):
            raise
        raise StoppedWithMeasurements(stop, finished(merged)) from None
    _keep_session(scratch, jsons, merged)
    return finished(merged)


def _passes(invoke_session: InvokeSession, base: Any, head: Any, pytest_args: Sequence[str], pairs: int,
            scratch: Path, merged: dict[str, Any], jsons: list[Path], *, max_pairs: int, target_pct: float,
            confirm_pairs: int, threshold_pct: float, confidence: float, time_budget_s: float | None,
            coarsest_pct: float | None, focus: Sequence[str], progress: Callable[[str], None],
            clock: Callable[[], float]) -> None:
    """invoke_in_passes' passes, each one's measurements merged and its JSON listed as it ends
    (a stopped one's JSON listed before it runs: what its finished worker runs wrote)."""
    listing = scratch / "runs-of.txt"

    def one_pass(number: int, total: int | None, only: Sequence[str] | None, why: str) -> dict[str, Any]:
        if only is not None:
            listing.write_text("".join(f"{n}\n" for n in only))
        args = [*pytest_args, *session_items(DEFAULTS, (), first_pair=number,
                                             runs_of=listing if only is not None else None)]
        progress(f"pass {number + 1}{f'/{total}' if total else ''}: {why}")
        path = scratch / f"pass-{number + 1}.json"
        jsons.append(path)
        session = invoke_session(base, head, args, 1, path)
        merge_session(merged, session)
        merged["passes_done"] += 1
        return session

    started = clock()
    for p in range(pairs):
        one_pass(p, pairs, None, "one pair of every worker run")
    done = pairs
    if time_budget_s is not None:
        names = sorted(set().union(*merged["base"]))
        wanted_pct = sorted({target_pct, *([coarsest_pct] if coarsest_pct else [])})

        def needs(of: Sequence[str]) -> dict[str, Any]:
            return run_needs(merged, of, wanted_pct, confidence, max_pairs or None,
                             lambda name: entry_pair_ratios(merged, name), lambda name: entry_pair_errors(merged, name))

        runs = needs(names)
        elapsed = clock() - started
        # what a pass takes beyond its runs: from every run the first passes timed, focused or not
        overhead = max(0.0, elapsed / pairs - sum(r.cost_s for r in runs.values()))
        runs_of = merged["runs"]
        first = pairs
        if focus:  # only the focused families' runs take further pairs (a worker run's key is FAMILY[case])
            runs = {key: need for key, need in runs.items() if key.split("[")[0] in focus}
            names = [n for n in names if runs_of.get(n) in runs]
            # Their first stage is twice the pairs: Stein's needs from 3 pairs (t at 2 degrees of freedom,
            # 4.30) are 2.8x those from 6 (2.57), more than a budget of minutes buys a host-side run.
            for p in range(pairs, 2 * pairs):
                if not names or clock() - started + pass_cost_s(runs, names, runs_of, overhead) > time_budget_s:
                    break
                one_pass(p, None, names, f"a first-stage pair of the worker runs of {', '.join(focus)}, whose own "
                                         "code changed")
                first = done = p + 1
            merged["first_stage"].update({n: first for n in names if first > pairs})
            runs = needs(names)  # Stein's first stage on all of those pairs
            elapsed = clock() - started
        levels = allocate(runs, first, time_budget_s - elapsed, overhead)
        if focus:  # the rest of the budget still narrows the touched family's intervals
            levels = fill(levels, runs, first, time_budget_s - elapsed, overhead)
        wanted = {n: levels[runs_of[n]] for n in names if levels.get(runs_of.get(n, ""), first) > first}
        of_focus = f" of {', '.join(focus)}" if focus else ""
        progress(f"time budget {time_budget_s:.0f} s, {elapsed:.0f} s taken: further pairs for "
                 f"{sum(n > first for n in levels.values())} of {len(levels)} worker runs{of_focus} (up to "
                 f"{max(levels.values(), default=first)} pairs), toward resolutions of "
                 f"{' and '.join(f'{p:g}%' for p in wanted_pct)}")
        for p in range(first, max(wanted.values(), default=first)):
            only = [n for n, w in wanted.items() if w > p]
            if clock() - started + pass_cost_s(runs, only, runs_of, overhead) > time_budget_s:
                progress(f"time budget {time_budget_s:.0f} s: the next further pass would end after it; none more")
                break
            one_pass(p, None, only, f"a further pair of the worker runs of {len(only)} entries, within the time "
                                    "budget")
            done = p + 1
    elif max_pairs > pairs:
        wanted = further_wanted(merged, target_pct, confidence, max_pairs)
        for p in range(pairs, max(wanted.values(), default=pairs)):
            only = [n for n, w in wanted.items() if w > p]
            one_pass(p, None, only, f"a further pair of the worker runs of {len(only)} entries too spread")
            done = p + 1
    if confirm_pairs:
        changed = changed_names(merged, threshold_pct, confidence, pairs)
        for p in range(done, done + (confirm_pairs if changed else 0)):
            session = one_pass(p, None, changed, f"a confirming pair of the worker runs of {len(changed)} entries "
                                                 "judged changed")
            for name in set().union(*session.get("base") or []):
                merged["confirming"][name] = merged["confirming"].get(name, 0) + 1


def finished(merged: dict[str, Any]) -> dict[str, Any]:
    """``merged`` without its bookkeeping."""
    return {k: v for k, v in merged.items() if not k.startswith("_")}


def _keep_session(scratch: Path, jsons: Sequence[Path], merged: dict[str, Any]) -> None:
    """The passes' session JSONs as one (``scratch / "ab.json"``, what --session-json keeps and
    --rejudge reads), where any was written."""
    runs = []
    for path in jsons:  # a pass stopped before it wrote any is not there
        try:
            runs.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    if runs:
        (scratch / "ab.json").write_text(json.dumps(merge_session_jsons(runs, merged.get("confirming") or {},
                                                                        merged.get("first_stage") or {})))


def merge_session_jsons(runs: Sequence[dict[str, Any]], confirming: dict[str, int],
                        first_stage: dict[str, int] | None = None) -> dict[str, Any]:
    """The passes' pytest-benchmark JSONs as one session's: the first pass's run with each entry's
    per-pair lists (the head's invocation medians, machines, CPUs and walls; the base's in
    ``extra_info["ab_base"]``, with both sides' rounds) extended pass by pass, entries first seen in
    a later pass added, and each entry's confirming pairs (``confirming``) and, where larger than
    the run's --pairs, its first stage (``first_stage``) as that session's."""
    merged = json.loads(json.dumps(runs[0]))
    by_name = {b["fullname"]: b for b in merged.get("benchmarks") or []}
    for run in runs[1:]:
        for bench in run.get("benchmarks") or []:
            into = by_name.get(bench["fullname"])
            if into is None:
                into = by_name[bench["fullname"]] = json.loads(json.dumps(bench))
                merged.setdefault("benchmarks", []).append(into)
                continue
            extra, more = into.setdefault("extra_info", {}), bench.get("extra_info") or {}
            _extend(extra, more, HEAD_PER_PAIR)
            _extend(extra.setdefault(AB_BASE_KEY, {}), more.get(AB_BASE_KEY) or {}, BASE_PER_PAIR)
    for bench in merged.get("benchmarks") or []:
        ab = (bench.get("extra_info") or {}).get(AB_BASE_KEY)
        if isinstance(ab, dict):
            ab["confirmation_pairs"] = confirming.get(bench["fullname"], 0)
            if (first_stage or {}).get(bench["fullname"]):
                ab["first_stage_pairs"] = first_stage[bench["fullname"]]
    return merged


def _extend(into: dict[str, Any], more: dict[str, Any], keys: Sequence[str]) -> None:
    for key in keys:
        if isinstance(into.get(key), list) and isinstance(more.get(key), list):
            into[key] = into[key] + more[key]
        elif key in into or key in more:  # one pass kept it, another did not: no list that matches the pairs
            into.pop(key, None)
