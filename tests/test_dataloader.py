"""dataloader family: the synthetic dataset, the re-bind in worker_init_fn (checked from
inside the loader workers), its ranks, and a CPU case end to end through the runner."""
from __future__ import annotations

import functools
import os
from functools import lru_cache
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from numabench.cases import Case  # noqa: E402
from numabench.families import family  # noqa: E402
from numabench.families.dataloader.datasets import (
    InfiniteSampler,
    SyntheticImages,  # noqa: E402
)
from numabench.families.dataloader.worker import (
    bind_loader_worker,
    check_loader_reports,  # noqa: E402
)
from numabench.machine.capabilities import probe  # noqa: E402
from numabench.machine.topology import discover  # noqa: E402
from numabench.numa import mempolicy  # noqa: E402
from numabench.numa.policy import Policy  # noqa: E402
from numabench.workers.run import run_case  # noqa: E402

MACHINES = Path(__file__).resolve().parent / "data" / "machines"


@lru_cache(maxsize=None)
def topo(name: str):
    return discover(MACHINES / name)

TOPO = discover("/")
CAPS = probe(first_node=(TOPO.memory_node_ids or (0,))[0])
NODE = (TOPO.cpu_node_ids or (0,))[0]
FAM = family("dataloader")


def test_dataset_is_deterministic_and_augmented():
    d = SyntheticImages(16, side=32, seed=3)
    x0, y0 = d[5]
    x1, y1 = d[5]
    assert x0.shape == (3, 32, 32) and x0.dtype == torch.float32 and int(y0) == 5
    assert torch.equal(x0, x1)
    assert not torch.equal(d[4][0], x0)
    raw = d.raw(5)
    assert raw.dtype == torch.uint8 and raw.shape == (3, 32, 32)
    assert float(x0.abs().sum()) > 0 and x0.mean().abs() < 3  # normalised, not raw bytes


def _reports(tmp_path, cpus, policy):
    from torch.utils.data import DataLoader

    init = functools.partial(bind_loader_worker, cpus=cpus, policy=policy, report_dir=str(tmp_path))
    loader = DataLoader(SyntheticImages(64, side=16), batch_size=4, sampler=InfiniteSampler(64), num_workers=2,
                        worker_init_fn=init)
    it = iter(loader)
    for _ in range(4):
        next(it)
    del it
    import json

    return sorted((json.loads(p.read_text()) for p in tmp_path.glob("worker-*.json")), key=lambda r: r["worker_id"])


def test_worker_init_fn_rebinds_cpus_and_memory_policy(tmp_path):
    """The parent runs on all its CPUs with the default policy; each loader worker, from
    inside worker_init_fn, sees exactly the node CPU set and policy it was re-bound to."""
    cpus = [sorted(TOPO.node(NODE).cpus)[0]]  # one CPU: visibly different from the parent's set
    reports = _reports(tmp_path, cpus, Policy.parse(f"bind:{NODE}"))
    assert [r["worker_id"] for r in reports] == [0, 1]
    assert len({r["pid"] for r in reports}) == 2 and os.getpid() not in {r["pid"] for r in reports}
    for r in reports:
        assert r["affinity"] == cpus
        assert r["mempolicy_mode"] == mempolicy.MPOL_BIND and r["mempolicy_nodes"] == [NODE]
    assert check_loader_reports(reports, cpus, Policy.parse(f"bind:{NODE}")) == []
    assert mempolicy.get_mempolicy()[0] == mempolicy.MPOL_DEFAULT  # the parent is untouched


def test_without_rebind_workers_inherit_and_the_check_says_so(tmp_path):
    reports = _reports(tmp_path, None, None)
    for r in reports:
        assert r["affinity"] == sorted(os.sched_getaffinity(0))
        assert r["mempolicy_mode"] == mempolicy.MPOL_DEFAULT
    problems = check_loader_reports(reports, [10_000], Policy.parse(f"bind:{NODE}"))
    assert len(problems) == 4 and "expected [10000]" in problems[0] and "expected bind" in problems[1]


