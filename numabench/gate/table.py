"""The baseline gate's verdicts in each of gate/formats.py's formats: the verdict table and summary lines (the terminal, the
session's "numabench regression gate" section), Markdown (a job summary), GitHub Actions
workflow commands (one annotation per regression), JSON (anything else), and the per-entry
record a gated session writes into extra_info["gate"]. Library code does not print: each
function returns text or lines."""
from __future__ import annotations

import functools
import json
import math
import statistics
from typing import Any, Sequence

from numabench.gate import formats
from numabench.gate.band import GateRule
from numabench.gate.formats import Renderers, escape_data, escape_property, format_table
from numabench.gate.rule import (
    CONFIRM_INVOCATIONS,
    FILL_COMMAND,
    INFORMATIONAL,
    INSUFFICIENT,
    MIN_EXCESS_S,
    NO_BASELINE,
    NO_DATA,
    OTHER_HARDWARE,
    SAME,
    SLOWER,
    UNRESOLVED,
    VERDICTS,
    CompareResult,
    Row,
)


def gate_record(row: Row, rule: GateRule) -> dict:
    """What a gated run's entry records of its verdict (extra_info["gate"]), enough for an offline
    compare to judge as the session did."""
    return {"verdict": row.verdict, "confirmation": row.confirm_verdict,
            CONFIRM_INVOCATIONS: len(row.confirm_medians), "threshold_pct": rule.threshold_pct,
            "coarsest_pct": rule.coarsest_pct, "noise_multiple": rule.noise_multiple,
            "min_invocations": rule.min_invocations, "min_runs": rule.min_runs, "entry_threshold_pct": row.threshold_pct,
            "detectable_pct": row.detectable_pct, "beyond_band_pct": row.beyond_band_pct, "why": row.why or None}


def _ms(s: float) -> str:
    return f"{s * 1e3:.4g}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}"


HEADER = ("benchmark", "baseline ms", "band ms (invocations)", "new ms", "change %", "beyond band %",
          "threshold %", "detects %", "verdict", "confirmation")


