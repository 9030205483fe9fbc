"""Ranks for families that run on GPUs where there are GPUs, and on the CPU otherwise.

``GpuOrCpuFamily`` keeps ``rank_kind="gpu"`` (so the default nprocess axis is
{1, number of GPUs}, as for the GPU families) and overrides how ranks and skip
reasons come about:

- GPUs visible: rank i on GPU i, its CPUs on the GPU's nearest CPU node (as
  ``Family.ranks``); nprocess > GPUs is a skip.
- no GPU: every rank on the first CPU node (a CPU-only machine is a CI machine:
  one process group of ``nprocess`` CPU processes on that node's CPUs).
- ``cpu_binding(case)`` False (e.g. the dataloader's ``binding=unbound``): the
  rank keeps its own node (for ``local``) but is not CPU-bound, so its worker is
  started without --cpunodebind and ``default`` promises no node.
- ``gpu_only(case)``: a reason when that case needs CUDA (FSDP CPU offload, bf16
  autocast, a GPU-sized default); ``cpu_only_skip(case)``: the same for cases
  that only a GPU machine should run.

Nothing here changes ``Family`` itself: other families are untouched.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..cases import Case, Family, Rank

if TYPE_CHECKING:
    from ..capabilities import Capabilities
    from ..topology import Topology


@dataclass
class GpuOrCpuFamily(Family):
    cpu_binding: Callable[[Case], bool] = lambda case: True
    # reason a case cannot run without a GPU (None: it runs on the CPU too)
    gpu_only: Callable[[Case], str | None] = lambda case: None

    def ranks(self, case: Case, topology: "Topology") -> list[Rank]:
        if topology.gpus:
            ranks = Family.ranks(self, case, topology)
        else:
            node = (topology.cpu_node_ids or (0,))[0]
            ranks = [Rank(i, None, node, node) for i in range(case.nprocess)]
        if not self.cpu_binding(case):
            ranks = [Rank(r.index, r.gpu, r.own_node, None) for r in ranks]
        return ranks

    def skip_reason(self, case: Case, topology: "Topology", caps: "Capabilities",
                    host_memory_bytes: int | None = None) -> str | None:
        ngpu = len(topology.gpus)
        if ngpu and case.nprocess > ngpu:
            return f"nprocess={case.nprocess} needs {case.nprocess} GPUs; this machine has {ngpu}"
        if ngpu and case.policy.kind == "local":
            unknown = [g.index for g in topology.gpus[: case.nprocess] if g.numa_node is None]
            if unknown:
                return f"policy local needs each GPU's NUMA node; unknown for GPU(s) {unknown} (sysfs numa_node=-1)"
        if not ngpu:
            if not topology.cpu_node_ids:
                return f"{self.key} on the CPU needs a NUMA node with CPUs; this machine reports none"
            reason = self.gpu_only(case)
            if reason:
                return f"{reason}; no CUDA GPU is visible (needs a CUDA GPU)"
        return super().skip_reason(case, topology, caps, host_memory_bytes)
