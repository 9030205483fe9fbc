"""The families as people read them: ``numabench plan --list`` (text) and the README's family
table (Markdown), both rendered from each ``Family``'s ``description`` and ``needs``, the one
source. ``numabench plan --list --readme README.md`` rewrites the README's table from it;
tests/test_families.py fails while the two differ.

Torch-free: it reads the families' ``__init__`` modules only.
"""
from __future__ import annotations

import textwrap
from collections.abc import Iterable

from numabench.families import FAMILIES, family

README_SECTION = "## The families"
TABLE_HEADER = ("| family | what one round measures | needs |", "|---|---|---|")


def family_rows(keys: Iterable[str] | None = None) -> list[tuple[str, str, str]]:
    """(key, description, needs) of each family (every one by default), in registry order."""
    rows = []
    for key in FAMILIES if keys is None else keys:
        fam = family(key)
        rows.append((fam.key, " ".join(fam.description.split()), " ".join(fam.needs.split())))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(keys: Iterable[str] | None = None) -> str:
    """The README's family table: its header and one row per family."""
    lines = list(TABLE_HEADER)
    lines += [f"| `{key}` | {_cell(desc)} | {_cell(needs)} |" for key, desc, needs in family_rows(keys)]
    return "\n".join(lines) + "\n"


def render_text(keys: Iterable[str] | None = None, width: int = 100) -> str:
    """One block per family for a terminal: its key, then its description and what it needs,
    wrapped to ``width`` and indented."""
    width = max(width, 40)
    indent = " " * 4
    blocks = []
    for key, desc, needs in family_rows(keys):
        body = textwrap.fill(desc, width, initial_indent=indent, subsequent_indent=indent)
        req = textwrap.fill(f"needs: {needs}", width, initial_indent=indent, subsequent_indent=indent + "  ")
        blocks.append(f"{key}\n{body}\n{req}\n")
    return "\n".join(blocks)


def _table_span(readme: str) -> tuple[int, int]:
    """Start and end line index of the family table below ``README_SECTION``."""
    lines = readme.splitlines(keepends=True)
    try:
        section = next(i for i, ln in enumerate(lines) if ln.rstrip() == README_SECTION)
        start = next(i for i in range(section + 1, len(lines)) if lines[i].startswith(TABLE_HEADER[0]))
    except StopIteration:
        raise ValueError(f"no family table (a line {TABLE_HEADER[0]!r} below {README_SECTION!r})") from None
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return start, end


def readme_table(readme: str) -> str:
    """The family table as the README has it (header and rows)."""
    start, end = _table_span(readme)
    return "".join(readme.splitlines(keepends=True)[start:end])


def replace_readme_table(readme: str, keys: Iterable[str] | None = None) -> str:
    """``readme`` with its family table replaced by the one the families render; ValueError
    where it has none."""
    start, end = _table_span(readme)
    lines = readme.splitlines(keepends=True)
    return "".join(lines[:start]) + render_markdown(keys) + "".join(lines[end:])
