"""Run one case: set weights, launch a worker per rank, check placement, time rounds (of one
checkout's workers, or of two checkouts' alternating: numabench.workers.sides).

Returns numbers only; pytest glue decides what becomes a benchmark entry.
Per round, each phase's value is the max over ranks (the slowest rank bounds
a data-parallel step), as the seed benchmark does.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import sys
import time
from typing import Any, Sequence

from numabench import faults as faultlib
from numabench.cases import Case, CaseResult, Rank, RankPlacement, retired_env_error
from numabench.errors import PlacementError, UsageError, WorkerError
from numabench.families.base import Family, WorkerSpec, ab_pair_cpus
from numabench.gate.pairs import RoundTarget
from numabench.replies import SetupDone
from numabench.machine.capabilities import Capabilities
from numabench.machine.topology import Topology
from numabench.numa.kind_check import judge_kinds, rank_verdict
from numabench.numa.launch import build_command, worker_env
from numabench.numa.place import Place
from numabench.numa.placement import Expectation, compare
from numabench.numa.weights import WeightSetting
from numabench.toolkit.inject import slowdown_factor
from numabench.workers.sides import REWARM_BELOW_S, THIS_SIDE, WorkerSide


def run_case(case: Case, family: Family, topology: Topology, caps: Capabilities, *, rounds: int,
             warmup: int, launcher: str = "auto", timeout_s: float = 600.0, tolerance_pp: float = 2.0,
             spec_extra: dict[str, Any] | None = None) -> CaseResult:
    """Run one case (one variant); see run_variants."""
    return run_variants(case, [case.extra], family, topology, caps, rounds=rounds, warmup=warmup,
                        launcher=launcher, timeout_s=timeout_s, tolerance_pp=tolerance_pp,
                        spec_extra=spec_extra)[0]


def run_variants(case: Case, variants: list[tuple[tuple[str, str], ...]], family: Family, topology: Topology,
                 caps: Capabilities, *, rounds: int, warmup: int, launcher: str = "auto",
                 timeout_s: float = 600.0, tolerance_pp: float = 2.0,
                 spec_extra: dict[str, Any] | None = None,
                 rank_nodes: list[int] | None = None,
                 rank_gpus: list[int] | None = None,
                 verified: dict[str, Any] | None = None) -> list[CaseResult]:
    """Start the workers once for ``case`` and time each variant (values of the
    family's worker axes, e.g. impl x schedule) on the same placed memory.
    ``rank_nodes`` pins CPU ranks to given nodes (the bandwidth matrix's rows); ``rank_gpus``
    gives rank i the GPU ``rank_gpus[i]`` (the GPU bandwidth matrix's columns).
    ``verified``: the correctness checks passed so far in this session (check key -> result),
    updated here; workers skip those (a kernel checked on a GPU at a dtype stays checked:
    a session checks each once instead of paying a check, and its imports, in every run).
    None: every worker runs its checks."""
    return run_sides(case, variants, family, topology, caps, rounds=rounds, warmup=warmup, launcher=launcher,
                     timeout_s=timeout_s, tolerance_pp=tolerance_pp, spec_extra=spec_extra, rank_nodes=rank_nodes,
                     rank_gpus=rank_gpus, verified={THIS_SIDE.label: verified})[THIS_SIDE.label]


def round_order(labels: Sequence[str], round_no: int) -> list[str]:
    """The sides in the order they step in round ``round_no``: A B, B A, A B, ... so that a drift
    of the machine within a round hits both alike."""
    return list(labels) if round_no % 2 == 0 else list(reversed(labels))


def run_sides(case: Case, variants: list[tuple[tuple[str, str], ...]], family: Family, topology: Topology,
              caps: Capabilities, *, rounds: int, warmup: int, sides: Sequence[WorkerSide] = (THIS_SIDE,),
              launcher: str = "auto", timeout_s: float = 600.0, tolerance_pp: float = 2.0,
              spec_extra: dict[str, Any] | None = None, rank_nodes: list[int] | None = None,
              rank_gpus: list[int] | None = None,
              verified: dict[str, dict[str, Any] | None] | None = None,
              rewarm: bool = False, same_cpus_pair: int | None = None,
              round_target: RoundTarget | None = None) -> dict[str, list[CaseResult]]:
    """run_variants for several sides at once (numabench.workers.sides: whose code the workers
    run): each side's workers start and set up together, each side's placement is checked, and
    the timed rounds alternate between the sides (A B, B A, ...) and, inside a side, between the
    variants, so that the machine's drift over seconds hits every side alike. Returns each side's
    results by its label. ``verified``: per side label, as run_variants' (a side's own checks).
    ``rewarm``: every timed step comes right after an untimed one of the same variant on the same
    workers, so that it starts from what its own side left (its arrays in the cache, its threads
    awake), as a plain run's rounds do, rather than from what the other side's round left; from
    the second round on, only for the variants whose untimed steps of the first round all took
    under REWARM_BELOW_S (the same variants for every side), unless the family rewarms every round
    (``Family.rewarm_every_round``).
    ``same_cpus_pair``: the pair's number in a same-runner A/B whose sides share CPUs: each rank of
    a case whose family gives it ``step_threads`` runs on that many CPUs, the same for every side
    (numabench.families.base.ab_pair_cpus).
    ``round_target``: with two sides, rounds beyond ``rounds`` until every variant's phases have a
    ratio (of ABBA quads of rounds) known to its error (numabench.gate.pairs.RoundTarget), at most its most."""
    if round_target is not None and (len(sides) != 2 or round_target.most_rounds < rounds):
        raise ValueError(f"round_target {round_target}: allowed with 2 sides and most_rounds >= rounds ({rounds})")
    if not sides or len({s.label for s in sides}) != len(sides):
        raise ValueError(f"sides {[s.label for s in sides]}: allowed one or more, each label once")
    ranks: list[Rank] = family.ranks(case, topology)
    if rank_nodes is not None:
        ranks = [Rank(r.index, r.gpu, n, n) for r, n in zip(ranks, rank_nodes)]
    if rank_gpus is not None:
        ranks = [dataclasses.replace(r, gpu=g) for r, g in zip(ranks, rank_gpus)]
    step_threads = family.step_threads(case) if same_cpus_pair is not None else 0
    if step_threads:
        ranks = ab_pair_cpus(ranks, topology, sorted(os.sched_getaffinity(0)), step_threads, same_cpus_pair)
    # the workers pad their phases; checked here before any starts
    slowdowns = {s.label: slowdown_factor(s.environment()) for s in sides}
    retired = retired_env_error()  # a knob's old variable: the workers no longer read it
    if retired:
        raise UsageError(retired)
    kernels = tuple(dict.fromkeys(k for v in variants for k in family.kernels_for(v)))
    if kernels:  # built here, once, so that workers only load them (and never race to build)
        from numabench.kernels.prebuild import ensure_built
        ensure_built(kernels)
    misplace = faultlib.parent_fault("misplace")  # also checks NUMABENCH_FAULT before any worker starts
    commands: dict[str, list[list[str]]] = {s.label: [] for s in sides}
    rank_specs, resolved = [], []
    how = "none"
    # once per run: every rank must get the same values (e.g. the process group's rendezvous port)
    extra = {**(family.spec_extra(case) if family.spec_extra else {}), **(spec_extra or {})}
    typed = sorted(set(extra) & {f.name for f in dataclasses.fields(WorkerSpec)})
    if typed:  # a typed field comes from the case and its ranks, never from the family's extras
        raise ValueError(f"spec_extra key(s) {', '.join(typed)} name WorkerSpec fields; pass the family's "
                         f"own values only (a rank's GPU: rank_gpus)")
    place = Place.parse(case.param("place")) if case.param("place") else None
    places = []
    for r in ranks:
        policy = case.policy.resolve(topology, r.own_node)
        resolved.append(policy)
        places.append(place.resolve(topology, r.own_node) if place is not None else None)
        for s in sides:
            argv = worker_argv(s, family.key)
            if policy.kind == "default" and r.cpu_node is None and not r.cpus:
                cmd, how_r = argv, "none"
            else:
                cmd, how_r = build_command(argv, policy, topology, caps, cpu_node=r.cpu_node, launcher=launcher,
                                           cpus=r.cpus)
            commands[s.label].append(cmd)
        how = how_r if how in ("none", how_r) else "mixed"
        rank_specs.append(dict(
            rank=r.index, nprocess=case.nprocess, gpu=r.gpu, **family.spec_size(case.numel_per_rank), dtype=case.dtype,
            policy=policy, place=places[-1], cpu_node=r.cpu_node, variants=tuple(dict(v) for v in variants),
            cpus=tuple(r.cpus) if r.cpus else tuple(topology.node(r.cpu_node).cpus) if r.cpu_node is not None
            else None,
            # ranks whose threads share those CPUs: a worker sizes its thread pool by it
            cpu_share=1 if r.cpus else sum(1 for o in ranks if o.cpu_node == r.cpu_node and not o.cpus),
            extra=extra))
    verified = verified or {}
    weights = WeightSetting(case.policy.weight_map) if case.policy.kind == "weighted" else contextlib.nullcontext()
    from numabench.workers.group import WorkerGroup

    labels = [s.label for s in sides]
    t0 = time.perf_counter()
    with weights, contextlib.ExitStack() as stack:
        groups = {s.label: stack.enter_context(WorkerGroup(commands[s.label], s.environment(), timeout_s=timeout_s,
                                                           cwd=s.cwd)) for s in sides}
        dones: dict[str, list[SetupDone]] = {}
        for s in sides:
            checked = verified.get(s.label)
            _side_call(s, sides, groups[s.label].send_setup,
                       [WorkerSpec(**spec, verified=dict(checked or {})).to_dict() for spec in rank_specs])
        for s in sides:
            dones[s.label] = [SetupDone.from_dict(d, family.setup_reply)
                              for d in _side_call(s, sides, groups[s.label].receive_setup)]
            if verified.get(s.label) is not None:
                for done in dones[s.label]:
                    verified[s.label].update(done.verified)
        t_checks = time.perf_counter()
        first = labels[0]
        parts = fixed_parts(dones[first], groups[first].started_at)
        placements: dict[str, list[RankPlacement]] = {}
        for s in sides:
            placements[s.label] = []
            for r, policy, rank_place, done in zip(ranks, resolved, places, dones[s.label]):
                report = done.info.placement
                if rank_place is not None:  # each kind against its own policy (the whole state follows none)
                    placements[s.label].append(_kind_placement(r, policy, rank_place, done, family, case,
                                                               tolerance_pp))
                    continue
                expected = policy.expectation(cpu_node=r.cpu_node)
                if any(f.rank in (None, r.index) for f in misplace):  # fault injection: a promise nobody keeps
                    expected = Expectation(within=(max(topology.node_ids, default=0) + 1,))
                verdict = compare(report, expected, tolerance_pp) if expected else None
                placements[s.label].append(RankPlacement(r.index, str(policy), report, verdict))
            bad = [p for p in placements[s.label] if p.verdict and not p.verdict.ok]
            if bad:
                where = "" if len(sides) == 1 else f"{s.describe()}: "
                raise PlacementError(where + "; ".join(f"rank {p.rank} under {p.policy}: {p.verdict.message}"
                                                       for p in bad))
        # Variants take turns round by round, and sides too, so slow drifts of a shared machine
        # (other tenants, clocks, page migration) hit every variant and side alike.
        payloads = [{"variant": dict(v)} for v in variants]
        t_steps = time.perf_counter()
        parts["checks"] = t_steps - t_checks
        by_label = {s.label: s for s in sides}
        for n in range(warmup):
            for label in round_order(labels, n):
                for payload in payloads:
                    _side_call(by_label[label], sides, groups[label].step, payload)
        per_rank = {label: [[dict() for _ in ranks] for _ in variants] for label in labels}
        phases: dict[str, list[dict[str, list[float]]]] = {label: [dict() for _ in variants] for label in labels}
        step_cpus = {label: [collections.Counter() for _ in ranks] for label in labels}  # timed steps per CPU
        rewarmed = [rewarm] * len(payloads)  # per variant: its timed steps after an untimed one
        untimed_s = [0.0] * len(payloads)  # per variant: its longest untimed step of the first round
        step_requests = warmup * len(payloads) * len(labels)
        n = 0
        while wants_round(n, rounds, round_target, phases, labels):
            for label in round_order(labels, n):
                for k, payload in enumerate(payloads):
                    if rewarmed[k]:
                        started = time.perf_counter()
                        _side_call(by_label[label], sides, groups[label].step, payload)
                        untimed_s[k] = max(untimed_s[k], time.perf_counter() - started)
                        step_requests += 1
                    times = _side_call(by_label[label], sides, groups[label].step, payload)
                    step_requests += 1
                    for i, cpu in enumerate(groups[label].step_cpus):
                        if cpu is not None:
                            step_cpus[label][i][cpu] += 1
                    for i, t in enumerate(times):
                        for ph, v in t.items():
                            per_rank[label][k][i].setdefault(ph, []).append(v)
                    for ph in times[0]:
                        phases[label][k].setdefault(ph, []).append(max(t[ph] for t in times))
            if n == 0:
                rewarmed = [r and (family.rewarm_every_round or took < REWARM_BELOW_S)
                            for r, took in zip(rewarmed, untimed_s)]
            n += 1
        steps_s = time.perf_counter() - t_steps
        t_close = time.perf_counter()
        for group in groups.values():  # every side's workers tear down at once, not one side after the other
            group.ask_exit()
        results: dict[str, list[CaseResult]] = {label: [] for label in labels}
        for s in sides:
            for k, variant in enumerate(variants):
                results[s.label].append(CaseResult(
                    case=Case(case.family, case.nprocess, case.numel, case.policy, case.dtype, variant),
                    phases=phases[s.label][k], per_rank=per_rank[s.label][k],
                    setup_info=[d.info for d in dones[s.label]], affinity=[d.affinity for d in dones[s.label]],
                    node_memory=[d.node_memory for d in dones[s.label]],
                    invocation_cpus=[[c.most_common(1)[0][0] if c else None for c in step_cpus[s.label]]],
                    invocation_huge_shares=[huge_share(placements[s.label])],
                    placement=placements[s.label], launcher=how + (" (forked)" if s.fork_socket else ""),
                    commands=commands[s.label], slowdown=slowdowns[s.label],
                    rewarmed=[rewarmed[k] and n > 1] if rewarm else [],
                    extra=place_note(case, topology)))
    # The run's cost, for time plans: fixed (start, set-up, checks, teardown) and per step request
    t_end = time.perf_counter()
    fixed_s = t_end - t0 - steps_s
    parts["close"] = t_end - t_close
    parts = {k: round(v, 3) for k, v in parts.items()}
    for side_results in results.values():
        for r in side_results:
            r.fixed_s, r.step_wall_s = fixed_s, steps_s / max(1, step_requests)
            r.fixed_parts_s = parts
            r.invocation_walls_s = [(round(fixed_s, 3), round(steps_s, 3))]
    return results


def huge_share(placements: Sequence[RankPlacement]) -> float | None:
    """The share of all ranks' placed bytes in transparent huge pages (None: any rank's not known)."""
    if not placements:
        return None
    merged = placements[0].report
    for p in placements[1:]:
        merged = merged.merge(p.report)
    share = merged.huge_share()
    return None if share is None else round(share, 4)


def wants_round(taken: int, rounds: int, round_target: RoundTarget | None,
                phases: dict[str, list[dict[str, list[float]]]], labels: Sequence[str]) -> bool:
    """Whether a run that has timed ``taken`` rounds times another: up to ``rounds``, then, with a
    ``round_target`` (two sides), while some variant's phase has a ratio it does not know to the
    target yet, up to its most rounds. ``phases``: per side label, per variant, the
    phases' rounds so far."""
    if taken < rounds:
        return True
    if round_target is None or taken >= round_target.most_rounds:
        return False
    first, second = (phases[label] for label in labels)
    return not round_target.met([(a[ph], b[ph]) for a, b in zip(first, second) for ph in a if ph in b])


def worker_argv(side: WorkerSide, family_key: str) -> list[str]:
    """What the launcher starts for one of ``side``'s workers: the worker itself, or the stand-in
    that its fork server turns into one (numabench.workers.forks.pool)."""
    if side.fork_socket:
        from numabench.workers.forks.pool import client_argv
        return client_argv(side.fork_socket, family_key)
    return [sys.executable, "-m", "numabench.workers.main", family_key]


def _side_call(side: WorkerSide, sides: Sequence[WorkerSide], fn: Any, *args: Any) -> Any:
    """``fn(*args)`` on one side's group; with several sides, a failure names the side."""
    try:
        return fn(*args)
    except WorkerError as e:
        if len(sides) == 1:
            raise
        raise WorkerError(f"{side.describe()}: {e}") from None


def _kind_placement(rank: Rank, policy, place: Place, done: SetupDone, family: Family, case: Case,
                    tolerance_pp: float) -> RankPlacement:
    """A rank's placement under ``place``: its kinds judged (numabench.numa.kind_check), one verdict of them."""
    records = done.info.kinds
    if records is None:
        raise PlacementError(f"rank {rank.index} of {case.id} reported no placement per kind: its family's worker "
                             f"does not place by place={place}")
    touches = {k.kind: k.touches for k in family.state_kinds(case)}
    kinds = judge_kinds(records, place, policy, rank.cpu_node, touches, os.sysconf("SC_PAGE_SIZE"), tolerance_pp)
    return RankPlacement(rank.index, str(policy), done.info.placement, rank_verdict(kinds), kinds)


def place_note(case: Case, topology: Topology) -> dict[str, Any]:
    """What an entry says of its ``place`` beyond the kinds: on a machine of one memory node every
    kind lands there, whatever the placement names (the axis runs; its nodes are all one)."""
    if not case.param("place") or len(topology.memory_node_ids) != 1:
        return {}
    node = topology.memory_node_ids[0]
    return {"place_note": f"one NUMA node with memory: every kind on node {node}"}


def fixed_parts(dones: list[SetupDone], started_at: float) -> dict[str, float]:
    """The slowest rank's start-up and set-up parts (each rank's ``timing`` from workers.main)."""
    timings = [d.timing for d in dones]
    parts: dict[str, float] = {}
    if timings:
        parts["start"] = max(t.main_at for t in timings) - started_at
    parts["import"] = max((t.import_s for t in timings), default=0.0)
    parts["setup"] = max((t.setup_s for t in timings), default=0.0)
    for t in timings:
        for name, v in t.parts_s.items():
            parts[f"setup.{name}"] = max(parts.get(f"setup.{name}", 0.0), v)
    return parts
