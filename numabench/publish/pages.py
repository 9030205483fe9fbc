"""What every page of the site shares: the HTML shell (the chart specifications embedded as JSON
that site.js draws), tables, times in a unit that fits them, the navigation between keys and
families, and the runs table."""
from __future__ import annotations

import html
import json

NAV_INDEX = "index.html"
# (below this many seconds, scale, unit): a time is shown in the largest unit it reaches 1 in
UNITS = ((1e-3, 1e6, "µs"), (1.0, 1e3, "ms"), (float("inf"), 1.0, "s"))


def esc(v: object) -> str:
    return html.escape(str(v), quote=True)


def time_unit(seconds: float) -> tuple[float, str]:
    """(scale, unit) for showing ``seconds`` (and values near it): us, ms or s."""
    a = abs(seconds)
    return next((scale, unit) for below, scale, unit in UNITS if a < below)


def fmt_time(s: float | None, unit_of: float | None = None) -> str:
    """'12.19 µs', '228.7 ms', '1.234 s'; in the unit of ``unit_of`` where given (a band's two ends
    in one unit)."""
    if s is None:
        return "-"
    scale, unit = time_unit(s if unit_of is None else unit_of)
    return f"{s * scale:.4g} {unit}"


def fmt_band(lo: float, hi: float) -> str:
    scale, unit = time_unit(hi)
    return f"{lo * scale:.4g}&ndash;{hi * scale:.4g} {unit}"


def page(title: str, body: str, data: dict | None = None, nav: str = "") -> str:
    # "</" inside a JSON string would end the <script> element early
    blob = json.dumps(data or {"charts": []}, separators=(",", ":")).replace("</", "<\\/")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><link rel=\"stylesheet\" href=\"site.css\"></head>\n<body>"
            f"<header><nav><a href=\"{NAV_INDEX}\">numabench</a>{nav}</nav><h1>{esc(title)}</h1></header>"
            f"<main>\n{body}\n</main>"
            f"<script type=\"application/json\" id=\"site-data\">{blob}</script>"
            f"<script src=\"site.js\"></script></body></html>\n")


def table(header: list[str], rows: list[list[str]], num: set[int] = frozenset(), attrs: list[str] | None = None,
          css: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = []
    for i, r in enumerate(rows):
        cells = "".join(f"<td class=\"num\">{c}</td>" if j in num else f"<td>{c}</td>" for j, c in enumerate(r))
        body.append(f"<tr{attrs[i] if attrs else ''}>{cells}</tr>")
    cls = f' class="{css}"' if css else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def when_text(when: str) -> str:
    """'2026-11-24T04:59:00' -> '2026-11-24 04:59 UTC'."""
    return f"{when[:10]} {when[11:16]} UTC" if len(when) >= 16 else (when or "date not recorded")


def run_line(r: dict) -> str:
    """A run as the "what changed" block and the tooltips introduce it: name, date, commit, machine."""
    return (f"<b class=\"run-name\">{esc(r['name'])}</b> &middot; {esc(when_text(r['when']))} &middot; commit "
            f"<code>{esc(r['commit'][:8])}</code> &middot; machine <code>{esc(r['machine'])}</code>")


def runs_table(runs: list[dict]) -> str:
    """Every run of a key, oldest first, folded: a reader opens it when a run's details matter."""
    rows = [[f"<b>{esc(r['name'])}</b>", esc(r["source"]), esc(r["when"]), f"<code>{esc(r['commit'])}</code>",
             esc(r["machine"]), esc(r["measured"]), esc(r["carried"]), esc(r["gated"] or "-"),
             esc(", ".join(r["invocation_machines"]) or "-"), esc(", ".join(r["gpus"]) or "-"),
             esc(r["kernel"] or "-")] for r in runs]
    body = table(["run", "source", "when (UTC)", "commit", "machine", "entries measured", "carried (not measured)",
                  "gated", "invocations measured on", "GPUs", "kernel"], rows, num={5, 6, 7}, css="runs")
    return f"<details class=\"runs\"><summary>Runs ({len(runs)}, oldest first)</summary>{body}</details>"


def key_nav(key: dict, here: str = "") -> str:
    """Links to every family page of a key, its NUMA page and its offload page where it has one (the
    page shown not linked)."""
    links = [f"<b>{esc(f['family'])}</b>" if f["file"] == here else
             f"<a href=\"{esc(f['file'])}\">{esc(f['family'])}</a>" for f in key["families"]]
    numa = "<b>NUMA</b>" if key["numa_file"] == here else f"<a href=\"{esc(key['numa_file'])}\">NUMA</a>"
    links.append(numa)
    if key.get("offload_file"):
        off = key["offload_file"]
        links.append("<b>offload</b>" if off == here else f"<a href=\"{esc(off)}\">offload</a>")
    return " ".join(links)
