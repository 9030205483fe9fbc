"""The seed benchmark's CSV -> a pytest-benchmark-shaped run JSON (the inverse of seed_csv).

The seed's scripts (numa-gpu-adam-bench) wrote, per configuration, the mean
latency of each phase::

    ngpus,numa_nodes,update_element,avg_h2d_latency(ms),avg_compute_latency(ms),avg_d2h_latency(ms)

with ``numa_weight`` after ``numa_nodes`` for weighted-interleave runs. Each
row becomes three benchmarks (h2d, compute, d2h) of family adam_offload, named
as this suite names them, so old results can be tabled, plotted and compared
with new ones. Only a mean is known: min = max = median = mean, stddev 0, one
round, no per-round data (so ``numabench compare`` says "no data", never
"slower"), and ``extra_info`` says ``"source": "seed-csv", "stats_from": "mean only"``.

numa_nodes to policy: ``0`` -> ``bind:0``; ``0,1`` -> ``interleave:0,1``; with
numa_weight ``1,3`` -> ``weighted:0=1,1=3``; a policy text (``default``,
``local``, ``interleave:all``) is taken as it is. These are what
``numabench csv`` writes, so csv -> json -> csv gives the same rows.
"""
from __future__ import annotations

import csv
import datetime as _dt
import hashlib
import io
import math
from pathlib import Path

from numabench.cases import DTYPES, MAX_NUMEL, Case
from numabench.errors import PolicyError, UsageError
from numabench.machine.hwkey import check_key, hardware_key as _hardware_key
from numabench.numa.mempolicy import MASK_BITS
from numabench.numa.policy import Policy
from numabench.results.entry import case_fields, entry_fullname, entry_group, entry_name, entry_param
from numabench.results.seed_csv import PLAIN, WEIGHTED

PHASES = {"h2d": "avg_h2d_latency(ms)", "compute": "avg_compute_latency(ms)", "d2h": "avg_d2h_latency(ms)"}
# bytes moved per element and itemsize, as families/adam_offload.metrics counts them
BYTES_PER_ELEMENT = {"h2d": 4, "d2h": 3, "compute": 7}


def _split(text: str) -> list[str]:
    return [t for t in text.replace(":", ",").replace(";", ",").replace(" ", ",").split(",") if t]


def policy_from_seed(nodes_text: str, weight_text: str | None = None) -> Policy:
    nodes_text = nodes_text.strip()
    parts = _split(nodes_text)
    if parts and all(p.isdigit() for p in parts):
        nodes = [int(p) for p in parts]
        if weight_text is not None:
            weights = _split(weight_text.strip())
            if len(weights) != len(nodes) or not all(w.isdigit() for w in weights):
                raise UsageError(f"numa_weight {weight_text!r} does not match numa_nodes {nodes_text!r}: "
                                 "write one weight per node, e.g. nodes 0,1 weights 1,3")
            return Policy.parse("weighted:" + ",".join(f"{n}={w}" for n, w in zip(nodes, weights)))
        return Policy.parse(f"bind:{nodes[0]}" if len(nodes) == 1 else "interleave:" + ",".join(parts))
    return Policy.parse(nodes_text)


def _number(text: str, column: str, line: int, kind=float, path: Path | None = None):
    where = f"{path} line {line}" if path else f"line {line}"
    try:
        value = kind(float(text)) if kind is int else float(text)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: {column} {text!r} is not a number") from None
    if not value > 0 or not math.isfinite(value):
        raise UsageError(f"{where}: {column} {text!r} must be a finite number > 0")
    if column == "update_element" and value > MAX_NUMEL:
        raise UsageError(f"{where}: {column} {text!r}: more than 1e13 elements is beyond any machine")
    return value


def _stats(mean_s: float) -> dict:
    return {"min": mean_s, "max": mean_s, "mean": mean_s, "stddev": 0.0, "rounds": 1, "median": mean_s,
            "iqr": 0.0, "q1": mean_s, "q3": mean_s, "iqr_outliers": 0, "stddev_outliers": 0, "outliers": "0;0",
            "ld15iqr": mean_s, "hd15iqr": mean_s, "ops": 1 / mean_s, "total": mean_s, "iterations": 1}


def _pytest_benchmark_version() -> str:
    try:
        from importlib.metadata import version

        return version("pytest-benchmark")
    except Exception:
        return "unknown"


