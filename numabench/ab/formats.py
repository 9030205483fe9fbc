"""An A/B run (numabench.ab.run.ABResult) in each of gate/formats.py's formats: text (the terminal),
Markdown (a CI job summary), GitHub Actions annotations and JSON (a machine-readable A/B run that
``from_json`` reads back, for ``numabench ab --show`` and the results site).

Every format leads with what changed: the counts first, then the entries sorted by ratio
head/base, slowest first, each with its interval and resolution. Library code: each function
returns text or data, none prints.
"""
from __future__ import annotations

import json
import math
import signal
import statistics
from pathlib import Path
from typing import Any

from numabench.gate.rule import FASTER, SAME, SLOWER
from numabench.gate import formats
from numabench.gate.formats import Renderers, escape_data, escape_property, format_table
from numabench.ab.run import TIMINGS, ABResult, ABRow, Side
from numabench.gate.pairs import INTERVAL, PAIR_RATIOS, UNRESOLVED, pairs_to_resolve
from numabench.ab.schema import SCHEMA, verdicts_problem

RUN_KEY = "numabench_ab"  # a kept session's record of how its A/B ran (run_record)
COUNT_ORDER = (SLOWER, FASTER, SAME, UNRESOLVED)
HEADER = ("benchmark", "ratio", "interval", "resolution %", "verdict", "base ms", "head ms")
MARKDOWN_NAMED = 8  # unresolved entries named in a warning line


def sorted_rows(res: ABResult) -> list[ABRow]:
    """Slowest first (ratio head/base descending), then by name."""
    return sorted(res.rows, key=lambda r: (-r.ratio, r.name))


# the order a reader takes the entries in: what fails the run, what may, what changed for the better,
# what could not be judged, what is the same
CONCERN = {SLOWER: 0, f"{UNRESOLVED} {SLOWER}": 1, f"{UNRESOLVED} {FASTER}": 2, FASTER: 3, UNRESOLVED: 4, SAME: 5}


def by_concern(res: ABResult) -> list[ABRow]:
    """Slower entries first, then the unresolved ones leaning slower, leaning faster, the faster
    ones, the other unresolved ones, the same ones; each group slowest first."""
    return sorted(res.rows, key=lambda r: (CONCERN[f"{r.verdict} {r.leans}" if r.leans else r.verdict], -r.ratio,
                                           r.name))


def leaning(res: ABResult) -> list[ABRow]:
    """The unresolved entries whose interval excludes 1, leaning slower first."""
    return [r for r in by_concern(res) if r.verdict == UNRESOLVED and r.leans]


def verdict_text(r: ABRow) -> str:
    """'slower', 'same', ..., or 'unresolved, leans slower'."""
    return f"{r.verdict}, leans {r.leans}" if r.leans else r.verdict


def lean_line(r: ABRow, res: ABResult) -> str:
    """A leaning entry, its interval and the pairs that would resolve it."""
    need = pairs_to_resolve(r.pair_ratios, res.threshold_pct, res.row_confidence(r), errors=r.pair_errors)
    resolve = (f"about {need} pairs would resolve it (numabench ab --pairs {need})" if need is not None
               else "more than 100 pairs would be needed to resolve it: its change lies about at the threshold")
    return (f"LEANS {r.leans.upper()}: {r.name} {r.ratio:.4f} [{r.low:.4f}-{r.high:.4f}] on {len(r.base_s)} pairs: "
            f"{resolve}")


def counts(res: ABResult) -> dict[str, int]:
    return {v: sum(r.verdict == v for r in res.rows) for v in COUNT_ORDER}


def _side(s: Side) -> str:
    return (s.label + (f" ({s.commit[:12]})" if s.commit else "")
            + (f" with {' '.join(f'{k}={v}' for k, v in s.env.items())}" if s.env else ""))


