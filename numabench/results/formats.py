"""A comparison's verdicts for a CI system: Markdown (a job summary), GitHub Actions
workflow commands (one annotation per regression) and JSON (anything else)."""
from __future__ import annotations

import json
import math
import statistics
from typing import Any

from numabench.results.compare import (
    FILL_COMMAND,
    HEADER,
    INFORMATIONAL,
    INSUFFICIENT,
    NO_BASELINE,
    SLOWER,
    CompareResult,
    Row,
    render,
    foreign_warning,
    rule_line,
    summary_lines,
    table_rows,
)

FORMATS = ("text", "markdown", "github", "json")


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
    return out


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


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
            lines.append(f"::error title={_escape_property('numabench regression ' + row.name)}::"
                         f"{_escape_data(_describe(row))}")
        elif row.verdict == SLOWER:
            lines.append(f"::warning title={_escape_property('numabench: not confirmed ' + row.name)}::"
                         f"{_escape_data(_describe(row))}")
    for warning in warnings(res):
        title = "numabench: other hardware" if warning.startswith("WARNING: the runs were measured on different") \
            else "numabench: not gated"
        lines.append(f"::warning title={title}::{_escape_data(warning)}")
    lines.append(f"::notice title=numabench gate::{_escape_data('; '.join(summary_lines(res)))}")
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
        return f"::error title=numabench compare refused::{_escape_data(message)}\n"
    return None


def render_as(res: CompareResult, fmt: str, *, show: str = "all") -> str:
    if fmt == "text":
        return render(res, show=show) + "\n"
    if fmt == "markdown":
        return render_markdown(res, show=show)
    if fmt == "github":
        return render_github(res)
    if fmt == "json":
        return json.dumps(to_json(res), indent=2) + "\n"
    raise ValueError(f"unknown format {fmt!r}: allowed {', '.join(FORMATS)}")