def _plain(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def table_rows(rows: Sequence[Row]) -> list[tuple[str, ...]]:
    out = []
    for r in rows:
        band = "-" if r.band is None else f"{_ms(r.band.low)}-{_ms(r.band.high)} ({r.band.invocations})"
        new = "-" if not r.new_medians else _ms(r.new_value) + (
            "" if not r.confirm_medians else f" / {_ms(statistics.median(r.confirm_medians))}")
        out.append((r.name, "-" if r.band is None else _ms(r.band.center), band, new, _pct(r.change_pct),
                    _pct(r.beyond_band_pct), _plain(r.threshold_pct), _plain(r.detectable_pct), r.verdict_text,
                    r.confirmed_text))
    return out


def rule_line(rule: GateRule) -> str:
    """The rule in one sentence, for every output."""
    return (f"verdict: the new value (median of invocation medians) beyond the baseline's band of invocation "
            f"medians by more than the entry's threshold, max({rule.threshold_pct:g}%, {rule.noise_multiple:g} x "
            f"its spread between invocations); gated only with >= {rule.min_invocations} invocations from >= "
            f"{rule.min_runs} runs (and 2+ machines when judging another) and a detectable change <= "
            f"{rule.coarsest_pct:g}%")


def summary_lines(res: CompareResult) -> list[str]:
    counts = res.counts()
    lines = [f"{len(res.rows)} entries: " + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS)]
    if res.foreign:
        lines.append(foreign_warning(res))
    floored = [r for r in res.rows if r.under_floor]
    if floored:
        lines.append(f"{len(floored)} entries beyond their threshold in % but by less than {MIN_EXCESS_S * 1e6:g} us "
                     "(the timer's resolution): same")
    gated = [r for r in res.gated if r.detectable_pct is not None]
    if gated:
        det = sorted(r.detectable_pct for r in gated)
        lines.append(f"gated: {len(gated)} entries; smallest slowdown they detect: {det[0]:.1f}% to {det[-1]:.1f}% "
                     f"(median {statistics.median(det):.1f}%)")
    flagged = [r for r in res.rows if r.verdict == SLOWER and r.confirm_verdict is not None]
    if flagged:
        lines.append(f"confirmation: {sum(r.confirm_verdict == SLOWER for r in flagged)} of the {len(flagged)} "
                     "entries judged slower were slower again in fresh invocations")
        unresolved = [r for r in flagged if r.confirm_verdict == UNRESOLVED]
        if unresolved:
            lines.append(f"WARNING: {len(unresolved)} entries judged slower whose confirmation was too noisy to "
                         f"resolve {res.rule.coarsest_pct:g}% (unresolved, NOT FAILED; re-run on a quieter machine): "
                         + ", ".join(f"{r.name} (confirmation detects {r.confirm_detectable_pct:.0f}%, "
                                     f"{len(r.confirm_medians)} invocations)" for r in unresolved))
    if res.only_baseline:
        lines.append(f"{len(res.only_baseline)} baseline entries not measured in this run (not compared)")
    if counts.get(INSUFFICIENT):
        lines.append(f"WARNING: {counts[INSUFFICIENT]} entries have insufficient data (band of fewer than "
                     f"{res.rule.min_invocations} invocations or {res.rule.min_runs} runs, or from one machine "
                     f"judging another): NOT GATED; fill their bands: {FILL_COMMAND}")
    if counts.get(INFORMATIONAL):
        noisy = sorted((r for r in res.rows if r.verdict == INFORMATIONAL), key=lambda r: -r.band.spread_pct)
        lines.append(f"{counts[INFORMATIONAL]} entries informational (too noisy to detect {res.rule.coarsest_pct:g}%; "
                     f"measured, NOT GATED; numabench ab judges them on one machine): spread between invocations "
                     + ", ".join(f"{r.name} {r.band.spread_pct:.1f}%" for r in noisy[:8])
                     + (f", ... {len(noisy) - 8} more" if len(noisy) > 8 else ""))
    if counts.get(NO_BASELINE):
        lines.append(f"{counts[NO_BASELINE]} entries have no baseline entry: NOT GATED (save a baseline that "
                     "holds them)")
    if counts.get(NO_DATA):
        lines.append(f"{counts[NO_DATA]} entries hold a mean only (imported): NOT GATED")
    g = res.geomean_ratio
    if g is not None:
        lines.append(f"geometric mean of new/baseline: {g:.4f} ({(g - 1) * 100:+.2f}%)")
    if res.regressions:
        lines.append(f"REGRESSION: {len(res.regressions)} entries slower than the baseline's band by more than "
                     "their threshold")
    return lines


def foreign_warning(res: CompareResult) -> str:
    return (f"WARNING: the runs were measured on different hardware ({res.baseline_key!r} vs {res.new_key!r}, "
            "--allow-foreign): every difference is the hardware's as much as the code's; no entry is judged "
            f"slower or faster ({OTHER_HARDWARE}), and none fails the run")


def render(res: CompareResult, *, show: str = "all") -> str:
    """Text for the terminal. ``show``: all, changed (everything but "same")."""
    rows = res.rows if show == "all" else [r for r in res.rows if r.verdict != SAME]
    lines = [f"baseline: {res.baseline} [{res.baseline_key}]", f"new: {res.new} [{res.new_key}]",
             rule_line(res.rule), ""]
    lines += format_table(HEADER, table_rows(rows))
    lines.append("")
    lines += summary_lines(res)
    return "\n".join(lines)


