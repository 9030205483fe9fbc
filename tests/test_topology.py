"""numabench.machine.topology.discover against recorded trees (tests/data/machines) and the live machine."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

from numabench.machine.nodelist import parse_list
from numabench.machine.topology import Topology, discover, kernel_version_tuple

MACHINES = Path(__file__).resolve().parent / "data" / "machines"
TREES = sorted(p.name for p in MACHINES.iterdir() if p.is_dir())
GIB = 2**30


@lru_cache(maxsize=None)
def topo(name: str) -> Topology:
    return discover(MACHINES / name)


def _cpus(text: str) -> tuple[int, ...]:
    return parse_list(text)


def test_all_trees_recorded():
    assert TREES == ["cxl-3node", "dgx-2socket-8gpu", "h200x2-vm", "old-kernel-2node", "vm-1node"]


# name: (node ids, {node: cpu list}, cpuless, {node: distance row}, kernel tuple)
EXPECTED = {
    "vm-1node": ((0,), {0: "0-1"}, (), {0: {0: 10}}, (6, 18)),
    "dgx-2socket-8gpu": ((0, 1), {0: "0-55,112-167", 1: "56-111,168-223"}, (),
                         {0: {0: 10, 1: 21}, 1: {0: 21, 1: 10}}, (6, 8)),
    "cxl-3node": ((0, 1, 3), {0: "0-31,64-95", 1: "32-63,96-127", 3: ""}, (3,),
                  {0: {0: 10, 1: 21, 3: 14}, 1: {0: 21, 1: 10, 3: 24}, 3: {0: 14, 1: 24, 3: 10}}, (6, 12)),
    "old-kernel-2node": ((0, 1), {0: "0-15,32-47", 1: "16-31,48-63"}, (),
                         {0: {0: 10, 1: 32}, 1: {0: 32, 1: 10}}, (6, 1)),
    "h200x2-vm": ((0,), {0: "0-31"}, (), {0: {0: 10}}, (6, 18)),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_nodes_cpus_distances(name):
    ids, cpus, cpuless, dist, kver = EXPECTED[name]
    t = topo(name)
    assert t.node_ids == ids
    assert {n.id: n.cpus for n in t.nodes} == {n: _cpus(c) for n, c in cpus.items()}
    assert t.cpuless_node_ids == cpuless
    assert t.cpu_node_ids == tuple(n for n in ids if n not in cpuless)
    assert t.memory_node_ids == ids  # every recorded node has memory
    assert {n.id: n.distances for n in t.nodes} == dist
    assert t.kernel_version() == kver
    # every online CPU belongs to exactly one node
    owners = [c for n in t.nodes for c in n.cpus]
    assert sorted(owners) == list(t.online_cpus)
    assert t.cpu_model


@pytest.mark.parametrize("name, node, total_kb, free_kb", [
    ("dgx-2socket-8gpu", 0, 1056460644, 1011283720),
    ("dgx-2socket-8gpu", 1, 1056952924, 1019935112),
    ("cxl-3node", 3, 268435456, 268173312),
    ("old-kernel-2node", 1, 264208896, 255617092),
    ("h200x2-vm", 0, 263921468, 254812336),
])
def test_node_memory(name, node, total_kb, free_kb):
    n = topo(name).node(node)
    assert (n.mem_total_bytes, n.mem_free_bytes) == (total_kb * 1024, free_kb * 1024)
    assert n.has_memory


def test_vm_1node_memory_matches_recorded_meminfo():
    text = (MACHINES / "vm-1node/sys/devices/system/node/node0/meminfo").read_text()
    kb = {line.split()[2]: int(line.split()[3]) for line in text.splitlines()}
    n = topo("vm-1node").node(0)
    assert n.mem_total_bytes == kb["MemTotal:"] * 1024
    assert n.mem_free_bytes == kb["MemFree:"] * 1024
    assert 0 < n.mem_free_bytes <= n.mem_total_bytes


def test_dgx_has_about_a_tib_per_socket():
    for n in topo("dgx-2socket-8gpu").nodes:
        assert 980 * GIB < n.mem_total_bytes < 1100 * GIB


# name: [(cuda index, bus id, node, source)]
GPUS = {
    "vm-1node": [],
    "dgx-2socket-8gpu": [(0, "0000:18:00.0", 0, "sysfs"), (1, "0000:2a:00.0", 0, "sysfs"),
                         (2, "0000:3a:00.0", 0, "sysfs"), (3, "0000:5d:00.0", 0, "sysfs"),
                         (4, "0000:9a:00.0", 1, "sysfs"), (5, "0000:ab:00.0", 1, "sysfs"),
                         (6, "0000:ba:00.0", 1, "sysfs"), (7, "0000:db:00.0", 1, "sysfs")],
    "cxl-3node": [(0, "0000:19:00.0", 0, "sysfs"), (1, "0000:9b:00.0", 1, "sysfs")],
    "old-kernel-2node": [(0, "0000:41:00.0", None, "unknown"), (1, "0000:c1:00.0", None, "unknown")],
    "h200x2-vm": [(0, "0000:00:06.0", 0, "only-node"), (1, "0000:00:07.0", 0, "only-node")],
}


@pytest.mark.parametrize("name", sorted(GPUS))
def test_gpu_nodes_and_source(name):
    got = [(g.index, g.pci_bus_id, g.numa_node, g.numa_node_source) for g in topo(name).gpus]
    assert got == GPUS[name]


def test_gpu_names_and_memory_from_gpus_json():
    g = topo("h200x2-vm").gpu(1)
    assert g.name == "NVIDIA H200"
    assert g.memory_bytes > 140 * GIB
    assert all(g.name == "NVIDIA H100 80GB HBM3" for g in topo("dgx-2socket-8gpu").gpus)


def test_explicit_gpus_override_gpus_json():
    from numabench.machine.gpus import GpuInfo
    t = discover(MACHINES / "dgx-2socket-8gpu", gpus=[GpuInfo(0, "0000:db:00.0", "x", 1)])
    assert [(g.index, g.pci_bus_id, g.numa_node) for g in t.gpus] == [(0, "0000:db:00.0", 1)]


def test_gpu_without_numa_node_file_is_unknown_on_two_nodes():
    from numabench.machine.gpus import GpuInfo
    t = discover(MACHINES / "dgx-2socket-8gpu", gpus=[GpuInfo(0, "0000:ee:00.0")])
    assert (t.gpus[0].numa_node, t.gpus[0].numa_node_source) == (None, "unknown")


@pytest.mark.parametrize("release, expected", [
    ("6.8.0-45-generic", (6, 8)),
    ("6.1.0-26-amd64", (6, 1)),
    ("6.12.0", (6, 12)),
    ("6.18.44-fc-v180-gpu", (6, 18)),
    ("6.12.48+deb13-amd64", (6, 12)),
    ("6.9-rc1", (6, 9)),
    ("garbage", (0, 0)),
    ("", (0, 0)),
], ids=lambda v: v if isinstance(v, str) else None)
def test_kernel_version_tuple(release, expected):
    assert kernel_version_tuple(release) == expected


@pytest.mark.parametrize("name, node, nearest", [
    ("cxl-3node", 3, 0),  # CPU-less CXL node: distance 14 to node 0, 24 to node 1
    ("cxl-3node", 1, 1),  # a node with CPUs is its own
    ("dgx-2socket-8gpu", 1, 1),
    ("vm-1node", 0, 0),
])
def test_nearest_cpu_node(name, node, nearest):
    assert topo(name).nearest_cpu_node(node) == nearest


def test_node_lookup_error_names_nodes():
    with pytest.raises(KeyError) as ei:
        topo("cxl-3node").node(2)
    assert ei.value.args[0] == "NUMA node 2 does not exist; nodes are [0, 1, 3]"


@pytest.mark.parametrize("name, count", [("dgx-2socket-8gpu", 8), ("vm-1node", 0), ("h200x2-vm", 2)])
def test_gpu_lookup_error(name, count):
    with pytest.raises(KeyError) as ei:
        topo(name).gpu(99)
    assert ei.value.args[0] == f"GPU 99 does not exist; this process sees {count} GPU(s)"
    with pytest.raises(KeyError):
        topo(name).gpu(-1)


@pytest.mark.parametrize("name", TREES)
def test_to_dict_from_dict_round_trip(name):
    t = topo(name)
    d = json.loads(t.to_json())  # through JSON: tuples become lists, int keys strings
    assert Topology.from_dict(d) == t
    assert Topology.from_dict(t.to_dict()) == t
    assert [n["cpuless"] for n in d["nodes"]] == [n.id in t.cpuless_node_ids for n in t.nodes]
    assert all(isinstance(k, str) for n in d["nodes"] for k in n["distances"])


def test_live_machine():
    t = discover("/")
    assert len(t.nodes) >= 1
    in_nodes = {c for n in t.nodes for c in n.cpus}
    assert set(t.online_cpus) <= in_nodes, f"online CPUs without a node: {set(t.online_cpus) - in_nodes}"
    assert t.kernel_version() >= (3, 0)
    assert t.memory_node_ids, "no node with memory"
    for g in t.gpus:
        assert g.numa_node_source in ("sysfs", "only-node", "unknown")


def test_physical_cores_group_smt_siblings(tmp_path):
    """sysfs thread_siblings_list groups CPUs by core; a CPU sysfs says nothing of is a core."""
    import shutil

    root = tmp_path / "m"
    shutil.copytree(MACHINES / "vm-1node", root)
    for cpu, siblings in ((0, "0-1"), (1, "0-1")):
        d = root / f"sys/devices/system/cpu/cpu{cpu}/topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text(siblings + "\n")
    t = discover(root)
    assert t.core_of == {0: 0, 1: 0} and t.physical_cores([1, 0]) == [(0, 1)]
    assert Topology.from_dict(json.loads(t.to_json())).core_of == t.core_of
    assert topo("vm-1node").physical_cores([0, 1]) == [(0,), (1,)]  # recorded without the files
