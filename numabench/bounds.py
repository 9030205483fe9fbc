"""Every tuning setting's range, declared once: the pytest options, the numabench commands and the
environment variables that set a round count, a warm-up, a threshold, a band, a pair count or a
time limit check their value here, and docs/ENV.md lists the same ranges (tests/test_bounds.py
holds the page to this table).

A range keeps a setting from switching off what it tunes: a threshold of 1000% or a coarsest of
0% would let any slowdown pass the gate, a warm-up of 1e20 rounds would never end, a build time
limit of 0 would kill every build. Each bound is far beyond any careful use, so a value past it is
a typo or a mistake, answered in one line naming the value and the range.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from numabench.errors import UsageError


@dataclass(frozen=True)
class Bound:
    low: float
    high: float
    unit: str = ""            # what the number counts, said after it: "rounds", "seconds", "%"
    whole: bool = False       # a whole number
    low_open: bool = False    # the low end itself is refused (> low, not >= low)
    high_open: bool = False   # the high end itself is refused
    example: str = ""

    def allowed(self) -> str:
        """The range in words: 'a whole number from 1 to 100000 rounds', 'a number > 0 and at most 100%'."""
        def num(x: float) -> str:
            text = str(int(x)) if x == int(x) else f"{x:g}"
            return text + "%" if self.unit == "%" else text

        low = f"> {num(self.low)}" if self.low_open else f"from {num(self.low)}"
        high = f"below {num(self.high)}" if self.high_open else \
            f"at most {num(self.high)}" if self.low_open else f"to {num(self.high)}"
        unit = "" if self.unit in ("", "%") else f" {self.unit}"
        text = f"{'a whole number' if self.whole else 'a number'} {low}{' and' if self.low_open else ''} {high}{unit}"
        return text + (f", e.g. {self.example}" if self.example else "")

    def holds(self, value: float) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        if self.whole and value != int(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def check(self, value: float, said: str) -> float:
        """``value`` where it is in range; else a UsageError '{said}: allowed {range}' (``said``:
        how the user wrote it, e.g. '--numa-rounds=0' or 'NUMABENCH_BUILD_TIMEOUT_S=abc')."""
        if not self.holds(value):
            raise UsageError(f"{said}: allowed {self.allowed()}")
        return value


DAY_S = 86_400.0
MIN_PAIRS = 2  # an interval needs two pairs
MOST_PAIRS = 1000  # more pairs than any A/B can take in a day: a typo, not a setting

BOUNDS: dict[str, Bound] = {
    # a case's measuring (pytest options --numa-*)
    "rounds": Bound(1, 100_000, "rounds", whole=True),
    "warmup": Bound(0, 10_000, "rounds", whole=True),
    "repeats": Bound(1, 1_000, "invocations", whole=True),
    "confirm": Bound(0, 1_000, "invocations", whole=True),
    "tolerance": Bound(0, 100, "percentage points"),
    "case_timeout": Bound(0, 7 * DAY_S, "seconds", low_open=True),
    "host_memory": Bound(0, 2 ** 20, "GiB", low_open=True),
    # the gate (compare, --benchmark-compare, ab): a slowdown beyond the threshold is slower; a
    # band wider than coarsest is too noisy to gate
    "threshold": Bound(0, 100, "%", example="3%"),
    # a resolution (an interval's relative half-width): a few noisy pairs can be wider than 100%
    "coarsest": Bound(0, 10_000, "%", low_open=True, example="10%"),
    "confidence": Bound(0, 1, low_open=True, high_open=True, example="0.95"),
    "pairs": Bound(MIN_PAIRS, MOST_PAIRS, "pairs", whole=True),
    # a pair's rounds until its ratio is known to this standard error (0: the family's rounds only)
    "round_target": Bound(0, 100, "%", example="0.3%"),
    "round_cap": Bound(1, 100, "times", whole=True, example="4"),
    # time limits and factors read from the environment
    "build_timeout": Bound(0, DAY_S, "seconds", low_open=True, example="900"),
    "lock_timeout": Bound(0, DAY_S, "seconds", example="1800"),
    "slowdown": Bound(1, 100, "times", example="1.05 for 5% slower"),
    "first_touch_gib": Bound(0, 2 ** 20, "GiB", low_open=True),
}


def check(setting: str, value: float, said: str) -> float:
    """``value`` of the setting ``setting`` (a key of BOUNDS) where it is in range; else one
    UsageError naming ``said`` and the range."""
    return BOUNDS[setting].check(value, said)
