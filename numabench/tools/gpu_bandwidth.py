"""The node x GPU copy bandwidth matrix (``numabench topo --bandwidth`` on GPU
machines): pinned H2D and D2H GB/s from memory bound to each NUMA node into
each GPU, measured with the ``transfer`` family's worker (one rank, the GPU
chosen per column, the driving CPUs on the GPU's nearest CPU node, placement
checked before timing like every case)."""
from __future__ import annotations

from numabench.cases import Case
from numabench.families import family
from numabench.machine.capabilities import Capabilities
from numabench.machine.topology import Topology
from numabench.numa.policy import Policy
from numabench.workers.run import run_variants

MATRIX_ELEMS = 64 * 2**20  # fp32: 256 MiB per copy, as nvbandwidth's order of magnitude
DIRECTIONS = ("h2d", "d2h")


def gpu_bandwidth_matrix(topo: Topology, caps: Capabilities, numel: int = MATRIX_ELEMS, rounds: int = 5) -> dict | None:
    """{"h2d"|"d2h": {node: {gpu index: GB/s}}} (decimal, median of ``rounds``), or None without GPUs."""
    if not topo.gpus:
        return None
    mod = family("transfer")
    out: dict = {"unit": "GB/s (decimal), pinned, median", **{d: {} for d in DIRECTIONS}}
    for node in topo.memory_node_ids:
        case = Case("transfer", 1, numel, Policy.parse(f"bind:{node}"), "fp32", (("memory", "pinned"),))
        for gpu in topo.gpus:
            own = gpu.numa_node if gpu.numa_node is not None else node
            cpu_node = topo.nearest_cpu_node(own) if topo.cpu_node_ids else None
            res = run_variants(case, [case.extra], mod, topo, caps, rounds=rounds, warmup=1,
                               rank_gpus=[gpu.index],
                               rank_nodes=[cpu_node] if cpu_node is not None else None)[0]
            for d in DIRECTIONS:
                out[d].setdefault(str(node), {})[str(gpu.index)] = mod.metrics(res, d)["GBps"]
    return out


def render_gpu_matrix(matrix: dict) -> str:
    lines = []
    for d in DIRECTIONS:
        rows = matrix[d]
        cols = list(next(iter(rows.values())).keys()) if rows else []
        lines.append(f"{d.upper()} copy bandwidth ({matrix['unit']}); rows: memory node, columns: GPU")
        lines.append("mem node  " + "  ".join(f"{'gpu' + c:>8}" for c in cols))
        for node, vals in rows.items():
            lines.append(f"{'node' + node:<8}  " + "  ".join(f"{vals[c]:>8.1f}" for c in cols))
        lines.append("")
    return "\n".join(lines).rstrip()
