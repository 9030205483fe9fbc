"""The site's HTML: an index, one page per hardware key and family, one NUMA page per key. Each
page embeds its chart specifications as JSON that site.js draws; tables are plain HTML, so the
numbers read without script too."""
from __future__ import annotations

import html
import json
from datetime import datetime, timezone

from numabench.cases import format_size

NAV_INDEX = "index.html"


def esc(v: object) -> str:
    return html.escape(str(v), quote=True)


def ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.4g}"


def family_file(key: dict, fam: str) -> str:
    return f"{key['slug']}--{fam}.html"


def numa_file(key: dict) -> str:
    return f"{key['slug']}--numa.html"


def page(title: str, body: str, data: dict | None = None, nav: str = "") -> str:
    # "</" inside a JSON string would end the <script> element early
    blob = json.dumps(data or {"charts": []}, separators=(",", ":")).replace("</", "<\\/")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><link rel=\"stylesheet\" href=\"site.css\"></head>\n<body>"
            f"<header><a href=\"{NAV_INDEX}\">numabench</a>{nav}<h1>{esc(title)}</h1></header><main>\n{body}\n</main>"
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


def runs_table(runs: list[dict]) -> str:
    rows = [[esc(r["index"]), esc(r["label"]), esc(r["when"]), f"<code>{esc(r['commit'])}</code>",
             esc(r["machine"]), esc(", ".join(r["invocation_machines"]) or "-"), esc(", ".join(r["gpus"]) or "-"),
             esc(r["kernel"] or "-"), esc(r["entries"]), esc(r["gated"] or "-")] for r in runs]
    return table(["run", "file", "when (UTC)", "commit", "machine", "invocations measured on", "GPUs", "kernel",
                  "entries", "gated"], rows, num={0, 8, 9}, css="runs")


def index_page(model: dict, source: str) -> str:
    parts = [f"<p class=\"note\">Saved runs of {len(model['keys'])} hardware key(s) from <code>{esc(source)}</code>, "
             f"built {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC. A change point: a run beyond the previous "
             f"run's band (the range of its invocation medians) by more than {model['threshold_pct']:g}%, the next "
             "run agreeing (numabench history's rule).</p>"]
    for k in model["keys"]:
        fams = [[f"<a href=\"{esc(family_file(k, f['slug']))}\">{esc(f['name'])}</a>", esc(f["entries"]),
                 f"<span class=\"{'chg' if f['changes'] else 'muted'}\">{f['changes']}</span>",
                 esc(", ".join(f"{n} {v}" for v, n in sorted(f["verdicts"].items())) or "-")]
                for f in k["families"]]
        parts += [f"<h2 id=\"{esc(k['slug'])}\">{esc(k['key'])}</h2>",
                  f"<p><a href=\"{esc(numa_file(k))}\">NUMA placement: policies, weighted interleave, advisor</a></p>",
                  "<h3>Runs (oldest first)</h3>", runs_table(k["runs"]), "<h3>Families</h3>",
                  table(["family", "entries", "change points", "newest gate verdicts (the newest gated run)"], fams, num={1, 2})]
    return page("numabench results", "\n".join(parts))


def _history_chart(entry: dict, group: str, runs: list[dict]) -> dict:
    ticks = [[r["index"], r["label"].split("_", 1)[0].split("@")[0] + ("@" + r["commit"][:7])] for r in runs]
    pts = [[p["run"], p["v"], p["lo"], p["hi"],
            f"{runs[p['run']]['label']}, {runs[p['run']]['when']}, commit {runs[p['run']]['commit']}; "
            f"measured on {', '.join(p['machines'])}"] for p in entry["points"]]
    return {"title": f"{group}: {entry['label']}", "xlabel": "saved run (commit)", "ylabel": "median time (ms)",
            "xlog": False, "ylog": False, "yscale": 1e3, "xticks": ticks,
            "vlines": [[c["run"], f"change point: {ms(c['before'])} -> {ms(c['after'])} ms ({c['pct']:+.1f}%)"]
                       for c in entry["changes"]],
            "series": [{"name": "median of invocation medians (band: their range)", "points": pts, "band": True}]}


def _verdict_cell(v: dict | None, newest: int) -> str:
    if not v:
        return "<span class=\"muted\">-</span>"
    text = v.get("verdict") or "-"
    extra = f" ({v['beyond_band_pct']:+.1f}%)" if isinstance(v.get("beyond_band_pct"), (int, float)) else ""
    if v.get("run") is not None and v["run"] != newest:
        extra += f", run {v['run']}"  # the newest gated run is not the newest run
    return f"<span class=\"v-{esc(text)}\" title=\"{esc(v.get('why') or '')}\">{esc(text)}{esc(extra)}</span>"


