"""The index: what changed first (each key's newest run against its verdicts), then per key its
families (what changed in each, change points, the newest gate verdicts) and, folded, its runs."""
from __future__ import annotations

from datetime import datetime, timezone

from numabench.publish.page_ab import ABPage, ab_index_rows
from numabench.publish.page_changed import changed_block, changed_body, counts_text
from numabench.publish.pages import esc, key_nav, page, runs_table, table
from numabench.publish.verdicts import SLOWER

INDEX_ITEMS = 4  # changed entries listed per key on the index (the family pages list them all)


def _more(key: dict, shown: int) -> str:
    """Where the changed entries the index leaves out are: each family's own block."""
    fams = [(f, len(f["changed"]["changed"])) for f in key["families"] if f["changed"] and f["changed"]["changed"]
            and f["changed"]["run"]["index"] == key["changed"]["run"]["index"]]
    total = len(key["changed"]["changed"])
    links = ", ".join(f"<a href=\"{esc(f['file'])}#what-changed\">{esc(f['family'])} ({n})</a>" for f, n in fams)
    return f"<p class=\"chg-more\">{total - shown} more; every changed entry, by family: {links}</p>"


def _key_block(key: dict) -> str:
    ch = key["changed"]
    more = _more(key, INDEX_ITEMS) if ch and len(ch["changed"]) > INDEX_ITEMS else ""
    return (f"<div class=\"chg-key\"><h3><a href=\"#k-{esc(key['slug'])}\">{esc(key['key'])}</a></h3>"
            f"{changed_body(ch, limit=INDEX_ITEMS, link_family=True, more=more)}</div>")


def _changes_cell(changes: dict) -> str:
    n = sum(changes.values())
    if not n:
        return "<span class=\"muted\">0</span>"
    parts = [f"<span class=\"v-{d}\">{changes[d]} {d}</span>" for d in ("slower", "faster") if changes.get(d)]
    return f"{n} ({', '.join(parts)})"


def _families(key: dict) -> str:
    runs = key["runs"]
    rows = []
    for f in key["families"]:
        ch = f["changed"]
        what = "-" if not ch else (f"{counts_text(ch['counts']) or 'measured, no verdict'} "
                                   f"<span class=\"muted\">({esc(ch['run']['name'])}, {esc(ch['source'])})</span>")
        gate = "-" if f["verdicts_run"] is None else (
            f"{counts_text(f['verdicts'])} <span class=\"muted\">({esc(runs[f['verdicts_run']]['name'])})</span>")
        rows.append([f"<a href=\"{esc(f['file'])}\">{esc(f['family'])}</a>", esc(f["entries"]), what,
                     _changes_cell(f["changes"]), gate])
    return table(["family", "entries", "what changed (its newest run, verdict source)", "change points in its history",
                  "newest gate verdicts (run)"], rows, num={1}, css="families")


def _look_items(model: dict, ab: list[ABPage]) -> list[str]:
    """What needs a look, one item each: an A/B run with a slower, unresolved or unjudged entry
    (its families named), a key whose newest judged run has a family with slower entries."""
    items = []
    for p in ab:
        if not p.needs_look:
            continue
        fams = ", ".join(f"{esc(f)} ({counts_text(c)})" for f, c in sorted(p.families_to_look_at().items()))
        items.append(f"<li>A/B <a href=\"{esc(p.file)}\">{esc(p.label)}</a>: {counts_text(p.counts)} &mdash; {fams}</li>")
    for k in model["keys"]:
        fams = [f for f in k["families"] if f["changed"] and f["changed"]["counts"].get(SLOWER)]
        if fams:
            links = ", ".join(f"<a href=\"{esc(f['file'])}#what-changed\">{esc(f['family'])}</a> "
                              f"(<span class=\"v-slower\">{f['changed']['counts'][SLOWER]} slower</span>)"
                              for f in fams)
            items.append(f"<li><a href=\"#k-{esc(k['slug'])}\">{esc(k['key'])}</a>: {links}</li>")
    return items


def _look_block(model: dict, ab: list[ABPage]) -> str:
    items = _look_items(model, ab)
    if not items:
        what = "A/B runs and keys" if ab and model["keys"] else ("A/B runs" if ab else "keys")
        return f"<p class=\"look none\">Needs a look: nothing &mdash; no slower verdict in any of the {what} here.</p>"
    return f"<div class=\"look\"><p><b>Needs a look</b> ({len(items)}):</p><ul>{''.join(items)}</ul></div>"


def index_page(model: dict, source: str, ab: list[ABPage] = ()) -> str:
    keys = model["keys"]
    ab = list(ab)
    jump = "".join(f"<a href=\"#k-{esc(k['slug'])}\">{esc(k['key'])}</a>" for k in keys)
    if ab:
        jump += "<span class=\"sep\">A/B:</span><a href=\"#ab-runs\">A/B runs</a>"
    ab_block = (f"<h3 id=\"ab-runs\">A/B runs ({len(ab)}, newest first)</h3>{ab_index_rows(ab)}" if ab else "")
    parts = [changed_block(_look_block(model, ab) + ab_block + "".join(_key_block(k) for k in keys)),
             f"<p class=\"note\">Saved runs of {len(keys)} hardware key(s) and {len(ab)} A/B run(s) from <code>{esc(source)}</code>, built "
             f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC. A history point is a run's own measurement: the "
             "invocations it added (values a merge carried forward from earlier runs are not drawn again). A change "
             f"point: a measurement beyond the previous one's band (the range of its invocation medians) by more than "
             f"{model['threshold_pct']:g}%, the next measurement agreeing (numabench history's rule).</p>"]
    for k in keys:
        parts += [f"<h2 id=\"k-{esc(k['slug'])}\">{esc(k['key'])}</h2>", f"<p class=\"jump\">{key_nav(k)}</p>",
                  _families(k), runs_table(k["runs"])]
    return page("numabench results", "\n".join(parts), nav=f"<span class=\"sep\">keys:</span>{jump}")
