"""A family's page of one hardware key: what changed first, then its entries grouped by phase and
the other axes, each row with its history as a sparkline; a click (or a link to the row) shows
the history large in the chart panel, which stays in view. A history point is a run's own
measurement (the invocations it added); its bar is their range; a change point is coloured by
its direction and says what weakens it."""
from __future__ import annotations

from numabench.publish.page_changed import changed_block, changed_body
from numabench.publish.pages import esc, fmt_band, fmt_time, key_nav, page, runs_table, table, when_text

FAMILY_ITEMS = 6  # changed entries listed before the rest are folded
NOTE_WORDS = {"coincides with": "new machine", "inside this run's band": "inside its band",
              "unconfirmed": "unconfirmed"}


def short_notes(notes: list[str]) -> list[str]:
    """A change point's notes as the row and the chart label say them in a word or two."""
    return [next((short for long, short in NOTE_WORDS.items() if long in n), n) for n in notes]


def history_chart(e: dict, runs: list[dict]) -> dict:
    """The chart specification of one entry's history (site.js draws it): the key's runs along x
    (each by its one name), a point and a bar per run that measured the entry, change points
    as lines coloured by direction."""
    pts = []
    for p in e["points"]:
        r = runs[p["run"]]
        carried = p["of"] - p["n"]
        pts.append([p["run"], p["v"], p["lo"], p["hi"],
                    f"{r['name']}: {when_text(r['when'])}, commit {r['commit'][:8]}; {p['n']} invocation(s) measured "
                    f"in this run" + (f" ({carried} more carried from earlier runs, not drawn)" if carried else "")
                    + f"; measured on {', '.join(p['machines'])}"])
    vlines = []
    for c in e["changes"]:
        notes = "; ".join(c["notes"])
        vlines.append([c["run"], f"change point at {runs[c['run']]['name']}: {fmt_time(c['before'])} -> "
                                 f"{fmt_time(c['after'], c['before'])} ({c['pct']:+.1f}%, {c['dir']})"
                                 + (f"; {notes}" if notes else ""),
                       1 if c["dir"] == "slower" else -1,
                       f"{c['pct']:+.1f}%" + ("*" if c["notes"] else "")])
    return {"title": e["title"], "entry": e["name"], "kind": "history", "xlabel": "run", "ylabel": "median time",
            "yunit": "s", "xlog": False, "ylog": False, "xticks": [[r["index"], r["name"]] for r in runs],
            "xspan": [0, len(runs) - 1], "vlines": vlines,
            "series": [{"name": "median of the invocations the run measured (bar: their range)", "points": pts,
                        "band": "bars"}]}


def _changes_cell(e: dict, runs: list[dict]) -> str:
    if not e["changes"]:
        return "<span class=\"muted\">-</span>"
    out = []
    for c in e["changes"]:
        notes = short_notes(c["notes"])
        out.append(f"<span class=\"v-{c['dir']}\" title=\"{esc('; '.join(c['notes']))}\">"
                   f"{esc(runs[c['run']]['name'])}: {c['pct']:+.1f}%</span>"
                   + (f" <span class=\"muted\">({esc(', '.join(notes))})</span>" if notes else ""))
    return "<br>".join(out)


def _verdict_cell(v: dict | None, runs: list[dict]) -> str:
    if not v:
        return "<span class=\"muted\">-</span>"
    text = v.get("verdict") or "-"
    extra = f" ({v['beyond_band_pct']:+.1f}%)" if isinstance(v.get("beyond_band_pct"), (int, float)) else ""
    if v.get("confirmation") and text == "slower" and v["confirmation"] != "slower":
        extra += f", confirmation {v['confirmation']}"
    # the newest gated run is not always the newest run: then it is named
    when = "" if v["run"] == len(runs) - 1 else f" <span class=\"muted nowrap\">{esc(runs[v['run']]['name'])}</span>"
    return (f"<span class=\"v-{esc(text.replace(' ', '-'))} nowrap\" title=\"{esc(v.get('why') or '')}\">"
            f"{esc(text)}{esc(extra)}</span>{when}")