def render_markdown(res: CompareResult, *, show: str = "changed") -> str:
    """A Markdown summary: the verdict line, the table (``show``: all, or changed: every row
    that is not "same" and has a baseline entry: the entries without one are counted and named
    in a line, not tabled, so a job summary stays short), the summary lines."""
    rows = res.rows if show == "all" else [r for r in res.rows if r.verdict not in ("same", NO_BASELINE)]
    status = (f"**{len(res.regressions)} regression(s)**" if res.regressions
              else "**no regression**")
    out = [f"### numabench gate: {status}", "",
           f"baseline `{res.baseline}` [`{res.baseline_key}`], new `{res.new}` [`{res.new_key}`]; "
           f"{rule_line(res.rule)}; confirmed by fresh invocations where the run made them.", ""]
    for warning in warnings(res):
        out += [f"> [!WARNING]\n> {warning}", ""]
    if rows:
        out.append("| " + " | ".join(HEADER) + " |")
        out.append("|" + "---|" * len(HEADER))
        for cells in table_rows(rows):
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        out.append("")
    elif show != "all":
        out += ["Every compared entry is within its band.", ""]
    missing = [r.name for r in res.rows if r.verdict == NO_BASELINE]
    if missing and show != "all":
        out += [f"{len(missing)} entries have no baseline entry (not tabled; --all lists them): "
                + ", ".join(f"`{n}`" for n in missing[:5]) + (", ..." if len(missing) > 5 else ""), ""]
    out += [f"- {line}" for line in summary_lines(res)]
    return "\n".join(out) + "\n"


def warnings(res: CompareResult) -> list[str]:
    """What a reader must not miss although it fails nothing: entries that are not gated."""
    out = [foreign_warning(res)] if res.foreign else []
    thin = [r.name for r in res.rows if r.verdict == INSUFFICIENT]
    if thin:
        out.append(f"{len(thin)} entries have insufficient data and are NOT GATED ({', '.join(thin[:5])}"
                   f"{', ...' if len(thin) > 5 else ''}): fill their bands with {FILL_COMMAND}")
    noisy = [r for r in res.rows if r.verdict == INFORMATIONAL]
    if noisy:
        out.append(f"{len(noisy)} entries are informational, too noisy to detect {res.rule.coarsest_pct:g}% and NOT "
                   f"GATED ({', '.join(f'{r.name} spread {r.band.spread_pct:.1f}%' for r in noisy[:5])}"
                   f"{', ...' if len(noisy) > 5 else ''}): judge them with numabench ab on one machine")
    unresolved = [r.name for r in res.rows if r.verdict == SLOWER and r.confirm_verdict == UNRESOLVED]
    if unresolved:
        out.append(f"{len(unresolved)} entries judged slower could not be confirmed, their confirmation too noisy "
                   f"(unresolved, NOT FAILED: {', '.join(unresolved[:5])}{', ...' if len(unresolved) > 5 else ''}): "
                   "re-run on a quieter machine")
    return out


def _describe(row: Row) -> str:
    band = row.band
    text = (f"{row.name}: {row.new_value * 1e3:.4g} ms, baseline band {band.low * 1e3:.4g}-{band.high * 1e3:.4g} ms "
            f"({band.invocations} invocations), {row.beyond_band_pct:+.1f}% beyond it")
    if row.confirm_medians:
        text += f"; confirmation {statistics.median(row.confirm_medians) * 1e3:.4g} ms: {row.confirmed_text}"
    return text


def render_github(res: CompareResult) -> str:
    """GitHub Actions workflow commands: an error per regression, a warning per entry judged
    slower that its confirmation did not confirm, a notice with the summary."""
    lines = []
    for row in res.rows:
        if row.regression:
            lines.append(f"::error title={escape_property('numabench regression ' + row.name)}::"
                         f"{escape_data(_describe(row))}")
        elif row.verdict == SLOWER:
            lines.append(f"::warning title={escape_property('numabench: not confirmed ' + row.name)}::"
                         f"{escape_data(_describe(row))}")
    for warning in warnings(res):
        title = "numabench: other hardware" if warning.startswith("WARNING: the runs were measured on different") \
            else "numabench: not gated"
        lines.append(f"::warning title={title}::{escape_data(warning)}")
    lines.append(f"::notice title=numabench gate::{escape_data('; '.join(summary_lines(res)))}")
    return "\n".join(lines) + "\n"


