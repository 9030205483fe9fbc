"""The default policy axis per recorded machine, case ids, and Family.skip_reason."""
from __future__ import annotations

import errno
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import pytest
from helpers import fake_caps

from numabench.cases import Case, default_policies, format_size
from numabench.families.base import Family
from numabench.machine.capabilities import Capabilities
from numabench.machine.topology import Topology, discover
from numabench.numa.policy import Policy

MACHINES = Path(__file__).resolve().parent / "data" / "machines"


@lru_cache(maxsize=None)
def topo(name: str) -> Topology:
    return discover(MACHINES / name)


TWO_NODE_AXIS = ["default", "local", "bind:0", "bind:1", "preferred:1", "preferred-many:0,1", "interleave:all",
                 "interleave:0,1", "weighted:0=1,1=1", "weighted:0=1,1=3", "weighted:0=2,1=1",
                 "weighted:0=3,1=1", "weighted:0=4,1=1"]
AXES = {
    # one node: the second-node templates stay, to show up as skipped
    "vm-1node": TWO_NODE_AXIS,
    "h200x2-vm": TWO_NODE_AXIS,
    "dgx-2socket-8gpu": TWO_NODE_AXIS,
    "old-kernel-2node": TWO_NODE_AXIS,
    # the far node is the CPU-less CXL node 3
    "cxl-3node": ["default", "local", "bind:0", "bind:1", "bind:3", "preferred:3", "preferred-many:0,3",
                  "interleave:all", "interleave:0,3", "weighted:0=1,3=1", "weighted:0=1,3=3", "weighted:0=2,3=1",
                  "weighted:0=3,3=1", "weighted:0=4,3=1"],
}


@pytest.mark.parametrize("tree", sorted(AXES))
def test_default_policies(tree):
    ids = [p.id for p in default_policies(topo(tree))]
    assert ids == AXES[tree]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("tree", ["vm-1node", "h200x2-vm"])
def test_one_node_templates_present_but_unrunnable(tree):
    t = topo(tree)
    pols = {p.id: p for p in default_policies(t)}
    multi = [i for i, p in pols.items() if 1 in p.nodes]
    assert multi == ["bind:1", "preferred:1", "preferred-many:0,1", "interleave:0,1", "weighted:0=1,1=1",
                     "weighted:0=1,1=3", "weighted:0=2,1=1", "weighted:0=3,1=1",
                     "weighted:0=4,1=1"]
    for i in multi:
        err = pols[i].requirement_error(t)
        assert err and "node(s) 1 " in err, (i, err)
    for i in ("default", "local", "bind:0", "interleave:all"):
        assert pols[i].requirement_error(t) is None


def test_cxl_far_node_is_cpuless_node_3():
    t = topo("cxl-3node")
    ids = [p.id for p in default_policies(t)]
    assert "bind:3" in ids and "weighted:0=1,3=3" in ids
    assert not any(p.requirement_error(t) for p in default_policies(t))


def test_several_cxl_nodes_add_an_interleave_over_them():
    t = topo("cxl-3node")
    extra = replace(t.node(3), id=4, distances={0: 14, 1: 24, 3: 16, 4: 10})
    t2 = replace(t, nodes=(*t.nodes, extra))
    ids = [p.id for p in default_policies(t2)]
    assert "interleave:0,3,4" in ids
    assert "bind:4" in ids


@pytest.mark.parametrize("nprocess, numel, policy, dtype, extra, expected", [
    pytest.param(2, 12845056, "interleave:0,1", "bf16", (), "np2-12.8M-interleave:0,1-bf16", id="issue-example"),
    pytest.param(1, 1835008, "default", "fp32", (), "np1-1.84M-default-fp32", id="small"),
    pytest.param(8, 544997376, "weighted:0=1,3=3", "fp16", (), "np8-545M-weighted:0=1,3=3-fp16", id="weighted"),
    pytest.param(4, 2_000_000_000, "bind:0", "fp32", (("impl", "cuda"), ("sched", "async")),
                 "np4-2G-bind:0-fp32-cuda-async", id="extra-axes"),
    pytest.param(1, 999, "local", "fp32", (), "np1-999-local-fp32", id="tiny"),
])
def test_case_id(nprocess, numel, policy, dtype, extra, expected):
    case = Case("touch", nprocess, numel, Policy.parse(policy), dtype, extra)
    assert case.id == expected


