"""GPU path of the adam_offload worker (runs only where CUDA is; .ci/gpu runs it)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def make_worker(numel: int, dtype: str, impls=("ours", "torch")):
    from numabench.families.adam_offload.worker import Worker

    variants = [{"impl": i, "schedule": s, "chunk_numel": str(1 << 20)} for i in impls for s in ("serial", "overlap")]
    w = Worker({"rank": 0, "gpu": 0, "numel": numel, "dtype": dtype, "variants": variants})
    info = w.setup()
    return w, info


def snapshot(w):
    return {n: b.tensor.clone() for n, b in w.host.items()}


def restore(w, snap):
    for n, t in snap.items():
        w.host[n].tensor.copy_(t)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("impl", ["ours", "torch"])
def test_overlap_is_bit_identical_to_serial(dtype, impl):
    numel = 5 * (1 << 20) + 12345  # several chunks and a ragged tail
    w, info = make_worker(numel, dtype, impls=(impl,))
    try:
        start = snapshot(w)
        results = {}
        for schedule in ("serial", "overlap"):
            restore(w, start)
            w.step_no = 0
            for _ in range(2):
                times = w.step({"impl": impl, "schedule": schedule})
                assert all(v > 0 for v in times.values()), times
            results[schedule] = snapshot(w)
        for n in ("param", "exp_avg", "exp_avg_sq"):
            assert not torch.equal(results["serial"][n], start[n]), f"{n} was not updated"
            assert torch.equal(results["serial"][n], results["overlap"][n]), f"{n} differs between schedules"
    finally:
        w.close()


def test_setup_reports_placement_limits_and_errors():
    w, info = make_worker(3 * (1 << 20), "fp32")
    try:
        assert info.placement.untouched_bytes == 0
        assert sum(info.placement.bytes_by_node.values()) >= 4 * 3 * (1 << 20) * 4
        for k, v in (("h2d", info.limit_h2d_GBps), ("d2h", info.limit_d2h_GBps), ("d2d", info.limit_d2d_GBps)):
            assert v > 1.0, (k, v)
        for impl in ("ours", "torch"):
            assert set(info.max_rel_error[impl]) == {"adam", "adamw"}
        t = w.step({"impl": "ours", "schedule": "serial"})
        assert t["step"] >= max(t["h2d"], t["compute"], t["d2h"])
    finally:
        w.close()
