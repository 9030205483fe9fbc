"""What the machine looks like: NUMA nodes, CPUs, memory, distances, GPUs.

Everything is read from sysfs/procfs below ``root`` so tests can point it at a
recorded tree (tests/data/machines/*). GPUs come from numabench.machine.gpus unless
given explicitly (recorded trees list theirs in ``gpus.json``).
"""
from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from numabench.machine.gpus import GpuInfo, visible_gpus
from numabench.machine.nodelist import parse_list

NODE_DIR = "sys/devices/system/node"


@dataclass(frozen=True)
class NumaNode:
    id: int
    cpus: tuple[int, ...]
    mem_total_bytes: int
    mem_free_bytes: int
    distances: dict[int, int]  # node id -> SLIT distance

    @property
    def has_cpus(self) -> bool:
        return bool(self.cpus)

    @property
    def has_memory(self) -> bool:
        return self.mem_total_bytes > 0


@dataclass(frozen=True)
class Gpu:
    index: int  # CUDA index in this process
    pci_bus_id: str
    numa_node: int | None  # None: the platform does not say and several nodes exist
    numa_node_source: str  # "sysfs", "only-node" (sysfs said -1 on a 1-node machine), "unknown"
    name: str = ""
    memory_bytes: int = 0


@dataclass(frozen=True)
class Topology:
    nodes: tuple[NumaNode, ...]
    online_cpus: tuple[int, ...]
    kernel_release: str
    gpus: tuple[Gpu, ...] = field(default=())
    cpu_model: str = ""
    # CPU -> its physical core (the core's first SMT sibling); a CPU missing here is a core of its own
    core_of: dict[int, int] = field(default_factory=dict)

    # -- lookups -----------------------------------------------------------
    @property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(n.id for n in self.nodes)

    @property
    def memory_node_ids(self) -> tuple[int, ...]:
        return tuple(n.id for n in self.nodes if n.has_memory)

    @property
    def cpu_node_ids(self) -> tuple[int, ...]:
        return tuple(n.id for n in self.nodes if n.has_cpus)

    @property
    def cpuless_node_ids(self) -> tuple[int, ...]:
        """Memory-only nodes: CXL expanders, HBM/PMEM exposed as memory."""
        return tuple(n.id for n in self.nodes if n.has_memory and not n.has_cpus)

    def node(self, node_id: int) -> NumaNode:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(f"NUMA node {node_id} does not exist; nodes are {list(self.node_ids)}")

    def gpu(self, index: int) -> Gpu:
        if not 0 <= index < len(self.gpus):
            raise KeyError(f"GPU {index} does not exist; this process sees {len(self.gpus)} GPU(s)")
        return self.gpus[index]

    def nearest_cpu_node(self, node_id: int) -> int:
        """The node whose CPUs should run work for memory on ``node_id`` (itself if it has CPUs)."""
        node = self.node(node_id)
        if node.has_cpus:
            return node_id
        candidates = [n for n in self.nodes if n.has_cpus]
        if not candidates:
            raise KeyError("no NUMA node has CPUs")
        return min(candidates, key=lambda n: (node.distances.get(n.id, 255), n.id)).id

    def physical_cores(self, cpus: Sequence[int]) -> list[tuple[int, ...]]:
        """``cpus`` grouped by physical core (SMT siblings together), cores in order."""
        cores: dict[int, list[int]] = {}
        for c in sorted(cpus):
            cores.setdefault(self.core_of.get(c, c), []).append(c)
        return [tuple(v) for _, v in sorted(cores.items())]

    def kernel_version(self) -> tuple[int, int]:
        return kernel_version_tuple(self.kernel_release)

    # -- serialization -------------------------------------------------------
    def to_dict(self) -> dict:
        d = asdict(self)
        for n in d["nodes"]:
            n["distances"] = {str(k): v for k, v in n["distances"].items()}
            n["cpuless"] = not n["cpus"] and n["mem_total_bytes"] > 0
        d["core_of"] = {str(k): v for k, v in self.core_of.items()}
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> "Topology":
        nodes = tuple(
            NumaNode(
                id=n["id"],
                cpus=tuple(n["cpus"]),
                mem_total_bytes=n["mem_total_bytes"],
                mem_free_bytes=n["mem_free_bytes"],
                distances={int(k): v for k, v in n["distances"].items()},
            )
            for n in d["nodes"]
        )
        gpus = tuple(Gpu(**g) for g in d.get("gpus", ()))
        return cls(nodes=nodes, online_cpus=tuple(d["online_cpus"]), kernel_release=d["kernel_release"],
                   gpus=gpus, cpu_model=d.get("cpu_model", ""),
                   core_of={int(k): v for k, v in (d.get("core_of") or {}).items()})


