"""Text rendering of the topology (what ``numabench topo`` prints)."""
from __future__ import annotations

from numabench.machine.capabilities import Capabilities
from numabench.machine.hugepages import THP_DIR
from numabench.machine.nodelist import format_list
from numabench.machine.topology import Topology


def _gib(b: int) -> str:
    return f"{b / 2**30:.1f} GiB"


def render_topology(topo: Topology, caps: Capabilities) -> str:
    lines: list[str] = []
    ids = topo.node_ids
    if topo.gpus:
        header = ["", "PCI bus", "NUMA node", "CPU affinity", "Memory", "Name"]
        rows = []
        for g in topo.gpus:
            node = "unknown" if g.numa_node is None else str(g.numa_node)
            if g.numa_node_source == "only-node":
                node += " (only node; sysfs -1)"
            cpus = format_list(topo.node(g.numa_node).cpus) if g.numa_node is not None else "?"
            rows.append([f"GPU{g.index}", g.pci_bus_id, node, cpus, _gib(g.memory_bytes) if g.memory_bytes else "?",
                         g.name])
        lines += _table(header, rows)
    else:
        lines.append("GPUs: none visible")
    lines.append("")
    header = ["Node", "CPUs", "MemTotal", "MemFree", "Kind"] + [f"d{n}" for n in ids]
    rows = []
    for n in topo.nodes:
        kind = "cpu+mem" if n.has_cpus and n.has_memory else ("memory-only (CXL-like)" if n.has_memory else "cpu-only")
        rows.append([f"node{n.id}", format_list(n.cpus) or "-", _gib(n.mem_total_bytes), _gib(n.mem_free_bytes),
                     kind] + [str(n.distances.get(o, "-")) for o in ids])
    lines += _table(header, rows)
    lines.append("")
    lines.append(f"kernel: {topo.kernel_release}")
    lines.append(f"transparent huge pages: {caps.transparent_hugepages or 'none (no ' + str(THP_DIR) + ')'}")
    if caps.numactl_path:
        ver = caps.numactl_version or "older than 2.0.17 (no --version)"
        lines.append(f"numactl: {ver} at {caps.numactl_path}; --weighted-interleave: "
                     f"{'yes' if caps.numactl_weighted else 'no'}; --preferred-many: "
                     f"{'yes' if caps.numactl_preferred_many else 'no'}")
    else:
        lines.append("numactl: not installed (the built-in launcher applies every policy)")
    how = caps.weighted_launcher
    if how is None:
        lines.append(f"weighted interleave: no ({caps.weighted_skip_reason()})")
    else:
        via = "numactl" if how == "numactl" else "built-in launcher (set_mempolicy)"
        extra = "" if caps.weights_writable else "; weights not writable (needs root)"
        auto = caps.weights_auto_on
        if auto:  # why weighted cases skip here although the kernel can weigh nodes
            extra += (f"; the kernel's auto mode is on, so weighted cases skip: running one {auto.split(': ')[0]} "
                      "(--numa-allow-weight-writes allows it)")
        lines.append(f"weighted interleave: yes, via {via}{extra}")
    return "\n".join(lines)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip()] + [fmt.format(*r).rstrip() for r in rows]
