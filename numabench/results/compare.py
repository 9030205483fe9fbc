"""The regression decision: a new result against a baseline's between-invocation band.

Rounds of one run are not independent samples (numabench.results.invocations), so a
test on rounds reads the drift between runs as a regression. The baseline
entry's *band* is the range of its invocation medians (fresh processes, fresh
buffers; pooled from several runs and machines of one hardware key by
``numabench merge``). A new value is

- ``slower`` when it lies above the band's top by more than the threshold,
- ``faster`` when it lies below the band's bottom by more than the threshold,
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
from numabench.results.invocations import invocation_medians
from numabench.results.seed_csv import load_run

FASTER, SLOWER, SAME, NO_BASELINE, NO_DATA = "faster", "slower", "same", "no baseline", "no data"
DEFAULT_THRESHOLD = "3%"
MIN_EXCESS_S = 2e-6
# extra_info["gate"][CONFIRM_INVOCATIONS]: how many of an entry's last invocation medians were
# the gate's confirmation (they re-ran because the others were judged slower)
CONFIRM_INVOCATIONS = "confirm_invocations"
MIN_BAND_INVOCATIONS = 3  # fewer: the band says little about the noise between invocations


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


@dataclass(frozen=True)
class Band:
    """The range of a baseline entry's invocation medians (seconds)."""
    low: float
    high: float
    center: float
    invocations: int

    @classmethod
    def of(cls, medians: Sequence[float]) -> "Band":
        if not medians:
            raise ValueError("a band needs at least one invocation median")
        return cls(min(medians), max(medians), statistics.median(medians), len(medians))

    @property
    def width_pct(self) -> float:
        return (self.high / self.low - 1) * 100


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
    verdict: str
    confirm_medians: list[float] = field(default_factory=list)
    confirm_verdict: str | None = None  # None: no confirmation ran

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
        """Slower, and the confirmation (where one ran) agrees."""
        return self.verdict == SLOWER and self.confirm_verdict in (None, SLOWER)

    @property
    def confirmed_text(self) -> str:
        if self.confirm_verdict is None:
            return "-"
        return "confirmed" if self.confirm_verdict == self.verdict else f"not confirmed ({self.confirm_verdict})"


def judge_entry(name: str, fullname: str, baseline: dict | None, new_medians: Sequence[float],
                threshold_pct: float) -> Row:
    """A row for one entry: ``baseline`` is the baseline run's benchmark dict (None if absent).
    No new medians, or a baseline entry without one (an imported mean): ``no data``."""
    meds = invocation_medians(baseline) if baseline is not None else []
    if not new_medians or (baseline is not None and not meds):
        return Row(name, fullname, Band.of(meds) if meds else None, list(new_medians), NO_DATA)
    if not meds:
        return Row(name, fullname, None, list(new_medians), NO_BASELINE)
    band = Band.of(meds)
    return Row(name, fullname, band, list(new_medians), judge(band, statistics.median(new_medians), threshold_pct))


def confirm(row: Row, confirm_medians: Sequence[float], threshold_pct: float) -> Row:
    """``row`` with the verdict of fresh invocations' medians (the confirmation) added."""
    if row.band is None or not confirm_medians:
        return row
    row.confirm_medians = list(confirm_medians)
    row.confirm_verdict = judge(row.band, statistics.median(confirm_medians), threshold_pct)
    return row


@dataclass
class CompareResult:
    baseline: str
    new: str
    baseline_key: str | None
    new_key: str | None
    threshold_pct: float
    rows: list[Row] = field(default_factory=list)
    only_baseline: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.regression]

    @property
    def compared(self) -> list[Row]:
        return [r for r in self.rows if r.band is not None and r.new_medians]

    @property
    def geomean_ratio(self) -> float | None:
        """Geometric mean of new value / band center over the entries both runs have."""
        ratios = [r.new_value / r.band.center for r in self.compared if r.band.center > 0]
        if not ratios:
            return None
        return math.exp(sum(math.log(v) for v in ratios) / len(ratios))

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.verdict] = out.get(r.verdict, 0) + 1
        return out

    @property
    def thin_bands(self) -> int:
        """Compared entries whose band has fewer than MIN_BAND_INVOCATIONS invocations."""
        return sum(1 for r in self.compared if r.band.invocations < MIN_BAND_INVOCATIONS)


def recorded_threshold(run: dict) -> float | None:
    """The threshold a gated run was judged with (extra_info.gate.threshold_pct), if it was."""
    for bench in run.get("benchmarks", []):
        pct = ((bench.get("extra_info") or {}).get("gate") or {}).get("threshold_pct")
        if isinstance(pct, (int, float)):
            return float(pct)
    return None