def test_ranks_cpu_only_and_gpu_machines():
    case = Case("dataloader", 1, 32, Policy.parse("default"), "fp32", (("binding", "bound"),))
    unbound = Case("dataloader", 1, 32, Policy.parse("default"), "fp32", (("binding", "unbound"),))
    vm = topo("vm-1node")
    assert [(r.gpu, r.cpu_node) for r in FAM.ranks(case, vm)] == [(None, vm.cpu_node_ids[0])]
    assert [(r.gpu, r.own_node, r.cpu_node) for r in FAM.ranks(unbound, vm)] == [(None, vm.cpu_node_ids[0], None)]
    dgx = topo("dgx-2socket-8gpu")
    two = Case("dataloader", 2, 32, Policy.parse("local"), "fp32", (("binding", "bound"),))
    ranks = FAM.ranks(two, dgx)
    assert [r.gpu for r in ranks] == [0, 1] and all(r.cpu_node is not None for r in ranks)
    nine = Case("dataloader", 9, 32, Policy.parse("default"), "fp32", (("binding", "bound"),))
    assert "needs 9 GPUs" in FAM.skip_reason(nine, dgx, CAPS)


def test_cpu_only_skips_gpu_sized_batch():
    big = Case("dataloader", 1, 256, Policy.parse("default"), "fp32", (("binding", "bound"),))
    reason = FAM.skip_reason(big, topo("vm-1node"), CAPS)
    assert "GPU-machine size" in reason and "needs a CUDA GPU" in reason
    assert FAM.skip_reason(Case("dataloader", 1, 32, Policy.parse("default"), "fp32",
                                (("binding", "bound"),)), topo("vm-1node"), CAPS) is None


@pytest.mark.parametrize("binding", ["bound", "unbound"])
def test_cpu_case_through_the_runner(binding):
    if TOPO.gpus:
        pytest.skip("this machine has GPUs: the GPU test covers the runner path")
    case = Case("dataloader", 1, 16, Policy.parse(f"bind:{NODE}"), "fp32", (("binding", binding), ("image_px", "64")))
    res = run_case(case, FAM, TOPO, CAPS, rounds=3, warmup=1, timeout_s=120)
    info = res.setup_info[0]
    assert info.binding == binding and info.num_workers == 2 and info.pin_memory is False
    assert all(p.verdict.ok for p in res.placement)
    for r in info.loader_workers:
        assert r.mempolicy_mode == mempolicy.MPOL_BIND and r.mempolicy_nodes == [NODE]
        if binding == "bound":
            assert r.affinity == sorted(TOPO.node(NODE).cpus)
    m = family("dataloader").metrics(res, "batch")
    assert len(res.phases["batch"]) == 3 and min(res.phases["batch"]) > 0
    assert m["samples_per_s"] > 0 and m["image_side"] == 64


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("binding", ["bound", "unbound"])
def test_gpu_case_pins_and_copies(binding):
    case = Case("dataloader", 1, 64, Policy.parse("local"), "fp32", (("binding", binding),))
    res = run_case(case, FAM, TOPO, CAPS, rounds=3, warmup=1, timeout_s=300)
    info = res.setup_info[0]
    assert info.pin_memory is True and info.device.startswith("cuda")
    assert all(p.verdict is None or p.verdict.ok for p in res.placement)
    assert min(res.phases["batch"]) > 0 and min(res.phases["h2d"]) > 0
    m = family("dataloader").metrics(res, "batch")
    assert m["samples_per_s"] > 0 and m["copy_GBps"] > 0
    if binding == "bound":
        own = TOPO.gpu(0).numa_node
        cpus = sorted(TOPO.node(TOPO.nearest_cpu_node(own)).cpus) if own is not None else None
        for r in info.loader_workers:
            assert cpus is None or r.affinity == cpus