def _res(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def cells(r: ABRow, pairs: int | None = None) -> tuple[str, ...]:
    """A row's cells; its resolution says how many pairs it took where that is not ``pairs``."""
    took = f"{len(r.base_s)} pairs" if pairs is not None and len(r.base_s) != pairs else ""
    if r.confirmation_pairs:
        took += f", {r.confirmation_pairs} confirming"
    res = _res(r.resolution_pct) + (f" ({took})" if took else "")
    return (r.name, f"{r.ratio:.4f}", f"{r.low:.4f}-{r.high:.4f}", res, verdict_text(r),
            f"{statistics.median(r.base_s) * 1e3:.4g}", f"{statistics.median(r.head_s) * 1e3:.4g}")


def stopped_note(res: ABResult) -> str:
    """What a stopped session's table holds ('' where it ran to its end)."""
    if not res.stopped_by:
        return ""
    cut = "" if res.passes_done is None else f", cut short after {res.passes_done} passes"
    return (f"STOPPED ({signal.Signals(res.stopped_by).name}) before the session's end{cut}: the entries of its finished "
            "worker runs judged, the rest NOT MEASURED")


def headline(res: ABResult) -> str:
    c = counts(res)
    status = (f"REGRESSION: {c[SLOWER]} of {len(res.rows)} entries slower" if c[SLOWER]
              else f"no regression in {len(res.rows)} entries")
    if res.stopped_by:
        status = f"{stopped_note(res)}; {status}"
    what = f"numabench A/B (re-judged from {res.rejudged_from}, nothing measured)" if res.rejudged_from \
        else "numabench A/B"
    return f"{what}: {status} ({count_text(res)}); exit {res.exit_code}"


def count_text(res: ABResult) -> str:
    """'0 slower, 0 faster, 3 same, 2 unresolved, 1 of them leaning slower'."""
    c = counts(res)
    text = ", ".join(f"{n} {v}" for v, n in c.items())
    leans = [f"{sum(r.leans == way for r in leaning(res))} of them leaning {way}" for way in (SLOWER, FASTER)
             if any(r.leans == way for r in leaning(res))]
    return text + (f", {' and '.join(leans)}" if leans else "")


def pct(confidence: float) -> str:
    """0.95 -> '95%', 0.975 -> '97.5%'."""
    return f"{round(confidence * 100, 2):g}%"


def confidence_text(res: ABResult) -> str:
    """The run's interval confidence, and the stricter one of entries with confirming pairs where it differs."""
    if res.confirm_pairs and res.confirmed_confidence != res.confidence:
        return f"{pct(res.confidence)} ({pct(res.confirmed_confidence)} with confirming pairs)"
    return pct(res.confidence)


def rule_line(res: ABResult) -> str:
    started = {"forked": ", forked from a server per side", "exec": ""}.get(res.workers, "")
    started += ", both sides of a pair on the same CPUs where a family steps on few threads" if res.same_cpus else ""
    how = f"pairs of fresh workers{started}, rounds alternating between the sides" if res.interleave == "rounds" \
        else "pairs of invocations in ABBA order"
    how += ", pair p of every worker run in a session of its own (pass p)" if res.passes else ""
    return (f"{res.pairs} {how}; ratio head/base: geometric mean of the pair ratios (each pair's "
            f"{pair_ratio_text(res)}), "
            f"{pct(res.confidence)} interval ({INTERVAL}"
            + ("; its spread at least what each pair's own rounds leave unknown, the standard error of its median "
               "quad ratio" if any(math.isfinite(e) for r in res.rows for e in r.pair_errors or ()) else "")
            + "); slower/faster only when the whole interval lies beyond "
            + (f"{res.threshold_pct:g}%, same only when it lies wholly within {res.threshold_pct:g}% of 1, else "
               "unresolved (leaning slower or faster where it excludes 1)" if res.same_within_band else
               f"{res.threshold_pct:g}%; unresolved where the interval's relative half-width (the resolution) is "
               f"coarser than {res.coarsest_pct:g}% or fewer than 2 pairs were measured (judged before same meant "
               "an interval wholly within the threshold)")
            + (f"; a worker run whose first pairs were too spread to reach a resolution of {res.target_pct:g}% took "
               f"further pairs, up to {res.max_pairs} (Stein's two-stage rule: its interval's width from the first "
               f"{res.pairs})" if res.max_pairs and res.time_budget_s is None else "")
            + (f"; further pairs where they brought the most entries"
               f"{' of ' + ', '.join(res.focus) + ' (their own code changed)' if res.focus else ''} to a resolution "
               f"of {res.target_pct:g}% per second, within a time budget of {res.time_budget_s:.0f} s"
               f"{f' and up to {res.max_pairs} pairs' if res.max_pairs else ''}"
               f"{', the rest of it a pair at a time for their runs still short of that' if res.focus else ''} "
               f"(Stein's two-stage rule: an "
               f"interval's width from the first {res.pairs}"
               f"{f', theirs from a first stage of up to {2 * res.pairs}' if res.focus else ''})"
               if res.time_budget_s is not None else "")
            + (f"; each pair took rounds beyond its family's until every entry's pair ratio was known to "
               f"{res.round_target_pct:g}% (the standard error of its median quad ratio), up to {res.round_cap}x "
               "them" if res.round_target_pct else "")
            + (f"; a worker run whose pairs judged an entry slower or faster took {res.confirm_pairs} confirming "
               f"pairs of fresh workers{' from fresh servers' if res.workers == 'forked' else ''}"
               f"{' (passes of their own)' if res.passes else ''}, its entries "
               f"judged on all their pairs at {pct(res.confirmed_confidence)} (the first pairs, chosen because they "
               "looked changed, are among them)" if res.confirm_pairs else ""))


def unresolved_why(res: ABResult) -> str:
    """Why its unresolved entries are, by the rule the run was judged by."""
    if res.same_within_band:
        return f"their intervals neither within nor beyond {res.threshold_pct:g}%"
    return f"resolution coarser than {res.coarsest_pct:g}%"


def pair_ratio_text(res: ABResult) -> str:
    """What a pair's ratio is in this run (gate.pairs.PAIR_RATIOS)."""
    if res.pair_ratio in PAIR_RATIOS:
        return PAIR_RATIOS[res.pair_ratio]
    by_medians = sum(r.round_ratios is None for r in res.rows)
    from_rounds = {r.ratios_from for r in res.rows if r.round_ratios is not None}
    texts = "; ".join(PAIR_RATIOS.get(k, k) for k in sorted(from_rounds))
    return f"{texts}; {by_medians} of {len(res.rows)} entries without both sides' rounds: {PAIR_RATIOS['medians']}"


def summary_lines(res: ABResult) -> list[str]:
    c = counts(res)
    lines = [*res.scope, f"{len(res.rows)} entries: {count_text(res)}"]
    if res.stopped_by:
        lines.append(f"WARNING: {stopped_note(res)}")
    resolved = sorted(r.resolution_pct for r in res.rows if r.resolution_pct is not None)
    if resolved:
        lines.append(f"resolution: {resolved[0]:.2f}% to {resolved[-1]:.2f}% (median "
                     f"{statistics.median(resolved):.2f}%); an entry is judged slower from a ratio of about "
                     f"(1 + threshold) x (1 + resolution)")
    if c[UNRESOLVED]:
        lines.append(f"WARNING: {c[UNRESOLVED]} entries unresolved ({unresolved_why(res)}): NOT JUDGED; more pairs "
                     "narrow their intervals")
    if res.missing:
        lines.append(f"WARNING: {len(res.missing)} entries not measured in every pair of both sides (NOT JUDGED): "
                     + "; ".join(res.missing[:8]) + (" ..." if len(res.missing) > 8 else ""))
    grown = memory_grown_note(res)
    if grown:
        lines.append(f"WARNING: {grown}")
    t = res.timings_s
    if t:
        lines.append(f"took {t['total']:.0f} s: builds {t['build_base']:.0f} s (base) + {t['build_head']:.0f} s "
                     f"(head), measuring {t['measuring']:.0f} s")
    if c[SLOWER]:
        lines.append(f"REGRESSION: {c[SLOWER]} entries slower by more than {res.threshold_pct:g}% "
                     f"with {confidence_text(res)} confidence")
    lines += [lean_line(r, res) for r in leaning(res)]
    return lines


MEMORY_GREW_PCT = 1.0  # MemTotal that moved less than this while measuring did not grow


def memory_grown_note(res: ABResult) -> str | None:
    """What a VM whose memory grew while the A/B measured means for its entries (None: it did not)."""
    if res.mem_total_gib is None:
        return None
    before, after = res.mem_total_gib
    if not after > before * (1 + MEMORY_GREW_PCT / 100):
        return None
    return (f"MemTotal grew from {before:.1f} to {after:.1f} GiB while measuring (a VM whose memory grows as used): "
            "entries that allocate fresh host memory (pinned_alloc, pageable copies) vary with how far it had grown; "
            "`numabench first-touch` shows what memory not used yet costs here")


def render_text(res: ABResult) -> str:
    lines = [headline(res), f"base: {_side(res.base)}", f"head: {_side(res.head)}"]
    if res.hardware_key:
        lines.append(f"machine: {res.hardware_key}")
    lines += [rule_line(res), ""]
    lines += format_table(HEADER, [cells(r, res.pairs) for r in by_concern(res)])
    lines.append("")
    lines += summary_lines(res)
    return "\n".join(lines)


def _md_table(rows: list[ABRow], pairs: int) -> list[str]:
    out = ["| " + " | ".join(HEADER) + " |", "|---|" + "---:|" * 3 + "---|" + "---:|" * 2]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in cells(r, pairs)) + " |" for r in rows]
    return out


