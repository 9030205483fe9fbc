"""Command line: ``numabench topo|build|csv``. The only place that prints."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from .errors import NumabenchError


def cmd_topo(ns: argparse.Namespace) -> int:
    from .capabilities import probe
    from .report_topo import render_topology
    from .topology import discover

    topo = discover(ns.root)
    caps = probe(first_node=(topo.memory_node_ids or (0,))[0])
    if ns.bandwidth:
        from .membw import bandwidth_matrix, render_matrix

        matrix = bandwidth_matrix(topo, caps)
    if ns.json:
        out = {"topology": topo.to_dict(), "capabilities": caps.to_dict()}
        if ns.bandwidth:
            out["bandwidth"] = matrix
        print(json.dumps(out, indent=2, sort_keys=True))
    else:
        print(render_topology(topo, caps))
        if ns.bandwidth:
            print()
            print(render_matrix(matrix))
    return 0


def cmd_build(ns: argparse.Namespace) -> int:
    from .kernels import prebuild

    for name, status in prebuild.build_all():
        print(f"{name}: {status}")
    return 0


def cmd_csv(ns: argparse.Namespace) -> int:
    from .seedcsv import run_json_to_csv

    sys.stdout.write(run_json_to_csv(ns.run_json, weighted=True if ns.weighted else None, dtype=ns.dtype,
                                     impl=ns.impl, schedule=ns.schedule))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="numabench", description="NUMA-aware GPU offload benchmarks")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("topo", help="show NUMA nodes, GPUs, distances, and what policies this machine can apply")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--bandwidth", action="store_true", help="also measure the node x node host bandwidth matrix")
    p.add_argument("--root", default="/", help=argparse.SUPPRESS)  # recorded trees in tests
    p.set_defaults(func=cmd_topo)
    p = sub.add_parser("build", help="compile the C++/CUDA kernels into the cache")
    p.set_defaults(func=cmd_build)
    p = sub.add_parser("csv", help="write a pytest-benchmark run as the seed benchmark's CSV")
    p.add_argument("run_json", help="a saved run (baselines/.../NNNN_name.json) or --benchmark-json file")
    p.add_argument("--weighted", action="store_true", help="the weighted format (default: if the run has weighted cases)")
    p.add_argument("--dtype", default="fp32", help="which dtype's rows (the seed CSV has no dtype column)")
    p.add_argument("--impl", default="ours", help="which kernel's rows: ours or torch")
    p.add_argument("--schedule", default="serial", help="which schedule's rows: serial or overlap")
    p.set_defaults(func=cmd_csv)
    ns = parser.parse_args(argv)
    try:
        return ns.func(ns)
    except NumabenchError as e:
        print(f"numabench: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
