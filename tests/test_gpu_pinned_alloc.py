"""GPU path of the pinned_alloc family (runs only where CUDA is; .ci/gpu runs it)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ALLOCATORS = ("register", "torch", "cudahostalloc")


def make_worker(numel: int, policy: str = "default", cpu_node=None):
    from numabench.families.pinned_alloc.worker import Worker

    w = Worker({"rank": 0, "gpu": 0, "numel": numel, "dtype": "fp32", "policy": policy,
                "cpu_node": cpu_node, "variants": [{"allocator": a} for a in ALLOCATORS]})
    return w, w.setup()


def test_requested_vs_reserved():
    numel = 3_000_000  # 12 MB: torch's caching host allocator takes the next power of two, 16 MiB
    w, info = make_worker(numel)
    try:
        req = numel * 4
        a = info.allocators
        assert set(a) == set(ALLOCATORS)
        for kind in ALLOCATORS:
            assert a[kind].requested_bytes == req
            assert a[kind].reserved_bytes >= req, (kind, a[kind])
            assert a[kind].placement.untouched_bytes == 0, (kind, a[kind].placement)
            assert a[kind].honours_policy is None  # default policy, no bound node: nothing promised
        page = 4096
        assert a["register"].reserved_bytes == -(-req // page) * page
        assert a["torch"].reserved_bytes >= 16 * 2**20, a["torch"]
        if a["torch"].torch_host_stats_bytes is not None:
            assert a["torch"].torch_host_stats_bytes == 16 * 2**20, a["torch"]
        assert a["cudahostalloc"].reserved_bytes < 16 * 2**20, a["cudahostalloc"]  # exact size, page-ish
        assert info.placement == a["register"].placement  # the one the runner checks
    finally:
        w.close()


def test_rounds_allocate_touch_and_free():
    from numabench.families.pinned_alloc.worker import torch_host_allocated_bytes

    w, _ = make_worker(2_000_000)
    try:
        held0 = torch_host_allocated_bytes()  # other tests' live pinned tensors stay
        for _ in range(2):
            for kind in ALLOCATORS:
                t = w.step({"allocator": kind})
                assert set(t) == {"alloc", "free"} and all(v > 0 for v in t.values()), (kind, t)
        held = torch_host_allocated_bytes()
        if held is not None:
            assert held == held0, f"torch's host cache still holds {held} bytes: rounds would be cache hits"
    finally:
        w.close()


def test_through_the_runner_with_a_bound_policy():
    """bind:<first node> through numactl: register's placement is checked (the case fails on a
    miss); torch's and cudaHostAlloc's are reported as honours_policy true/false."""
    from numabench.cases import Case
    from numabench.families import family
    from numabench.machine.capabilities import probe
    from numabench.machine.topology import discover
    from numabench.numa.policy import Policy
    from numabench.workers.run import run_variants

    topo = discover("/")
    caps = probe(first_node=(topo.memory_node_ids or (0,))[0])
    mod = family("pinned_alloc")
    node = topo.memory_node_ids[0]
    case = Case("pinned_alloc", 1, 1835008, Policy.parse(f"bind:{node}"), "fp32", (("allocator", "register"),))
    results = run_variants(case, [(("allocator", a),) for a in ALLOCATORS], mod, topo, caps,
                           rounds=3, warmup=1)
    for res in results:
        assert all(p.verdict is None or p.verdict.ok for p in res.placement)
        for ph in ("alloc", "free"):
            m = mod.metrics(res, ph)
            assert m["GBps"] > 0 and m["honours_policy"] in (True, False), m
        if res.case.param("allocator") == "register":
            assert mod.metrics(res, "alloc")["honours_policy"] is True