def render_markdown(res: ABResult) -> str:
    """A job summary: the verdict, the entries that changed or are unresolved (slowest first),
    every entry in a collapsed table, the summary lines."""
    c = counts(res)
    status = f"**{c[SLOWER]} slower**" if c[SLOWER] else "**no regression**"
    if res.stopped_by:
        status = f"**stopped ({signal.Signals(res.stopped_by).name})**, {status}"
    what = f"numabench A/B (re-judged from `{res.rejudged_from}`)" if res.rejudged_from else "numabench A/B"
    out = [f"### {what}: {status} ({len(res.rows)} entries)", "",
           f"base `{_side(res.base)}`, head `{_side(res.head)}`"
           + (f" on `{res.hardware_key}`" if res.hardware_key else "") + f"; {rule_line(res)}.", ""]
    unresolved = [r for r in by_concern(res) if r.verdict == UNRESOLVED]
    if unresolved:
        out += [f"> [!WARNING]\n> {len(unresolved)} entries unresolved, NOT JUDGED ({unresolved_why(res)}): "
                + ", ".join(f"`{r.name}` {verdict_text(r)}, {_res(r.resolution_pct)}%"
                            for r in unresolved[:MARKDOWN_NAMED])
                + (", ..." if len(unresolved) > MARKDOWN_NAMED else "") + "; more pairs narrow their intervals", ""]
    changed = [r for r in by_concern(res) if r.verdict != SAME]
    if changed:
        out += _md_table(changed, res.pairs) + [""]
    else:
        out += ["Every entry is the same within its interval.", ""]
    if res.rows:
        out += [f"<details><summary>all {len(res.rows)} entries, slowest first</summary>", ""]
        out += _md_table(sorted_rows(res), res.pairs) + ["", "</details>", ""]
    out += [f"- {line}" for line in summary_lines(res)]
    return "\n".join(out) + "\n"


