"""The "what changed" block each page leads with (verdicts.what_changed's data): the run judged
(named, dated, its commit and machine), by which verdict source, how many entries each verdict
has, and the changed entries, largest change first, slower in red and faster in green, each a
link to its row on its family page."""
from __future__ import annotations

from numabench.publish.pages import esc, run_line
from numabench.publish.verdicts import CHANGED, FASTER, NEW, SAME, SLOWER

ORDER = (SLOWER, FASTER, SAME, NEW)


def counts_text(counts: dict[str, int]) -> str:
    """'<span class="v-slower">4 slower</span>, 1 faster, 123 same, 2 insufficient data'."""
    kinds = [k for k in ORDER if counts.get(k)] + sorted(k for k in counts if k not in ORDER)
    return ", ".join(f"<span class=\"v-{esc(k.replace(' ', '-'))}\">{counts[k]} {esc(k)}</span>" for k in kinds)


def _pct(v: float | None) -> str:
    return "" if v is None else f"{v:+.1f}%"


def _items(items: list[dict], link_family: bool) -> str:
    rows = []
    for v in items:
        cls = f"v-{v['verdict']}"
        fam = f"<td class=\"fam\">{esc(v['family'])}</td>" if link_family else ""
        note = f"<td class=\"note-cell\">{esc(v['note'])}</td>" if v["note"] else "<td></td>"
        rows.append(f"<tr><td class=\"num {cls}\">{_pct(v['pct'])}</td><td class=\"{cls}\">{esc(v['verdict'])}</td>"
                    f"{fam}<td class=\"what\"><a href=\"{esc(v['href'])}\">{esc(v['label'])}</a> "
                    f"<span class=\"muted\">{esc(v['group'])}</span></td>{note}</tr>")
    return f"<table class=\"changes\"><tbody>{''.join(rows)}</tbody></table>"


def changed_body(ch: dict | None, *, limit: int | None, link_family: bool, more: str = "") -> str:
    """The block's content for one key or one family; ``limit`` changed entries shown (the rest
    under a fold, or named by ``more``)."""
    if ch is None:
        return "<p class=\"muted\">No run measured any entry here.</p>"
    r = ch["run"]
    parts = []
    lead = "Newest run" if ch["newest"] is None else "Newest run measuring these entries"
    parts.append(f"<p class=\"chg-run\">{lead}: {run_line(r)}</p>")
    if ch["newest"] is not None:
        how = ("only carried values of earlier runs forward" if ch["newest_carried"] else "holds none of them")
        parts.append(f"<p class=\"muted chg-note\">The key's newest run, {esc(ch['newest']['name'])}, measured none of "
                     f"these entries: it {how}.</p>")
    measured = (f"{ch['measured']} entr{'y' if ch['measured'] == 1 else 'ies'} measured in this run"
                + (f", {ch['carried']} carried from earlier runs (not measured again)" if ch["carried"] else ""))
    if ch["source"] == "none":
        parts.append(f"<p class=\"chg-sum\">{measured}; no verdict on it.</p>")
        return "".join(parts)
    parts.append(f"<p class=\"chg-sum\">{counts_text(ch['counts']) or 'no verdict'} &mdash; "
                 f"<span title=\"{esc(ch['rule'])}\">{esc(ch['heading'])}</span>. {esc(measured)}.</p>")
    items = ch["changed"]
    if not items:
        parts.append("<p class=\"muted chg-none\">No entry slower or faster.</p>")
        return "".join(parts)
    shown = items if limit is None else items[:limit]
    parts.append(f"<p class=\"muted chg-cols\">The %: {esc(ch['pct_means'])}; largest change first.</p>")
    parts.append(_items(shown, link_family))
    rest = items[len(shown):]
    if rest:
        parts.append(more or f"<details class=\"chg-more\"><summary>{len(rest)} more changed</summary>"
                             f"{_items(rest, link_family)}</details>")
    return "".join(parts)


def changed_block(inner: str) -> str:
    return f"<section id=\"what-changed\" class=\"changed\"><h2>What changed</h2>{inner}</section>"


__all__ = ["CHANGED", "changed_block", "changed_body", "counts_text"]
