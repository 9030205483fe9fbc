"""The default policy axis, built from the live topology.

Multi-node templates stay in the axis on smaller machines so that they show
up as SKIPPED with the reason (never silently absent).
"""
from __future__ import annotations

from .policy import Policy
from .topology import Topology


def default_policies(topology: Topology) -> list[Policy]:
    mem = list(topology.memory_node_ids) or [0]
    cpu = list(topology.cpu_node_ids) or [0]
    cxl = list(topology.cpuless_node_ids)
    near = cpu[0]
    # The "far" node: a CPU-less (CXL) node if there is one, else the next node, else node 1 (a template).
    far = cxl[0] if cxl else next((n for n in mem if n != near), 1)
    texts = ["default", "local"]
    texts += [f"bind:{n}" for n in mem]
    if len(mem) < 2:
        texts.append(f"bind:{far}")  # shows as skipped: no second node
    texts += [f"preferred:{far}", f"preferred-many:{near},{far}", "interleave:all", f"interleave:{near},{far}",
              f"weighted:{near}=1,{far}=1", f"weighted:{near}=1,{far}=3"]
    if len(cxl) > 1:
        texts.append("interleave:" + ",".join(map(str, [near, *cxl])))
    seen: dict[str, Policy] = {}
    for t in texts:
        p = Policy.parse(t)
        seen.setdefault(p.id, p)
    return list(seen.values())
