"""Which worker runs take more pairs than the A/B's first ones: further pairs where an entry's
first pairs are too spread for the target resolution (Stein's first stage,
gate.pairs.pairs_for_target), and confirming pairs where they judge an entry slower or faster
(gate.pairs.judge_ratios). Plain code, in two shapes of the same decision:

- a worker run's pairs as a session measured them back to back (``--no-passes``): each pair the
  base's and the head's results, a result per variant (:func:`take_pairs`, which
  fixtures/running.py calls with the session's own invocations);
- the entries of numabench ab's passes, by full name (:func:`further_wanted`,
  :func:`changed_names`, which ab/passes.py calls between passes).

These only choose what to measure; every entry is judged once, by numabench ab on all its pairs
(numabench.ab.run.judge_measured).
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Sequence

from numabench.cases import CaseResult
from numabench.gate.pairs import MIN_PAIRS, judge_ratios, pairs_for_target, pair_error, quad_ratio
from numabench.gate.rule import FASTER, SLOWER

# one pair of a worker run: (the base's results, the head's results), a result per variant
Pair = tuple[Sequence[CaseResult], Sequence[CaseResult]]


def entry_ratios(pairs: Sequence[Pair]) -> Iterator[tuple[int, str, list[float], list[float]]]:
    """Each entry of a worker run (variant index, phase) with its pair ratios head/base, as
    numabench ab takes them (gate.pairs.quad_ratio: by ABBA quads of rounds), one per pair that timed it
    on both sides, as many rounds of each, every one > 0; and each ratio's own standard error
    (gate.pairs.pair_error: the interval's floor)."""
    for k in range(len(pairs[0][0]) if pairs else 0):
        for phase in pairs[0][1][k].phases:
            ratios, errors = [], []
            for base, head in pairs:
                b, h = base[k].phases.get(phase) or [], head[k].phases.get(phase) or []
                if b and len(b) == len(h) and all(v > 0 for v in (*b, *h)):
                    ratios.append(quad_ratio(b, h))
                    errors.append(pair_error(b, h))
            yield k, phase, ratios, errors


def pairs_wanted(pairs: Sequence[Pair], target_pct: float, confidence: float, most: int) -> int:
    """Stein's first stage over a worker run: from its first pairs, how many pairs in all its
    widest entry (each variant's each phase) needs to reach ``target_pct``, at most ``most``. It
    reads the pairs' spread only, never where their ratios lie."""
    wanted = len(pairs)
    for _, _, ratios, errors in entry_ratios(pairs):
        wanted = max(wanted, pairs_for_target(ratios, target_pct, confidence, most, errors))
    return min(most, wanted)


def changed_entries(pairs: Sequence[Pair], threshold_pct: float, confidence: float,
                    first_stage: int | None = None) -> list[tuple[int, str, str]]:
    """The entries of a worker run (variant index, phase, verdict) that its pairs judge slower or
    faster (``first_stage``: Stein's, where further pairs ran). A worker run with any such entry
    runs confirming pairs: on a few pairs, some unchanged entry of a large tier is judged changed
    by chance alone (about 1% of those whose noise is well above the threshold, at 95%), and fresh
    pairs pooled with these cut that sevenfold or more at little cost in power (docs/GATE.md)."""
    changed = []
    for k, phase, ratios, errors in entry_ratios(pairs):
        if len(ratios) < MIN_PAIRS:
            continue
        verdict = judge_ratios(ratios, threshold_pct, confidence, first_stage=first_stage, errors=errors).verdict
        if verdict in (SLOWER, FASTER):
            changed.append((k, phase, verdict))
    return changed


def take_pairs(invoke: Callable[[int], Mapping[str, Sequence[CaseResult]]], repeats: int, base: str, head: str, *,
               max_pairs: int, target_pct: float, confidence: float, confirm_pairs: int, threshold_pct: float,
               before_confirming: Callable[[], None] = lambda: None) -> tuple[list[Mapping[str, Any]], int]:
    """A worker run's pairs taken back to back in one session: ``repeats`` pairs (``invoke(i)``:
    pair i, each side's results by its label ``base`` and ``head``), then further pairs up to
    ``max_pairs`` where its entries are too spread for ``target_pct``, then ``confirm_pairs``
    fresh ones where its pairs judge an entry changed (``before_confirming`` runs first: fresh
    fork servers). Returns every pair and how many of them (the last ones) confirm."""
    runs = [invoke(i) for i in range(repeats)]
    if max_pairs:
        wanted = pairs_wanted([(r[base], r[head]) for r in runs], target_pct, confidence, max_pairs)
        runs += [invoke(i) for i in range(len(runs), wanted)]
    if confirm_pairs:  # a change seen on these pairs is judged on as many fresh ones more
        stein = repeats if len(runs) > repeats else None  # further pairs ran: width from the first
        if changed_entries([(r[base], r[head]) for r in runs], threshold_pct, confidence, first_stage=stein):
            before_confirming()
            runs += [invoke(i) for i in range(len(runs), len(runs) + confirm_pairs)]
            return runs, confirm_pairs
    return runs, 0


def entry_pair_ratios(measured: Mapping[str, Any], name: str) -> list[float]:
    """An entry's head/base per pair it has (numabench ab's measurements, by full name): round by
    round where recorded, else of its medians."""
    out = []
    ratios = measured.get("ratios") or [{} for _ in measured["base"]]
    for b, h, r in zip(measured["base"], measured["head"], ratios):
        if name in b and name in h:
            out.append(r.get(name) or h[name] / b[name])
    return out


def entry_pair_errors(measured: Mapping[str, Any], name: str) -> list[float] | None:
    """Each of ``entry_pair_ratios``'s own standard error (gate.pairs.pair_error), where every
    pair's ratio came from its rounds and its error was recorded; else None (no floor)."""
    out = []
    ratios = measured.get("ratios") or [{} for _ in measured["base"]]
    errors = measured.get("errors") or [{} for _ in measured["base"]]
    for b, h, r, e in zip(measured["base"], measured["head"], ratios, errors):
        if name in b and name in h:
            if r.get(name) is None or e.get(name) is None:
                return None
            out.append(e[name])
    return out


def further_wanted(measured: Mapping[str, Any], target_pct: float, confidence: float, most: int) -> dict[str, int]:
    """Stein's first stage per entry of numabench ab's measurements: the pairs in all that each
    entry whose first pairs are too spread needs, at most ``most``; entries that need none left out."""
    wanted = {}
    for name in sorted(set().union(*measured["base"])):
        ratios = entry_pair_ratios(measured, name)
        if len(ratios) >= MIN_PAIRS:
            n = pairs_for_target(ratios, target_pct, confidence, most, entry_pair_errors(measured, name))
            if n > len(ratios):
                wanted[name] = n
    return wanted


def changed_names(measured: Mapping[str, Any], threshold_pct: float, confidence: float,
                  first_stage: int) -> list[str]:
    """The entries that numabench ab's pairs so far judge slower or faster (Stein's ``first_stage``
    where an entry has further pairs): the ones whose worker runs take confirming passes."""
    changed = []
    for name in sorted(set().union(*measured["base"])):
        ratios = entry_pair_ratios(measured, name)
        if len(ratios) < MIN_PAIRS:
            continue
        stein = first_stage if len(ratios) > first_stage else None
        if judge_ratios(ratios, threshold_pct, confidence, first_stage=stein,
                        errors=entry_pair_errors(measured, name)).verdict in (SLOWER, FASTER):
            changed.append(name)
    return changed
