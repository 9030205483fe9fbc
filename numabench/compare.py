"""Statistical compare of two pytest-benchmark runs (saved runs or --benchmark-json files).

A benchmark is flagged only when its change is both larger than a threshold
(on medians) and significant: a two-sided Mann-Whitney U test on the per-round
durations ``stats.data`` (saved with ``--benchmark-save-data``). Without
per-round data on either side the verdict is "no data", never significant.

The U test is implemented here (scipy may be absent): exact distribution when
one sample has at most 8 values and there are no ties, otherwise the normal
approximation with tie correction and continuity correction (scipy's
``mannwhitneyu(..., method="auto")`` rules, so the two agree).

Library code does not print: :func:`compare_runs` returns a
:class:`CompareResult`; :func:`render` makes its text.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UsageError
from .hwkey import run_hardware_key
from .seedcsv import load_run

FASTER, SLOWER, SAME, NOT_SIGNIFICANT, NO_DATA = "faster", "slower", "same", "not significant", "no data"


class ForeignHardwareError(UsageError):
    """The two runs were measured on different hardware."""


# -- Mann-Whitney U ----------------------------------------------------------------

def _rank(values: list[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) and the sizes of the tie groups."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        avg = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[order[k]] = avg
        ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


def _u_counts(m: int, n: int) -> list[int]:
    """Number of orderings giving each U in 0..m*n: the coefficients of the Gaussian
    binomial [m+n choose m]_q = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i)."""
    if m > n:
        m, n = n, m
    deg = m * n
    poly = [0] * (deg + 1)
    poly[0] = 1
    for i in range(1, m + 1):
        k = n + i
        for d in range(deg, k - 1, -1):  # multiply by (1 - q^k)
            poly[d] -= poly[d - k]
        for d in range(i, deg + 1):  # divide by (1 - q^i): c[d] += c[d - i]
            poly[d] += poly[d - i]
    return poly


def _norm_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2))


@dataclass(frozen=True)
class UTest:
    u: float  # U of the first sample (scipy's statistic)
    p_value: float
    method: str  # "exact" or "asymptotic"


def mann_whitney_u(x: list[float], y: list[float], method: str = "auto") -> UTest:
    """Two-sided Mann-Whitney U test of x against y."""
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("Mann-Whitney U needs at least one value in each sample")
    ranks, ties = _rank(list(x) + list(y))
    r1 = sum(ranks[:n1])
    u1 = r1 - n1 * (n1 + 1) / 2
    u = max(u1, n1 * n2 - u1)
    if method == "auto":
        method = "exact" if (n1 <= 8 or n2 <= 8) and max(ties) == 1 else "asymptotic"
    if method == "exact":
        counts = _u_counts(n1, n2)
        total = sum(counts)
        p = 2 * sum(counts[math.ceil(u):]) / total
    elif method == "asymptotic":
        n = n1 + n2
        tie_term = sum(t ** 3 - t for t in ties) / (n * (n - 1)) if n > 1 else 0.0
        var = n1 * n2 / 12 * ((n + 1) - tie_term)
        if var <= 0:
            p = 1.0  # every value equal: no evidence of a difference
        else:
            z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(var)
            p = 2 * _norm_sf(z)
    else:
        raise ValueError(f"unknown method {method!r}: allowed auto, exact, asymptotic")
    return UTest(u1, min(max(p, 0.0), 1.0), method)


# -- compare -------------------------------------------------------------------------

def parse_threshold(text: str | float) -> float:
    """'5%' or '5' -> 5.0 (percent)."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1] if raw.endswith("%") else raw)
    except ValueError:
        raise UsageError(f"bad threshold {text!r}: write a percentage, e.g. 5% or 2.5") from None
    if not (value >= 0 and math.isfinite(value)):
        raise UsageError(f"bad threshold {text!r}: must be a percentage >= 0")
    return value


@dataclass
class Row:
    name: str
    fullname: str
    old_median_s: float
    new_median_s: float
    change_pct: float
    p_value: float | None
    verdict: str
    method: str | None = None


@dataclass
class CompareResult:
    old_path: str
    new_path: str
    old_key: str | None
    new_key: str | None
    threshold_pct: float
    alpha: float
    rows: list[Row] = field(default_factory=list)
    only_old: list[str] = field(default_factory=list)
    only_new: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == SLOWER]

    @property
    def improvements(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == FASTER]

    @property
    def geomean_ratio(self) -> float | None:
        """Geometric mean of new/old medians over the benchmarks both runs have."""
        ratios = [r.new_median_s / r.old_median_s for r in self.rows if r.old_median_s > 0 and r.new_median_s > 0]
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



