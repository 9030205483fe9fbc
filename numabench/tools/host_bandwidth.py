"""The node x node host bandwidth matrix (what Intel MLC prints), measured with
the host_membw workers: threads of each CPU node over memory bound to each
node, plus interleave over all nodes."""
from __future__ import annotations

from numabench.cases import Case
from numabench.families import family
from numabench.machine.capabilities import Capabilities
from numabench.machine.topology import Topology
from numabench.numa.policy import Policy
from numabench.workers.run import run_variants

MATRIX_ELEMS = 16 * 2**20  # 64 MiB per array, 4 arrays
KERNELS = ("copy", "triad", "adam_pattern")


def bandwidth_matrix(topo: Topology, caps: Capabilities, numel: int = MATRIX_ELEMS, rounds: int = 10) -> dict:
    """{kernel: {cpu_node: {policy: GB/s}}} for copy, triad and adam_pattern (decimal GB/s,
    write-allocate not counted)."""
    mod = family("host_membw")
    fam = mod
    policies = [Policy.parse(f"bind:{n}") for n in topo.memory_node_ids] + [Policy.parse("interleave:all")]
    out: dict = {"unit": "GB/s (decimal), write-allocate not counted", **{k: {} for k in KERNELS}}
    for cpu_node in topo.cpu_node_ids:
        for pol in policies:
            case = Case("host_membw", 1, numel, pol, "fp32")
            variants = [(("kernel", k),) for k in KERNELS]
            results = run_variants(case, variants, fam, topo, caps, rounds=rounds, warmup=2,
                                   spec_extra=None, rank_nodes=[cpu_node])
            for res in results:
                kernel = res.case.param("kernel")
                out[kernel].setdefault(str(cpu_node), {})[pol.id] = mod.metrics(res, "time")["GBps"]
    return out


def render_matrix(matrix: dict) -> str:
    lines = []
    for kernel in KERNELS:
        rows = matrix[kernel]
        cols = list(next(iter(rows.values())).keys()) if rows else []
        lines.append(f"host memory bandwidth, {kernel} ({matrix['unit']}); rows: CPU node, columns: memory policy")
        width = max([len(c) for c in cols] + [8])
        lines.append("cpu node  " + "  ".join(f"{c:>{width}}" for c in cols))
        for node, vals in rows.items():
            lines.append(f"{'node' + node:<8}  " + "  ".join(f"{vals[c]:>{width}.1f}" for c in cols))
        lines.append("")
    return "\n".join(lines).rstrip()