@pytest.mark.parametrize("tree", sorted(AXES))
def test_axis_ids_read_well(tree):
    ids = [Case("touch", 2, 12845056, p, "bf16").id for p in default_policies(topo(tree))]
    assert all(i.startswith("np2-12.8M-") and i.endswith("-bf16") for i in ids)
    assert all(" " not in i for i in ids)
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("numel, text", [(1835008, "1.84M"), (12845056, "12.8M"), (544997376, "545M"),
                                         (1000, "1K"), (1, "1"), (3_500_000_000, "3.5G")])
def test_format_size(numel, text):
    assert format_size(numel) == text


def test_case_numel_per_rank_and_params():
    case = Case("touch", 3, 10, Policy.parse("default"), "bf16", (("impl", "cuda"),))
    assert case.numel_per_rank == 4
    assert case.itemsize == 2
    assert case.param("impl") == "cuda" and case.param("sched", "sync") == "sync"


# -- Family.skip_reason ---------------------------------------------------------

def caps(**kw) -> Capabilities:
    return fake_caps(**kw)


OLD_KERNEL_CAPS = dict(kernel_release="6.1.0-26-amd64", weighted_interleave_kernel=False,
                       weighted_interleave_errno=errno.EINVAL, weights_dir=False, weights_writable=False,
                       weights_auto_mode=False)

GPU_FAMILY = Family("h2d", "host to device copy", ("copy",), needs_gpu=True,
                    device_bytes_per_element=lambda case: case.itemsize)
CPU_FAMILY = Family("touch", "first touch", ("touch",), rank_kind="cpu-node")
PAIR_FAMILY = Family("p2p", "GPU pairs", ("copy",), needs_gpu=True, min_gpus_per_case=lambda case: 2 * case.nprocess)


def case(policy="default", nprocess=1, numel=1_000_000, dtype="fp32"):
    return Case("x", nprocess, numel, Policy.parse(policy), dtype)


@pytest.mark.parametrize("family, tree, c, capabilities, expected", [
    pytest.param(GPU_FAMILY, "vm-1node", case(), caps(), "h2d needs a CUDA GPU; none is visible",
                 id="gpu-family-no-gpu"),
    pytest.param(GPU_FAMILY, "old-kernel-2node", case(nprocess=4), caps(),
                 "nprocess=4 needs 4 GPUs; this machine has 2", id="np4-on-2-gpus"),
    pytest.param(GPU_FAMILY, "h200x2-vm", case(nprocess=4), caps(),
                 "nprocess=4 needs 4 GPUs; this machine has 2", id="np4-on-h200x2"),
    pytest.param(CPU_FAMILY, "dgx-2socket-8gpu", case(nprocess=3), caps(),
                 "nprocess=3 needs 3 NUMA nodes with CPUs (one rank per node); this machine has 2",
                 id="cpu-ranks-beyond-nodes"),
    pytest.param(CPU_FAMILY, "cxl-3node", case(nprocess=3), caps(),
                 "nprocess=3 needs 3 NUMA nodes with CPUs (one rank per node); this machine has 2",
                 id="cxl-node-has-no-cpus"),
    pytest.param(PAIR_FAMILY, "h200x2-vm", case(nprocess=2), caps(), "p2p needs 4 GPUs; this machine has 2",
                 id="min-gpus-per-case"),
    pytest.param(CPU_FAMILY, "vm-1node", case("bind:1"), caps(), "policy bind:1 needs NUMA node(s) 1 with memory",
                 id="missing-node"),
    pytest.param(GPU_FAMILY, "old-kernel-2node", case("local", nprocess=2), caps(**OLD_KERNEL_CAPS),
                 "policy local needs each GPU's NUMA node; unknown for GPU(s) [0, 1]", id="local-unknown-gpu-node"),
    pytest.param(GPU_FAMILY, "old-kernel-2node", case("weighted:0=1,1=3", nprocess=2), caps(**OLD_KERNEL_CAPS),
                 "weighted interleave needs Linux >= 6.9; kernel 6.1.0-26-amd64 rejected MPOL_WEIGHTED_INTERLEAVE "
                 "(EINVAL)", id="weighted-old-kernel"),
    pytest.param(CPU_FAMILY, "cxl-3node", case("weighted:0=1,3=3"), caps(weights_writable=False),
                 "setting weighted interleave weights needs root", id="weighted-not-root"),
    pytest.param(CPU_FAMILY, "cxl-3node", case("weighted:0=1,3=3"), caps(weights_dir=False),
                 "weighted interleave weights directory /sys/kernel/mm/mempolicy/weighted_interleave is missing",
                 id="weighted-no-weights-dir"),
    pytest.param(CPU_FAMILY, "dgx-2socket-8gpu", case("preferred-many:0,1"),
                 caps(kernel_release="5.10.0-30-amd64", preferred_many_kernel=False),
                 "preferred-many needs Linux >= 5.15; kernel 5.10.0-30-amd64", id="preferred-many-old-kernel"),
    pytest.param(CPU_FAMILY, "vm-1node", case(numel=4_000_000_000), caps(),
                 "size 4G needs 14.9 GiB of host memory; MemTotal reads", id="too-big-for-host"),
    pytest.param(GPU_FAMILY, "dgx-2socket-8gpu", case(numel=40_000_000_000, nprocess=2), caps(),
                 "size 40G needs 74.5 GiB per GPU; the GPU has 79.6 GiB", id="too-big-for-gpu"),
])
def test_skip_reason(family, tree, c, capabilities, expected):
    reason = family.skip_reason(c, topo(tree), capabilities)
    assert reason is not None and expected in reason, reason
    assert "\n" not in reason


