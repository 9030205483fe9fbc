"""The A/B's verdicts as rendered, byte for byte: every kept session in tests/data/ab/
(``*.session.json``: one real A/A session on the CPU machine, three made from
test_ab_rejudge's slow-spell pairs) judged again by ``numabench ab --rejudge`` in every
format, and every saved A/B run (the other ``*.json``) shown again by ``numabench ab --show``,
against the outputs kept in tests/data/ab/golden/. A move of the A/B's code (its modules, its
rule, its formats) must leave these unchanged; a change of what a verdict says rewrites them
on purpose: ``python tests/test_ab_golden.py --write``.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

import pytest

from numabench.cli import main

DATA = Path(__file__).resolve().parent / "data" / "ab"
GOLDEN = DATA / "golden"
FORMATS = {"text": "txt", "markdown": "md", "github": "github", "json": "json"}
SESSIONS = sorted(p.name for p in DATA.glob("*.session.json"))
SAVED = sorted(p.name for p in DATA.glob("*.json") if not p.name.endswith(".session.json"))
CASES = [("--rejudge", name, fmt) for name in SESSIONS for fmt in FORMATS] + \
        [("--show", name, fmt) for name in SAVED for fmt in FORMATS]


def rendered(option: str, name: str, fmt: str) -> tuple[int, str]:
    """``numabench ab OPTION NAME --format FMT`` run in tests/data/ab (the file named as given, so
    its name in the output is the same everywhere): (exit code, standard output)."""
    out = io.StringIO()
    here = os.getcwd()
    os.chdir(DATA)
    try:
        with contextlib.redirect_stdout(out):
            code = main(["ab", option, name, "--format", fmt])
    finally:
        os.chdir(here)
    return code, out.getvalue()


def golden_path(option: str, name: str, fmt: str) -> Path:
    return GOLDEN / f"{name.removesuffix('.json')}.{option.lstrip('-')}.{FORMATS[fmt]}"


def test_every_kept_file_is_covered():
    assert len(SESSIONS) >= 4 and SAVED
    kept = {golden_path(*case) for case in CASES}
    assert set(GOLDEN.iterdir()) == kept, "golden outputs without a kept file, or kept files without outputs"


@pytest.mark.parametrize("option, name, fmt", CASES)
def test_the_verdicts_render_byte_for_byte_as_kept(option, name, fmt):
    code, text = rendered(option, name, fmt)
    kept = golden_path(option, name, fmt).read_text()
    expected_code = int(kept.split("\n", 1)[0].removeprefix("exit "))
    assert (code, text) == (expected_code, kept.split("\n", 1)[1])


if __name__ == "__main__":  # python tests/test_ab_golden.py --write: keep the outputs as they are now
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_ab_golden.py --write")
    GOLDEN.mkdir(exist_ok=True)
    for case in CASES:
        code, text = rendered(*case)
        golden_path(*case).write_text(f"exit {code}\n{text}")
