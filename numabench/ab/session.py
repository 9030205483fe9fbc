"""A rounds-mode A/B session's JSON read back: the one pytest session of the head that timed
both sides round by round (fixtures.ab_sides) keeps, per entry, the head's invocation medians
as any run does and the base's, both sides' rounds pair by pair, the confirming pairs its worker
run took and each pair's CPUs in ``extra_info["ab_base"]``. ``numabench ab`` judges what these
return (numabench.ab.run.judge_measured), and so does ``--rejudge`` for a kept session.
"""
from __future__ import annotations

import signal
from pathlib import Path
from typing import Any, Callable

from numabench.errors import UsageError
from numabench.interrupts import Stopped
from numabench.gate.invocations import invocation_medians
from numabench.gate import pairs as pair_rule
from numabench.results import storage

AB_BASE_KEY = "ab_base"  # extra_info of an entry of a rounds-interleaved session (fixtures.ab_sides)


class StoppedWithMeasurements(Stopped):
    """A rounds-mode session (or a pass of them) stopped (Ctrl-C, SIGTERM, SIGHUP) after some of
    its worker runs had finished: ``measured`` is what they measured, as invoke_interleaved
    returns it."""

    def __init__(self, stop: KeyboardInterrupt, measured: dict[str, Any]) -> None:
        super().__init__(stop.signum if isinstance(stop, Stopped) else signal.SIGINT, str(stop) or None)
        self.measured = measured


def session_measured(json_path: Path, pairs: int, selection: str = "",
                     failed: list[str] | None = None) -> dict[str, Any]:
    """A rounds-mode session's JSON as invoke_interleaved returns it: each side's medians per pair,
    the tests that ``failed``, each entry's confirming pairs and each pair's CPUs."""
    run = storage.load_run(json_path)
    measured: dict[str, Any] = interleaved_medians(run, pairs, selection)
    measured["failed"] = list(failed or [])
    measured["confirming"] = confirming_pairs(run)
    measured["cpus"] = pair_cpus(run)
    measured["runs"], measured["walls"] = run_walls(run)
    return measured


def interleaved_medians(run: dict, pairs: int, selection: str = "",
                        pair_ratio: str = pair_rule.PAIR_RATIO) -> dict[str, list[dict[str, float]]]:
    """Each side's per-pair medians from a rounds-interleaved session's run: the head's are the
    entry's invocation medians, the base's its ``extra_info["ab_base"]``; and each pair's ratio
    from both sides' rounds (``pair_ratio``: "quads" or "rounds", gate.pairs.RATIO_OF) where kept,
    under "ratios", with each such ratio's own standard error (gate.pairs.pair_error, the
    interval's floor; quads only) under "errors". An entry without ``pairs`` of each is in only
    the pairs it has (judge_measured lists it as missing); one with more (further pairs of its
    worker run) is in all of them."""
    entries = []
    for b in run["benchmarks"]:
        base = ((b.get("extra_info") or {}).get(AB_BASE_KEY) or {}).get("invocation_medians_s") or []
        if not all(isinstance(v, (int, float)) and v > 0 for v in base):
            base = []
        entries.append((b, invocation_medians(b), base))
    # pairs beyond ``pairs``: a worker run whose entries were still too wide (--max-pairs)
    most = max([pairs, *(min(len(h), len(b)) for _, h, b in entries)])
    measured: dict[str, list[dict[str, float]]] = {"base": [{} for _ in range(most)],
                                                   "head": [{} for _ in range(most)],
                                                   "ratios": [{} for _ in range(most)],
                                                   "errors": [{} for _ in range(most)]}
    for b, head, base in entries:
        ratios = session_round_ratios(b, pair_ratio)
        errors = session_round_errors(b) if pair_ratio == "quads" else None
        for i in range(min(len(head), len(base))):  # the pairs it has; judge_measured lists the rest
            measured["head"][i][b["fullname"]] = head[i]
            measured["base"][i][b["fullname"]] = float(base[i])
            if ratios is not None and i < len(ratios):
                measured["ratios"][i][b["fullname"]] = ratios[i]
            if errors is not None and i < len(errors):
                measured["errors"][i][b["fullname"]] = errors[i]
    if not any(measured["head"]):
        raise UsageError(f"the A/B session measured nothing: check the selection ({selection})")
    return measured


