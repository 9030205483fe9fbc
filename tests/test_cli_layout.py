"""Module docstrings that list things keep listing all of them: numabench/cli.py's names every
subcommand the parser has, fixtures/plugin.py's every module of fixtures/."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from numabench import cli

ROOT = Path(__file__).resolve().parents[1]


def _subcommands() -> set[str]:
    parser = cli.build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


def test_the_cli_docstring_lists_every_subcommand():
    listed = set()
    for line in cli.__doc__.splitlines():
        if line.startswith("- "):
            listed |= set(re.findall(r"``([a-z][a-z-]*)``", line.split(":", 1)[0]))
    assert listed == _subcommands(), "numabench/cli.py's docstring: list each subcommand as - ``name``: what it does"


def test_the_plugin_docstring_names_every_fixtures_module():
    import fixtures.plugin

    modules = {p.name for p in (ROOT / "fixtures").glob("*.py")} - {"__init__.py", "plugin.py"}
    named = set(re.findall(r"^- (\w+\.py):", fixtures.plugin.__doc__, re.MULTILINE))
    assert named == modules, "fixtures/plugin.py's docstring: name each module of fixtures/ (- name.py: what it does)"
