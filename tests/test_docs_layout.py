"""README.md as a newcomer reads it: its first screen says how to set up and run the suite, and
its Layout section names every folder of the library, one line each, and no folder that is not
there."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
FIRST_SCREEN = 40
COMMANDS = ("bash .ci/bench", "bash .ci/test")
TOP_LEVEL = ("benchmarks/", "csrc/", "fixtures/", "baselines/", "tests/", ".ci/", "docs/")


def _layout_section(text: str) -> str:
    match = re.search(r"^## Layout\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, "README.md has no '## Layout' section"
    return match.group(1)


def _layout_folders(text: str) -> list[str]:
    """The folder each item of the Layout section is about: its first backticked path."""
    folders = re.findall(r"^- `([^`\s]+/)`", _layout_section(text), re.M)
    assert folders, "README.md's Layout section lists no folder (items read '- `path/` what it holds')"
    return folders


def _package_folders() -> set[str]:
    """Every folder of numabench/ that holds a Python module, as 'numabench/.../'."""
    return {d.relative_to(ROOT).as_posix() + "/"
            for d in [ROOT / "numabench", *(ROOT / "numabench").rglob("*")]
            if d.is_dir() and "__pycache__" not in d.parts and any(d.glob("*.py"))}


def test_layout_names_every_package_folder_and_no_other():
    listed = _layout_folders(README.read_text())
    assert len(listed) == len(set(listed)), f"folders listed twice: {sorted({f for f in listed if listed.count(f) > 1})}"
    missing = sorted(_package_folders() - set(listed))
    assert not missing, f"README.md's Layout lacks these folders of numabench/: {missing}"
    absent = sorted(f for f in listed if not (ROOT / f).is_dir())
    assert not absent, f"README.md's Layout names folders that do not exist: {absent}"
    lacking = sorted(set(TOP_LEVEL) - set(listed))
    assert not lacking, f"README.md's Layout lacks these top-level folders: {lacking}"


def test_layout_gives_each_folder_one_line():
    items = re.findall(r"^- `[^`\s]+/`.*(?:\n(?!- |\n).*)*", _layout_section(README.read_text()), re.M)
    long = [item.split("\n")[0] for item in items if "\n" in item]
    assert not long, f"Layout items run over one line: {long}"


def test_first_screen_has_both_commands():
    first = "\n".join(README.read_text().splitlines()[:FIRST_SCREEN])
    missing = [c for c in COMMANDS if c not in first]
    assert not missing, f"README.md's first {FIRST_SCREEN} lines lack {missing}"


def test_the_commands_are_the_ci_scripts():
    for command in COMMANDS:
        script = ROOT / command.split()[1]
        assert script.is_file(), f"README.md's first screen runs {command}, but {script} does not exist"