def kernel_version_tuple(release: str) -> tuple[int, int]:
    """'6.12.48+deb13-amd64' -> (6, 12)."""
    parts = release.split(".")
    try:
        major = int(parts[0])
        minor = int("".join(ch for ch in parts[1].split("-")[0] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)
    return (major, minor)


def _read(path: Path, default: str = "") -> str:
    try:
        return path.read_text()
    except OSError:
        return default


def _node_meminfo(path: Path) -> tuple[int, int]:
    total = free = 0
    for line in _read(path).splitlines():
        # "Node 0 MemTotal:       24573532 kB"
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "MemTotal:":
            total = int(parts[3]) * 1024
        elif len(parts) >= 4 and parts[2] == "MemFree:":
            free = int(parts[3]) * 1024
    return total, free


def _cpu_model(root: Path) -> str:
    for line in _read(root / "proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def read_nodes(root: Path) -> tuple[NumaNode, ...]:
    base = root / NODE_DIR
    online = _read(base / "online").strip()
    if online:
        ids = parse_list(online, "node list")
    else:  # kernels without NUMA support expose no node directory: one node 0
        ids = tuple(sorted(int(p.name[4:]) for p in base.glob("node[0-9]*"))) or (0,)
    nodes = []
    for nid in ids:
        d = base / f"node{nid}"
        cpus = parse_list(_read(d / "cpulist"), "cpu list")
        total, free = _node_meminfo(d / "meminfo")
        raw = _read(d / "distance").split()
        dist = {other: int(v) for other, v in zip(ids, raw)} if raw else {nid: 10}
        if not d.exists():  # no sysfs node info at all: describe the whole machine as node 0
            cpus = tuple(range(os.cpu_count() or 1))
            total = free = 0
        nodes.append(NumaNode(id=nid, cpus=cpus, mem_total_bytes=total, mem_free_bytes=free, distances=dist))
    return tuple(nodes)


def read_cores(root: Path, cpus: Sequence[int]) -> dict[int, int]:
    """CPU -> its core's first SMT sibling, for CPUs whose sysfs says it (others are left out)."""
    core_of = {}
    for c in cpus:
        text = _read(root / f"sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list").strip()
        if text:
            core_of[c] = min(parse_list(text, "cpu list"))
    return core_of


def gpu_numa_node(root: Path, bus_id: str, memory_nodes: Sequence[int]) -> tuple[int | None, str]:
    """A GPU's node from sysfs; -1 means the firmware did not say."""
    text = _read(root / "sys/bus/pci/devices" / bus_id / "numa_node").strip()
    try:
        node = int(text)
    except ValueError:
        node = -1
    if node >= 0:
        return node, "sysfs"
    if len(memory_nodes) == 1:
        return memory_nodes[0], "only-node"
    return None, "unknown"


def discover(root: str | os.PathLike = "/", gpus: Sequence[GpuInfo] | None = None) -> Topology:
    """Read the machine's topology below ``root``; ``gpus=None`` asks the driver."""
    root = Path(root)
    nodes = read_nodes(root)
    online = parse_list(_read(root / "sys/devices/system/cpu/online"), "cpu list")
    if not online:
        online = tuple(c for n in nodes for c in n.cpus)
    release = _read(root / "proc/sys/kernel/osrelease").strip() or platform.release()
    if gpus is None:
        recorded = root / "gpus.json"
        if root != Path("/") and recorded.is_file():
            gpus = [GpuInfo(**g) for g in json.loads(recorded.read_text())]
        elif root == Path("/"):
            gpus = visible_gpus()
        else:
            gpus = []
    mem_nodes = [n.id for n in nodes if n.has_memory] or [n.id for n in nodes]
    topo_gpus = []
    for g in gpus:
        node, source = gpu_numa_node(root, g.pci_bus_id, mem_nodes)
        topo_gpus.append(Gpu(index=g.cuda_index, pci_bus_id=g.pci_bus_id, numa_node=node,
                             numa_node_source=source, name=g.name, memory_bytes=g.memory_bytes))
    return Topology(nodes=nodes, online_cpus=online, kernel_release=release, gpus=tuple(topo_gpus),
                    cpu_model=_cpu_model(root), core_of=read_cores(root, online))
