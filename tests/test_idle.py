"""The GPU-idle measurement's interval arithmetic (the profiling itself runs on a GPU)."""
from __future__ import annotations

import pytest

from numabench.families.train_step.idle import gpu_spans, idle_fractions, union_ns


def test_union_merges_overlaps_and_gaps():
    assert union_ns([]) == 0
    assert union_ns([(0, 10), (5, 15), (20, 30)]) == 25
    assert union_ns([(20, 30), (0, 10), (10, 12)]) == 22
    with pytest.raises(ValueError, match="end before start"):
        union_ns([(5, 1)])


def test_idle_fractions_count_copies_as_busy_for_the_gpu_not_the_sms():
    kernels = [(0, 40), (60, 100)]
    copies = [(30, 70)]
    f = idle_fractions(kernels, copies)
    assert f["gpu_idle_fraction"] == 0.0 and f["sm_idle_fraction"] == 0.2
    f = idle_fractions([(0, 10), (90, 100)], [])
    assert f["gpu_idle_fraction"] == 0.8
    with pytest.raises(ValueError, match="no GPU activity"):
        idle_fractions([], [])


def test_gpu_spans_read_kernels_and_copies_from_the_exported_trace():
    """Only GPU-side work counts: annotations and host-side runtime calls are not activity."""
    trace = {"traceEvents": [
        {"cat": "kernel", "name": "adam", "ts": 10.0, "dur": 5.5},
        {"cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "ts": 20, "dur": 2},
        {"cat": "gpu_memset", "name": "Memset (Device)", "ts": 30, "dur": 1},
        {"cat": "gpu_user_annotation", "name": "step", "ts": 0, "dur": 100},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 9, "dur": 1},
        {"ph": "M", "name": "process_name"},
    ]}
    kernels, copies = gpu_spans(trace)
    assert kernels == [(10000, 15500)]
    assert copies == [(20000, 22000), (30000, 31000)]
    assert gpu_spans({}) == ([], [])
