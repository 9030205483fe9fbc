"""pytest-benchmark run JSON -> the seed benchmark's CSV (numa-gpu-adam-bench).

Columns, exactly as its scripts print them::

    ngpus,numa_nodes,update_element,avg_h2d_latency(ms),avg_compute_latency(ms),avg_d2h_latency(ms)

and for weighted runs ``numa_weight`` after ``numa_nodes``. Latencies are
means over rounds (the seed averages). The seed has no dtype, impl or schedule
column, so one value of each is selected (default fp32, ours, serial).
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from numabench.errors import UsageError
from numabench.numa.policy import Policy
from numabench.results import storage

PLAIN = ["ngpus", "numa_nodes", "update_element", "avg_h2d_latency(ms)", "avg_compute_latency(ms)",
         "avg_d2h_latency(ms)"]
WEIGHTED = PLAIN[:2] + ["numa_weight"] + PLAIN[2:]


def run_json_to_csv(path: str | Path, *, weighted: bool | None = None, dtype: str = "fp32", impl: str = "ours",
                    schedule: str = "serial") -> str:
    from numabench.cases import DTYPES
    from numabench.families import family

    axes = family("adam_offload").extra_axes
    for name, value, allowed in (("dtype", dtype, tuple(DTYPES)), ("impl", impl, axes["impl"]),
                                 ("schedule", schedule, axes["schedule"])):
        if value not in allowed:
            raise UsageError(f"{name} {value!r}: allowed {', '.join(allowed)} (the CSV holds adam_offload's entries)")
    data = storage.load_run(path)
    rows: dict[tuple, dict[str, float]] = {}
    for b in data["benchmarks"]:
        x = b.get("extra_info", {})
        if x.get("family") != "adam_offload" or x.get("dtype") != dtype:
            continue
        if x.get("impl", impl) != impl or x.get("schedule", schedule) != schedule:
            continue
        key = (x["nprocess"], x["policy"], x["numel"])
        rows.setdefault(key, {})[x["phase"]] = b["stats"]["mean"] * 1e3
    if weighted is None:
        weighted = any(Policy.parse(k[1]).kind == "weighted" for k in rows)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(WEIGHTED if weighted else PLAIN)
    for (nproc, pol_text, numel), ph in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        pol = Policy.parse(pol_text)
        if (pol.kind == "weighted") != weighted or not {"h2d", "compute", "d2h"} <= set(ph):
            continue
        nodes = ",".join(map(str, pol.nodes)) if pol.nodes else pol.id
        lat = [f"{ph['h2d']:.6f}", f"{ph['compute']:.6f}", f"{ph['d2h']:.6f}"]
        if weighted:
            w.writerow([nproc, nodes, ",".join(map(str, pol.weights)), numel, *lat])
        else:
            w.writerow([nproc, nodes, numel, *lat])
    return out.getvalue()