def _describe(r: ABRow, res: ABResult) -> str:
    return (f"{r.name}: head/base {r.ratio:.4f}, {pct(res.row_confidence(r))} interval {r.low:.4f}-{r.high:.4f}, "
            f"resolution {_res(r.resolution_pct)}% ({len(r.base_s)} pairs; base {_side(res.base)}, head {_side(res.head)})")


def render_github(res: ABResult) -> str:
    """GitHub Actions workflow commands: an error where the session was stopped before its end, an
    error per slower entry (slowest first), one warning naming the unresolved entries, a notice
    with the summary."""
    lines = [f"::error title=numabench A/B stopped::{escape_data(stopped_note(res))}"] if res.stopped_by else []
    lines += [f"::error title={escape_property('numabench A/B slower ' + r.name)}::{escape_data(_describe(r, res))}"
              for r in sorted_rows(res) if r.verdict == SLOWER]
    lines += [f"::warning title={escape_property(f'numabench A/B leans {r.leans} ' + r.name)}::"
              f"{escape_data(lean_line(r, res))}" for r in leaning(res)]
    unresolved = [r for r in by_concern(res) if r.verdict == UNRESOLVED]
    if unresolved:
        text = (f"{len(unresolved)} entries unresolved, not judged ({unresolved_why(res)}): "
                + ", ".join(f"{r.name} {_res(r.resolution_pct)}%" for r in unresolved))
        lines.append(f"::warning title=numabench A/B unresolved::{escape_data(text)}")
    lines.append(f"::notice title=numabench A/B::{escape_data('; '.join([headline(res), *summary_lines(res)]))}")
    return "\n".join(lines) + "\n"