def import_csv(path: str | Path, *, gpus: list[str] | None = None, dtype: str = "fp32", impl: str | None = None,
               schedule: str | None = None, alloc: str | None = None, cpu_model: str = "unknown",
               numa_nodes: int | None = None, hardware_key: str | None = None) -> dict:
    """Read a seed CSV; return the run as a dict (json.dump it to save)."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise UsageError(f"CSV file {path} does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"CSV file {path} is a directory: allowed the seed benchmark's CSV file") from None
    except OSError as e:
        raise UsageError(f"CSV file {path} cannot be read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        line = path.read_bytes()[:e.start].count(b"\n") + 1
        raise UsageError(f"CSV file {path} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at line {line}): "
                         "allowed the seed benchmark's CSV as it writes it") from None
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}: allowed {', '.join(DTYPES)}")
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader, [])]
    if header not in (PLAIN, WEIGHTED):
        raise UsageError(f"{path}: header {','.join(header)!r} is not the seed's; expected {','.join(PLAIN)!r} "
                         f"or, weighted, {','.join(WEIGHTED)!r}")
    weighted = header == WEIGHTED
    rows = []
    warnings: list[str] = []
    seen: dict[tuple, int] = {}
    for line, cells in enumerate(reader, start=2):
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise UsageError(f"{path} line {line}: {len(cells)} fields, the header has {len(header)}")
        row = dict(zip(header, (c.strip() for c in cells)))
        try:
            pol = policy_from_seed(row["numa_nodes"], row["numa_weight"] if weighted else None)
        except PolicyError as e:
            raise UsageError(f"{path} line {line}: numa_nodes {row['numa_nodes']!r}: {e}") from None
        beyond = [n for n in pol.nodes if not 0 <= n < MASK_BITS]
        if beyond:
            raise UsageError(f"{path} line {line}: numa_nodes {row['numa_nodes']!r}: node {beyond[0]} is beyond what "
                             f"a machine can have: allowed node ids 0..{MASK_BITS - 1} (Linux's MAX_NUMNODES is at "
                             f"most {MASK_BITS})")
        nproc = _number(row["ngpus"], "ngpus", line, int, path)
        numel = _number(row["update_element"], "update_element", line, int, path)
        key = (nproc, pol.id, numel)
        if key in seen:
            raise UsageError(f"{path} line {line}: same ngpus, numa_nodes and update_element as line {seen[key]}")
        seen[key] = line
        # A phase cell that is no number (the seed script can write e.g. "step:" there) is a
        # missing value, named in a warning; the row's other phases are kept.
        lat = {}
        for ph, col in PHASES.items():
            try:
                lat[ph] = _number(row[col], col, line, float, path)
            except UsageError as e:
                warnings.append(f"{e}: left out")
        if not lat:
            continue
        rows.append((line, row, nproc, pol, numel, lat))
    if not rows:
        raise UsageError(f"{path}: no data rows")

    max_np = max(r[2] for r in rows)
    node_ids = [n for r in rows for n in r[3].nodes]
    if numa_nodes is not None and numa_nodes > MASK_BITS:
        raise UsageError(f"numa nodes {numa_nodes}: allowed an integer <= {MASK_BITS} (Linux's MAX_NUMNODES is at "
                         f"most {MASK_BITS})")
    if numa_nodes is not None and numa_nodes < max(node_ids, default=0) + 1:
        raise UsageError(f"numa nodes {numa_nodes}: allowed an integer >= {max(node_ids, default=0) + 1} "
                         f"(the CSV names node {max(node_ids, default=0)})")
    if any(not g.strip() for g in gpus or []):
        raise UsageError(f"GPU model {next(g for g in gpus or [] if not g.strip())!r}: allowed a model name, "
                         "e.g. 'NVIDIA H100 80GB HBM3'")
    gpu_names = list(gpus or [])
    if len(gpu_names) == 1 and max_np > 1:
        gpu_names = gpu_names * max_np  # one model named for a machine of max(ngpus) GPUs
    info = {
        "gpus": gpu_names,
        "gpu_count": len(gpu_names) or max_np,
        "cpu_model": cpu_model,
        "numa_nodes": numa_nodes if numa_nodes is not None else (max(node_ids) + 1 if node_ids else 1),
        "cpuless_nodes": 0,
        "cuda_driver_major": None,
        "gpu_models": sorted(set(gpu_names)) or ["unknown"],
        "source": "seed-csv",
        "import_warnings": warnings,
    }
    info["hardware_key"] = check_key(hardware_key) if hardware_key else _hardware_key(None, info)  # type: ignore[arg-type]

    itemsize = DTYPES[dtype]
    axes = tuple((name, value) for name, value in (("impl", impl), ("schedule", schedule), ("alloc", alloc)) if value)
    benchmarks = []
    for line, row, nproc, pol, numel, lat in rows:
        case = Case("adam_offload", nproc, numel, pol, dtype, axes)
        for phase, mean_ms in lat.items():
            mean_s = mean_ms / 1e3
            moved = BYTES_PER_ELEMENT[phase] * numel * itemsize
            extra = case_fields(case, phase, info["hardware_key"])
            extra.update({"source": "seed-csv", "stats_from": "mean only", "csv_file": path.name, "csv_line": line,
                          "seed_numa_nodes": row["numa_nodes"], "bytes": moved, "GBps": round(moved / mean_s / 1e9, 3)})
            if weighted:
                extra["seed_numa_weight"] = row["numa_weight"]
            benchmarks.append({
                "group": entry_group(case, phase),
                "name": entry_name(case, phase),
                "fullname": entry_fullname(case, phase),
                "params": {"numa_phase": phase, "numa_case": case.id},
                "param": entry_param(case, phase),
                "extra_info": extra,
                "options": {"disable_gc": False, "timer": "seed-csv", "min_rounds": 1, "max_time": 0.0,
                            "min_time": 0.0, "warmup": False},
                "stats": _stats(mean_s),
            })
    return {
        "machine_info": {"node": "seed-csv", "processor": "unknown", "machine": "unknown", "system": "Linux",
                         "python_implementation": "unknown", "python_version": "unknown", "release": "unknown",
                         "cpu": {"brand_raw": cpu_model}, "numabench": info},
        # the file's name and content hash, never this machine's path to it
        "commit_info": {"id": "unknown", "source": "seed-csv", "csv_file": path.name,
                        "csv_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "dirty": False,
                        "project": "numa-gpu-adam-bench", "branch": "(unknown)"},
        "benchmarks": benchmarks,
        "datetime": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "version": _pytest_benchmark_version(),
    }
