"""A key's offload page: which train_step offload mode wins, then the report's offload section
(numabench.results.report.offload_section: the modes table, recipes, rates, out-of-memory cases,
each mode's capacity and the split-only prediction) turned from its Markdown into HTML, so the
page and the report say the same thing from one source."""
from __future__ import annotations

import re

from numabench.publish.pages import esc, key_nav, page, table

WINS_HEAD = "Which offload wins on "  # offload_section's closing block: the page leads with it instead
CODE = re.compile(r"`([^`]*)`")
SEPARATOR_CELL = re.compile(r"^:?-+:?$")


def inline(text: str) -> str:
    """Markdown text as HTML: escaped, `code` as <code>."""
    parts = CODE.split(text)  # odd indices: what stood between backticks
    return "".join(f"<code>{esc(p)}</code>" if i % 2 else esc(p) for i, p in enumerate(parts))


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().removeprefix("|").removesuffix("|").split("|")]


def _table(lines: list[str]) -> str:
    """A pipe table: header, separator (``---:`` right-aligns a column as a number), rows."""
    if len(lines) < 2 or not all(SEPARATOR_CELL.match(c) for c in _cells(lines[1])):
        raise ValueError(f"not a pipe table (no separator line under the header): {lines[:2]!r}")
    num = {i for i, c in enumerate(_cells(lines[1])) if c.endswith(":")}
    return table(_cells(lines[0]), [[inline(c) for c in _cells(ln)] for ln in lines[2:]], num=num)


def _kind(line: str) -> str:
    if line.startswith("#"):
        return "heading"
    if line.startswith("- "):
        return "list"
    return "table" if line.startswith("|") else "paragraph"


def _block(kind: str, lines: list[str]) -> list[str]:
    if kind == "table":
        return [_table(lines)]
    if kind == "list":
        return ["<ul>" + "".join(f"<li>{inline(ln[2:])}</li>" for ln in lines) + "</ul>"]
    if kind == "paragraph":
        return [f"<p>{inline(' '.join(lines))}</p>"]
    out = []
    for ln in lines:
        level = len(ln) - len(ln.lstrip("#"))
        if level > 6 or not ln[level:].startswith(" "):
            raise ValueError(f"not a Markdown heading: {ln!r}")
        out.append(f"<h{level}>{inline(ln[level + 1:])}</h{level}>")
    return out


def markdown_html(lines: list[str]) -> str:
    """The Markdown that offload_section emits as HTML: headings, paragraphs (consecutive lines
    joined), bullet lists and pipe tables, blocks parted by a blank line or a change of kind;
    text escaped, `code` as <code>. Nothing else of Markdown is understood. An item may hold several
    lines (modes_table returns its table as one string)."""
    out: list[str] = []
    kind, block = "", []
    for line in [*(ln for item in lines for ln in item.split("\n")), ""]:
        here = _kind(line) if line.strip() else ""
        if block and here != kind:
            out += _block(kind, block)
            block = []
        kind = here
        if here:
            block.append(line)
    return "\n".join(out)


def _section_body(section: list[str]) -> list[str]:
    """The section without its closing 'which offload wins' block: the page leads with it."""
    cut = next((i for i, ln in enumerate(section) if ln.startswith(WINS_HEAD)), len(section))
    return section[:cut]


def offload_html(key: dict) -> str:
    """The offload page of ``key`` (a key_model dict that has ``offload``)."""
    off = key.get("offload")
    if not off:
        raise ValueError(f"key {key.get('key')!r} has no train_step offload modes: no offload page")
    if off["wins"]:
        lead = [f"<p class=\"lead\">Which offload wins on {esc(key['key'])}:</p>",
                "<ul class=\"lead\">" + "".join(f"<li>{inline(w)}</li>" for w in off["wins"]) + "</ul>"]
    else:
        lead = ["<p class=\"lead\">No group (model, dtype, ranks, policy) has two measured offload modes: "
                "nothing to rank. The modes measured are below.</p>"]
    runs = ", ".join(f"<b>{esc(n)}</b>" for n in off["runs"])
    source = (f"<p class=\"note\">From the key's runs combined as the report combines one machine's runs (a later "
              f"run's entry of a case replaces an earlier one's); train_step's modes come from {runs}.</p>")
    nav = f"<span class=\"sep\">{esc(key['key'])}:</span>{key_nav(key, key['offload_file'])}"
    body = "\n".join([*lead, source, markdown_html(_section_body(off["section"]))])
    return page(f"{key['key']}: which offload wins", body, None, nav)
