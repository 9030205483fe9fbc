"""An A/B run (``numabench ab --json``) as a page of its own, a pull request's report: what
changed first (the verdict counts, then every entry not ``same``, slowest first, and the
entries not judged), a chart of every entry's ratio head/base with its interval beside the
no-change line and the threshold, then the whole table. The index lists each A/B run and
says which need a look (``needs_look``)."""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

from numabench.gate.rule import FASTER, SAME, SLOWER
from numabench.publish.page_changed import counts_text
from numabench.publish.pages import esc, fmt_time, page, table, when_text
from numabench.ab.run import ABResult, ABRow
from numabench.ab.formats import (by_concern, confidence_text, counts, lean_line, leaning, rule_line, sorted_rows,
                                  stopped_note, verdict_text)
from numabench.gate.pairs import UNRESOLVED

# the chart's colours per verdict (site.js: red says slower, green faster)
VERDICT_COLOURS = {SLOWER: "#d62728", FASTER: "#2ca02c", SAME: "#7f7f7f", UNRESOLVED: "#ff7f0e"}
NOT_JUDGED = "not judged"


@dataclass
class ABPage:
    label: str  # the file it came from
    file: str  # its page
    result: ABResult

    @property
    def counts(self) -> dict[str, int]:
        out = {k: v for k, v in counts(self.result).items() if v}
        if self.result.missing:
            out[NOT_JUDGED] = len(self.result.missing)
        return out

    @property
    def needs_look(self) -> bool:
        """Slower, unresolved, not judged, or a session stopped before its end: a verdict a reader must
        look at."""
        c = self.counts
        return bool(c.get(SLOWER) or c.get(UNRESOLVED) or c.get(NOT_JUDGED) or self.result.stopped_by)

    def families_to_look_at(self) -> dict[str, dict[str, int]]:
        """family -> its entries per verdict that needs a look (slower, unresolved, not judged)."""
        out: dict[str, dict[str, int]] = {}
        for r in self.result.rows:
            if r.verdict in (SLOWER, UNRESOLVED):
                fam = out.setdefault(family_of(r.name), {})
                fam[r.verdict] = fam.get(r.verdict, 0) + 1
        for line in self.result.missing:
            fam = out.setdefault(family_of(line), {})
            fam[NOT_JUDGED] = fam.get(NOT_JUDGED, 0) + 1
        return out


def family_of(name: str) -> str:
    """'benchmarks/test_cpu_adam.py::test_cpu_adam[step-...]' (or a pytest FAILED line) -> 'cpu_adam'."""
    found = re.search(r"\btest_([a-z0-9_]+)\[", name)
    return found.group(1) if found else "other"


def ab_pages(results: list[tuple[str, ABResult]]) -> list[ABPage]:
    """One page per A/B run, newest first, each file named after its source file."""
    ordered = sorted(results, key=lambda lr: (lr[1].when, lr[0]), reverse=True)
    used: set[str] = set()
    out = []
    for label, res in ordered:
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", label.rsplit("/", 1)[-1].removesuffix(".json")).strip("-") or "ab"
        file, n = f"ab-{slug}.html", 2
        while file in used:
            file, n = f"ab-{slug}-{n}.html", n + 1
        used.add(file)
        out.append(ABPage(label, file, res))
    return out


def side_text(side) -> str:
    env = " ".join(f"{k}={v}" for k, v in side.env.items())
    return (f"<b>{esc(side.label)}</b>" + (f" <code>{esc(side.commit[:12])}</code>" if side.commit else "")
            + (f" with <code>{esc(env)}</code>" if env else ""))


def _pct(r: ABRow) -> str:
    return f"{(r.ratio - 1) * 100:+.2f}%"


def _interval(r: ABRow) -> str:
    return f"{(r.low - 1) * 100:+.2f}% to {(r.high - 1) * 100:+.2f}%"


def _resolution(r: ABRow) -> str:
    """Its resolution, and where its worker run confirmed a change, on how many pairs."""
    text = "-" if r.resolution_pct is None else f"{r.resolution_pct:.2f}%"
    if r.confirmation_pairs:
        text += f" ({len(r.base_s)} pairs, {r.confirmation_pairs} confirming)"
    return text


def _row_cells(i: int, r: ABRow, anchor: bool) -> list[str]:
    cls = f"v-{r.verdict}"
    name = f"<span id=\"e{i}\">{esc(r.name)}</span>" if anchor else f"<a href=\"#e{i}\">{esc(r.name)}</a>"
    return [str(i), f"<span class=\"{cls}\">{esc(verdict_text(r))}</span>", f"<span class=\"{cls}\">{_pct(r)}</span>",
            _interval(r), _resolution(r), esc(family_of(r.name)), name,
            fmt_time(statistics.median(r.base_s)), fmt_time(statistics.median(r.head_s))]


HEADER = ["#", "verdict", "head/base", "interval", "resolves", "family", "benchmark", "base", "head"]
NUM = {0, 2, 3, 4, 7, 8}


