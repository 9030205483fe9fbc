"""The regression decision: a new result against a baseline's between-invocation band.

Rounds of one run are not independent samples (numabench.results.invocations), so a
test on rounds reads the drift between runs as a regression. The baseline
entry's *band* is the range of its invocation medians (fresh processes, fresh
buffers; pooled from several runs and machines of one hardware key by
``numabench merge`` or the rolling window). Each entry has its own threshold, from its
measured noise, and a status (numabench.results.band): only a *gated* entry gets a verdict
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
and is a regression only when the confirmation is ``slower`` too; an offline
compare of two files cannot re-run, so its ``slower`` entries count as
regressions as they are.

Library code does not print: :func:`compare_runs` returns a
:class:`CompareResult`; :func:`render` makes its text.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from numabench.errors import UsageError
from numabench.machine.hwkey import run_hardware_key
from numabench.results import storage
from numabench.results.band import (
    DEFAULT_COARSEST_PCT,
    GATED,
    INFORMATIONAL,
    INSUFFICIENT,
    Band,
    GateRule,
    new_noise,
)
from numabench.results.invocations import invocation_medians, run_machine

FASTER, SLOWER, SAME, NO_BASELINE, NO_DATA = "faster", "slower", "same", "no baseline", "no data"
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


def parse_threshold(text: str | float) -> float:
    """'5%' or '5' -> 5.0 (percent)."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1] if raw.endswith("%") else raw)
    except ValueError:
        raise UsageError(f"bad threshold {text!r}: write a percentage, e.g. 3% or 2.5") from None
    if not (value >= 0 and math.isfinite(value)):
        raise UsageError(f"bad threshold {text!r}: must be a percentage >= 0")
    return value


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
    the row's rule with the confirmation's own noise."""
    if row.band is None or not confirm_medians or row.rule is None:
        return row
    row.confirm_medians = list(confirm_medians)
    threshold = row.rule.threshold_of(row.band, new_noise(confirm_medians, confirm_rounds))
    row.confirm_verdict = judge(row.band, statistics.median(confirm_medians), threshold)
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


def gate_record(row: Row, rule: GateRule) -> dict:
    """What a gated run's entry records of its verdict (extra_info["gate"]), enough for an offline
    compare to judge as the session did."""
    return {"verdict": row.verdict, "confirmation": row.confirm_verdict,
            CONFIRM_INVOCATIONS: len(row.confirm_medians), "threshold_pct": rule.threshold_pct,
            "coarsest_pct": rule.coarsest_pct, "noise_multiple": rule.noise_multiple,
            "min_invocations": rule.min_invocations, "min_runs": rule.min_runs, "entry_threshold_pct": row.threshold_pct,
            "detectable_pct": row.detectable_pct, "beyond_band_pct": row.beyond_band_pct, "why": row.why or None}


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


def compare_runs(baseline: str | Path | dict, new: str | Path | dict, *, threshold: str | float | None = None,
                 coarsest: str | float | None = None, allow_foreign: bool = False) -> CompareResult:
    """Judge every entry of run ``new`` against the bands of run ``baseline`` (paths or loaded runs).
    ``threshold``/``coarsest`` None: those a gated ``new`` run was judged with, else the defaults,
    so the offline verdict is the session's."""
    a = baseline if isinstance(baseline, dict) else storage.load_run(baseline)
    b = new if isinstance(new, dict) else storage.load_run(new)
    recorded = recorded_rule(b) or GateRule(parse_threshold(DEFAULT_THRESHOLD))
    rule = GateRule(recorded.threshold_pct if threshold is None else parse_threshold(threshold),
                    recorded.coarsest_pct if coarsest is None else parse_threshold(coarsest),
                    recorded.noise_multiple, recorded.min_invocations, recorded.min_runs)
    ka, kb = run_hardware_key(a), run_hardware_key(b)
    if ka != kb and not allow_foreign:
        raise ForeignHardwareError(f"runs were measured on different hardware ({ka!r} vs {kb!r}): refusing to "
                                   "compare (pass --allow-foreign to compare anyway)")
    res = CompareResult(str(baseline) if not isinstance(baseline, dict) else "<baseline>",
                        str(new) if not isinstance(new, dict) else "<new>", ka, kb, rule)
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


def _ms(s: float) -> str:
    return f"{s * 1e3:.4g}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}"


HEADER = ("benchmark", "baseline ms", "band ms (invocations)", "new ms", "change %", "beyond band %",
          "threshold %", "detects %", "verdict", "confirmation")