def _side_json(s: Side) -> dict[str, Any]:
    return {"label": s.label, "commit": s.commit, "env": dict(s.env)}


def to_json(res: ABResult) -> dict[str, Any]:
    """The A/B run as data (seconds; ratios; percent): docs/GATE.md's schema."""
    return {
        "schema": SCHEMA, "base": _side_json(res.base), "head": _side_json(res.head),
        "hardware_key": res.hardware_key, "datetime": res.when or None, "selection": list(res.selection),
        "pairs": res.pairs,
        "order": "ABBA", "interleave": res.interleave, "threshold_pct": res.threshold_pct, "confidence": res.confidence,
        "coarsest_pct": res.coarsest_pct, "interval": INTERVAL, "pair_ratio": res.pair_ratio, "counts": counts(res),
        "regressions": len(res.regressions), "exit_code": res.exit_code, "missing": list(res.missing),
        "timings_s": dict(res.timings_s), "max_pairs": res.max_pairs, "target_resolution_pct": res.target_pct,
        "confirm_pairs": res.confirm_pairs, "confirm_confidence": res.confirm_confidence, "workers": res.workers,
        "same_cpus": res.same_cpus, "passes": res.passes,
        "time_budget_s": res.time_budget_s, "focus": list(res.focus) or None,
        "round_target_pct": res.round_target_pct or None, "round_cap": res.round_cap or None,
        "stopped_by": signal.Signals(res.stopped_by).name if res.stopped_by else None, "passes_done": res.passes_done,
        "scope": list(res.scope),
        "mem_total_gib": list(res.mem_total_gib) if res.mem_total_gib else None,
        "rejudged_from": res.rejudged_from,
        "entries": [{
            "name": r.name, "fullname": r.fullname or r.name, "verdict": r.verdict, "leans": r.leans,
            "pairs_to_resolve": pairs_to_resolve(r.pair_ratios, res.threshold_pct, res.row_confidence(r),
                                                 errors=r.pair_errors)
            if r.leans else None, "pairs": len(r.base_s),
            "confirmation_pairs": r.confirmation_pairs, "ratio": r.ratio,
            "interval": [r.low, r.high], "resolution_pct": r.resolution_pct,
            "pair_ratios": r.pair_ratios,
            "pair_ratios_from": r.ratios_from if r.round_ratios is not None else "medians",
            # null per pair whose rounds were too few to know its error (inf is not JSON)
            "pair_errors": None if r.pair_errors is None
            else [e if math.isfinite(e) else None for e in r.pair_errors],
            "base_medians_s": list(r.base_s), "head_medians_s": list(r.head_s),
            "base_cpus": r.base_cpus, "head_cpus": r.head_cpus,
        } for r in sorted_rows(res)],
        "summary": summary_lines(res),
    }


def run_record(res: ABResult) -> dict[str, Any]:
    """How an A/B run ran: ``to_json`` less its entries and verdicts (both sides' revisions, commits
    and environments, the pairs, passes, budget, workers, when and how long). A kept session holds it
    under RUN_KEY, so that ``--rejudge`` names the run by what it was, not by the temporary checkout
    of its base."""
    data = to_json(res)
    for key in ("entries", "summary", "counts", "regressions", "exit_code", "missing", "rejudged_from"):
        data.pop(key)
    return data


