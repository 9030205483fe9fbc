"""The declared shape of an A/B verdict file (``numabench ab --json``, schema ``numabench-ab/1``)
and of the record a kept session holds of its run (``numabench_ab``: the same fields without
entries), checked where one is read (``ab.formats.from_json``: ``ab --show``, ``--rejudge``'s
record, ``publish``). The kept session itself is a run file: results/run_schema.py.

Past the check, from_json trusts the fields: counts are whole and bounded (pairs up to
numabench.bounds.MOST_PAIRS), percentages, ratios and seconds finite and in range, verdicts and leans
from their lists, a signal a signal's name. Same library and message form as the run files.
"""
from __future__ import annotations

import signal
from typing import Annotated, Any, Literal

from pydantic import Field

from numabench.bounds import MOST_PAIRS
from numabench.gate.pairs import AB_VERDICTS, FASTER, SLOWER
from numabench.results.run_schema import Cpu, HardwareKey, Seconds, Text, OpenObject, first_problem

SCHEMA = "numabench-ab/1"  # the JSON's "schema": docs/GATE.md describes it

Pairs = Annotated[int, Field(ge=0, le=MOST_PAIRS)]
Ratio = Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]
Percent = Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]
Probability = Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)]
Two = Annotated[list[Ratio], Field(min_length=2, max_length=2)]  # [low, high]; [before, after]
SignalName = Literal[tuple(s.name for s in signal.Signals)]  # type: ignore[valid-type]


class Side(OpenObject):
    label: Text
    commit: Text | None
    env: dict[str, Text] | None = None


class Entry(OpenObject):
    name: Text
    fullname: Text | None = None
    verdict: Literal[AB_VERDICTS]  # type: ignore[valid-type]
    leans: Literal[SLOWER, FASTER] | None = None  # type: ignore[valid-type]
    ratio: Ratio
    interval: Two
    resolution_pct: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None
    base_medians_s: Annotated[list[Seconds], Field(min_length=1, max_length=MOST_PAIRS)]  # one per pair
    head_medians_s: Annotated[list[Seconds], Field(min_length=1, max_length=MOST_PAIRS)]
    pair_ratios: list[Ratio] | None = None
    pair_ratios_from: Literal["quads", "rounds", "medians"] | None = None
    confirmation_pairs: Pairs | None = None
    base_cpus: list[list[Cpu]] | None = None
    head_cpus: list[list[Cpu]] | None = None


class Verdicts(OpenObject):
    schema_: Literal[SCHEMA] = Field(alias="schema")  # type: ignore[valid-type]
    base: Side
    head: Side
    hardware_key: HardwareKey | None = None
    datetime: Text | None = None
    selection: list[Text] | None = None
    pairs: Pairs
    interleave: Literal["invocations", "rounds"] | None = None
    threshold_pct: Percent
    confidence: Probability
    coarsest_pct: Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)]
    missing: list[Text] | None = None
    timings_s: dict[str, Annotated[float, Field(ge=0, allow_inf_nan=False)]] | None = None
    max_pairs: Pairs | None = None
    target_resolution_pct: Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)] | None = None
    confirm_pairs: Pairs | None = None
    confirm_confidence: Probability | None = None
    workers: Text | None = None
    same_cpus: bool | None = None
    passes: bool | None = None
    time_budget_s: Annotated[float, Field(gt=0, le=1e7, allow_inf_nan=False)] | None = None
    focus: list[Text] | None = None
    round_target_pct: Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)] | None = None
    round_cap: Annotated[int, Field(ge=1, le=100)] | None = None
    stopped_by: SignalName | None = None
    passes_done: Pairs | None = None
    scope: list[Text] | None = None
    mem_total_gib: Two | None = None
    rejudged_from: Text | None = None
    entries: list[Entry]


# What the verdict file's fields allow, said as a reader of the file needs it
AB_FIELD_RULES = {
    "ratio": "allowed a finite number > 0 (head / base)", "interval": "allowed [low, high]: two finite numbers > 0",
    "pair_ratios": "allowed a finite number > 0 per pair (head / base)",
    "base_medians_s": "allowed a list of finite numbers of seconds > 0, one per pair",
    "head_medians_s": "allowed a list of finite numbers of seconds > 0, one per pair",
    "base_cpus": "allowed a list per pair of a CPU number or null per rank",
    "head_cpus": "allowed a list per pair of a CPU number or null per rank",
    "mem_total_gib": "allowed [GiB when the measuring began, GiB when it ended]",
    "pairs": f"allowed a whole number from 0 up to {MOST_PAIRS}",
    "max_pairs": f"allowed a whole number from 0 up to {MOST_PAIRS}",
    "confirm_pairs": f"allowed a whole number from 0 up to {MOST_PAIRS}",
    "threshold_pct": "allowed a percentage from 0 to 100", "coarsest_pct": "allowed a percentage > 0, up to 100",
    "round_target_pct": "allowed a percentage > 0, up to 100 (null: off)",
    "round_cap": "allowed a whole number from 1 to 100 (null: off)",
    "confidence": "allowed a probability between 0 and 1", "confirm_confidence": "allowed a probability between 0 and 1",
}


def verdicts_problem(data: Any) -> str | None:
    """None where ``data`` has the verdict file's declared shape; else its first problem in one
    line (the field's path, its value, what is allowed), with how many more there are."""
    return first_problem(Verdicts, data, AB_FIELD_RULES, entries="entries")