def _plain(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def table_rows(rows: Sequence[Row]) -> list[tuple[str, ...]]:
    out = []
    for r in rows:
        band = "-" if r.band is None else f"{_ms(r.band.low)}-{_ms(r.band.high)} ({r.band.invocations})"
        new = "-" if not r.new_medians else _ms(r.new_value) + (
            "" if not r.confirm_medians else f" / {_ms(statistics.median(r.confirm_medians))}")
        out.append((r.name, "-" if r.band is None else _ms(r.band.center), band, new, _pct(r.change_pct),
                    _pct(r.beyond_band_pct), _plain(r.threshold_pct), _plain(r.detectable_pct), r.verdict_text,
                    r.confirmed_text))
    return out


def format_table(header: Sequence[str], body: Sequence[Sequence[str]], left: Sequence[int] = (0,)) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *body)]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) if i in left else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return [fmt(header), "  ".join("-" * w for w in widths), *(fmt(c) for c in body)]


def rule_line(rule: GateRule) -> str:
    """The rule in one sentence, for every output."""
    return (f"verdict: the new value (median of invocation medians) beyond the baseline's band of invocation "
            f"medians by more than the entry's threshold, max({rule.threshold_pct:g}%, {rule.noise_multiple:g} x "
            f"its spread between invocations); gated only with >= {rule.min_invocations} invocations from >= "
            f"{rule.min_runs} runs (and 2+ machines when judging another) and a detectable change <= "
            f"{rule.coarsest_pct:g}%")


def summary_lines(res: CompareResult) -> list[str]:
    counts = res.counts()
    lines = [f"{len(res.rows)} entries: " + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS)]
    if res.foreign:
        lines.append(foreign_warning(res))
    floored = [r for r in res.rows if r.under_floor]
    if floored:
        lines.append(f"{len(floored)} entries beyond their threshold in % but by less than {MIN_EXCESS_S * 1e6:g} us "
                     "(the timer's resolution): same")
    gated = [r for r in res.gated if r.detectable_pct is not None]
    if gated:
        det = sorted(r.detectable_pct for r in gated)
        lines.append(f"gated: {len(gated)} entries; smallest slowdown they detect: {det[0]:.1f}% to {det[-1]:.1f}% "
                     f"(median {statistics.median(det):.1f}%)")
    flagged = [r for r in res.rows if r.verdict == SLOWER and r.confirm_verdict is not None]
    if flagged:
        lines.append(f"confirmation: {sum(r.confirm_verdict == SLOWER for r in flagged)} of the {len(flagged)} "
                     "entries judged slower were slower again in fresh invocations")
    if res.only_baseline:
        lines.append(f"{len(res.only_baseline)} baseline entries not measured in this run (not compared)")
    if counts.get(INSUFFICIENT):
        lines.append(f"WARNING: {counts[INSUFFICIENT]} entries have insufficient data (band of fewer than "
                     f"{res.rule.min_invocations} invocations or {res.rule.min_runs} runs, or from one machine "
                     f"judging another): NOT GATED; fill their bands: {FILL_COMMAND}")
    if counts.get(INFORMATIONAL):
        noisy = sorted((r for r in res.rows if r.verdict == INFORMATIONAL), key=lambda r: -r.band.spread_pct)
        lines.append(f"{counts[INFORMATIONAL]} entries informational (too noisy to detect {res.rule.coarsest_pct:g}%; "
                     f"measured, NOT GATED; numabench ab judges them on one machine): spread between invocations "
                     + ", ".join(f"{r.name} {r.band.spread_pct:.1f}%" for r in noisy[:8])
                     + (f", ... {len(noisy) - 8} more" if len(noisy) > 8 else ""))
    if counts.get(NO_BASELINE):
        lines.append(f"{counts[NO_BASELINE]} entries have no baseline entry: NOT GATED (save a baseline that "
                     "holds them)")
    if counts.get(NO_DATA):
        lines.append(f"{counts[NO_DATA]} entries hold a mean only (imported): NOT GATED")
    g = res.geomean_ratio
    if g is not None:
        lines.append(f"geometric mean of new/baseline: {g:.4f} ({(g - 1) * 100:+.2f}%)")
    if res.regressions:
        lines.append(f"REGRESSION: {len(res.regressions)} entries slower than the baseline's band by more than "
                     "their threshold")
    return lines


def foreign_warning(res: CompareResult) -> str:
    return (f"WARNING: the runs were measured on different hardware ({res.baseline_key!r} vs {res.new_key!r}, "
            "--allow-foreign): every difference is the hardware's as much as the code's; no entry is judged "
            f"slower or faster ({OTHER_HARDWARE}), and none fails the run")


def render(res: CompareResult, *, show: str = "all") -> str:
    """Text for the terminal. ``show``: all, changed (everything but "same")."""
    rows = res.rows if show == "all" else [r for r in res.rows if r.verdict != SAME]
    lines = [f"baseline: {res.baseline} [{res.baseline_key}]", f"new: {res.new} [{res.new_key}]",
             rule_line(res.rule), ""]
    lines += format_table(HEADER, table_rows(rows))
    lines.append("")
    lines += summary_lines(res)
    return "\n".join(lines)
