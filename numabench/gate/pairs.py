"""An A/B entry's verdict from its pairs: the ratio head/base, a confidence interval, the
smallest change this run can resolve for it, and slower / faster / same / unresolved.

Each pair (one base and one head invocation: fresh workers and buffers on both sides) gives
one ratio head/base; the pairs are the independent samples. Where the pair's rounds alternate
between the sides (numabench ab's rounds mode), its ratio comes from its rounds, each of one
side beside the same round of the other, so that a slow spell of the machine that spans a few
rounds hits both sides of those rounds alike and drops out, where a ratio of the two sides'
medians keeps it whenever it lasts into the one side's rounds more than the other's (an H200 x1
VM, pinned_alloc, 5 pairs, A/A, twice: the median resolution of its 12 entries from 3.3% to 1.7%
and from 6.0% to 3.9%, docs/GATE.md). Since the side that steps first alternates from round to
round, the ratio is the median over the pair's ABBA quads, rounds 2j and 2j+1, of the head's two
rounds over the base's two (``quad_ratio``): each side once first and once second in every quad,
so what stepping second costs (the other side's caches, its threads still spinning) cancels,
where a median of round-by-round ratios (``round_ratio``, how runs were judged before) takes a
sawtooth of +k, -k as noise: on the 2-core CPU machine cpu_adam's rounds went 1.30, 1.00, 1.32,
1.07 ms, and host_membw copy's resolution from 16-21% to 5% (docs/measured/2026-12-ab-gate.md).
Where the sides ran as separate invocations (ABBA order of whole invocations),
no round has a partner: the pair's ratio is that of their medians (``pair_ratios``). The
estimate is the geometric mean of the pair ratios. The interval is Student's t on the log
ratios:

    mean(log r) +- t(confidence, n - 1) * sd(log r) / sqrt(n)

which widens as it should with few pairs (t = 12.7 for 2 pairs at 95%, 4.3 for 3, 3.2 for
4), where a percentile bootstrap of the mean cannot: with 3 pairs it has only 10 distinct
resampled means, all inside the range of the 3 ratios, so it covers the true ratio far less
often than it claims (tests/test_ab_gate.py measures both on synthetic pairs).

The resolution of an entry is the interval's relative half-width, ``exp(t * sd / sqrt(n)) - 1``
in percent: a ratio at least that far from 1 (in log terms) puts the whole interval on one
side of 1. Its verdict:

- ``slower`` where the whole interval lies above ``1 + threshold``; ``faster`` where it lies
  below ``1 / (1 + threshold)``. Width does not matter here: such an interval says what it says.
- ``same`` only where the whole interval lies within the threshold band, ``1 / (1 + threshold)``
  to ``1 + threshold`` (an equivalence test, as two one-sided tests at the interval's
  confidence): the pairs rule out any change as large as the threshold.
- else ``unresolved`` (as with fewer than 2 pairs): the pairs cannot tell a change of the
  threshold from none. Where its interval excludes 1 it ``leans`` slower or faster
  ("unresolved, leans slower: 1.028 [1.006-1.050]"): something changed, by less than the
  threshold or by more, and ``pairs_to_resolve`` says how many pairs would tell which.
  A ``same`` that only meant "not shown to be slower" would pass a 3% slowdown measured
  with a 3% resolution; this rule calls it unresolved, leaning slower.

Further pairs (``numabench ab --max-pairs``) follow Stein's two-stage rule: the first
``pairs`` pairs (the first stage) decide how many pairs in all would bring the interval to
the target width, from their own spread (``pairs_for_target``); those further pairs run, and
the interval of an entry that has them is

    mean(log r over all n pairs) +- t(confidence, n0 - 1) * sd(log r over the first n0) / sqrt(n)

Its width was fixed before the further pairs ran, so how many ran says nothing about where the
mean lies: its coverage is the confidence it claims. Stopping instead as soon as the running
interval is narrow enough stops on pairs that happen to agree, and on synthetic A/A pairs
judged slower or faster 7.7% of runs at 95% (tests/test_ab_further_pairs.py).

The spread the interval uses is never less than what each pair's own rounds leave unknown
(``spread_sd``): a pair ratio varies by the pair's own part and by the standard error of its
median quad (``pair_error``, from its quads' spread), so the pairs' sample deviation,
which 2 or 3 pairs give very loosely, is floored at the root mean square of those errors. Two
pairs that agree by chance otherwise make an interval far narrower than their rounds allow: an
H200 x1 VM, cpu_adam given one thread fewer, 2 pairs of 30 rounds whose `ours` ratios agreed to
0.05%, judged `same` at 1.006 [1.004-1.009], where a pair of 90 rounds of the same change on the
same VM knew its ratio to 1.0% (about 1.8% at 30 rounds) and gave 1.028 (docs/GATE.md). A floor
only widens an interval, so the coverage stays at least what it claims.

An entry whose worker run took confirming pairs (its first pairs judged a change) is judged on
all its pairs at a stricter confidence, ``confirmed_confidence``: half the error of the first
verdict's. The first pairs are among those judged, and they were chosen because they looked
changed, so an interval at the first confidence over all of them is too ready to agree: on the
`ci` tier's entries (their noise from two A/As on H200 x1) about 5% of A/A runs judge some entry
slower that way, 3% at the halved error (tests/test_ab_confirm.py, docs/GATE.md).
"""
from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Sequence

