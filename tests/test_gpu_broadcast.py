"""GPU path of the broadcast family (runs only where >= 2 CUDA GPUs are; .ci/gpu runs it)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() < 2,
                                 reason="needs >= 2 GPUs")]

METHODS = ("pageable", "pinned", "pipelined", "relay")


def make_worker(numel: int, chunk_nbytes: str | None = None):
    from numabench.families.broadcast.worker import Worker

    knob = {"chunk_nbytes": chunk_nbytes} if chunk_nbytes else {}
    w = Worker({"rank": 0, "gpu": None, "numel": numel, "dtype": "fp32",
                "variants": [{"method": m, **knob} for m in METHODS]})
    return w, w.setup()


def test_every_method_lands_the_source_on_every_gpu():
    from numabench.families.broadcast.worker import block_checksums

    numel = 5 * (1 << 20) + 12345
    w, info = make_worker(numel, chunk_nbytes=str(1 << 20))  # many chunks and a ragged tail
    try:
        assert info.ngpus == torch.cuda.device_count() and info.chunk_bytes == 1 << 20
        assert info.placement.untouched_bytes == 0
        want = block_checksums(w.src.tensor)
        assert w.src.tensor.abs().sum() > 0
        for m in METHODS:
            for t in w.dst:
                t.fill_(float("nan"))
            times = [w.step({"method": m})["broadcast"] for _ in range(2)]
            assert all(t > 0 for t in times), (m, times)
            for i, t in enumerate(w.dst):
                assert torch.equal(block_checksums(t).cpu(), want), f"{m}: GPU {i} differs after timed rounds"
        assert torch.equal(w.dst[1].cpu(), w.src.tensor)
    finally:
        w.close()


@pytest.mark.serial  # judges timings: run alone
def test_pinned_beats_pageable_at_256_mib():
    """The seed's ordering (1.36 s -> 0.37 s -> 0.075 s); only pinned < pageable is asserted,
    all four times are printed (pytest -s)."""
    w, _ = make_worker(64 * 2**20)
    try:
        best = {m: min(w.step({"method": m})["broadcast"] for _ in range(3)) for m in METHODS}
        print({m: round(v * 1e3, 2) for m, v in best.items()})
        assert best["pinned"] < best["pageable"], best
    finally:
        w.close()


def test_through_the_runner():
    from numabench.cases import Case
    from numabench.families import family
    from numabench.machine.capabilities import probe
    from numabench.machine.topology import discover
    from numabench.numa.policy import Policy
    from numabench.workers.run import run_variants

    topo = discover("/")
    caps = probe(first_node=(topo.memory_node_ids or (0,))[0])
    mod = family("broadcast")
    case = Case("broadcast", 1, 4 * 2**20, Policy.parse("default"), "fp32", (("method", "pageable"),))
    assert mod.skip_reason(case, topo, caps) is None
    results = run_variants(case, [(("method", m),) for m in METHODS], mod, topo, caps, rounds=3, warmup=1)
    for res in results:
        assert all(p.verdict is None or p.verdict.ok for p in res.placement)
        m = mod.metrics(res, "broadcast")
        assert m["GBps"] > 0 and m["delivered_GBps"] == pytest.approx(m["GBps"] * m["ngpus"], rel=1e-3)
