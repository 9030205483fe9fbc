"""The cpu_bind axis (train_step): node, rank-cores (DeepSpeed's --bind_cores_to_rank: a
disjoint share of the node's physical cores per rank), none; shares on recorded machines,
the skip where a node has too few cores, a worker refusing a binding it did not get, and
two real gloo ranks each on its own CPU."""
from __future__ import annotations

import dataclasses
from functools import lru_cache
from pathlib import Path

import pytest

from numabench.cases import Case
from numabench.families import family
from numabench.families.base import WorkerSpec, rank_core_shares
from numabench.machine.topology import discover
from numabench.numa.policy import Policy
from numabench.workers.main import check_affinity

MACHINES = Path(__file__).resolve().parent / "data" / "machines"
FAM = family("train_step")


@lru_cache(maxsize=None)
def topo(name: str):
    return discover(MACHINES / name)


def case(nprocess: int, bind: str, dtype: str = "bf16") -> Case:
    return Case("train_step", nprocess, 32, Policy.parse("default"), dtype,
                (("mode", "ddp"), ("model", "tiny"), ("cpu_bind", bind)))


def test_ids_carry_the_binding_and_ci_keeps_node():
    from helpers import fake_caps

    from numabench.tiers import selection

    assert case(1, "node").id == "np1-32-default-bf16-ddp-tiny-node"
    assert selection("ci", FAM, topo("h200x2-vm"), fake_caps()).axis_values["cpu_bind"] == ("node",)


def test_rank_cores_split_each_nodes_physical_cores_among_its_ranks():
    # DGX-like: 8 GPUs, 4 per socket; 56 cores per socket, CPU c and c + 112 are SMT siblings
    dgx = dataclasses.replace(topo("dgx-2socket-8gpu"), core_of={c: c % 112 for c in range(224)})
    ranks = FAM.ranks(case(8, "rank-cores"), dgx)
    assert [r.cpu_node for r in ranks] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert ranks[0].cpus == tuple(range(0, 14)) and ranks[3].cpus == tuple(range(42, 56))
    assert ranks[4].cpus == tuple(range(56, 70)) and ranks[7].cpus == tuple(range(98, 112))
    every = [c for r in ranks for c in r.cpus]
    assert len(every) == len(set(every)) == 112  # disjoint, one CPU per physical core
    assert all(c in dgx.node(r.cpu_node).cpus for r in ranks for c in r.cpus)
    # node: the node's CPUs, shared; none: unbound
    assert all(r.cpus is None and r.cpu_node is not None for r in FAM.ranks(case(8, "node"), dgx))
    assert all(r.cpus is None and r.cpu_node is None for r in FAM.ranks(case(8, "none"), dgx))


def test_rank_cores_leftover_cores_stay_unused():
    # GPUs 0-2 all hang off node 0: 56 physical cores (SMT siblings c, c + 112) among 3 ranks
    dgx = dataclasses.replace(topo("dgx-2socket-8gpu"), core_of={c: c % 112 for c in range(224)})
    ranks = FAM.ranks(case(3, "rank-cores"), dgx)
    assert [len(r.cpus) for r in ranks] == [18, 18, 18] and ranks[2].cpus[-1] == 53
    # a recorded tree without SMT files: every CPU a core of its own (node 0: 112 CPUs)
    assert [len(r.cpus) for r in FAM.ranks(case(3, "rank-cores"), topo("dgx-2socket-8gpu"))] == [37, 37, 37]
    assert rank_core_shares(FAM.ranks(case(2, "node"), topo("vm-1node")), topo("vm-1node")) == {0: (0,), 1: (1,)}


def test_too_few_cores_is_a_skip_that_says_why():
    from helpers import fake_caps

    vm = topo("vm-1node")  # 2 CPUs, no GPU: every rank on node 0
    reason = FAM.skip_reason(case(3, "rank-cores", "fp32"), vm, fake_caps())
    assert reason and "rank-cores needs a physical core per rank" in reason and "0 (2 cores)" in reason
    assert FAM.skip_reason(case(2, "rank-cores", "fp32"), vm, fake_caps()) is None


