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


def test_one_chunk_runs_the_serial_step_under_the_overlap_schedule():
    w, info = make_worker((1 << 20) - 5, "fp32", impls=("ours",))  # chunk_numel 1M: one chunk
    try:
        assert w.overlap_chunks == 1 and info.overlap_chunks == 1

        def no_pipeline(*a, **k):
            raise AssertionError("the pipeline ran with one chunk")

        w.overlapped.run = no_pipeline
        times = w.step({"impl": "ours", "schedule": "overlap"})
        assert set(times) == {"h2d", "compute", "d2h", "step"} and all(v > 0 for v in times.values())
    finally:
        w.close()


def test_overlap_probe_measures_its_schedules():
    from numabench.families.adam_offload.schedule import Schedule
    from numabench.tools.overlap_probe import measure

    res = measure(4 * (1 << 20), "fp32", [Schedule(1 << 20), Schedule(1 << 20, d2h_group=2)], rounds=2)
    assert [r["schedule"] for r in res["rows"]] == ["serial", "chunk=1M", "chunk=1M d2h_group=2"]
    assert all(r["median_ms"] > 0 for r in res["rows"]) and res["bound_ms"] > 0
    assert set(res["limits"]) >= {"limit_h2d_GBps", "limit_bidir_d2h_GBps"}


def test_aligned_d2h_groups_are_bit_identical_to_serial():
    from numabench.families.adam_offload.schedule import Schedule
    from numabench.tools.overlap_probe import check_bit_identical

    got = check_bit_identical([Schedule(1 << 20, d2h_group=2, align_d2h=True)], 5 * (1 << 20) + 12345, "fp32")
    assert got == {"chunk=1M d2h_group=2 align_d2h": "identical"}, got
