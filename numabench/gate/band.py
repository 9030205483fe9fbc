"""A baseline entry's band, and the smallest change it can resolve.

The band is the range of the entry's invocation medians (numabench.gate.invocations):
fresh processes and buffers each, pooled by ``numabench merge`` or the rolling window
from several runs and machines of one hardware key. How far apart those medians lie is the
entry's own measured noise, and it sets the entry's threshold:

    spread     standard deviation of the invocation medians, in % of their median; never
               less than the sampling error of one invocation's median of its rounds
               (1.2533 x sigma of the rounds / sqrt(rounds), sigma from their IQR), so a
               band whose few invocations agree by chance is not read as noiseless
    threshold  max(the rule's threshold, NOISE_MULTIPLE x the noise of the difference): how
               far beyond the band's edge a new value must lie to be judged slower or faster.
               The noise of the difference is sqrt(spread^2 + new^2), ``new`` the sampling
               error of the new value itself (its invocations' spread over sqrt(their
               number), at least its rounds' sampling error): a new run measured in a noisy
               moment (a neighbour on a shared runner) is judged with the noise it carries
    detectable how far above the band's centre a value of a quiet run (new = 0) must be to
               be judged slower: the smallest slowdown this entry can detect

and its status:

    gated               >= MIN_INVOCATIONS invocations from >= MIN_RUNS runs (sessions), from
                        >= 2 machines where the new run comes from a machine the band has not
                        seen, and detectable <= the rule's coarsest: its verdict can fail the run
    insufficient data   fewer invocations or runs, or one machine judging another: listed with
                        the command that fills the band, never fails the run
    informational       enough data, but too noisy: detectable > coarsest; measured and
                        listed with its spread, never fails the run

Why runs: invocations of one session share that session's state of the machine (its
other tenants, its page cache, its clocks); sessions drift apart by more than invocations
of one session do (an H200 x2 machine: 17 of 64 entries 5-10% apart between back-to-back
sessions; the 2-core CI VM: touch 545 us in one session, 578 us in the next), so a band
of one run cannot know that noise.

NOISE_MULTIPLE was chosen on invocations of unchanged code (docs/GATE.md: the CPU CI
machine's gate families measured across sessions, the GPU bands across fresh VMs).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from numabench.gate.invocations import invocation_labels, invocation_machines, invocation_medians

MIN_INVOCATIONS = 3
MIN_RUNS = 2
NOISE_MULTIPLE = 3.0
DEFAULT_COARSEST_PCT = 10.0
GATED, INSUFFICIENT, INFORMATIONAL = "gated", "insufficient data", "informational"
IQR_TO_SIGMA = 1.349  # IQR of a normal distribution in standard deviations
MEDIAN_EFFICIENCY = 1.2533  # standard error of a median / that of a mean, normal samples


@dataclass(frozen=True)
class Band:
    """The range of a baseline entry's invocation medians (seconds) and what they say of its noise."""
    low: float
    high: float
    center: float
    invocations: int
    spread_pct: float = 0.0  # the noise between invocations (module docstring)
    machines: frozenset[str] = frozenset()  # the known machines its invocations came from
    unknown_machines: bool = True  # some invocations do not say which machine measured them
    runs: int = 1  # the runs (sessions) its invocations came from

    @classmethod
    def of(cls, medians: Sequence[float], *, rounds: Sequence[float] = (),
           machines: Sequence[str | None] = (), runs: int = 1) -> "Band":
        if not medians:
            raise ValueError("a band needs at least one invocation median")
        center = statistics.median(medians)
        known = [m for m in machines if m]
        return cls(min(medians), max(medians), center, len(medians), spread_pct(medians, rounds),
                   frozenset(known), len(known) < len(medians), runs)

    @classmethod
    def of_entry(cls, bench: dict[str, Any], run_machine: str | None = None) -> "Band | None":
        """The band of a saved entry (None: it holds no median, e.g. an imported mean)."""
        meds = invocation_medians(bench)
        if not meds:
            return None
        data = (bench.get("stats") or {}).get("data") or []
        runs = len(set(invocation_labels(bench, "this run")))
        return cls.of(meds, rounds=data, machines=invocation_machines(bench, run_machine), runs=runs)

    @property
    def width_pct(self) -> float:
        return (self.high / self.low - 1) * 100