def chart_spec(res: ABResult, rows: list[ABRow]) -> dict:
    """Each entry's ratio with its interval, one point per row of the table (x: its #), one series
    per verdict; the no-change line at 1 and the threshold at 1 + threshold."""
    series = []
    for verdict, colour in VERDICT_COLOURS.items():
        pts = [[i, r.ratio, r.low, r.high, f"{r.name}<br>resolves {_resolution(r)}"]
               for i, r in enumerate(rows, 1) if r.verdict == verdict]
        if pts:
            series.append({"name": verdict, "points": pts, "line": False, "color": colour})
    n = max(1, len(rows))
    series.append({"name": "no change", "points": [[0.5, 1.0], [n + 0.5, 1.0]], "marker": "none",
                   "color": "#555555"})
    series.append({"name": f"threshold +{res.threshold_pct:g}%", "points": [[0.5, 1 + res.threshold_pct / 100],
                   [n + 0.5, 1 + res.threshold_pct / 100]], "marker": "none", "color": "#9467bd"})
    every = max(1, n // 40)
    return {"title": "ratio head/base per entry", "kind": "xy", "xlabel": "entry (# in the table below)",
            "ylabel": "head/base", "bandlabel": f"{confidence_text(res)} interval",
            "xticks": [[i, str(i)] for i in range(1, n + 1) if i % every == 0 or i == 1], "series": series}


def ab_html(p: ABPage) -> str:
    res = p.result
    rows = sorted_rows(res)
    c = p.counts
    status = (f"<span class=\"v-slower\">REGRESSION: {c[SLOWER]} of {len(rows)} entries slower</span>"
              if c.get(SLOWER) else f"no regression in {len(rows)} entries")
    number = {id(r): i for i, r in enumerate(rows, 1)}  # each entry's # in the whole table and the chart
    changed = [(number[id(r)], r) for r in by_concern(res) if r.verdict != SAME]
    parts = [f"<p class=\"lead v-slower\">{esc(stopped_note(res))}.</p>"] if res.stopped_by else []
    parts += [f"<p class=\"lead\">{status} &mdash; {counts_text(c)}; exit {res.exit_code}.</p>",
             f"<p>head {side_text(res.head)} against base {side_text(res.base)} &middot; machine "
             f"<code>{esc(res.hardware_key or 'not recorded')}</code> &middot; {esc(when_text(res.when))}</p>"]
    if changed:
        what = ("<p class=\"muted\">Every entry not <i>same</i>: the slower ones first, then those unresolved "
                "that lean slower or faster, each group slowest first: its ratio head/base, the "
                f"{confidence_text(res)} interval of that ratio, and the smallest change it resolves on this run.</p>"
                + table(HEADER, [_row_cells(i, r, False) for i, r in changed], num=NUM, css="ab changes-ab"))
        leans = leaning(res)
        if leans:
            what += ("<ul class=\"leaning\">" + "".join(f"<li class=\"v-unresolved\">{esc(lean_line(r, res))}</li>"
                                                          for r in leans) + "</ul>")
    else:
        what = "<p class=\"muted chg-none\">No entry slower, faster or unresolved.</p>"
    if res.missing:
        what += (f"<p class=\"v-slower\">{len(res.missing)} entries NOT JUDGED (not measured in every pair of "
                 "both sides):</p><ul class=\"missing\">"
                 + "".join(f"<li><code>{esc(m)}</code></li>" for m in res.missing) + "</ul>")
    parts.append(f"<section id=\"what-changed\" class=\"changed\"><h2>What changed</h2>{what}</section>")
    parts.append("<div class=\"panel\"><h4>Every entry's ratio head/base with its interval (slower above the "
                 "no-change line)</h4><div data-chart=\"0\"></div></div>")
    parts.append(f"<h2>Every entry ({len(rows)}), slowest first</h2>"
                 + table(HEADER, [_row_cells(i, r, True) for i, r in enumerate(rows, 1)], num=NUM, css="ab"))
    parts.append(f"<h2>How it was judged</h2><p class=\"note\">{esc(rule_line(res))}</p>"
                 f"<p class=\"note\">Selection: <code>{esc(' '.join(res.selection) or '-')}</code>; from "
                 f"<code>{esc(p.label)}</code>.</p>")
    return page(f"A/B: {res.head.label} against {res.base.label}", "\n".join(parts),
                {"charts": [chart_spec(res, rows)]})


def ab_index_rows(pages: list[ABPage]) -> str:
    """The index's table of A/B runs, newest first."""
    rows = [[f"<a href=\"{esc(p.file)}\">{esc(p.label)}</a>", esc(when_text(p.result.when)),
             side_text(p.result.head), side_text(p.result.base), f"<code>{esc(p.result.hardware_key or '-')}</code>",
             counts_text(p.counts), "<b class=\"v-slower\">needs a look</b>" if p.needs_look else "ok"]
            for p in pages]
    return table(["A/B run", "when", "head", "base", "machine", "verdicts", ""], rows, css="ab-runs")
