"""The limits an offload mode's step is judged by, from rates the same run(s) measured: its PCIe
bytes per step over the copy rates of the ``transfer`` family (pinned memory, one GPU: host to
device, device to host, and both at once), and its CPU-side optimizer's host-memory bytes over
``host_membw``'s ``adam_pattern`` rate (Adam's 4 reads and 3 writes, the node's threads).

The PCIe bound is the largest of: host-to-device bytes over the one-way H2D rate, device-to-host
bytes over the D2H rate, and both together over the bidirectional rate (both directions share
the link when they run at once). Where several entries could give a rate, the one of the row's
policy is taken, else ``default``'s, else any, and among those the largest size (copies and
host passes of the size of a model's state, beyond the caches).
"""
from __future__ import annotations

from dataclasses import dataclass

from numabench.results.tables import Entry


@dataclass(frozen=True)
class Rate:
    gbps: float  # decimal GB/s; bidir: both directions' bytes
    entry: str  # the entry it came from


@dataclass(frozen=True)
class Rates:
    h2d: Rate | None = None
    d2h: Rate | None = None
    bidir: Rate | None = None
    adam_pattern: Rate | None = None


def _pick(candidates: list[tuple[Entry, float]], policy: str | None) -> Rate | None:
    """Of (entry, GB/s) pairs: the row's policy's, else default's, else any; the largest size."""
    if not candidates:
        return None
    for want in (policy, "default", None):
        pool = [c for c in candidates if want is None or str(c[0].axes.get("policy")) == want]
        if pool:
            e, gbps = max(pool, key=lambda c: (int(c[0].axes.get("numel") or 0), c[1]))
            return Rate(gbps, e.name)
    return None


def measured_rates(es: list[Entry], policy: str | None = None) -> Rates:
    """The copy and host-memory rates among ``es`` (numabench.results.tables.entries of a run) that
    bound a one-rank train_step row under ``policy``."""
    def of(family: str, phase: str, **axes: str) -> list[tuple[Entry, float]]:
        return [(e, e.gbps) for e in es if e.family == family and e.phase == phase and e.gbps
                and int(e.axes.get("nprocess") or 0) == 1 and all(str(e.axes.get(k)) == v for k, v in axes.items())]

    return Rates(_pick(of("transfer", "h2d", memory="pinned"), policy),
                 _pick(of("transfer", "d2h", memory="pinned"), policy),
                 _pick(of("transfer", "bidir", memory="pinned"), policy),
                 _pick(of("host_membw", "time", kernel="adam_pattern"), policy))


def pcie_bound_s(h2d_bytes: float, d2h_bytes: float, rates: Rates) -> float | None:
    """Seconds the step's PCIe traffic takes at least; None without traffic or without a rate."""
    if h2d_bytes < 0 or d2h_bytes < 0:
        raise ValueError(f"bytes {h2d_bytes}, {d2h_bytes}: allowed >= 0")
    if not h2d_bytes and not d2h_bytes:
        return None
    terms = [b / (r.gbps * 1e9) for b, r in ((h2d_bytes, rates.h2d), (d2h_bytes, rates.d2h),
                                             (h2d_bytes + d2h_bytes, rates.bidir)) if r is not None and b]
    return max(terms) if terms else None


def host_bound_s(host_bytes: float | None, rates: Rates) -> float | None:
    """Seconds a CPU-side optimizer's pass over host memory takes at least; None where the
    optimizer runs on the GPU or no adam_pattern rate was measured."""
    if not host_bytes or rates.adam_pattern is None:
        return None
    if host_bytes < 0:
        raise ValueError(f"host bytes {host_bytes}: allowed >= 0")
    return host_bytes / (rates.adam_pattern.gbps * 1e9)


def rates_note(rates: Rates) -> str:
    """Which entries the rates came from, for the table's legend."""
    parts = [f"{name} {r.gbps:.1f} GB/s ({r.entry})" for name, r in
             (("H2D", rates.h2d), ("D2H", rates.d2h), ("bidirectional", rates.bidir),
              ("adam_pattern", rates.adam_pattern)) if r is not None]
    return "; ".join(parts) if parts else "none measured in these runs"


MEASURE_RATES = ("pytest benchmarks/test_transfer.py benchmarks/test_host_membw.py --nprocess=1 "
                 "--param-sizes=268435456 --numa-axis memory=pinned --numa-axis kernel=adam_pattern")
