"""Which cases a family has on this machine (its axes over the run's options or its
defaults), each with the reason it cannot run here; and which cases share a worker run."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from numabench.cases import KNOB_DEFAULT, Case, default_policies
from numabench.families.base import Family
from numabench.numa.policy import Policy

if TYPE_CHECKING:
    from numabench.machine.capabilities import Capabilities
    from numabench.machine.topology import Topology


def case_matrix(family: Family, topology: Topology, caps: Capabilities, *,
                nprocess: Sequence[int] | None = None, sizes: Sequence[int] | None = None,
                policies: Sequence[Policy] | None = None, dtypes: Sequence[str] | None = None,
                axis_overrides: dict[str, list[str]] | None = None, host_memory_bytes: int | None = None,
                weight_writes_reason: str | None = None, copies: int = 1) -> list[tuple[Case, str | None]]:
    """Every case of ``family`` a run selects (None: the family's defaults on this machine),
    each with the reason it cannot run here, or None. ``weight_writes_reason``: why weighted
    cases may not change the kernel's weights (they skip with it). ``copies``: runs of a case
    alive at once (a same-runner A/B: 2), for the fits-in-memory checks."""
    default_np = sorted({1, max(1, len(topology.gpus))}) if family.rank_kind == "gpu" else [1]
    extras: list[tuple[tuple[str, str], ...]] = [()]
    for axis, values in family.axis_values(axis_overrides).items():
        extras = [e + ((axis, v),) for e in extras for v in values]
    for knob, values in family.knob_values(axis_overrides).items():  # auto: left out (ids as before knobs)
        extras = [e + (((knob, v),) if v != KNOB_DEFAULT else ()) for e in extras for v in values]
    out = []
    for n in nprocess or default_np:
        for size in sizes or family.default_sizes:
            for pol in policies or default_policies(topology):
                for dt in dtypes or family.default_dtypes:
                    for ex in extras:
                        case = Case(family.key, n, size, pol, dt, ex)
                        reason = family.skip_reason(case, topology, caps, host_memory_bytes, copies)
                        if reason is None and pol.kind == "weighted" and weight_writes_reason:
                            reason = weight_writes_reason  # a setting that cannot be restored: only on request
                        out.append((case, reason))
    return out


def worker_run_key(case: Case, family: Family) -> str:
    """Cases that differ only in the family's worker axes share one worker run."""
    shared = tuple((k, v) for k, v in case.extra if k not in family.worker_axes)
    return f"{case.family}[{Case(case.family, case.nprocess, case.numel, case.policy, case.dtype, shared).id}]"
