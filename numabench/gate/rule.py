"""The gate's rule, the regression decision: a new result against a baseline's between-invocation band.

Rounds of one run are not independent samples (numabench.gate.invocations), so a
test on rounds reads the drift between runs as a regression. The baseline
entry's *band* is the range of its invocation medians (fresh processes, fresh
buffers; pooled from several runs and machines of one hardware key by
``numabench merge`` or the rolling window). Each entry has its own threshold, from its
measured noise, and a status (numabench.gate.band): only a *gated* entry gets a verdict
that can fail a run; a band too thin (``insufficient data``) or too noisy
(``informational``) is reported with that status and the direction the value points. A
gated entry's new value is

- ``slower`` when it lies above the band's top by more than the entry's threshold,
- ``faster`` when it lies below the band's bottom by more than the entry's threshold,
- ``same`` otherwise,

and never by less than MIN_EXCESS_S in absolute terms: a CUDA event pair
resolves about half a microsecond, and a 40 us kernel's launch jitter is of
that order, so a few percent of a few microseconds is no evidence.

The new value is the median of the new run's invocation medians. In a pytest
session a ``slower`` entry is re-run as fresh invocations (``--numa-confirm``)
and is a regression only when the confirmation is ``slower`` too (a confirmation too noisy
to resolve the rule's coarsest change is ``unresolved``: re-run, and never read as ``same``); an offline
compare of two files cannot re-run, so its ``slower`` entries count as
regressions as they are.

Library code does not print: :func:`judge_runs` (and numabench.results.compare.compare_runs,
which reads the run files first) returns a :class:`CompareResult`; numabench.gate.table makes
its text.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Sequence

from numabench import bounds
from numabench.errors import UsageError
from numabench.numerals import decimal
from numabench.machine.hwkey import run_hardware_key
from numabench.gate.band import (
    DEFAULT_COARSEST_PCT,
    GATED,
    INFORMATIONAL,
    INSUFFICIENT,
    Band,
    GateRule,
    new_noise,
)
from numabench.gate.invocations import invocation_medians, run_machine

FASTER, SLOWER, SAME, NO_BASELINE, NO_DATA = "faster", "slower", "same", "no baseline", "no data"
# A confirmation too noisy to resolve the coarsest gated change: neither slower nor the same.
UNRESOLVED = "unresolved"
# --allow-foreign: the runs' hardware keys differ, so a difference is the hardware's, never a verdict
OTHER_HARDWARE = "other hardware"
VERDICTS = (SLOWER, FASTER, SAME, INSUFFICIENT, INFORMATIONAL, OTHER_HARDWARE, NO_BASELINE, NO_DATA)
DEFAULT_THRESHOLD = "3%"
DEFAULT_COARSEST = f"{DEFAULT_COARSEST_PCT:g}%"
MIN_EXCESS_S = 2e-6
# extra_info["gate"][CONFIRM_INVOCATIONS]: how many of an entry's last invocation medians were
# the gate's confirmation (they re-ran because the others were judged slower)
CONFIRM_INVOCATIONS = "confirm_invocations"
# The command that fills a thin band: more invocations from another machine of the key, pooled.
FILL_COMMAND = "NUMABENCH_REFRESH=pool bash .ci/refresh-baseline NAME (on another machine of this hardware key)"

class ForeignHardwareError(UsageError):
    """The two runs were measured on different hardware."""


def parse_pct(text: str | float) -> float:
    """'5%' or '5' -> 5.0 (percent), any number; UsageError where it is none."""
    raw = str(text).strip()
    try:
        return decimal(raw[:-1] if raw.endswith("%") else raw)
    except ValueError:
        raise UsageError(f"bad threshold {text!r}: write a percentage, e.g. 3% or 2.5") from None


def parse_threshold(text: str | float) -> float:
    """A threshold: '5%' or '5' -> 5.0 (percent), in its range (numabench.bounds)."""
    return bounds.check("threshold", parse_pct(text), f"threshold {text!r}")


def parse_positive_pct(text: str | float, option: str, example: str = "3%") -> float:
    """A coarsest band or resolution for ``option`` ('10%' or '10' -> 10.0), in its range."""
    try:
        value = parse_pct(text)
    except UsageError:  # not a percentage at all: the option's range, the text as written
        raise UsageError(f"{option} {text!r}: allowed {bounds.BOUNDS['coarsest'].allowed()}") from None
    return bounds.check("coarsest", value, f"{option} {text}")


def judge(band: Band, value: float, threshold_pct: float) -> str:
    """slower / faster / same for ``value`` against ``band`` with ``threshold_pct`` beyond its edges."""
    t = threshold_pct / 100
    if value > band.high * (1 + t) and value - band.high > MIN_EXCESS_S:
        return SLOWER
    if value < band.low / (1 + t) and band.low - value > MIN_EXCESS_S:
        return FASTER
    return SAME


@dataclass
class Row:
    name: str
    fullname: str
    band: Band | None  # None: the entry is not in the baseline
    new_medians: list[float]
    verdict: str  # slower/faster/same for a gated entry; else its status (insufficient data, ...)
    confirm_medians: list[float] = field(default_factory=list)
    confirm_verdict: str | None = None  # None: no confirmation ran
    confirm_detectable_pct: float | None = None  # the smallest slowdown the confirmation could detect
    threshold_pct: float | None = None  # the entry's own threshold beyond its band (band.GateRule)
    detectable_pct: float | None = None  # the smallest slowdown against the band's centre it detects
    direction: str | None = None  # not gated: where the value lies by the entry's threshold (slower, ...)
    why: str = ""  # not gated: why
    rule: GateRule | None = None  # the rule it was judged by (its confirmation is judged by it too)

    @property
    def gated(self) -> bool:
        return self.verdict in (SLOWER, FASTER, SAME)

    @property
    def new_value(self) -> float:
        return statistics.median(self.new_medians) if self.new_medians else math.nan

    @property
    def change_pct(self) -> float | None:
        return None if self.band is None or not self.new_medians else (self.new_value / self.band.center - 1) * 100

    @property
    def beyond_band_pct(self) -> float | None:
        """How far the new value lies outside the band (0 inside it), signed: + above, - below."""
        if self.band is None or not self.new_medians:
            return None
        v = self.new_value
        if v > self.band.high:
            return (v / self.band.high - 1) * 100
        if v < self.band.low:
            return (v / self.band.low - 1) * 100
        return 0.0

    @property
    def regression(self) -> bool:
        """Gated, slower, and the confirmation (where one ran) agrees."""
        return self.verdict == SLOWER and self.confirm_verdict in (None, SLOWER)

    @property
    def under_floor(self) -> bool:
        """Judged the same only because the excess is under MIN_EXCESS_S (beyond its threshold in %)."""
        if self.verdict != SAME or self.threshold_pct is None or self.band is None or not self.new_medians:
            return False
        beyond = self.beyond_band_pct or 0.0
        return abs(beyond) > self.threshold_pct

    @property
    def verdict_text(self) -> str:
        if self.direction and self.direction != SAME:
            return f"{self.verdict} ({self.direction})"
        if self.under_floor:
            return f"{self.verdict} (under the {MIN_EXCESS_S * 1e6:g} us floor)"
        return self.verdict

    @property
    def confirmed_text(self) -> str:
        if self.confirm_verdict is None:
            return "-"
        if self.confirm_verdict == UNRESOLVED:
            return f"unresolved (detects {self.confirm_detectable_pct:.0f}%)"
        return "confirmed" if self.confirm_verdict == self.verdict else f"not confirmed ({self.confirm_verdict})"


def judge_entry(name: str, fullname: str, baseline: dict | None, new_medians: Sequence[float],
                rule: GateRule, *, new_rounds: Sequence[float] = (), new_machine: str | None = None,
                baseline_machine: str | None = None) -> Row:
    """A row for one entry: ``baseline`` is the baseline run's benchmark dict (None if absent),
    ``baseline_machine`` the machine of the run it was read from (for entries that do not list
    their own), ``new_machine`` the machine of the new medians, ``new_rounds`` their rounds (the
    new value's own noise widens the threshold: band.GateRule). No new medians, or a baseline
    entry without one (an imported mean): ``no data``. A band too thin or too noisy to gate:
    its status (insufficient data, informational), with the direction it would point."""
    band = Band.of_entry(baseline, baseline_machine) if baseline is not None else None
    if not new_medians or (baseline is not None and band is None):
        return Row(name, fullname, band, list(new_medians), NO_DATA)
    if band is None:
        return Row(name, fullname, None, list(new_medians), NO_BASELINE)
    threshold = rule.threshold_of(band, new_noise(new_medians, new_rounds))
    verdict = judge(band, statistics.median(new_medians), threshold)
    status, why = rule.status_of(band, new_machine)
    row = Row(name, fullname, band, list(new_medians), verdict, threshold_pct=threshold,
              detectable_pct=rule.detectable_of(band), rule=rule)
    if status != GATED:
        row.verdict, row.direction, row.why = status, verdict, why
    return row


def confirm(row: Row, confirm_medians: Sequence[float], confirm_rounds: Sequence[float] = ()) -> Row:
    """``row`` with the verdict of fresh invocations' medians (the confirmation) added, judged by
    the row's rule with the confirmation's own noise. A confirmation so noisy that it could not
    detect the rule's coarsest gated change says nothing: ``unresolved``, never ``same``."""
    if row.band is None or not confirm_medians or row.rule is None:
        return row
    row.confirm_medians = list(confirm_medians)
    threshold = row.rule.threshold_of(row.band, new_noise(confirm_medians, confirm_rounds))
    row.confirm_detectable_pct = row.rule.detectable_of(row.band, threshold)
    verdict = judge(row.band, statistics.median(confirm_medians), threshold)
    if verdict == SAME and row.confirm_detectable_pct > row.rule.coarsest_pct:
        verdict = UNRESOLVED
    row.confirm_verdict = verdict
    return row


@dataclass
class CompareResult:
    baseline: str
    new: str
    baseline_key: str | None
    new_key: str | None
    rule: GateRule
    rows: list[Row] = field(default_factory=list)
    only_baseline: list[str] = field(default_factory=list)

    @property
    def threshold_pct(self) -> float:
        return self.rule.threshold_pct

    @property
    def foreign(self) -> bool:
        """The runs were measured under different hardware keys (compared with allow_foreign)."""
        return self.baseline_key != self.new_key

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.regression]

    @property
    def compared(self) -> list[Row]:
        return [r for r in self.rows if r.band is not None and r.new_medians]

    @property
    def gated(self) -> list[Row]:
        return [r for r in self.rows if r.gated]

    @property
    def geomean_ratio(self) -> float | None:
        """Geometric mean of new value / band center over the entries both runs have."""
        ratios = [r.new_value / r.band.center for r in self.compared if r.band.center > 0]
        if not ratios:
            return None
        return math.exp(sum(math.log(v) for v in ratios) / len(ratios))

    @property
    def exit_code(self) -> int:
        """1 on a confirmed regression of a gated entry; insufficient or informational entries never count."""
        return 1 if self.regressions else 0

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.verdict] = out.get(r.verdict, 0) + 1
        return out