def test_a_worker_refuses_a_binding_it_did_not_get():
    import os

    mine = sorted(os.sched_getaffinity(0))
    assert check_affinity(WorkerSpec(numel=1, cpus=tuple(mine))) == mine
    assert check_affinity(WorkerSpec(numel=1)) == mine
    other = tuple(c for c in range(max(mine) + 2) if c not in mine) or (max(mine) + 1,)
    with pytest.raises(RuntimeError, match=r"rank 0 runs on CPUs .*; it was bound to"):
        check_affinity(WorkerSpec(numel=1, cpus=other))


def test_two_gloo_ranks_each_on_its_own_cores():
    """Real workers (CPU, gloo DDP): each rank is started on its share and runs there."""
    import os

    pytest.importorskip("torch")
    from numabench.machine.capabilities import probe
    from numabench.workers.run import run_case

    t = discover("/")
    if t.gpus:
        pytest.skip("this machine has GPUs: ranks run NCCL there (the GPU tests)")
    node = t.cpu_node_ids[0]
    cores = t.physical_cores([c for c in t.node(node).cpus if c in os.sched_getaffinity(0)])
    if len(cores) < 2:
        pytest.skip(f"needs 2 physical cores this process may use on node {node}; it has {len(cores)}")
    c = Case("train_step", 2, 8, Policy.parse("default"), "fp32",
             (("mode", "ddp"), ("model", "tiny"), ("cpu_bind", "rank-cores")))
    ranks = FAM.ranks(c, t)
    res = run_case(c, FAM, t, probe(first_node=node), rounds=2, warmup=0, timeout_s=120)
    a, b = res.setup_info
    cpus_a, cpus_b = res.affinity
    assert cpus_a == list(ranks[0].cpus) and cpus_b == list(ranks[1].cpus)
    assert not set(cpus_a) & set(cpus_b)
    assert a.threads == len(ranks[0].cpus) and b.threads == len(ranks[1].cpus)
    assert FAM.metrics(res, "step")["cpus_per_rank"] == [cpus_a, cpus_b]


def test_ab_pair_cpus_gives_each_rank_its_own_cores_moving_on_pair_by_pair():
    from numabench.cases import Rank
    from numabench.families.base import ab_pair_cpus

    dgx = dataclasses.replace(topo("dgx-2socket-8gpu"), core_of={c: c % 112 for c in range(224)})
    ranks = [Rank(0, 0, 0, 0), Rank(1, 1, 0, 0), Rank(2, 4, 1, 1)]
    every = list(range(224))
    assert [r.cpus for r in ab_pair_cpus(ranks, dgx, every, 1, 0)] == [(0,), (1,), (56,)]
    assert [r.cpus for r in ab_pair_cpus(ranks, dgx, every, 1, 1)] == [(2,), (3,), (57,)]  # the next cores
    assert [r.cpus for r in ab_pair_cpus(ranks, dgx, every, 2, 0)] == [(0, 1), (2, 3), (56, 57)]
    # around the node's 56 cores, never an SMT sibling (c + 112) of a chosen core
    assert [r.cpus for r in ab_pair_cpus(ranks, dgx, every, 1, 28)] == [(0,), (1,), (0 + 56 + 28,)]
    # only the CPUs this process may use
    assert ab_pair_cpus(ranks[:1], dgx, [5, 6, 117], 1, 0)[0].cpus == (5,)
    with pytest.raises(ValueError, match=r"rank 0: none of its CPUs .* is allowed here \(\[200\]\)"):
        ab_pair_cpus(ranks[:1], dgx, [200], 1, 0)
    # a rank bound to no node: any allowed CPU
    assert ab_pair_cpus([Rank(0, None, None, None)], dgx, [7, 9], 1, 1)[0].cpus == (9,)
