"""Where an A/B entry's spread comes from: its log round ratios split into the part that moves
from round to round inside a pair (within-pair) and the part that moves from pair to pair
(between-pair), from a kept session (numabench ab --session-json), measuring nothing.

For an entry with P pairs of R rounds each, x[p][r] = log(head round r / base round r) of pair p
(the rounds alternated, so round r of one side ran beside round r of the other). A one-way
random-effects split of the x's:

    within  s_w^2 = the mean over pairs of each pair's sample variance of its x's
    between s_b^2 = max(0, var over pairs of the pair means - s_w^2 / R)

and the part of s_w that is the rounds' order, not noise: which side steps first alternates from
round to round, and where stepping second costs k, x alternates +k, -k (``position``: half the
difference between the median x of even and of odd rounds, the median over pairs of its size).

The gate judges each pair by the median over its ABBA quads (gate.pairs.quad_ratio), in which
that order cancels. Their observed variance s_m^2 holds s_b^2
and what the rounds add through the median, w = s_m^2 - min(s_b^2, s_m^2), shrinking as 1 / R
(the rounds' tails make the median's share smaller than a normal model's pi/2 x s_w^2 / R,
so the observed one is used). So:

- where s_w^2 / R dominates, more rounds narrow each pair (``Family.ab_rounds``);
- where s_b^2 dominates, more rounds do nothing: what moves is the pair (its workers' buffers and
  where their pages landed, the CPUs, the minute it ran in), and only more pairs, or moving those
  causes inside a pair (new buffers every few rounds), narrow the interval.

``resolution_at`` predicts the resolution of P pairs of R rounds from the two parts, at the
gate's confidence (t on P - 1 degrees of freedom), to say which cure reaches a target.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from numabench.ab.settings import DEFAULTS
from numabench.gate.formats import format_table
from numabench.gate.pairs import MIN_PAIRS, quad_ratio, t_quantile

@dataclass(frozen=True)
class Spread:
    """One entry's spread, in log-ratio units (about fractions: 0.01 is 1%)."""
    name: str
    pairs: int
    rounds: int  # rounds per pair (the fewest any pair had)
    within_sd: float  # round to round, inside a pair
    between_sd: float  # pair to pair, beyond what the rounds explain
    pair_sd: float  # of the pairs' ratios as the gate takes them (median of the ABBA quads), observed
    most_rounds: int = 0  # the most any pair had (numabench ab --round-target varies them); 0: as ``rounds``
    position: float = 0.0  # what stepping second costs, as x sees it (module docstring); quads cancel it

    @property
    def rounds_text(self) -> str:
        return f"{self.rounds}" if self.most_rounds <= self.rounds else f"{self.rounds}-{self.most_rounds}"

    @property
    def pairs_part(self) -> float:
        """The pair's own part of a pair ratio's variance (at most all of it, as observed)."""
        return min(self.between_sd, self.pair_sd) ** 2

    @property
    def rounds_part(self) -> float:
        """What the rounds add to a pair ratio's variance at this many rounds, as observed."""
        return self.pair_sd ** 2 - self.pairs_part

    @property
    def between_share(self) -> float:
        """The share of a pair ratio's variance that is the pair's own (0-1)."""
        return self.pairs_part / self.pair_sd ** 2 if self.pair_sd > 0 else 0.0

    def resolution_at(self, pairs: int, rounds: int, confidence: float = DEFAULTS.confidence) -> float:
        """The resolution (percent) that ``pairs`` pairs of ``rounds`` rounds would have, the two
        parts as measured here (the rounds' part scaled by this session's rounds / ``rounds``)."""
        if pairs < MIN_PAIRS or rounds < 1:
            raise ValueError(f"{pairs} pairs of {rounds} rounds: allowed 2 or more pairs of 1 or more rounds")
        sd = math.sqrt(self.pairs_part + self.rounds_part * self.rounds / rounds)
        return math.expm1(t_quantile((1 + confidence) / 2, pairs - 1) * sd / math.sqrt(pairs)) * 100


