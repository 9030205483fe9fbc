"""A kept A/B session judged again, nothing measured (``numabench ab --rejudge SESSION``): the
session's pytest-benchmark JSON that ``numabench ab --session-json`` kept holds both sides'
medians and rounds pair by pair, so what its first N pairs, another threshold or confidence, or
each pair's ratio of medians instead of its round-by-round ratio would have said is read off the
same pairs. What the gate would have run differently (further or confirming pairs that did not
run) is not there to judge.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from numabench.errors import UsageError
from numabench.ab.run import ABResult, Side, confirm_confidence_of, judge_measured
from numabench.ab.formats import RUN_KEY, recorded_run
from numabench.ab.session import AB_BASE_KEY, confirming_pairs, first_stage_pairs, interleaved_medians
from numabench.gate.pairs import MIN_PAIRS, PAIR_RATIO, PAIR_RATIOS
from numabench.ab.settings import DEFAULTS


def recorded_pairs(measured: dict[str, list[dict[str, float]]], confirming: dict[str, int]) -> int:
    """The pairs every entry of the session has apart from confirming ones: its --pairs."""
    names = set().union(*measured["base"])
    counts = [sum(name in m for m in measured["base"]) - confirming.get(name, 0) for name in names]
    return min(counts) if counts else 0


def _sides(run: dict[str, Any]) -> tuple[Side, Side]:
    """Base and head as the session recorded them: the base's checkout and environment (its
    ``extra_info["ab_base"]``), the head's commit (pytest-benchmark's ``commit_info``) and
    environment where recorded."""
    ab = next(((b.get("extra_info") or {}).get(AB_BASE_KEY) or {} for b in run.get("benchmarks") or []
               if (b.get("extra_info") or {}).get(AB_BASE_KEY)), {})
    checkout = ab.get("checkout")
    base = Side(str(checkout) if checkout else "base", None, Path(checkout) if checkout else Path("."),
                {str(k): str(v) for k, v in (ab.get("env") or {}).items()})
    commit = (run.get("commit_info") or {}).get("id")
    head = Side("head", commit if isinstance(commit, str) and commit else None, Path("."),
                {str(k): str(v) for k, v in (ab.get("head_env") or {}).items()})
    return base, head


def rejudge(run: dict[str, Any], source: str, *, pairs: int | None = None,
            threshold_pct: float = DEFAULTS.threshold, confidence: float = DEFAULTS.confidence,
            coarsest_pct: float = DEFAULTS.coarsest, pair_ratio: str = PAIR_RATIO,
            confirm_confidence: float | None = None) -> ABResult:
    """The verdicts of a kept session (``run``: its JSON, read from ``source``): on every pair
    each entry has, its confirming pairs as they ran (``pairs`` None), or on its first ``pairs``
    pairs alone (confirming pairs not told apart); each pair's ratio ``pair_ratio`` (gate.pairs.PAIR_RATIOS):
    "quads" (ABBA quads of rounds, where both sides' rounds are kept), "rounds" (round by round, as
    runs were judged before quads) or "medians". Entries with confirming pairs
    are judged at ``confirm_confidence`` (default: gate.pairs.confirmed_confidence of ``confidence``)."""
    confirm_confidence = confirm_confidence_of(confidence, confirm_confidence)
    if pair_ratio not in PAIR_RATIOS:
        raise UsageError(f"--pair-ratio {pair_ratio}: allowed {', '.join(PAIR_RATIOS)}")
    if not any(((b.get("extra_info") or {}).get(AB_BASE_KEY)) for b in run.get("benchmarks") or []):
        raise UsageError(f"--rejudge {source}: no entry has extra_info.{AB_BASE_KEY}: allowed the session JSON that "
                         "numabench ab --session-json kept")
    from_rounds = PAIR_RATIO if pair_ratio == "medians" else pair_ratio  # "medians" drops them below
    measured: dict[str, Any] = interleaved_medians(run, MIN_PAIRS, source, from_rounds)
    confirming = confirming_pairs(run)
    measured["first_stage"] = first_stage_pairs(run)
    first = recorded_pairs(measured, confirming)
    if pairs is not None:
        most = sum(bool(m) for m in measured["base"])
        if not MIN_PAIRS <= pairs <= most:
            raise UsageError(f"--pairs {pairs}: {source} has {most} pairs at most: allowed {MIN_PAIRS} to {most}")
        measured = {k: v[:pairs] for k, v in measured.items() if k != "first_stage"}
        first, confirming = pairs, {}
    if pair_ratio == "medians":
        measured.pop("ratios", None)
        measured.pop("errors", None)
    res = ABResult(*_sides(run), first, threshold_pct, confidence, coarsest_pct=coarsest_pct, interleave="rounds",
                   when=str(run.get("datetime") or ""), workers="", rejudged_from=source)
    if RUN_KEY in run:  # how the run ran, as numabench ab recorded it (sessions kept before it: the checkout)
        try:
            ran = recorded_run(run[RUN_KEY], source)
        except ValueError as e:
            raise UsageError(f"--rejudge {source}: {e}") from None
        # the run's sides and settings under this judgement's rule; nothing measured now, and the exit
        # code the verdicts' (not a stopped session's signal)
        res = dataclasses.replace(ran, pairs=first, threshold_pct=threshold_pct, confidence=confidence,
                                  coarsest_pct=coarsest_pct, interleave="rounds", timings_s={}, stopped_by=None,
                                  rejudged_from=source)
    res.rows, res.missing = judge_measured(measured, threshold_pct, confidence, first, confirming,
                                           confirm_confidence, from_rounds)
    res.confirm_pairs = max(confirming.values(), default=0)
    res.confirm_confidence = confirm_confidence if res.confirm_pairs else None
    keys = {(b.get("extra_info") or {}).get("hardware_key") for b in run.get("benchmarks") or []} - {None}
    res.hardware_key = keys.pop() if len(keys) == 1 else None
    return res