def _per_pair(bench: dict, of_pair: Callable[[list, list], float]) -> list[float] | None:
    """``of_pair(base rounds, head rounds)`` for each pair of an entry's ``extra_info["ab_base"]``, or
    None where both sides' rounds are not there for every pair it has (a session saved before they
    were kept, or a pair whose sides ran different numbers of rounds)."""
    ab = (bench.get("extra_info") or {}).get(AB_BASE_KEY) or {}
    base, head = ab.get("invocation_rounds_s"), ab.get("head_invocation_rounds_s")
    medians = ab.get("invocation_medians_s") or []
    if not (isinstance(base, list) and isinstance(head, list) and len(base) == len(head) == len(medians)):
        return None
    try:
        return [of_pair(b, h) for b, h in zip(base, head)]
    except (TypeError, ValueError):
        return None


def session_round_ratios(bench: dict, pair_ratio: str = pair_rule.PAIR_RATIO) -> list[float] | None:
    """An entry's pair ratios from both sides' rounds (``pair_ratio``: gate.pairs.RATIO_OF), or None
    (``_per_pair``)."""
    return _per_pair(bench, pair_rule.RATIO_OF[pair_ratio])


def session_round_errors(bench: dict) -> list[float] | None:
    """How well each pair's rounds know its quad ratio (gate.pairs.pair_error, log terms; infinite
    where too few rounds to say), for the pairs ``session_round_ratios`` gives; None as there."""
    return _per_pair(bench, pair_rule.pair_error)


def pair_cpus(run: dict) -> dict[str, dict[str, list]]:
    """Entry full name -> each side's CPUs per pair (its ``invocation_cpus``), where both sides say."""
    out = {}
    for b in run["benchmarks"]:
        extra = b.get("extra_info") or {}
        head, base = extra.get("invocation_cpus"), (extra.get(AB_BASE_KEY) or {}).get("invocation_cpus")
        if isinstance(head, list) and isinstance(base, list) and head and base:
            out[b["fullname"]] = {"base": base, "head": head}
    return out


def _counts(run: dict, key: str) -> dict[str, int]:
    """Entry full name -> its ``extra_info["ab_base"][key]``, where that is a whole number > 0."""
    out = {}
    for b in run["benchmarks"]:
        n = ((b.get("extra_info") or {}).get(AB_BASE_KEY) or {}).get(key) or 0
        if isinstance(n, int) and n > 0:
            out[b["fullname"]] = n
    return out


def first_stage_pairs(run: dict) -> dict[str, int]:
    """Entry full name -> its first stage's pairs where the session gave it more than --pairs (numabench ab
    --focus-budget: the families whose own code changed), as the kept session recorded them."""
    return _counts(run, "first_stage_pairs")


def confirming_pairs(run: dict) -> dict[str, int]:
    """Entry full name -> the confirming pairs its worker run took (fixtures.ab_sides), where it took any."""
    return _counts(run, "confirmation_pairs")


def run_walls(run: dict) -> tuple[dict[str, str], dict[str, list[float]]]:
    """Entry full name -> the worker run it came from, and -> that run's wall seconds per pair
    (fixtures.ab_sides.base_extra_info), where the session recorded them."""
    runs, walls = {}, {}
    for b in run["benchmarks"]:
        ab = (b.get("extra_info") or {}).get(AB_BASE_KEY) or {}
        key, per_pair = ab.get("run"), ab.get("pair_walls_s")
        if isinstance(key, str) and key and isinstance(per_pair, list) \
                and all(isinstance(w, (int, float)) and w >= 0 for w in per_pair):
            runs[b["fullname"]], walls[b["fullname"]] = key, [float(w) for w in per_pair]
    return runs, walls
