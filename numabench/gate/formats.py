"""The output formats of every verdict, in one registry: the baseline gate's (gate/table.py)
and the same-runner A/B's (numabench/ab/formats.py). A format is declared here once, with
what it is for; each kind of verdict hands :func:`render_as` its :class:`Renderers`, one
function per format. The pieces both kinds draw with (an aligned table, GitHub's escaping)
live here too. Library code: every function returns text or data, none prints.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Generic, Sequence, TypeVar

# name -> what it is for (the --format help of numabench compare and numabench ab)
FORMAT_USES = {
    "text": "the terminal",
    "markdown": "a CI job summary",
    "github": "GitHub Actions annotations: an error per confirmed slower entry",
    "json": "the verdicts as data, for other CI systems and numabench ab --show",
}
FORMATS = tuple(FORMAT_USES)
FORMAT_HELP = ", ".join(f"{name} ({use})" for name, use in FORMAT_USES.items())

Result = TypeVar("Result")


@dataclass(frozen=True)
class Renderers(Generic[Result]):
    """How one kind of verdict is drawn in each format: the text without its last newline (a
    terminal's lines), Markdown and GitHub's lines ending in one, JSON as data (dumped here, so
    every kind's JSON is indented alike)."""
    text: Callable[[Result], str]
    markdown: Callable[[Result], str]
    github: Callable[[Result], str]
    json: Callable[[Result], dict[str, Any]]


def render_as(result: Result, fmt: str, renderers: Renderers[Result]) -> str:
    """``result`` in format ``fmt`` (one of FORMATS), ending in a newline."""
    if fmt not in FORMAT_USES:
        raise ValueError(f"unknown format {fmt!r}: allowed {', '.join(FORMATS)}")
    if fmt == "json":
        return json.dumps(renderers.json(result), indent=2) + "\n"
    if fmt == "text":
        return renderers.text(result) + "\n"
    return getattr(renderers, fmt)(result)


def format_table(header: Sequence[str], body: Sequence[Sequence[str]], left: Sequence[int] = (0,)) -> list[str]:
    """An aligned text table: columns ``left`` flush left, the others flush right."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *body)]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) if i in left else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return [fmt(header), "  ".join("-" * w for w in widths), *(fmt(c) for c in body)]


def escape_data(text: str) -> str:
    """A GitHub workflow command's message, escaped."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A GitHub workflow command's property (a title), escaped."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")