def spread_pct(medians: Sequence[float], rounds: Sequence[float] = ()) -> float:
    """Standard deviation of ``medians`` in % of their median, floored by the sampling error of
    one invocation's median of its share of ``rounds`` (the pooled rounds of all invocations)."""
    center = statistics.median(medians)
    if center <= 0:
        return 0.0
    between = statistics.stdev(medians) / center * 100 if len(medians) > 1 else 0.0
    floor = 0.0
    per_invocation = len(rounds) // len(medians)
    if per_invocation >= 4:
        q = statistics.quantiles(rounds, n=4)
        sigma = (q[2] - q[0]) / IQR_TO_SIGMA
        floor = MEDIAN_EFFICIENCY * sigma / math.sqrt(per_invocation) / center * 100
    return max(between, floor)


def new_noise(medians: Sequence[float], rounds: Sequence[float] = ()) -> float:
    """The sampling error of a new value (the median of ``medians``), in %: their spread over the
    square root of their number, the spread floored by the rounds' sampling error."""
    if not medians:
        return 0.0
    return spread_pct(medians, rounds) / math.sqrt(len(medians))


@dataclass(frozen=True)
class GateRule:
    """The gate's settings: the global threshold, the coarsest change still gated, the invocations
    a band needs."""
    threshold_pct: float = 3.0
    coarsest_pct: float = DEFAULT_COARSEST_PCT
    noise_multiple: float = NOISE_MULTIPLE
    min_invocations: int = MIN_INVOCATIONS
    min_runs: int = MIN_RUNS

    def __post_init__(self) -> None:
        for name in ("threshold_pct", "coarsest_pct", "noise_multiple"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"GateRule.{name} = {v!r}: must be a number >= 0")
        for name in ("min_invocations", "min_runs"):
            if getattr(self, name) < 1:
                raise ValueError(f"GateRule.{name} = {getattr(self, name)!r}: must be >= 1")

    def threshold_of(self, band: Band, new_noise_pct: float = 0.0) -> float:
        """The entry's threshold beyond its band's edges, in %, for a new value whose own sampling
        error is ``new_noise_pct`` (new_noise)."""
        return max(self.threshold_pct, self.noise_multiple * math.hypot(band.spread_pct, new_noise_pct))

    def detectable_of(self, band: Band, threshold_pct: float | None = None) -> float:
        """The smallest slowdown against the band's centre that is judged slower, in %, with the
        threshold ``threshold_pct`` beyond its edge (None: a quiet new value's, threshold_of(band))."""
        threshold = self.threshold_of(band) if threshold_pct is None else threshold_pct
        return (band.high / band.center * (1 + threshold / 100) - 1) * 100

    def status_of(self, band: Band, new_machine: str | None) -> tuple[str, str]:
        """(status, why) of an entry with this band, judged for a run from ``new_machine``."""
        if band.invocations < self.min_invocations:
            return INSUFFICIENT, (f"band of {band.invocations} invocation{'s' * (band.invocations != 1)}, "
                                  f"{self.min_invocations} needed")
        if band.runs < self.min_runs:
            return INSUFFICIENT, (f"band from {band.runs} run, {self.min_runs} needed: the drift between "
                                  "sessions is unknown")
        if new_machine and new_machine not in band.machines and len(band.machines) < 2 and not band.unknown_machines:
            return INSUFFICIENT, "band from one machine, judging another: the difference between machines is unknown"
        detectable = self.detectable_of(band)
        if detectable > self.coarsest_pct:
            return INFORMATIONAL, (f"detects only {detectable:.1f}% (spread {band.spread_pct:.1f}% between "
                                   f"invocations), coarser than {self.coarsest_pct:g}%")
        return GATED, ""
