"""The gate in a pytest session: the baseline's entries, this session's verdicts, and the
confirmation policy.

Each worker run's entries are judged (numabench.gate.rule) as soon as its invocations are
pooled (numabench.gate.pool); where a gated entry is judged ``slower``, only the variants
with such an entry run again, ``confirm_invocations`` fresh invocations while the machine is
still in the same state, and every entry with a band gets the confirmation's verdict beside
its own (a regression only where both say slower). A confirmation too noisy to resolve the
coarsest gated change (``unresolved``) runs another ``confirm_invocations``, pooled with the
first, up to MAX_CONFIRM_BATCHES; one still unresolved fails nothing and is listed as such
(numabench.gate.table). The confirmation's invocations are pooled
into the entry it recorded, and the entry's record (numabench.gate.table.gate_record) says
how many of its last invocations they were, so an offline compare judges as the session did.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence

from numabench.cases import CaseResult
from numabench.errors import UsageError
from numabench.gate.band import GateRule
from numabench.gate.invocations import run_machine
from numabench.gate.pool import pool_by_variant, pool_invocations
from numabench.gate.rule import (
    SLOWER,
    UNRESOLVED,
    CompareResult,
    Row,
    confirm,
    judge_entry,
    parse_positive_pct,
    parse_threshold,
)
from numabench.gate.table import gate_record
from numabench.machine.hwkey import run_hardware_key

# Batches of confirmation invocations an entry may take while its confirmation stays unresolved:
# a noisy moment (a neighbour on a shared runner) passes within a batch or two, and a gated
# run must end.
MAX_CONFIRM_BATCHES = 3


class Entry(Protocol):
    """A benchmark entry of a worker run: its pytest node id, name, variant and phase."""
    nodeid: str
    name: str
    extra: tuple
    phase: str


class Gate:
    """The baseline's entries and this session's verdicts."""

    def __init__(self, baseline_path: str, baseline_run: dict[str, Any], rule: GateRule,
                 confirm_invocations: int, machine: str | None) -> None:
        self.baseline_path = baseline_path
        self.baseline_key = run_hardware_key(baseline_run)
        self.baseline_machine = run_machine(baseline_run)
        self.entries = {b["fullname"]: b for b in baseline_run["benchmarks"]}
        self.rule = rule
        self.machine = machine  # this session's machine: a one-machine band judges only its own
        self.confirm_invocations = confirm_invocations
        self.rows: dict[str, Row] = {}

    def judge(self, nodeid: str, name: str, medians: Sequence[float], rounds: Sequence[float]) -> Row:
        row = judge_entry(name, nodeid, self.entries.get(nodeid), medians, self.rule, new_rounds=rounds,
                          new_machine=self.machine, baseline_machine=self.baseline_machine)
        self.rows[nodeid] = row
        return row

    def confirm(self, nodeid: str, medians: Sequence[float], rounds: Sequence[float]) -> Row:
        return confirm(self.rows[nodeid], medians, rounds)

    def needs_confirmation(self, rows: Sequence[Row]) -> bool:
        """Only a gated entry judged slower re-runs: the others cannot fail the run."""
        return self.confirm_invocations > 0 and any(r.verdict == SLOWER for r in rows)

    def record(self, nodeid: str) -> dict | None:
        """What the entry ``nodeid`` records of its verdict (extra_info["gate"]); None: not judged."""
        row = self.rows.get(nodeid)
        return None if row is None else gate_record(row, self.rule)

    def result(self, new_key: str | None) -> CompareResult:
        return CompareResult(self.baseline_path, "this session", self.baseline_key, new_key, self.rule,
                             list(self.rows.values()))


def newest_baseline(paths: Iterable[Any]) -> Any:
    """Of the runs ``--benchmark-compare`` loaded, the one the gate judges against: the newest
    by file name (NNNN_name.json)."""
    return sorted(paths, key=lambda p: (Path(str(p)).name, str(p)))[-1]


def gate_of_baseline(baseline_path: str, baseline_run: dict[str, Any], threshold: str | float,
                     coarsest: str | float, confirm_invocations: int, machine: str | None) -> Gate:
    """The session's gate against ``baseline_run``; UsageError (one line) for a bad threshold."""
    try:
        rule = GateRule(parse_threshold(threshold), parse_positive_pct(coarsest, "--numa-gate-coarsest"))
    except UsageError as e:
        raise UsageError(f"--numa-gate-threshold/--numa-gate-coarsest: {e}") from None
    return Gate(baseline_path, baseline_run, rule, confirm_invocations, machine)


def judge_and_confirm(gate: Gate, entries: Iterable[Entry], pooled: dict[tuple, CaseResult],
                      invoke: Callable[[list[tuple]], list[CaseResult]]) -> dict[tuple, CaseResult]:
    """Judge a worker run's ``entries`` on its ``pooled`` invocations (variant -> result); where
    one is judged slower, run ``gate.confirm_invocations`` confirmation invocations of the flagged
    variants (``invoke(variants)`` is one fresh invocation of them), add their verdicts, run
    another batch of the variants whose slower entry's confirmation is unresolved (at most
    MAX_CONFIRM_BATCHES in all), and return the results with the confirmation's invocations
    pooled in."""
    entries = [e for e in entries if e.extra in pooled]
    rows = [gate.judge(e.nodeid, e.name, pooled[e.extra].invocation_medians(e.phase),
                       pooled[e.extra].phases[e.phase]) for e in entries]
    if not gate.needs_confirmation(rows):
        return pooled
    # Only the variants with an entry judged slower run again (the cost of a gated run).
    flagged = list(dict.fromkeys(e.extra for e, r in zip(entries, rows) if r.verdict == SLOWER))
    batches: list[list[CaseResult]] = []
    for _ in range(MAX_CONFIRM_BATCHES):
        batches += [invoke(flagged) for _ in range(gate.confirm_invocations)]
        confirmation = pool_by_variant(batches)
        for e, row in zip(entries, rows):
            if row.band is not None and e.extra in confirmation:
                gate.confirm(e.nodeid, confirmation[e.extra].invocation_medians(e.phase),
                             confirmation[e.extra].phases[e.phase])
        flagged = list(dict.fromkeys(e.extra for e, r in zip(entries, rows)
                                     if r.verdict == SLOWER and r.confirm_verdict == UNRESOLVED))
        if not flagged:
            break
    return {x: pool_invocations([pooled[x], confirmation[x]]) if x in confirmation else pooled[x]
            for x in pooled}