def family_html(key: dict, fp: dict) -> str:
    charts: list[dict] = []
    parts = [f"<p class=\"note\">{sum(len(g['entries']) for g in fp['groups'])} entries over {len(fp['runs'])} "
             f"run(s); {fp['changes']} change point(s). Click a row to see its history in the chart above; there "
             "the wheel zooms, a drag pans, a double click resets.</p>",
             "<div class=\"panel\" style=\"position:sticky;top:0;z-index:5\"><h4 id=\"detail-title\"></h4>"
             "<div id=\"detail\"></div></div>",
             "<p><input id=\"filter\" type=\"search\" size=\"50\" placeholder=\"filter entries, e.g. h2d bind:0 268M\">"
             " <span id=\"filter-count\" class=\"muted\"></span></p>"]
    first = None
    for g in fp["groups"]:
        rows, attrs = [], []
        for e in g["entries"]:
            k = len(charts)
            charts.append(_history_chart(e, g["title"], fp["runs"]))
            if first is None or (e["changes"] and not charts[first]["vlines"]):
                first = k
            last = e["points"][-1] if e["points"] else None
            chg = "; ".join(f"run {c['run']}: {c['pct']:+.1f}%" for c in e["changes"])
            rows.append([esc(e["label"]), f"<div class=\"spark\" data-chart=\"{k}\"></div>",
                         ms(last["v"] if last else None),
                         f"{ms(last['lo'])} to {ms(last['hi'])}" if last else "-", esc(e["invocations"]),
                         f"<span class=\"chg\">{esc(chg)}</span>" if chg else "<span class=\"muted\">-</span>",
                         _verdict_cell(e["verdict"], len(fp["runs"]) - 1), esc(", ".join(last["machines"]) if last else "-")])
            attrs.append(f" data-entry=\"{k}\"")
        parts += [f"<section class=\"group\" data-title=\"{esc(g['title'])}\"><h3>{esc(g['title'])}</h3>",
                  table(["entry", "history", "newest (ms)", "band (ms)", "invocations", "change points",
                         "gate verdict", "measured on"], rows, num={2, 3, 4}, attrs=attrs), "</section>"]
    parts += ["<h2>Runs</h2>", runs_table(fp["runs"])]
    nav = f"<a href=\"{esc(numa_file(key))}\">NUMA</a>"
    return page(f"{key['key']}: {fp['family']}", "\n".join(parts), {"charts": charts, "first": first or 0}, nav)


def numa_html(key: dict) -> str:
    numa = key["numa"]
    charts: list[dict] = []
    nodes = ", ".join(f"node {n.get('id')}: {n.get('cpus')} CPUs{' (no CPUs)' if n.get('cpuless') else ''}"
                      for n in numa["nodes"]) or "not recorded"
    parts = [f"<p class=\"note\">NUMA nodes of the newest run: {esc(nodes)}. Each entry's newest value over the "
             "key's runs.</p>", "<h2>Policies side by side</h2>"]

    def panels(specs: list[dict]) -> str:
        out = []
        for s in specs:
            out.append(f"<div class=\"panel\"><h4>{esc(s['title'])}</h4><div data-chart=\"{len(charts)}\"></div></div>")
            charts.append(s)
        return "<div class=\"grid2\">" + "".join(out) + "</div>"

    if numa["policy_charts"]:
        parts.append(panels(numa["policy_charts"]))
    else:
        parts.append("<p class=\"muted\">No case of this key was measured under two policies or more.</p>")
    parts.append("<h2>Weighted interleave: the model beside the measurements</h2>")
    if numa["advice_charts"]:
        parts += ["<p class=\"note\">t(f) = max(f&middot;t_fast, (1&minus;f)&middot;t_slow, floor); f is the share "
                  "of pages on the faster node, floor = t_fast where the phase crosses the host link "
                  "(numabench advise).</p>", panels(numa["advice_charts"]), "<h2>Advisor</h2>"]
        rows = [[esc(a["case"]), f"bind:{a['fast']} {a['t_fast_ms']:.4g}", f"bind:{a['slow']} {a['t_slow_ms']:.4g}",
                 "yes" if a["link_bound"] else "no", esc(a["best"]), f"{a['best_ms']:.4g}", esc(a["best_basis"]),
                 f"{a['max_slow_share']:.0%}", esc(a["room_basis"]), esc(a["measured"]),
                 "-" if a["max_error_pct"] is None else f"{a['max_error_pct']:.1f}%"] for a in numa["advice"]]
        parts.append(table(["case", "fast node (ms)", "slow node (ms)", "link-bound", "fastest", "time (ms)",
                            "stands on", "max share on slow node (2% budget)", "stands on", "weighted measured",
                            "largest model error"], rows, num={5, 7, 9, 10}))
    else:
        parts.append("<p class=\"muted\">No case of this key was measured bound to two single nodes (bind:A and "
                     "bind:B): nothing to model (a machine with one NUMA node has no placement choice).</p>")
    nav = "".join(f"<a href=\"{esc(family_file(key, f['slug']))}\">{esc(f['name'])}</a>" for f in key["families"])
    return page(f"{key['key']}: NUMA placement", "\n".join(parts), {"charts": charts}, nav)


__all__ = ["index_page", "family_html", "numa_html", "family_file", "numa_file", "format_size"]