def spread_of(name: str, base_rounds: Sequence[Sequence[float]], head_rounds: Sequence[Sequence[float]]) -> Spread:
    """The split of one entry from each pair's rounds of both sides (pair by pair, round by round)."""
    logs = []
    for p, (b, h) in enumerate(zip(base_rounds, head_rounds)):
        if len(b) != len(h) or len(b) < 2:
            raise ValueError(f"{name}: pair {p} has {len(b)} base and {len(h)} head rounds: allowed as many of each, "
                             "2 or more")
        if not all(v > 0 and math.isfinite(v) for v in (*b, *h)):
            raise ValueError(f"{name}: pair {p}: a round that is not a time > 0")
        logs.append([math.log(hv / bv) for bv, hv in zip(b, h)])
    if len(logs) < MIN_PAIRS:
        raise ValueError(f"{name}: {len(logs)} pairs with rounds of both sides: allowed {MIN_PAIRS} or more")
    rounds = min(len(x) for x in logs)
    within = statistics.fmean(statistics.variance(x) for x in logs)
    means = [statistics.fmean(x) for x in logs]
    # a pair of R rounds has a mean of variance s_b^2 + s_w^2 / R: pairs of unequal rounds, the mean of 1 / R
    between = max(0.0, statistics.variance(means) - within * statistics.fmean(1 / len(x) for x in logs))
    pair_logs = [math.log(quad_ratio(b, h)) for b, h in zip(base_rounds, head_rounds)]  # as the gate takes them
    # x of even rounds against odd ones: the side that steps first alternates, so a cost of stepping
    # second shows as +k, -k (every pair has 2 rounds or more: checked above)
    position = statistics.median(abs(statistics.median(x[0::2]) - statistics.median(x[1::2])) / 2 for x in logs)
    return Spread(name, len(logs), rounds, math.sqrt(within), math.sqrt(between), statistics.stdev(pair_logs),
                  max(len(x) for x in logs), position)


def session_spreads(run: Mapping[str, Any]) -> list[Spread]:
    """Every entry of a kept session (numabench ab --session-json) that kept both sides' rounds
    of 2 or more pairs, in the session's order."""
    out = []
    for bench in run.get("benchmarks") or []:
        ab = (bench.get("extra_info") or {}).get("ab_base") or {}
        base, head = ab.get("invocation_rounds_s"), ab.get("head_invocation_rounds_s")
        if isinstance(base, list) and isinstance(head, list) and len(base) == len(head) >= MIN_PAIRS:
            out.append(spread_of(str(bench.get("fullname") or bench.get("name")), base, head))
    return out


def table(spreads: Iterable[Spread], pairs: Sequence[int] = (3, 6, 12), rounds: Sequence[int] = (10, 30),
          confidence: float = DEFAULTS.confidence) -> list[str]:
    """Each entry's split and the resolutions other pairs and rounds would give, as text lines."""
    cols = [(p, r) for p in pairs for r in rounds]
    head = ["entry", "pairs x rounds", "within %", "2nd side %", "between %", "pair sd %", "between share",
            *(f"res {p}x{r} %" for p, r in cols)]
    rows = [[s.name.split("::")[-1], f"{s.pairs}x{s.rounds_text}", f"{s.within_sd * 100:.2f}",
             f"{s.position * 100:.2f}", f"{s.between_sd * 100:.2f}",
             f"{s.pair_sd * 100:.2f}", f"{s.between_share:.0%}",
             *(f"{s.resolution_at(p, r, confidence):.2f}" for p, r in cols)] for s in spreads]
    return format_table(head, rows)


