"""How much of a training step the GPU sits idle: measured, not modelled.

A few steps run under torch's profiler (CUPTI activity: every kernel and every copy with its
GPU start and end); the union of those intervals over the window from the first GPU activity
to the last is the busy time. ``gpu_idle_fraction``: neither a kernel nor a copy runs;
``sm_idle_fraction``: no kernel runs (copies alone leave the SMs idle). The profiler adds
some host overhead per launch, so the fractions are read beside the timed steps, not instead
of them. Imports torch lazily.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any


def union_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """Total length covered by ``intervals`` ((start, end) pairs, any order, overlapping allowed)."""
    total, cur_lo, cur_hi = 0, None, None
    for lo, hi in sorted(intervals):
        if hi < lo:
            raise ValueError(f"interval ({lo}, {hi}): end before start")
        if cur_hi is None or lo > cur_hi:
            if cur_hi is not None:
                total += cur_hi - cur_lo
            cur_lo, cur_hi = lo, hi
        else:
            cur_hi = max(cur_hi, hi)
    if cur_hi is not None:
        total += cur_hi - cur_lo
    return total


def idle_fractions(kernels: Sequence[tuple[int, int]], copies: Sequence[tuple[int, int]]) -> dict[str, float]:
    """Idle shares of the window from the first GPU activity to the last."""
    every = [*kernels, *copies]
    if not every:
        raise ValueError("no GPU activity recorded: nothing to measure the idle time against")
    window = max(hi for _, hi in every) - min(lo for lo, _ in every)
    if window <= 0:
        return {"gpu_idle_fraction": 0.0, "sm_idle_fraction": 0.0, "window_s": 0.0}
    return {"gpu_idle_fraction": round(1 - union_ns(every) / window, 4),
            "sm_idle_fraction": round(1 - union_ns(kernels) / window, 4),
            "window_s": window * 1e-9}


# The chrome trace's categories of GPU-side work (kineto's names): kernels, and the copies and
# memsets that keep the copy engines busy; not "gpu_user_annotation" (ranges, not work) nor the
# host-side "cuda_runtime" calls.
KERNEL_CATEGORIES = ("kernel",)
COPY_CATEGORIES = ("gpu_memcpy", "gpu_memset")


def gpu_spans(trace: dict[str, Any]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Kernel and copy intervals (ns) from a chrome trace as torch's profiler exports it
    (``traceEvents`` with ``cat``, ``ts`` and ``dur`` in microseconds)."""
    kernels, copies = [], []
    for ev in trace.get("traceEvents", []):
        cat = ev.get("cat")
        if cat not in KERNEL_CATEGORIES and cat not in COPY_CATEGORIES:
            continue
        start = round(float(ev["ts"]) * 1000)
        span = (start, start + round(float(ev.get("dur", 0)) * 1000))
        (kernels if cat in KERNEL_CATEGORIES else copies).append(span)
    return kernels, copies


def profile_idle(step: Callable[[], Any], device: Any, steps: int = 2) -> dict[str, Any]:
    """Run ``step`` ``steps`` times under the profiler on ``device`` (CUDA) and measure the idle shares.

    The GPU activity is read from the exported chrome trace: its format is public and stable
    across torch releases, unlike the profiler's internal event objects."""
    import json
    import tempfile
    from pathlib import Path

    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize(device)
    with tempfile.TemporaryDirectory(prefix="numabench-trace-") as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    kernels, copies = gpu_spans(trace)
    out = idle_fractions(kernels, copies)
    out["profiled_steps"] = steps
    out["source"] = "torch.profiler (CUPTI): union of kernel and copy intervals over the profiled steps"
    return out