def _data(b: dict) -> list[float] | None:
    data = b.get("stats", {}).get("data")
    return list(data) if isinstance(data, list) and data else None


def verdict(change_pct: float, p_value: float | None, threshold_pct: float, alpha: float) -> str:
    if p_value is None:
        return NO_DATA
    if abs(change_pct) <= threshold_pct:
        return SAME
    if p_value >= alpha:
        return NOT_SIGNIFICANT
    return SLOWER if change_pct > 0 else FASTER


def compare_runs(old: str | Path | dict, new: str | Path | dict, *, threshold: str | float = "5%",
                 alpha: float = 0.05, allow_foreign: bool = False) -> CompareResult:
    """Compare run ``new`` against baseline ``old`` (paths or loaded run dicts)."""
    threshold_pct = parse_threshold(threshold)
    if not 0 < alpha < 1:
        raise UsageError(f"bad alpha {alpha!r}: must be between 0 and 1, e.g. 0.05")
    a = old if isinstance(old, dict) else load_run(old)
    b = new if isinstance(new, dict) else load_run(new)
    ka, kb = run_hardware_key(a), run_hardware_key(b)
    if ka != kb and not allow_foreign:
        raise ForeignHardwareError(f"runs were measured on different hardware ({ka!r} vs {kb!r}): refusing to "
                                   "compare (pass --allow-foreign to compare anyway)")
    res = CompareResult(str(old) if not isinstance(old, dict) else "<old>",
                        str(new) if not isinstance(new, dict) else "<new>", ka, kb, threshold_pct, alpha)
    olds = {x["fullname"]: x for x in a["benchmarks"]}
    news = {x["fullname"]: x for x in b["benchmarks"]}
    for fullname, nb in news.items():
        ob = olds.get(fullname)
        if ob is None:
            res.only_new.append(fullname)
            continue
        om, nm = ob["stats"]["median"], nb["stats"]["median"]
        change = (nm / om - 1) * 100 if om > 0 else math.inf
        od, nd = _data(ob), _data(nb)
        p = method = None
        if od and nd:
            t = mann_whitney_u(od, nd)
            p, method = t.p_value, t.method
        res.rows.append(Row(nb.get("name", fullname), fullname, om, nm, change, p,
                            verdict(change, p, threshold_pct, alpha), method))
    res.only_old = [f for f in olds if f not in news]
    return res


def _fmt_ms(s: float) -> str:
    return f"{s * 1e3:.4g}"


def render(res: CompareResult, *, show: str = "all") -> str:
    """Text for the terminal. ``show``: all, changed (everything but "same")."""
    rows = res.rows if show == "all" else [r for r in res.rows if r.verdict != SAME]
    header = ("benchmark", "old median ms", "new median ms", "change %", "p-value", "verdict")
    body = [(r.name, _fmt_ms(r.old_median_s), _fmt_ms(r.new_median_s), f"{r.change_pct:+.2f}",
             "-" if r.p_value is None else f"{r.p_value:.3g}", r.verdict) for r in rows]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *body)]
    lines = [f"old: {res.old_path} [{res.old_key}]", f"new: {res.new_path} [{res.new_key}]",
             f"threshold {res.threshold_pct:g}% on medians, Mann-Whitney U two-sided, alpha {res.alpha:g}", ""]
    fmt = lambda cells: "  ".join(str(c).ljust(w) if i in (0, 5) else str(c).rjust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    lines.append(fmt(header))
    lines.append("  ".join("-" * w for w in widths))
    lines += [fmt(c) for c in body]
    lines.append("")
    counts = res.counts()
    lines.append(f"{len(res.rows)} compared: " + ", ".join(f"{counts.get(v, 0)} {v}" for v in
                                                          (SLOWER, FASTER, SAME, NOT_SIGNIFICANT, NO_DATA)))
    if res.only_old or res.only_new:
        lines.append(f"only in old: {len(res.only_old)}, only in new: {len(res.only_new)} (not compared)")
    g = res.geomean_ratio
    if g is not None:
        lines.append(f"geometric mean of new/old medians: {g:.4f} ({(g - 1) * 100:+.2f}%)")
    if res.regressions:
        lines.append(f"REGRESSION: {len(res.regressions)} benchmark(s) significantly slower by more than "
                     f"{res.threshold_pct:g}%")
    return "\n".join(lines)