def compare_runs(baseline: str | Path | dict, new: str | Path | dict, *, threshold: str | float | None = None,
                 allow_foreign: bool = False) -> CompareResult:
    """Judge every entry of run ``new`` against the bands of run ``baseline`` (paths or loaded runs).
    ``threshold`` None: the one a gated ``new`` run was judged with, else DEFAULT_THRESHOLD, so
    the offline verdict is the session's."""
    a = baseline if isinstance(baseline, dict) else load_run(baseline)
    b = new if isinstance(new, dict) else load_run(new)
    if threshold is None:
        threshold = recorded_threshold(b)
    threshold_pct = parse_threshold(DEFAULT_THRESHOLD if threshold is None else threshold)
    ka, kb = run_hardware_key(a), run_hardware_key(b)
    if ka != kb and not allow_foreign:
        raise ForeignHardwareError(f"runs were measured on different hardware ({ka!r} vs {kb!r}): refusing to "
                                   "compare (pass --allow-foreign to compare anyway)")
    res = CompareResult(str(baseline) if not isinstance(baseline, dict) else "<baseline>",
                        str(new) if not isinstance(new, dict) else "<new>", ka, kb, threshold_pct)
    olds = {x["fullname"]: x for x in a["benchmarks"]}
    for nb in b["benchmarks"]:
        meds = invocation_medians(nb)
        # A gated run's last invocations may be its confirmation: judged as the gate judged them.
        k = int(((nb.get("extra_info") or {}).get("gate") or {}).get(CONFIRM_INVOCATIONS) or 0)
        first, confirmation = (meds[:-k], meds[-k:]) if 0 < k < len(meds) else (meds, [])
        row = judge_entry(nb.get("name", nb["fullname"]), nb["fullname"], olds.get(nb["fullname"]), first,
                          threshold_pct)
        if confirmation:
            row = confirm(row, confirmation, threshold_pct)
        res.rows.append(row)
    news = {x["fullname"] for x in b["benchmarks"]}
    res.only_baseline = [f for f in olds if f not in news]
    return res


def _ms(s: float) -> str:
    return f"{s * 1e3:.4g}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}"


HEADER = ("benchmark", "baseline ms", "band ms (invocations)", "new ms", "change %", "beyond band %", "verdict",
          "confirmation")


def table_rows(rows: Sequence[Row]) -> list[tuple[str, ...]]:
    out = []
    for r in rows:
        band = "-" if r.band is None else f"{_ms(r.band.low)}-{_ms(r.band.high)} ({r.band.invocations})"
        new = "-" if not r.new_medians else _ms(r.new_value) + (
            "" if not r.confirm_medians else f" / {_ms(statistics.median(r.confirm_medians))}")
        out.append((r.name, "-" if r.band is None else _ms(r.band.center), band, new, _pct(r.change_pct),
                    _pct(r.beyond_band_pct), r.verdict, r.confirmed_text))
    return out


def format_table(header: Sequence[str], body: Sequence[Sequence[str]], left: Sequence[int] = (0,)) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *body)]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) if i in left else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return [fmt(header), "  ".join("-" * w for w in widths), *(fmt(c) for c in body)]


def summary_lines(res: CompareResult) -> list[str]:
    counts = res.counts()
    lines = [f"{len(res.rows)} entries: " + ", ".join(f"{counts.get(v, 0)} {v}" for v in
                                                       (SLOWER, FASTER, SAME, NO_BASELINE, NO_DATA))]
    flagged = [r for r in res.rows if r.verdict == SLOWER and r.confirm_verdict is not None]
    if flagged:
        lines.append(f"confirmation: {sum(r.confirm_verdict == SLOWER for r in flagged)} of the {len(flagged)} "
                     "entries judged slower were slower again in fresh invocations")
    if res.only_baseline:
        lines.append(f"{len(res.only_baseline)} baseline entries not measured in this run (not compared)")
    if counts.get(NO_BASELINE):
        lines.append(f"{counts[NO_BASELINE]} entries have no baseline entry: NOT GATED (save a baseline that "
                     "holds them)")
    if counts.get(NO_DATA):
        lines.append(f"{counts[NO_DATA]} entries hold a mean only (imported): NOT GATED")
    if res.thin_bands:
        lines.append(f"{res.thin_bands} compared entries have a band of fewer than {MIN_BAND_INVOCATIONS} "
                     "invocations: re-save the baseline with --numa-repeats=3 (or merge more runs)")
    g = res.geomean_ratio
    if g is not None:
        lines.append(f"geometric mean of new/baseline: {g:.4f} ({(g - 1) * 100:+.2f}%)")
    if res.regressions:
        lines.append(f"REGRESSION: {len(res.regressions)} entries slower than the baseline's band by more than "
                     f"{res.threshold_pct:g}%")
    return lines


def render(res: CompareResult, *, show: str = "all") -> str:
    """Text for the terminal. ``show``: all, changed (everything but "same")."""
    rows = res.rows if show == "all" else [r for r in res.rows if r.verdict != SAME]
    lines = [f"baseline: {res.baseline} [{res.baseline_key}]", f"new: {res.new} [{res.new_key}]",
             f"verdict: new value (median of invocation medians) beyond the baseline's band of invocation "
             f"medians by more than {res.threshold_pct:g}%", ""]
    lines += format_table(HEADER, table_rows(rows))
    lines.append("")
    lines += summary_lines(res)
    return "\n".join(lines)
