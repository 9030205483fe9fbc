"""GPU path of the transfer family and the node x GPU matrix (runs only where CUDA is; .ci/gpu runs it)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def make_worker(numel=3 * (1 << 20) + 7, kinds=("pinned", "pageable"), gpu=0):
    from numabench.families.transfer.worker import Worker

    w = Worker({"rank": 0, "gpu": gpu, "numel": numel, "dtype": "fp32", "variants": [{"memory": k} for k in kinds]})
    return w, w.setup()


def test_copies_are_exact_and_timed():
    w, info = make_worker()
    try:
        assert info.checked and info.memory == ["pinned", "pageable"]
        assert info.placement.untouched_bytes == 0
        assert sum(info.placement.bytes_by_node.values()) >= 4 * w.numel * 4  # src + dst per kind
        assert w.host["pinned"]["src"].tensor.is_pinned() and not w.host["pageable"]["src"].tensor.is_pinned()
        for kind in ("pinned", "pageable"):
            src, dst = w.host[kind]["src"].tensor, w.host[kind]["dst"].tensor
            dst.zero_()
            w.dev_dst.zero_()
            for _ in range(2):
                t = w.step({"memory": kind})
                assert set(t) == {"h2d", "d2h", "bidir"} and all(v > 0 for v in t.values()), t
                assert t["bidir"] >= 0.5 * max(t["h2d"], t["d2h"]), t  # two copies cannot take half of one
            assert torch.equal(w.dev_dst.cpu(), src), f"{kind}: GPU copy differs from the host source"
            assert torch.equal(dst, w.dev_src.cpu()), f"{kind}: host copy differs from the GPU source"
            assert src.abs().sum() > 0  # never zeros
    finally:
        w.close()


def test_check_refuses_a_source_that_differs_from_what_was_drawn():
    """The check compares on the GPU against the source's values drawn again: one changed
    element of either kind's host source fails it, naming the kind and direction."""
    w, _ = make_worker(numel=(1 << 20) + 3)
    try:
        w.check()  # as set up: passes
        for kind in ("pinned", "pageable"):
            src = w.host[kind]["src"].tensor
            kept = src[12345].item()
            src[12345] = kept + 1.0
            with pytest.raises(RuntimeError, match=f"{kind} H2D copy to GPU 0 does not match"):
                w.check()
            src[12345] = kept
        w.check()
    finally:
        w.close()


@pytest.mark.serial  # judges timings: run alone
def test_pinned_beats_pageable_on_big_copies():
    w, _ = make_worker(numel=64 * 2**20)
    try:
        best = {k: min(w.step({"memory": k})["h2d"] for _ in range(5)) for k in ("pinned", "pageable")}
        gbps = 64 * 2**20 * 4 / best["pinned"] / 1e9
        assert gbps > 5, f"pinned H2D at {gbps:.1f} GB/s"
        assert best["pinned"] < best["pageable"] * 1.1, best
    finally:
        w.close()


def test_every_gpu_at_once_through_the_runner():
    """The family end to end: one worker per GPU under the policy, placement checked, metrics."""
    from numabench.cases import Case
    from numabench.families import family
    from numabench.machine.capabilities import probe
    from numabench.machine.topology import discover
    from numabench.numa.policy import Policy
    from numabench.workers.run import run_variants

    topo = discover("/")
    caps = probe(first_node=(topo.memory_node_ids or (0,))[0])
    mod = family("transfer")
    n = len(topo.gpus)
    node = topo.memory_node_ids[0]
    case = Case("transfer", n, n * 4 * 2**20, Policy.parse(f"bind:{node}"), "fp32", (("memory", "pinned"),))
    assert mod.skip_reason(case, topo, caps) is None
    results = run_variants(case, [(("memory", "pinned"),), (("memory", "pageable"),)], mod, topo, caps,
                           rounds=3, warmup=1)
    for res in results:
        assert all(p.verdict is None or p.verdict.ok for p in res.placement)
        for ph in ("h2d", "d2h", "bidir"):
            m = mod.metrics(res, ph)
            assert len(res.phases[ph]) == 3 and m["GBps"] > 0
            assert m["aggregate_GBps"] == pytest.approx(m["GBps"] * n, rel=1e-3)
            assert len(m["GBps_per_rank"]) == n


def test_node_by_gpu_matrix():
    from numabench.machine.capabilities import probe
    from numabench.machine.topology import discover
    from numabench.tools.gpu_bandwidth import gpu_bandwidth_matrix, render_gpu_matrix

    topo = discover("/")
    caps = probe(first_node=(topo.memory_node_ids or (0,))[0])
    m = gpu_bandwidth_matrix(topo, caps, numel=4 * 2**20, rounds=2)
    assert m is not None
    for d in ("h2d", "d2h"):
        assert set(m[d]) == {str(n) for n in topo.memory_node_ids}
        for row in m[d].values():
            assert set(row) == {str(g.index) for g in topo.gpus} and all(v > 0.5 for v in row.values()), row
    assert "H2D copy bandwidth" in render_gpu_matrix(m)