def add_run_record(session: Path, res: ABResult) -> None:
    """The kept session JSON at ``session`` (``numabench ab --session-json``) with how ``res`` ran
    under RUN_KEY: what ``--rejudge`` names the run by."""
    data = json.loads(session.read_text())
    data[RUN_KEY] = run_record(res)
    session.write_text(json.dumps(data))


def recorded_run(data: Any, source: str) -> ABResult:
    """The ABResult (no rows) of a ``run_record``; ValueError naming what is wrong."""
    if not isinstance(data, dict):
        raise ValueError(f"{source}: {RUN_KEY} {type(data).__name__}: allowed what numabench ab recorded of its run")
    return from_json({**data, "entries": []}, f"{source}'s {RUN_KEY}")


def _timings(data: Any) -> dict[str, float]:
    """``timings_s`` as saved: every key of TIMINGS a number, or none (saved before it existed)."""
    if not data:
        return {}
    if not (isinstance(data, dict) and all(isinstance(data.get(k), (int, float)) for k in TIMINGS)):
        raise ValueError(f"timings_s {data!r}: allowed seconds for each of {', '.join(TIMINGS)}")
    return {k: float(data[k]) for k in TIMINGS}


def _mem_total(data: Any) -> tuple[float, float] | None:
    """``mem_total_gib`` as saved: [before, after] in GiB, or none (not read, or saved before it was)."""
    if data is None:
        return None
    if not (isinstance(data, list) and len(data) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in data)):
        raise ValueError(f"mem_total_gib {data!r}: allowed [GiB when the measuring began, GiB when it ended]")
    return float(data[0]), float(data[1])


def from_json(data: Any, source: str = "the A/B JSON") -> ABResult:
    """An ABResult from ``to_json``'s data; ValueError naming what is wrong."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{source}: schema {found!r}: allowed {SCHEMA!r} (what numabench ab --json writes)")
    wrong = verdicts_problem(data)  # the declared shape (ab/schema.py): past here the fields are trusted
    if wrong:
        raise ValueError(f"{source}: {wrong}")
    try:
        def side(d: dict) -> Side:
            return Side(str(d["label"]), d["commit"], None, dict(d.get("env") or {}))  # type: ignore[arg-type]

        res = ABResult(side(data["base"]), side(data["head"]), int(data["pairs"]), float(data["threshold_pct"]),
                       float(data["confidence"]), missing=list(data.get("missing") or []),
                       coarsest_pct=float(data["coarsest_pct"]), selection=list(data.get("selection") or []),
                       hardware_key=data.get("hardware_key"),
                       # saved before the rounds mode existed: whole invocations
                       interleave=str(data.get("interleave") or "invocations"),
                       when=str(data.get("datetime") or ""), timings_s=_timings(data.get("timings_s")),
                       max_pairs=int(data.get("max_pairs") or 0),
                       target_pct=None if data.get("target_resolution_pct") is None
                       else float(data["target_resolution_pct"]),
                       # saved before either existed: no confirming pairs, exec'd workers
                       confirm_pairs=int(data.get("confirm_pairs") or 0), workers=str(data.get("workers") or "exec"),
                       same_cpus=bool(data.get("same_cpus")), passes=bool(data.get("passes")),
                       time_budget_s=None if data.get("time_budget_s") is None else float(data["time_budget_s"]),
                       focus=[str(f) for f in data.get("focus") or []],
                       round_target_pct=float(data.get("round_target_pct") or 0.0),
                       round_cap=int(data.get("round_cap") or 0),
                       stopped_by=int(signal.Signals[data["stopped_by"]]) if data.get("stopped_by") else None,
                       passes_done=None if data.get("passes_done") is None else int(data["passes_done"]),
                       scope=[str(s) for s in data.get("scope") or []],
                       mem_total_gib=_mem_total(data.get("mem_total_gib")),
                       rejudged_from=str(data["rejudged_from"]) if data.get("rejudged_from") else None,
                       same_within_band=all("leans" in e for e in data["entries"]),
                       # saved before it existed: confirmed entries judged at the run's confidence
                       confirm_confidence=None if data.get("confirm_confidence") is None
                       else float(data["confirm_confidence"]))
        for e in data["entries"]:
            low, high = e["interval"]
            numbers = [e["ratio"], low, high, *e["base_medians_s"], *e["head_medians_s"]]
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
                       for v in numbers):
                raise ValueError(f"entry {e.get('name')!r}: a ratio, interval end or median that is not a finite "
                                 "number > 0")
            res.rows.append(ABRow(e["name"], [float(v) for v in e["base_medians_s"]],
                                  [float(v) for v in e["head_medians_s"]], float(e["ratio"]), float(low), float(high),
                                  e["verdict"], None if e["resolution_pct"] is None else float(e["resolution_pct"]),
                                  e.get("fullname") or e["name"], int(e.get("confirmation_pairs") or 0),
                                  _cpus(e.get("base_cpus")), _cpus(e.get("head_cpus")), _round_ratios(e),
                                  leans=_leans(e), ratios_from=str(e.get("pair_ratios_from") or "medians"),
                                  pair_errors=_pair_errors(e)))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{source}: not an A/B run ({type(e).__name__}: {e})") from None
    return res


def _leans(entry: dict) -> str | None:
    """An unresolved entry's lean as saved (None: saved before leans were named, or none)."""
    leans = entry.get("leans")
    if leans not in (None, SLOWER, FASTER) or (leans and entry["verdict"] != UNRESOLVED):
        raise ValueError(f"entry {entry.get('name')!r}: leans {leans!r}: allowed {SLOWER} or {FASTER} on an "
                         f"{UNRESOLVED} entry, or null")
    return leans


