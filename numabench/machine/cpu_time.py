"""Where the machine's CPU time went (/proc/stat's aggregate ``cpu`` line): a suspect of a host-side
step's round-to-round spread on a VM, where the hypervisor may take a vCPU away (steal) in the middle
of an OpenMP step that waits for its slowest thread."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

PROC_STAT = Path("/proc/stat")
# /proc/stat's order (proc(5)); guest and guest_nice are already counted in user and nice
FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass(frozen=True)
class CpuTimes:
    """One reading of the aggregate line, in clock ticks, at ``t`` seconds (a monotonic clock)."""
    t: float
    ticks: tuple[int, ...]  # FIELDS' order

    def __post_init__(self) -> None:
        if len(self.ticks) != len(FIELDS) or any(v < 0 for v in self.ticks):
            raise ValueError(f"ticks {self.ticks}: allowed {len(FIELDS)} counts >= 0 ({', '.join(FIELDS)})")


def parse_stat(text: str, t: float) -> CpuTimes:
    """The ``cpu`` line of a /proc/stat text; kernels before 2.6.11 have no steal field (read as 0)."""
    for line in text.splitlines():
        words = line.split()
        if words and words[0] == "cpu":
            counts = [int(w) for w in words[1:1 + len(FIELDS)]]
            if len(counts) < 4:
                raise ValueError(f"/proc/stat's cpu line {line!r}: allowed at least user nice system idle")
            return CpuTimes(t, tuple(counts + [0] * (len(FIELDS) - len(counts))))
    raise ValueError("no aggregate 'cpu' line in the /proc/stat text")


def shares(before: CpuTimes, after: CpuTimes) -> dict[str, float]:
    """Each field's share of the ticks between two readings (they sum to 1); busy is everything
    but idle, iowait and steal."""
    delta = [b - a for a, b in zip(before.ticks, after.ticks)]
    if any(d < 0 for d in delta):
        raise ValueError(f"readings at {before.t} and {after.t} go backwards: {delta}")
    total = sum(delta)
    if total == 0:
        raise ValueError(f"no ticks between the readings at {before.t} and {after.t}: allowed readings a tick apart")
    out = {name: d / total for name, d in zip(FIELDS, delta)}
    out["busy"] = 1.0 - out["idle"] - out["iowait"] - out["steal"]
    return out


def interval_shares(readings: Sequence[CpuTimes]) -> list[dict[str, float]]:
    """``shares`` of each pair of consecutive readings with ticks between them."""
    out = []
    for a, b in zip(readings, readings[1:]):
        if sum(b.ticks) > sum(a.ticks):
            out.append(shares(a, b))
    return out