def recorded_rule(run: dict) -> GateRule | None:
    """The rule a gated run was judged with (its entries' extra_info.gate), if it was."""
    for bench in run.get("benchmarks", []):
        gate = (bench.get("extra_info") or {}).get("gate") or {}
        pct = gate.get("threshold_pct")
        if isinstance(pct, (int, float)):
            defaults = GateRule()
            return GateRule(float(pct), float(gate.get("coarsest_pct", defaults.coarsest_pct)),
                            float(gate.get("noise_multiple", defaults.noise_multiple)),
                            int(gate.get("min_invocations", defaults.min_invocations)),
                            int(gate.get("min_runs", defaults.min_runs)))
    return None


def judge_runs(a: dict, b: dict, baseline_name: str, new_name: str, *, threshold: str | float | None = None,
               coarsest: str | float | None = None, allow_foreign: bool = False) -> CompareResult:
    """Judge every entry of loaded run ``b`` against the bands of loaded run ``a`` (named
    ``baseline_name`` and ``new_name`` in the result; numabench.results.compare.compare_runs
    reads run files first). ``threshold``/``coarsest`` None: those a gated ``b`` was judged with,
    else the defaults, so the offline verdict is the session's."""
    recorded = recorded_rule(b) or GateRule(parse_threshold(DEFAULT_THRESHOLD))
    # a coarsest of 0 would call every entry too noisy to judge and pass anything: refused
    rule = GateRule(recorded.threshold_pct if threshold is None else parse_threshold(threshold),
                    recorded.coarsest_pct if coarsest is None else parse_positive_pct(coarsest, "--coarsest", "10%"),
                    recorded.noise_multiple, recorded.min_invocations, recorded.min_runs)
    ka, kb = run_hardware_key(a), run_hardware_key(b)
    if ka != kb and not allow_foreign:
        raise ForeignHardwareError(f"runs were measured on different hardware ({ka!r} vs {kb!r}): refusing to "
                                   "compare (pass --allow-foreign to compare anyway)")
    res = CompareResult(baseline_name, new_name, ka, kb, rule)
    olds = {x["fullname"]: x for x in a["benchmarks"]}
    machine_a, machine_b = run_machine(a), run_machine(b)
    for nb in b["benchmarks"]:
        meds = invocation_medians(nb)
        # A gated run's last invocations may be its confirmation: judged as the gate judged them.
        k = int(((nb.get("extra_info") or {}).get("gate") or {}).get(CONFIRM_INVOCATIONS) or 0)
        first, confirmation = (meds[:-k], meds[-k:]) if 0 < k < len(meds) else (meds, [])
        # The rounds are pooled over every invocation, the confirmation's too: split in proportion.
        data = list((nb.get("stats") or {}).get("data") or [])
        cut = len(data) * len(first) // len(meds) if meds else 0
        row = judge_entry(nb.get("name", nb["fullname"]), nb["fullname"], olds.get(nb["fullname"]), first,
                          rule, new_rounds=data[:cut], new_machine=machine_b, baseline_machine=machine_a)
        if confirmation:
            row = confirm(row, confirmation, data[cut:])
        if res.foreign and row.gated:  # a difference between two machines' hardware is no verdict
            row.verdict, row.direction = OTHER_HARDWARE, row.verdict
            row.why = f"measured on other hardware ({ka!r} vs {kb!r})"
        res.rows.append(row)
    news = {x["fullname"] for x in b["benchmarks"]}
    res.only_baseline = [f for f in olds if f not in news]
    return res