def _round_ratios(entry: dict) -> list[float] | None:
    """An entry's pair ratios from its rounds as saved (``pair_ratios_from`` "quads", or "rounds" as
    runs judged before quads saved them), else None (those of its medians, or saved before pairs were
    judged from their rounds)."""
    if entry.get("pair_ratios_from") not in ("quads", "rounds"):
        return None
    ratios = entry.get("pair_ratios")
    if not (isinstance(ratios, list) and len(ratios) == len(entry["base_medians_s"])
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
                    for v in ratios)):
        raise ValueError(f"entry {entry.get('name')!r}: pair_ratios {ratios!r}: allowed a ratio > 0 per pair")
    return [float(v) for v in ratios]


def _pair_errors(entry: dict) -> list[float] | None:
    """An entry's per-pair standard errors as saved (null: unknown, inf), or None (saved before they
    were, or pairs of medians)."""
    errors = entry.get("pair_errors")
    if errors is None:
        return None
    ok = isinstance(errors, list) and len(errors) == len(entry["base_medians_s"]) and all(
        v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0)
        for v in errors)
    if not ok:
        raise ValueError(f"entry {entry.get('name')!r}: pair_errors {errors!r}: allowed a number >= 0 or null per "
                         "pair")
    return [math.inf if v is None else float(v) for v in errors]


def _cpus(data: Any) -> list[list[int | None]] | None:
    """An entry's per-pair CPUs as saved (a list per pair of a CPU or null per rank), or None
    (saved before they were recorded, or not recorded)."""
    def is_cpu(c: Any) -> bool:
        return c is None or (isinstance(c, int) and not isinstance(c, bool) and c >= 0)

    if data is None:
        return None
    if not (isinstance(data, list) and all(isinstance(p, list) and all(map(is_cpu, p)) for p in data)):
        raise ValueError(f"CPUs per pair {data!r}: allowed a list per pair of a CPU number or null per rank")
    return [list(p) for p in data]


RENDERERS = Renderers(text=render_text, markdown=render_markdown, github=render_github, json=to_json)


def render_as(res: ABResult, fmt: str) -> str:
    """The A/B run in one of gate/formats.py's FORMATS."""
    return formats.render_as(res, fmt, RENDERERS)