from numabench.bounds import MIN_PAIRS
from numabench.gate.band import IQR_TO_SIGMA, MEDIAN_EFFICIENCY
from numabench.gate.rule import FASTER, SAME, SLOWER, UNRESOLVED

# a pair's rounds below which round_ratio_error knows nothing (quartiles of fewer quads say little)
MIN_ROUNDS_FOR_ERROR = 8
# and below which it sets no floor to the interval's spread (``pair_error``): the quartiles of a few
# quads take one odd quad (a slow spell's edge) for a spread the median does not have
MIN_ROUNDS_FOR_FLOOR = 16
AB_VERDICTS = (SLOWER, FASTER, UNRESOLVED, SAME)
INTERVAL = "t on log pair ratios"
# what each pair's ratio head/base is (module docstring): of the rounds mode's rounds, or of medians
PAIR_RATIOS = {"quads": "median over its ABBA quads of the head's two rounds over the base's two",
               "rounds": "median of its round-by-round ratios", "medians": "ratio of its medians"}
PAIR_RATIO = "quads"  # how numabench ab judges a pair of the rounds mode now


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@functools.lru_cache(maxsize=256)  # a handful of (p, df) per run, each a bisection of 200 steps
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (0 < p < 1, df >= 1)."""
    if not 0 < p < 1:
        raise ValueError(f"p {p}: allowed a probability between 0 and 1")
    if df < 1:
        raise ValueError(f"df {df}: allowed an integer >= 1")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2


@dataclass(frozen=True)
class Judgement:
    """One entry's verdict and the figures it rests on (ratios head/base)."""

    pairs: int
    ratio: float  # geometric mean of the pair ratios
    low: float
    high: float
    resolution_pct: float | None  # relative half-width of the interval; None: fewer than 2 pairs
    verdict: str
    leans: str | None = None  # an unresolved entry whose interval excludes 1: SLOWER or FASTER