@dataclass(frozen=True)
class RunCost:
    """One worker run of a kept session: its entries' spreads and what a pair of it cost, split
    into the stepping (which grows with the rounds) and the rest (set-up, teardown: per pair)."""
    run: str
    spreads: tuple[Spread, ...]
    rounds: int  # rounds a pair had in the session
    pair_s: float  # the median wall of its pairs, both sides (ab_base.pair_walls_s)
    stepping_s: float  # of which stepping, modelled (step_requests_s)

    @property
    def fixed_s(self) -> float:
        return max(self.pair_s - self.stepping_s, 0.0)

    def seconds(self, pairs: int, rounds: int) -> float:
        """The measuring ``pairs`` pairs of ``rounds`` rounds would take (further passes' start-up
        left out: a lower bound)."""
        return pairs * (self.fixed_s + self.stepping_s * rounds / self.rounds)

    def cheapest(self, target_pct: float, confidence: float = DEFAULTS.confidence, most_pairs: int = 300,
                 most_rounds_x: int = 40) -> tuple[int, int, float] | None:
        """The cheapest (pairs, rounds, seconds) that brings every entry of the run to a resolution
        of ``target_pct``: pairs from 3 to ``most_pairs``, rounds whole multiples of the session's up
        to ``most_rounds_x`` of them; None where none does."""
        best = None
        for pairs in range(max(MIN_PAIRS, 3), most_pairs + 1):
            for k in range(1, most_rounds_x + 1):
                rounds = self.rounds * k
                if max(s.resolution_at(pairs, rounds, confidence) for s in self.spreads) <= target_pct:
                    seconds = self.seconds(pairs, rounds)
                    if best is None or seconds < best[2]:
                        best = (pairs, rounds, seconds)
                    break  # more rounds at these pairs only cost more
        return best


def step_requests_s(entries: Sequence[Mapping[str, Any]]) -> float:
    """A pair's stepping of one worker run, from what its head recorded (``run_step_wall_s``, the
    wall of one step request: one variant's step on one side): rounds x 2 sides x the run's
    variants (its entries' cases without their phase) x 2 where each timed round followed an
    untimed one (``rewarmed_pairs``)."""
    extra = entries[0].get("extra_info") or {}
    ab = extra.get("ab_base") or {}
    rewarm = 2 if all(ab.get("rewarmed_pairs") or [False]) else 1
    variants = {str(b.get("name", "")).split("[", 1)[-1].split("-", 1)[-1] for b in entries}
    return float(extra.get("rounds") or 0) * 2 * len(variants) * rewarm * float(extra.get("run_step_wall_s") or 0.0)


def session_run_costs(run: Mapping[str, Any], spreads: Iterable[Spread] | None = None) -> list[RunCost]:
    """Each worker run of a kept session whose entries kept both sides' rounds and whose pairs'
    walls were recorded, in the session's order (``spreads``: the session's, where already split)."""
    spreads = {s.name: s for s in (session_spreads(run) if spreads is None else spreads)}
    by_run: dict[str, list[Mapping[str, Any]]] = {}
    for bench in run.get("benchmarks") or []:
        extra = bench.get("extra_info") or {}
        key = (extra.get("ab_base") or {}).get("run")
        name = str(bench.get("fullname") or bench.get("name"))
        if key and name in spreads:
            by_run.setdefault(str(key), []).append(bench)
    out = []
    for key, entries in by_run.items():
        walls = (entries[0]["extra_info"]["ab_base"].get("pair_walls_s") or [])
        if not walls:
            continue
        own = tuple(spreads[str(b.get("fullname") or b.get("name"))] for b in entries)
        out.append(RunCost(key, own, min(s.rounds for s in own), statistics.median(walls), step_requests_s(entries)))
    return out


def cost_table(costs: Iterable[RunCost], target_pct: float, confidence: float = DEFAULTS.confidence) -> list[str]:
    """Per worker run: its pair's cost now and the cheapest pairs x rounds that bring all its
    entries to ``target_pct``, with the measuring that takes (an estimate, a lower bound)."""
    head = ["worker run", "entries", "pairs x rounds", "pair wall s", "stepping s", "resolution now %",
            f"all <= {target_pct:g}% at", "est. minutes", "now minutes"]
    rows = []
    for c in costs:
        pairs = min(s.pairs for s in c.spreads)
        now = [s.resolution_at(pairs, c.rounds, confidence) for s in c.spreads]
        best = c.cheapest(target_pct, confidence)
        rows.append([c.run, str(len(c.spreads)), f"{pairs}x{c.rounds}", f"{c.pair_s:.1f}", f"{c.stepping_s:.1f}",
                     f"{min(now):.2f}-{max(now):.2f}", f"{best[0]}x{best[1]}" if best else "beyond 300 pairs",
                     f"{best[2] / 60:.1f}" if best else "-", f"{c.seconds(pairs, c.rounds) / 60:.1f}"])
    return format_table(head, rows)