def test_skip_reason_weighted_names_kernel_version():
    reason = GPU_FAMILY.skip_reason(case("weighted:0=1,1=3"), topo("old-kernel-2node"), caps(**OLD_KERNEL_CAPS))
    assert "6.1.0-26-amd64" in reason and "6.9" in reason


@pytest.mark.parametrize("family, tree, c", [
    pytest.param(GPU_FAMILY, "dgx-2socket-8gpu", case("interleave:0,1", nprocess=8), id="dgx-np8-interleave"),
    pytest.param(GPU_FAMILY, "h200x2-vm", case("local", nprocess=2), id="h200-local-only-node"),
    pytest.param(GPU_FAMILY, "cxl-3node", case("weighted:0=1,3=3", nprocess=2), id="cxl-weighted"),
    pytest.param(CPU_FAMILY, "vm-1node", case("bind:0", numel=1_000_000_000), id="vm-1G-fits"),
    pytest.param(CPU_FAMILY, "cxl-3node", case("preferred-many:0,3", nprocess=2), id="cxl-pm"),
])
def test_skip_reason_none_when_runnable(family, tree, c):
    assert family.skip_reason(c, topo(tree), caps()) is None


@pytest.mark.parametrize("tree", ["vm-1node", "h200x2-vm"])
def test_one_node_axis_skips_with_reason(tree):
    t = topo(tree)
    reasons = {p.id: CPU_FAMILY.skip_reason(case(p.id), t, caps())
               for p in default_policies(t)}
    skipped = {i for i, r in reasons.items() if r}
    assert skipped == {"bind:1", "preferred:1", "preferred-many:0,1", "interleave:0,1", "weighted:0=1,1=1",
                       "weighted:0=1,1=3", "weighted:0=2,1=1",
                       "weighted:0=3,1=1", "weighted:0=4,1=1"}


def test_ranks_gpu_family():
    ranks = GPU_FAMILY.ranks(case(nprocess=2), topo("cxl-3node"))
    assert [(r.gpu, r.own_node, r.cpu_node) for r in ranks] == [(0, 0, 0), (1, 1, 1)]
    ranks = GPU_FAMILY.ranks(case(nprocess=2), topo("old-kernel-2node"))
    assert [(r.gpu, r.own_node, r.cpu_node) for r in ranks] == [(0, None, None), (1, None, None)]


def test_ranks_cpu_family():
    ranks = CPU_FAMILY.ranks(case(nprocess=2), topo("cxl-3node"))
    assert [(r.gpu, r.own_node, r.cpu_node) for r in ranks] == [(None, 0, 0), (None, 1, 1)]


def test_host_memory_override_lets_a_big_case_run():
    """VMs whose MemTotal grows with use: --numa-host-memory replaces MemTotal in the check."""
    from numabench.families import family

    t = topo("vm-1node")
    fam = family("touch")
    case = Case("touch", 1, 4_000_000_000, Policy.parse("default"), "fp32")
    assert "MemTotal reads" in fam.skip_reason(case, t, caps())
    assert fam.skip_reason(case, t, caps(), host_memory_bytes=64 * 2**30) is None