def confirmed_confidence(confidence: float) -> float:
    """The confidence at which an entry with confirming pairs is judged on all its pairs: half the
    error of ``confidence`` (0.975 for 0.95; module docstring)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence}: allowed a number between 0 and 1")
    return 1 - (1 - confidence) / 2


def pair_ratios(base_s: Sequence[float], head_s: Sequence[float]) -> list[float]:
    """head/base of each pair (invocation medians, seconds)."""
    if len(base_s) != len(head_s):
        raise ValueError(f"{len(base_s)} base and {len(head_s)} head medians: allowed one of each per pair")
    bad = [v for v in (*base_s, *head_s) if not (v > 0 and math.isfinite(v))]
    if bad:
        raise ValueError(f"median {bad[0]!r}: allowed a time > 0 seconds")
    return [h / b for b, h in zip(base_s, head_s)]


def spread_sd(logs: Sequence[float], errors: Sequence[float] | None = None) -> float:
    """The pairs' spread in log terms as the interval takes it: their sample standard deviation,
    at least the root mean square of the pairs' own ``errors`` (``pair_error`` of each,
    where known: infinite or None ones are left out) -- the module docstring's floor. Without
    ``errors``, the sample deviation alone (pairs of medians, or rounds too few to know them by)."""
    sd = statistics.stdev(logs)
    known = [e for e in errors or () if e is not None and math.isfinite(e) and e >= 0]
    if not known:
        return sd
    return max(sd, math.sqrt(statistics.fmean(e * e for e in known)))


def _checked_errors(errors: Sequence[float | None] | None, n: int) -> Sequence[float | None] | None:
    if errors is not None and len(errors) != n:
        raise ValueError(f"{len(errors)} pair errors for {n} ratios: allowed one per pair, or none")
    return errors


def t_interval(ratios: Sequence[float], confidence: float,
               first_stage: int | None = None,
               errors: Sequence[float | None] | None = None) -> tuple[float, float, float]:
    """(low, high, half-width in log terms) of the geometric mean of ``ratios`` (2 or more).
    ``first_stage``: with more ratios than that, the further pairs of Stein's two-stage rule
    (module docstring): the width from the first ``first_stage`` ratios' spread. ``errors``: each
    pair's own standard error in log terms (``pair_error``), the spread's floor (``spread_sd``)."""
    if len(ratios) < MIN_PAIRS:
        raise ValueError(f"{len(ratios)} ratios: an interval needs {MIN_PAIRS} or more")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence}: allowed a number between 0 and 1")
    _checked_errors(errors, len(ratios))
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    mean = statistics.fmean(logs)
    first = first_stage if first_stage is not None and MIN_PAIRS <= first_stage < n else n
    sd = spread_sd(logs[:first], None if errors is None else errors[:first])
    half = t_quantile((1 + confidence) / 2, first - 1) * sd / math.sqrt(n)
    return math.exp(mean - half), math.exp(mean + half), half


def pairs_for_target(first_ratios: Sequence[float], target_pct: float, confidence: float, most: int,
                     errors: Sequence[float | None] | None = None) -> int:
    """Stein's first stage: how many pairs in all (at least these, at most ``most``) bring the
    interval of an entry whose first pairs gave ``first_ratios`` (and, where known, each pair's own
    ``errors``: the spread's floor) to a resolution of ``target_pct``."""
    n0 = len(first_ratios)
    if n0 < MIN_PAIRS:
        return max(n0, most)
    logs = [math.log(r) for r in first_ratios]
    sd = spread_sd(logs, _checked_errors(errors, n0))
    width = t_quantile((1 + confidence) / 2, n0 - 1) * sd / math.log1p(target_pct / 100)
    return min(most, max(n0, math.ceil(width * width)))


def resolution_pct(ratios: Sequence[float], confidence: float,
                   errors: Sequence[float | None] | None = None) -> float | None:
    """The interval's relative half-width in percent (None with fewer than MIN_PAIRS ratios): what
    ``judge`` calls the resolution."""
    if len(ratios) < MIN_PAIRS:
        return None
    return math.expm1(t_interval(ratios, confidence, errors=errors)[2]) * 100


def _checked_rounds(base_rounds: Sequence[float], head_rounds: Sequence[float]) -> None:
    if len(base_rounds) != len(head_rounds) or not base_rounds:
        raise ValueError(f"{len(base_rounds)} base and {len(head_rounds)} head rounds: allowed as many of "
                         "each, 1 or more")
    bad = [v for v in (*base_rounds, *head_rounds) if not (v > 0 and math.isfinite(v))]
    if bad:
        raise ValueError(f"round {bad[0]!r}: allowed a time > 0 seconds")


def round_ratio(base_rounds: Sequence[float], head_rounds: Sequence[float]) -> float:
    """One pair's head/base from its rounds, which alternated between the sides (round i of
    the head beside round i of the base): the median over i of their ratios (runs judged before
    ``quad_ratio``; numabench ab --rejudge --pair-ratio rounds)."""
    _checked_rounds(base_rounds, head_rounds)
    return statistics.median(h / b for b, h in zip(base_rounds, head_rounds))


def quad_ratios(base_rounds: Sequence[float], head_rounds: Sequence[float]) -> list[float]:
    """A pair's ABBA quads' ratios: for rounds 2j and 2j+1 (one side first in the one, the other in
    the other), the head's two rounds over the base's two; a last odd round left out, and a pair of
    one round its one round's ratio."""
    _checked_rounds(base_rounds, head_rounds)
    if len(base_rounds) == 1:
        return [head_rounds[0] / base_rounds[0]]
    return [(head_rounds[i] + head_rounds[i + 1]) / (base_rounds[i] + base_rounds[i + 1])
            for i in range(0, len(base_rounds) - 1, 2)]


def quad_ratio(base_rounds: Sequence[float], head_rounds: Sequence[float]) -> float:
    """One pair's head/base as numabench ab judges it (module docstring): the median of its
    ``quad_ratios``."""
    return statistics.median(quad_ratios(base_rounds, head_rounds))


RATIO_OF = {"quads": quad_ratio, "rounds": round_ratio}  # a pair's ratio from its rounds, by PAIR_RATIOS key


def round_ratio_error(base_rounds: Sequence[float], head_rounds: Sequence[float]) -> float:
    """How well a pair's rounds know its ``quad_ratio``: the standard error of the median of its
    log quad ratios (about a fraction: 0.003 is 0.3%), from their spread read robustly,
    MEDIAN_EFFICIENCY x sigma (their IQR / IQR_TO_SIGMA) / sqrt(quads); infinite under
    MIN_ROUNDS_FOR_ERROR rounds, whose quartiles say nothing, or with a time that is not > 0."""
    if len(base_rounds) != len(head_rounds):
        raise ValueError(f"{len(base_rounds)} base and {len(head_rounds)} head rounds: allowed as many of each")
    if len(base_rounds) < MIN_ROUNDS_FOR_ERROR:
        return math.inf
    try:
        logs = [math.log(r) for r in quad_ratios(base_rounds, head_rounds)]
    except ValueError:  # a zero or negative time: nothing is known
        return math.inf
    q = statistics.quantiles(logs, n=4)
    return MEDIAN_EFFICIENCY * (q[2] - q[0]) / IQR_TO_SIGMA / math.sqrt(len(logs))


def pair_error(base_rounds: Sequence[float], head_rounds: Sequence[float]) -> float:
    """A pair's own standard error as the interval's floor takes it (``spread_sd``): its
    ``round_ratio_error`` from MIN_ROUNDS_FOR_FLOOR rounds on, else infinite (no floor)."""
    if len(base_rounds) < MIN_ROUNDS_FOR_FLOOR:
        return math.inf
    return round_ratio_error(base_rounds, head_rounds)


@dataclass(frozen=True)
class RoundTarget:
    """A pair of the rounds mode takes rounds until every entry's ratio is known to
    ``error_pct`` (``round_ratio_error``) or it has ``most_rounds``: where a pair's spread is
    its rounds' (numabench.ab.noise), rounds spent where the rounds differ narrow the pairs."""
    error_pct: float
    most_rounds: int

    def met(self, entries: Iterable[tuple[Sequence[float], Sequence[float]]]) -> bool:
        """Whether each entry's (base rounds, head rounds) of this pair so far are known to the target."""
        return all(round_ratio_error(b, h) * 100 <= self.error_pct for b, h in entries)


def judge(base_s: Sequence[float], head_s: Sequence[float], threshold_pct: float, confidence: float,
          first_stage: int | None = None) -> Judgement:
    """The verdict of one entry from its per-pair medians, each pair's ratio that of its medians
    (module docstring: the rule); ``first_stage``: the pairs that decided on further ones
    (Stein's rule), if any ran."""
    return judge_ratios(pair_ratios(base_s, head_s), threshold_pct, confidence, first_stage)


def judge_ratios(ratios: Sequence[float], threshold_pct: float, confidence: float,
                 first_stage: int | None = None, errors: Sequence[float | None] | None = None) -> Judgement:
    """The verdict of one entry from its pair ratios head/base (``pair_ratios`` or ``quad_ratio``
    of each pair), as ``judge``; ``errors``: each pair's own standard error (``pair_error``),
    the floor of the spread (``spread_sd``)."""
    bad = [r for r in ratios if not (r > 0 and math.isfinite(r))]
    if bad:
        raise ValueError(f"pair ratio {bad[0]!r}: allowed a number > 0")
    if not ratios:
        raise ValueError("no pairs: allowed 1 or more")
    ratio = math.exp(statistics.fmean(math.log(r) for r in ratios))
    if len(ratios) < MIN_PAIRS:
        return Judgement(len(ratios), ratio, ratio, ratio, None, UNRESOLVED)
    low, high, half = t_interval(ratios, confidence, first_stage, errors)
    resolution = math.expm1(half) * 100
    t = 1 + threshold_pct / 100
    if low > t:
        return Judgement(len(ratios), ratio, low, high, resolution, SLOWER)
    if high < 1 / t:
        return Judgement(len(ratios), ratio, low, high, resolution, FASTER)
    if low >= 1 / t and high <= t:
        return Judgement(len(ratios), ratio, low, high, resolution, SAME)
    leans = SLOWER if low > 1 else FASTER if high < 1 else None
    return Judgement(len(ratios), ratio, low, high, resolution, UNRESOLVED, leans)


def pairs_to_resolve(ratios: Sequence[float], threshold_pct: float, confidence: float, most: int = 100,
                     errors: Sequence[float | None] | None = None) -> int | None:
    """About how many pairs in all would resolve an unresolved entry whose pairs gave ``ratios``,
    if more pairs spread as these did and their mean stayed where it is: enough that the interval's
    half-width falls below the distance from the mean to the nearer edge of the threshold band
    (then the interval lies wholly within the band, same, or wholly beyond it, slower or faster).
    None where that is more than ``most`` (the mean lies about on the edge) or fewer than
    MIN_PAIRS ratios give no spread to go by."""
    if len(ratios) < MIN_PAIRS:
        return None
    mean = statistics.fmean(math.log(r) for r in ratios)
    edge = math.log1p(threshold_pct / 100)
    distance = min(abs(mean - edge), abs(mean + edge))
    if distance <= 0:
        return None
    need = pairs_for_target(ratios, math.expm1(distance) * 100, confidence, most + 1, errors)
    return None if need > most else max(need, len(ratios) + 1)
