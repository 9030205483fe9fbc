"""Run tiers: how much of each family's matrix a run takes.

- ``smoke``: every family once: one process, its smallest default size, the default
  policy, its first dtype (of ci's), the first value of each axis (minutes on one GPU: for
  every pull request);
- ``ci`` (the default): each family's default sizes, dtypes and axes (narrowed where a
  family says so: ``Family.ci_sizes``, ``Family.ci_axis_values``, ``ci_gpu_dtypes``, e.g.
  adam_offload's own kernel only, train_step's tiny model in bf16 on GPUs), one and all
  GPUs, and one policy of each
  kind the machine can apply: ``default`` and, where there are two memory nodes or more
  (with one, every policy places what ``default`` places), ``bind`` to each memory node,
  ``interleave:all``, and a DRAM-heavy ``weighted`` 3:1 (near CPU node : far or CPU-less
  node; on every machine: where it cannot run, it is collected and skipped with the
  reason, so ``-k weighted`` says why); at most ``CI_MAX_ROUNDS`` rounds (the gate judges invocations, not rounds);
- ``full``: the whole matrix (every default policy template, shown as skipped where
  the machine lacks what it needs).

smoke is part of ci, and ci of full, so ``-m smoke`` / ``-m ci`` select a tier's
items inside a larger one. Explicit axis options override the tier's choice.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from numabench.errors import UsageError
from numabench.numa.policy import Policy

if TYPE_CHECKING:
    from numabench.families.base import Family
    from numabench.machine.capabilities import Capabilities
    from numabench.machine.topology import Topology

TIERS = ("smoke", "ci", "full")
DEFAULT_TIER = "ci"
CI_MAX_ROUNDS = 10


@dataclass(frozen=True)
class Selection:
    """What a tier takes of one family's axes; None: the family's default (the full matrix's)."""

    nprocess: tuple[int, ...] | None = None
    sizes: tuple[int, ...] | None = None
    policies: tuple[Policy, ...] | None = None
    dtypes: tuple[str, ...] | None = None
    axis_values: dict[str, tuple[str, ...]] = field(default_factory=dict)
    max_rounds: int | None = None


def check_tier(tier: str) -> str:
    if tier not in TIERS:
        raise UsageError(f"--numa-tier: unknown tier {tier!r}: allowed {', '.join(TIERS)}")
    return tier


def ci_policies(topology: "Topology", caps: "Capabilities") -> list[Policy]:
    """One policy of each kind this machine can apply (see the module docstring). With one
    memory node every policy places every page on it, as ``default`` does: ci runs ``default``
    only there (``bind:0`` is in the full tier), and collects the weighted case to skip it."""
    mem = list(topology.memory_node_ids) or [0]
    texts = ["default"]
    near = (list(topology.cpu_node_ids) or mem)[0]
    if len(mem) >= 2:
        texts += [f"bind:{n}" for n in mem]
        far = next(iter(topology.cpuless_node_ids), None)
        far = far if far is not None else next(n for n in mem if n != near)
        texts.append("interleave:all")
    else:
        far = max(mem) + 1  # no such node here: the case is collected and skipped, saying why
    # Always in the tier: where the machine, kernel or numactl cannot weigh nodes the case skips
    # with the reason, so `-k weighted` shows why rather than selecting nothing.
    texts.append(f"weighted:{near}=3,{far}=1")
    return [Policy.parse(t) for t in texts]


def selection(tier: str, family: "Family", topology: "Topology", caps: "Capabilities") -> Selection:
    check_tier(tier)
    if tier == "full":
        return Selection()
    ci_dtypes = family.ci_gpu_dtypes if topology.gpus else None
    if tier == "ci":
        return Selection(sizes=family.ci_sizes, policies=tuple(ci_policies(topology, caps)), dtypes=ci_dtypes,
                         axis_values={**family.axis_values(), **family.ci_axis_values}, max_rounds=CI_MAX_ROUNDS)
    return Selection(nprocess=(1,), sizes=(min(family.default_sizes),), policies=(Policy.parse("default"),),
                     dtypes=(ci_dtypes or family.default_dtypes)[:1],  # inside ci
                     axis_values={a: vals[:1] for a, vals in family.axis_values().items()}, max_rounds=CI_MAX_ROUNDS)


def tier_case_ids(tier: str, family: "Family", topology: "Topology", caps: "Capabilities") -> set[str]:
    """The ids of the cases ``tier`` takes of ``family`` on this machine, runnable or not."""
    from numabench.families.matrix import case_matrix

    sel = selection(tier, family, topology, caps)
    return {case.id for case, _ in case_matrix(
        family, topology, caps, nprocess=sel.nprocess, sizes=sel.sizes, policies=sel.policies, dtypes=sel.dtypes,
        axis_overrides={a: list(v) for a, v in sel.axis_values.items()})}
