"""Further pairs within a time budget (``numabench ab --time-budget``, pairs in passes): after the
first passes, which worker runs take how many more pairs so that, when the budget ends, as many
entries as it can buy are judged at all (their resolution within the coarsest, not `unresolved`)
and reach the target resolution: each entry counts once for each.

Why: on the lent VMs the host-side entries' pairs in passes spread 5-10% (docs/GATE.md), so one
entry may need 30 pairs for a resolution that another reaches in 3, and worker runs cost 2-30 s a
pair. Stein's rule alone (``--max-pairs``) gives every too-spread run what it needs, however long
that takes; a budget spends the time where it brings the most entries to the target per second.

Each entry's need is Stein's first stage (gate.pairs.pairs_for_target: from its first pairs'
spread only, never where their ratios lie, so the interval from all its pairs stays valid); a worker
run's cost a pair is the mean wall of its pairs so far (both sides' set-up, steps and teardown, as
the session recorded it: fixtures.ab_sides.base_extra_info); a further pass also pays a session's
start and its fork servers (``pass_overhead_s``, what the first passes took beyond their runs).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from numabench.gate.pairs import MIN_PAIRS, pairs_for_target

UNCAPPED = 10_000  # pairs: an entry's need as Stein's rule gives it, before any cap


@dataclass(frozen=True)
class RunNeeds:
    """One worker run: what a pair of it costs, and the pairs in all that bring one of its entries
    to a resolution (each entry's need for the coarsest and for the target, where it needs more)."""
    cost_s: float
    entry_pairs: tuple[int, ...]


def allocate(runs: Mapping[str, RunNeeds], first: int, budget_s: float, pass_overhead_s: float = 0.0
             ) -> dict[str, int]:
    """Pairs in all per worker run (``first`` or more), chosen greedily: each step raises one run
    to the next need of one of its entries, the step that brings the most entries to their need
    per second, while the further pairs' cost (each run's pairs beyond ``first`` times its cost,
    and a further pass's overhead per pass) stays within ``budget_s``."""
    if first < 1:
        raise ValueError(f"first {first}: allowed 1 or more pairs")
    level = {name: first for name in runs}

    def cost(levels: Mapping[str, int]) -> float:
        passes = max(levels.values(), default=first) - first
        return sum((n - first) * runs[r].cost_s for r, n in levels.items()) + passes * pass_overhead_s

    while True:
        spent, best = cost(level), None
        for name in sorted(runs):
            needs = runs[name].entry_pairs
            for target in sorted({n for n in needs if n > level[name]}):
                trial = cost({**level, name: target})
                if trial > budget_s:
                    break  # a higher target costs more
                gained = sum(level[name] < n <= target for n in needs)
                score = gained / max(trial - spent, 1e-9)
                if best is None or score > best[0]:
                    best = (score, name, target)
        if best is None:
            return level
        level[best[1]] = best[2]


def fill(levels: Mapping[str, int], runs: Mapping[str, RunNeeds], first: int, budget_s: float,
         pass_overhead_s: float = 0.0) -> dict[str, int]:
    """``levels`` (allocate's) with what ``budget_s`` has left spent on the runs an entry of which
    is still short of its need: a pair more for each of them at a time, while the cost stays within
    the budget. For the focus budget (numabench ab --focus-budget): where the threshold is beyond
    what the budget buys, its further pairs still narrow the touched family's intervals, which a
    change larger than the threshold needs to be judged; how many depends on time alone, never
    on where the ratios lie, so Stein's interval stays valid."""
    level = dict(levels)
    short = sorted(r for r in level if any(n > level[r] for n in runs[r].entry_pairs))

    def cost(trial: Mapping[str, int]) -> float:
        passes = max(trial.values(), default=first) - first
        return sum((n - first) * runs[r].cost_s for r, n in trial.items()) + passes * pass_overhead_s

    while short:
        trial = {**level, **{r: level[r] + 1 for r in short}}
        if cost(trial) > budget_s:
            return level
        level = trial
        short = [r for r in short if any(n > level[r] for n in runs[r].entry_pairs)]
    return level


def run_needs(measured: Mapping[str, Any], names: Sequence[str], resolutions_pct: Sequence[float],
              confidence: float, most: int | None, ratios_of: Any, errors_of: Any = None) -> dict[str, RunNeeds]:
    """The worker runs of ``names`` with what a pair of each cost (``measured["walls"]``) and each
    entry's needs (Stein's first stage on ``ratios_of(name)``, floored by ``errors_of(name)`` where
    given and known: gate.pairs.spread_sd; one for each of ``resolutions_pct``);
    a need beyond ``most`` pairs (None: no cap) is left out, as is an entry with no run or walls
    recorded: no number of pairs allowed brings it there."""
    runs_of, walls = measured.get("runs") or {}, measured.get("walls") or {}
    costs: dict[str, list[float]] = {}
    needs: dict[str, list[int]] = {}
    for name in names:
        run, per_pair = runs_of.get(name), walls.get(name)
        if not run or not per_pair:
            continue
        costs.setdefault(run, list(per_pair))
        needs.setdefault(run, [])
        ratios = ratios_of(name)
        if len(ratios) < MIN_PAIRS:
            continue
        for pct in resolutions_pct:
            n = pairs_for_target(ratios, pct, confidence, UNCAPPED, None if errors_of is None else errors_of(name))
            if n > len(ratios) and (most is None or n <= most):
                needs[run].append(n)
    return {run: RunNeeds(statistics.fmean(costs[run]), tuple(needs[run])) for run in costs}


def pass_cost_s(runs: Mapping[str, RunNeeds], names: Sequence[str], runs_of: Mapping[str, str],
                pass_overhead_s: float) -> float:
    """What a pass over the worker runs of ``names`` is expected to take."""
    chosen = {runs_of[n] for n in names if n in runs_of and runs_of[n] in runs}
    return sum(runs[r].cost_s for r in chosen) + pass_overhead_s
