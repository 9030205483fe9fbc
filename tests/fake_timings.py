"""A pytest plugin for tests of the gate's session: the suite's cases "measured" by a fake clock.

Loaded into a child ``pytest benchmarks/test_touch.py ...`` with ``-p fake_timings`` (tests/ on
PYTHONPATH), it replaces the worker run (fixtures.running.run_sides) by given timings, so
everything else runs as in a real session: the baseline lookup, pooling, the gate's verdicts,
its confirmation invocations, the table, extra_info["gate"], --benchmark-save/-json/-compare-fail
and the exit code. No worker starts.

``NUMABENCH_TEST_TIMINGS`` (JSON) gives, per case id (``np1-1M-default-fp32``), the scale of
each invocation of that case in this session, in order: ``{"np1-1M-default-fp32": [1.0, 1.5]}``
(the last repeats; a confirmation's invocations come after the run's own). An invocation's
rounds are ``BASE_S`` x its scale, 0.1% apart from each other (a round-to-round noise too small
to matter). Only the touch family (its metrics read ``bytes`` of the set-up reply).
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any

from numabench.cases import Case, CaseResult
from numabench.families.touch.reply import TouchReply

ENV = "NUMABENCH_TEST_TIMINGS"
BASE_S = 1e-3
_invocations: dict[str, int] = {}  # case id -> invocations run so far in this session


def scales() -> dict[str, list[float]]:
    spec = json.loads(os.environ.get(ENV) or "{}")
    if not isinstance(spec, dict) or not all(isinstance(v, list) and v for v in spec.values()):
        raise ValueError(f"{ENV}={os.environ.get(ENV)!r}: allowed a JSON object of case id -> [scale, ...]")
    return spec


def rounds_of(scale: float, rounds: int) -> list[float]:
    return [BASE_S * scale * (1 + 0.001 * (j % 3 - 1)) for j in range(rounds)]


def fake_run_sides(case: Case, variants: list[tuple], family: Any, topology: Any, caps: Any, *, rounds: int,
                   sides: Any, **_: Any) -> dict[str, list[CaseResult]]:
    if family.key != "touch":
        raise ValueError(f"fake timings: family {family.key!r}: only touch")
    own = scales().get(case.id)
    if own is None:
        raise ValueError(f"fake timings: no scales for case {case.id!r} in {ENV}")
    i = _invocations.get(case.id, 0)
    _invocations[case.id] = i + 1
    scale = own[min(i, len(own) - 1)]
    out = []
    for v in variants:
        phases = {ph: rounds_of(scale, rounds) for ph in family.phases}
        reply = TouchReply(**{f.name: None for f in dataclasses.fields(TouchReply)
                              if f.name != "bytes"}, bytes=case.numel * case.itemsize)
        out.append(CaseResult(dataclasses.replace(case, extra=v), phases, [dict(phases)], [reply], [], "none", []))
    return {s.label: out for s in sides}


def pytest_configure(config: Any) -> None:
    running = sys.modules["fixtures.running"]  # the root conftest's plugin, loaded by now
    if not hasattr(running, "run_sides"):  # renamed: replacing nothing would time the real workers
        raise RuntimeError("fake timings: fixtures.running has no run_sides to replace")
    running.run_sides = fake_run_sides