def _row(e: dict, k: int, runs: list[dict]) -> list[str]:
    last = e["points"][-1] if e["points"] else None
    if last is None:
        return [esc(e["label"]), f"<div class=\"spark\" data-chart=\"{k}\"></div>", "-", "-", "-", "-",
                _changes_cell(e, runs), _verdict_cell(e["verdict"], runs), "-"]
    held = len(e["points"]) + len(e["carried"])
    return [esc(e["label"]), f"<div class=\"spark\" data-chart=\"{k}\"></div>", fmt_time(last["v"]),
            fmt_band(last["lo"], last["hi"]) if last["n"] > 1 else "<span class=\"muted\">one invocation</span>",
            f"{esc(runs[last['run']]['name'])} <span class=\"muted\" title=\"measured in {len(e['points'])} of the "
            f"{held} runs holding it\">({len(e['points'])} of {held})</span>",
            f"<span title=\"the run holds {last['of']} (pooled)\">{last['n']}</span>",
            _changes_cell(e, runs), _verdict_cell(e["verdict"], runs), esc(", ".join(last["machines"]))]


def family_html(key: dict, fp: dict, elsewhere: list[tuple[str, str]]) -> str:
    """``elsewhere``: (key, page) of the same family on the other hardware keys."""
    runs = key["runs"]
    charts: list[dict] = []
    groups = []
    index_of: dict[str, int] = {}
    first_with_change = None
    for g in fp["groups"]:
        rows, attrs = [], []
        for e in g["entries"]:
            k = len(charts)
            charts.append(history_chart(e, runs))
            index_of[e["anchor"]] = k
            if first_with_change is None and e["changes"]:
                first_with_change = k
            rows.append(_row(e, k, runs))
            attrs.append(f" id=\"{esc(e['anchor'])}\" data-entry=\"{k}\"")
        groups += [f"<section class=\"group\" data-title=\"{esc(g['title'])}\"><h3>{esc(g['title'])}</h3>",
                   table(["entry", "history", "newest", "its band", "measured in (runs)", "invocations",
                          "change points", "gate verdict", "measured on"], rows, num={2, 5}, attrs=attrs,
                         css="entries"), "</section>"]
    ch = fp["changed"]
    biggest = ch["changed"][0]["href"].split("#", 1)[1] if ch and ch["changed"] else None
    first = index_of.get(biggest, first_with_change or 0)
    changes = sum(fp["changes"].values())
    parts = [changed_block(changed_body(ch, limit=FAMILY_ITEMS, link_family=False)),
             f"<p class=\"note\">{fp['entries']} entries over {len(runs)} run(s); {changes} change point(s) "
             "(red: slower, green: faster; * a weak one: it coincides with a new machine, the previous value lies "
             "inside the new band, or no later measurement has confirmed it yet). A point is a run's own measurement: runs that only carried an entry forward "
             "have none. Click a row, or an entry above, to see its history in the chart; there the wheel zooms, "
             "a drag pans, a double click resets.</p>",
             "<div class=\"panel detail\" id=\"detail-panel\"><h4 id=\"detail-title\"></h4><div id=\"detail\"></div>"
             "</div>",
             "<p class=\"filter\"><input id=\"filter\" type=\"search\" placeholder=\"filter entries, e.g. h2d bind:0 "
             "268M\"> <span id=\"filter-count\" class=\"muted\"></span></p>",
             *groups, runs_table(runs)]
    nav = f"<span class=\"sep\">{esc(key['key'])}:</span>{key_nav(key, fp['file'])}"
    if elsewhere:
        nav += "<span class=\"sep\">other keys:</span>" + "".join(
            f"<a href=\"{esc(f)}\">{esc(k)}</a>" for k, f in elsewhere)
    return page(f"{key['key']}: {fp['family']}", "\n".join(parts), {"charts": charts, "first": first,
                                                               "runs": [[r["name"], r["source"]] for r in runs]}, nav)
