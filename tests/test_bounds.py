"""The settings' ranges (numabench/bounds.py): declared once, listed on docs/ENV.md as declared,
and refused past their ends by each way of giving them (a numabench option, a pytest option, an
environment variable), one line naming the value and the range. A threshold past 100% and a
coarsest of 0% would let any slowdown pass the gate."""
from __future__ import annotations

import contextlib
import io
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from numabench import bounds
from numabench.cli import main
from numabench.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "baselines/H200x1_Intel-Xeon_1node_cuda13/Linux-CPython-3.12-64bit/0003_h200x1-all.json"
SESSION = "tests/data/ab/cpu-aa-smoke-3pairs.session.json"


def test_the_page_lists_every_range_as_declared():
    page = (ROOT / "docs" / "ENV.md").read_text()
    listed = dict(re.findall(r"^\| `([a-z_]+)` \| .* \| (a (?:whole )?number [^|]*?) \|$", page, re.M))
    assert listed == {name: b.allowed() for name, b in bounds.BOUNDS.items()}


@pytest.mark.parametrize("value, ok", [(1, True), (100_000, True), (0, False), (100_001, False), (1.5, False),
                                       (math.nan, False), (math.inf, False), (True, False), ("5", False)])
def test_a_whole_range_holds_its_ends_only(value, ok):
    assert bounds.BOUNDS["rounds"].holds(value) is ok


def test_open_ends_are_refused_and_the_message_names_value_and_range():
    assert not bounds.BOUNDS["coarsest"].holds(0) and bounds.BOUNDS["coarsest"].holds(100)
    assert not bounds.BOUNDS["confidence"].holds(1) and bounds.BOUNDS["confidence"].holds(0.5)
    with pytest.raises(UsageError) as e:
        bounds.check("threshold", 1000.0, "--threshold 1000%")
    assert str(e.value) == "--threshold 1000%: allowed a number from 0% to 100%, e.g. 3%"


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 2
    return code or 0, out.getvalue()


@pytest.mark.parametrize("argv, said", [
    (["compare", "--threshold", "101", BASELINE, BASELINE], "threshold '101': allowed a number from 0% to 100%"),
    (["compare", "--threshold", "1000%", BASELINE, BASELINE], "threshold '1000%': allowed a number from 0% to 100%"),
    (["compare", "--coarsest", "0", BASELINE, BASELINE], "--coarsest 0: allowed a number > 0% and at most 10000%"),
    (["ab", "--rejudge", SESSION, "--threshold", "500%"], "--threshold 500%: allowed a number from 0% to 100%"),
    (["ab", "--rejudge", SESSION, "--confidence", "1"], "--confidence 1: allowed a number > 0 and below 1"),
    (["ab", "--rejudge", SESSION, "--coarsest", "0%"], "--coarsest 0%: allowed a number > 0% and at most 10000%"),
    (["first-touch", "--gib", "2e6"], "--gib 2e+06: allowed a number > 0 and at most 1048576 GiB"),
], ids=["compare-threshold-101", "compare-threshold-1000", "compare-coarsest-0", "ab-threshold", "ab-confidence",
        "ab-coarsest", "first-touch-gib"])
def test_numabench_refuses_a_value_past_its_range(argv, said):
    code, out = run(argv)
    assert code == 2 and said in out and out.count("\n") == 1, out


def test_the_range_ends_themselves_are_taken():
    code, out = run(["compare", "--threshold", "100", "--coarsest", "100", BASELINE, BASELINE])
    assert code == 0, out


@pytest.mark.parametrize("args, env, said", [
    (["--numa-gate-threshold=500%"], {}, "--numa-gate-threshold: threshold '500%': allowed a number from 0% to 100%"),
    (["--numa-rounds=100001"], {}, "--numa-rounds=100001: allowed a whole number from 1 to 100000 rounds"),
    ([], {"NUMABENCH_BUILD_TIMEOUT_S": "86401"},
     "NUMABENCH_BUILD_TIMEOUT_S='86401': allowed a number > 0 and at most 86400 seconds"),
], ids=["gate-threshold", "rounds", "build-timeout"])
def test_pytest_refuses_a_value_past_its_range_before_any_case(args, env, said):
    proc = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "-p", "no:cacheprovider", "-q",
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, **env})
    errors = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("ERROR")]
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR and len(errors) == 1 and errors[0].startswith(f"ERROR: {said}"), \
        proc.stdout + proc.stderr
