"""Property-based fuzz (Hypothesis) of what reads a user's input: the policy, size, dtype, count,
node-list and duration parsers, the A/B session's --numa-ab items, the run-file reader and the
saved A/B run's reader. Any input ends in a result or the project's one error (UsageError, or
the ValueError the A/B reader names its file with), never another exception, each within a time
bound. Seeded (derandomize) and a short budget, so a run finds the same inputs every time.
The commands that trust what the readers accepted: tests/test_fuzz_commands.py."""
from __future__ import annotations

import json
import time
from typing import Any, Callable

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed (.ci/setup installs it)")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from numabench.ab.formats import from_json  # noqa: E402
from numabench.ab.settings import SETTINGS, parse_duration_s, read_session  # noqa: E402
from numabench.cases import parse_dtypes, parse_ints, parse_sizes  # noqa: E402
from numabench.errors import UsageError  # noqa: E402
from numabench.machine.nodelist import parse_list  # noqa: E402
from numabench.numa.policy import parse_policies  # noqa: E402
from numabench.results import storage  # noqa: E402

BOUND_S = 5.0  # one input's time at most (a parse that expands a range or nests deeply would show)
FUZZ = settings(max_examples=150, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
# texts near what the parsers read: their own characters more often than any
TEXT = st.text(alphabet=st.sampled_from(list("0123456789,;:-=%.kKmMgGsh abcdefilnprtwx_\u0660\uff10")) | st.characters(),
               max_size=40)
JSON = st.recursive(st.none() | st.booleans() | st.floats() | st.integers(min_value=-10**40, max_value=10**40)
                    | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=16)


def ends_well(fn: Callable[[Any], Any], value: Any, allowed: tuple[type[BaseException], ...] = (UsageError,)) -> None:
    started = time.monotonic()
    try:
        fn(value)
    except allowed:
        pass
    assert time.monotonic() - started < BOUND_S, f"{value!r}: {time.monotonic() - started:.1f} s"


@FUZZ
@given(TEXT)
def test_the_axis_parsers_end_in_a_value_or_a_usage_error(text):
    ends_well(parse_policies, text)
    ends_well(parse_sizes, text)
    ends_well(parse_dtypes, text)
    ends_well(lambda t: parse_ints(t, "nprocess"), text)
    ends_well(lambda t: parse_list(t, "node", unique=True, most=1023), text)
    ends_well(lambda t: parse_duration_s(t, "--time-budget"), text)


@FUZZ
@given(st.sampled_from(sorted(SETTINGS)), TEXT)
def test_every_ab_setting_s_reader_ends_in_a_value_or_a_usage_error(name, text):
    s = SETTINGS[name]
    ends_well(s.parse, [text] if s.repeat else text)
    ends_well(read_session, [f"base=/x", f"{name}={text}"])


@FUZZ
@given(st.lists(TEXT, max_size=4))
def test_the_session_items_end_in_a_session_or_a_usage_error(items):
    ends_well(read_session, items)


@FUZZ
@given(st.one_of(JSON, st.fixed_dictionaries({"benchmarks": st.lists(JSON, max_size=3)}, optional={
    "machine_info": JSON, "datetime": JSON})))
def test_the_run_file_reader_ends_in_a_run_or_a_usage_error(data):
    try:
        text = json.dumps(data)
    except ValueError:
        return
    ends_well(lambda t: storage.run_from_text(t, "fuzz.json"), text)


@FUZZ
@given(st.dictionaries(st.sampled_from(["schema", "base", "head", "pairs", "threshold_pct", "confidence", "coarsest_pct",
                                        "entries", "interleave", "timings_s", "stopped_by", "passes_done", "scope",
                                        "mem_total_gib", "confirm_confidence"]), JSON, max_size=10))
def test_the_saved_ab_run_reader_ends_in_a_run_or_its_named_error(data):
    ends_well(lambda d: from_json({**d, "schema": "numabench-ab/1"}, "ab.json"), data, (ValueError,))
    ends_well(lambda d: from_json(d, "ab.json"), data, (ValueError,))