def _num(v: float | None) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def to_json(res: CompareResult) -> dict[str, Any]:
    """Everything the table says, as data (seconds, percent)."""
    return {
        "baseline": res.baseline, "new": res.new, "baseline_key": res.baseline_key, "new_key": res.new_key,
        "threshold_pct": res.threshold_pct, "coarsest_pct": res.rule.coarsest_pct,
        "noise_multiple": res.rule.noise_multiple, "min_invocations": res.rule.min_invocations,
        "counts": res.counts(), "regressions": len(res.regressions), "warnings": warnings(res),
        "geomean_ratio": res.geomean_ratio, "exit_code": res.exit_code, "only_baseline": res.only_baseline,
        "entries": [{
            "name": r.name, "fullname": r.fullname, "verdict": r.verdict, "confirmation": r.confirm_verdict,
            "regression": r.regression, "gated": r.gated, "direction": r.direction, "why": r.why or None,
            "threshold_pct": r.threshold_pct, "detectable_pct": r.detectable_pct,
            "spread_pct": None if r.band is None else r.band.spread_pct,
            "band_machines": None if r.band is None else len(r.band.machines),
            "band_s": None if r.band is None else [r.band.low, r.band.high],
            "band_invocations": None if r.band is None else r.band.invocations,
            "baseline_s": None if r.band is None else r.band.center,
            "new_s": _num(r.new_value), "new_medians_s": r.new_medians, "confirm_medians_s": r.confirm_medians,
            "change_pct": r.change_pct, "beyond_band_pct": r.beyond_band_pct,
        } for r in res.rows],
        "summary": summary_lines(res),
    }


def render_refusal(message: str, fmt: str) -> str | None:
    """A refused comparison (a usage error: foreign hardware, no baseline, a bad file) in the
    machine-read formats, for stdout; None for text and markdown (stderr carries it)."""
    if fmt == "json":
        return json.dumps({"error": message, "exit_code": 2, "regressions": None, "entries": []}, indent=2) + "\n"
    if fmt == "github":
        return f"::error title=numabench compare refused::{escape_data(message)}\n"
    return None


def render_as(res: CompareResult, fmt: str, *, show: str = "all") -> str:
    """The comparison in one of gate/formats.py's FORMATS; ``show`` (all, changed) for text and Markdown."""
    return formats.render_as(res, fmt, Renderers(text=functools.partial(render, show=show),
                                                 markdown=functools.partial(render_markdown, show=show),
                                                 github=render_github, json=to_json))


def session_lines(res: CompareResult, confirm_invocations: int, *, verbose: bool) -> list[tuple[str, dict[str, bool]]]:
    """The session's "numabench regression gate" section, line by line with its markup (red,
    yellow) for the terminal; ``verbose`` lists the entries judged the same too."""
    shown = res.rows if verbose else [r for r in res.rows if r.verdict != SAME]
    out: list[tuple[str, dict[str, bool]]] = [
        (f"baseline: {res.baseline} [{res.baseline_key}]", {}),
        (f"{rule_line(res.rule)}; gated entries judged slower re-run {confirm_invocations}x as fresh "
         "invocations (confirmation)", {})]
    if shown:
        out += [(line, {}) for line in format_table(HEADER, table_rows(shown))]
    hidden = len(res.rows) - len(shown)
    if hidden:
        out.append((f"({hidden} entries 'same' not listed; -v lists every entry)", {}))
    for line in summary_lines(res):
        out.append((line, {"red": line.startswith("REGRESSION"), "yellow": "NOT GATED" in line or "WARNING" in line}))
    return out
