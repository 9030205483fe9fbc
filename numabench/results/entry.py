"""The benchmark entry: how a case's phase is named in pytest-benchmark's JSON and what
its ``extra_info`` holds. The one schema: the pytest plugin (fixtures/running.py) and
the seed CSV importer both write entries through here, and the tables, plots and the
gate read these keys.

extra_info of every entry: ``family, phase, nprocess, numel, numel_per_rank, dtype,
policy``, one key per further axis (impl, schedule, ...) and per knob set to other than
``auto`` (numabench.cases.KNOBS: chunk_numel, ...), ``hardware_key``; of a measured
entry also ``launcher, placement, per_rank_median_s, rounds, run_fixed_s, run_fixed_parts_s,
run_step_wall_s, invocation_medians_s, invocation_machines``, ``node_memory_per_rank`` (each
rank's memory per NUMA node after set-up by numastat's categories: huge, heap, stack, private),
``invocation_cpus`` (per invocation, the CPU each rank ran most of its timed steps on),
under the ``place`` axis each rank's kinds in ``placement[i]["kinds"]`` (and ``place_note`` on a
machine of one memory node), (with an injected slowdown) ``injected_slowdown``, and (with
several invocations) ``invocation_walls_s`` (each invocation's wall time apart from its steps,
and its steps'); then the family's metrics (bytes, GB/s, limits, ...).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from numabench.gate.invocations import INVOCATION_MACHINES, INVOCATION_MEDIANS

INVOCATION_CPUS = "invocation_cpus"
INVOCATION_HUGE_SHARES = "invocation_huge_shares"

if TYPE_CHECKING:
    from numabench.cases import Case, CaseResult
    from numabench.families.base import Family


def entry_param(case: "Case", phase: str) -> str:
    """pytest's id of the entry's parameters (``numa_phase`` then ``numa_case``)."""
    return f"{phase}-{case.id}"


def entry_name(case: "Case", phase: str) -> str:
    return f"test_{case.family}[{entry_param(case, phase)}]"


def entry_fullname(case: "Case", phase: str) -> str:
    return f"benchmarks/test_{case.family}.py::{entry_name(case, phase)}"


def entry_group(case: "Case", phase: str) -> str:
    """pytest-benchmark's group: the entries one table compares (policies side by side)."""
    return f"{case.family}:{phase} np{case.nprocess} {case.numel} {case.dtype}"


def case_fields(case: "Case", phase: str, hardware_key: str) -> dict[str, Any]:
    """What every entry's extra_info starts with."""
    return {"family": case.family, "phase": phase, "nprocess": case.nprocess, "numel": case.numel,
            "numel_per_rank": case.numel_per_rank, "dtype": case.dtype, "policy": case.policy.id,
            **{k: v for k, v in case.extra}, "hardware_key": hardware_key}


def case_of_entry(extra: dict[str, Any], family: "Family") -> "Case | None":
    """The case an entry's extra_info describes (the inverse of case_fields), or None where it
    does not say enough."""
    from numabench.cases import Case
    from numabench.errors import NumabenchError
    from numabench.numa.policy import Policy

    try:
        axes = tuple((a, str(extra[a])) for a in (*family.extra_axes, *family.knobs) if a in extra)
        return Case(family.key, int(extra["nprocess"]), int(extra["numel"]), Policy.parse(str(extra["policy"])),
                    str(extra["dtype"]), axes)
    except (KeyError, ValueError, TypeError, NumabenchError):
        return None


def measured_extra_info(result: "CaseResult", phase: str, hardware_key: str, metrics: dict[str, Any],
                        machine: str | None = None) -> dict[str, Any]:
    """extra_info of an entry measured by this suite on ``machine`` (numabench.machine.instance)."""
    extra = {
        **case_fields(result.case, phase, hardware_key),
        "launcher": result.launcher,
        "placement": [p.to_dict() for p in result.placement],
        "per_rank_median_s": [sorted(r[phase])[len(r[phase]) // 2] for r in result.per_rank],
        "rounds": len(result.phases[phase]),
        "run_fixed_s": round(result.fixed_s, 3), "run_step_wall_s": result.step_wall_s,
        "run_fixed_parts_s": result.fixed_parts_s,
        INVOCATION_MEDIANS: result.invocation_medians(phase),
        INVOCATION_MACHINES: [machine] * len(result.invocation_medians(phase)),
        **result.extra,
        **metrics,
    }
    if any(m is not None for m in result.node_memory):
        extra["node_memory_per_rank"] = [m.to_dict() if m is not None else None for m in result.node_memory]
    if any(c is not None for inv in result.invocation_cpus for c in inv):
        extra[INVOCATION_CPUS] = result.invocation_cpus
    if any(s is not None for s in result.invocation_huge_shares):
        extra[INVOCATION_HUGE_SHARES] = result.invocation_huge_shares
    if result.slowdown != 1.0:
        extra["injected_slowdown"] = result.slowdown
    if len(result.invocation_walls_s) > 1:  # where several invocations' (an A/B's pairs') time went
        extra["invocation_walls_s"] = [list(w) for w in result.invocation_walls_s]
    return extra
