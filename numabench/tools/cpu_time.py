"""Where the machine's CPU time went while something ran: steal (a VM's vCPU taken by the
hypervisor), busy, idle, per interval and over the whole.

    python -m numabench.tools.cpu_time watch FILE [--interval S]   # until SIGTERM or SIGINT
    python -m numabench.tools.cpu_time summary FILE

``watch`` appends a /proc/stat reading to FILE every S seconds (default 1) until stopped (one
reading more as it stops, or as its parent goes); ``summary`` prints the shares over the whole and the spread of the
intervals' steal and busy shares."""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from pathlib import Path

from numabench.machine.cpu_time import FIELDS, PROC_STAT, CpuTimes, interval_shares, parse_stat, shares


def read_now() -> CpuTimes:
    return parse_stat(PROC_STAT.read_text(), time.monotonic())


def write_line(path: Path, r: CpuTimes) -> None:
    with path.open("a") as f:
        f.write(f"{r.t:.3f} " + " ".join(str(v) for v in r.ticks) + "\n")


def read_lines(path: Path) -> list[CpuTimes]:
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        words = line.split()
        if len(words) != 1 + len(FIELDS):
            raise ValueError(f"{path}:{n}: {line!r}: allowed a time and {len(FIELDS)} counts")
        out.append(CpuTimes(float(words[0]), tuple(int(w) for w in words[1:])))
    return out


def watch(path: Path, interval: float) -> int:
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    parent = os.getppid()
    write_line(path, read_now())
    while not stop and os.getppid() == parent:  # a caller killed without stopping it leaves none behind
        time.sleep(interval)
        write_line(path, read_now())
    return 0


def summary(readings: list[CpuTimes]) -> list[str]:
    if len(readings) < 2:
        raise ValueError(f"{len(readings)} readings: allowed 2 or more")
    whole = shares(readings[0], readings[-1])
    lines = [f"{readings[-1].t - readings[0].t:.0f} s, {len(readings) - 1} intervals: "
             + ", ".join(f"{k} {whole[k]:.1%}" for k in ("busy", "steal", "idle", "iowait", "system", "softirq"))]
    parts = interval_shares(readings)
    for key in ("steal", "busy"):
        v = sorted(p[key] for p in parts)
        lines.append(f"  {key} per interval: median {statistics.median(v):.1%}, max {v[-1]:.1%}, "
                     f"intervals above 1%: {sum(x > 0.01 for x in v)} of {len(v)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m numabench.tools.cpu_time", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    w = sub.add_parser("watch", help="append a reading every --interval seconds until SIGTERM/SIGINT")
    w.add_argument("file", type=Path)
    w.add_argument("--interval", type=float, default=1.0, help="seconds between readings (default 1)")
    s = sub.add_parser("summary", help="shares over the whole and per interval")
    s.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.verb == "watch":
            if args.interval <= 0:
                raise ValueError(f"--interval {args.interval}: allowed > 0")
            return watch(args.file, args.interval)
        print("\n".join(summary(read_lines(args.file))))
        return 0
    except (ValueError, OSError) as e:
        print(f"cpu_time: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
