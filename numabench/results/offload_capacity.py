"""The capacity of each train_step mode on the machine a run measured: the largest model it can
train there, from its bytes per parameter on the GPU and the host
(numabench.families.train_step.memory), the memory the run's fits-in-memory checks counted
(``numabench_memory``: the GPU's size, the host's) and the activations its largest measured model
used (that row's peak GPU memory less its state), checked by the runs nearest to it: the
largest model the mode trained and the smallest that ran out of memory. A split mode
(``streamed-split``, ``deepspeed-zero3``) is given at the offload_ratio that holds the largest model
(memory.split_capacity: where its GPU and host limits meet), every split mode of the run's dtypes
whether it ran or not.
"""
from __future__ import annotations

from dataclasses import dataclass

from numabench.families.train_step import memory as memory_model
from numabench.results import memory_outcomes
from numabench.results.offload_modes import ModeRow


@dataclass(frozen=True)
class CapacityRow:
    mode: str
    dtype: str
    gpu_bytes_per_param: float
    host_bytes_per_param: float
    activations: float  # bytes, from ``measured_at``'s peak
    measured_at: str | None  # the row the activations come from
    capacity: memory_model.Capacity
    largest_fit: ModeRow | None  # the largest model the mode trained
    smallest_oom: ModeRow | None  # the smallest model that ran out of memory
    offload_ratio: float | None = None  # a split mode's: the share on the host at its capacity


def capacity_rows(rows: list[ModeRow], run: dict) -> list[CapacityRow]:
    """One row per mode (one rank) with rows in ``run``; none where the run did not record the
    machine's memory (a run from before ``numabench_memory``)."""
    mem = memory_outcomes.memory_of(run) or {}
    gpus = [g for g in mem.get("gpu_bytes") or [] if g]
    host = mem.get("host_bytes")
    if not gpus or not host:
        return []
    out = []
    one_rank = [r for r in rows if r.nprocess == 1]
    pairs = {(r.mode, r.dtype) for r in one_rank} | {(m, d) for m in memory_model.SPLIT_MODES
                                                      for d in {r.dtype for r in one_rank}}
    for mode, dtype in sorted(pairs):
        mine = [r for r in one_rank if (r.mode, r.dtype) == (mode, dtype) and r.n_params]
        fit = [r for r in mine if r.step_ms is not None]
        oom = [r for r in mine if r.step_ms is None]
        largest = max(fit, key=lambda r: r.n_params, default=None)
        act = 0.0
        if largest is not None and largest.peak_allocated:
            act = max(0.0, largest.peak_allocated - largest.gpu_bytes_per_param * largest.n_params)
        ratio = None
        try:
            if mode in memory_model.SPLIT_MODES:
                cap, ratio = memory_model.split_capacity(mode, dtype, min(gpus), host, act)
            else:
                cap = memory_model.capacity(mode, dtype, min(gpus), host, act)
        except ValueError:  # a mode that keeps nothing per parameter anywhere
            continue
        out.append(CapacityRow(mode, dtype, memory_model.gpu_bytes_per_param(mode, dtype, offload_ratio=ratio or 1.0),
                               memory_model.host_bytes_per_param(mode, dtype, offload_ratio=ratio or 1.0), act,
                               largest.name if largest is not None and act else None, cap, largest,
                               min(oom, key=lambda r: r.n_params, default=None), ratio))
    return out


def _no_activations(r: CapacityRow) -> str:
    """Why a mode's activations are counted as 0: no peak measured, or a peak under the state its
    bytes per parameter model (the model overstates that mode: the measured peak is the truth)."""
    fit = r.largest_fit
    if fit is None or not fit.peak_allocated or not fit.n_params:
        return "not measured: 0"
    state = fit.gpu_bytes_per_param * fit.n_params
    return (f"0: the peak, {fit.peak_allocated / 2**30:.1f} GiB, is under the {state / 2**30:.1f} GiB of state "
            f"its {r.gpu_bytes_per_param:g} B/param model ({fit.name})")


def _b(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e9:.2f}B"


def capacity_table(rows: list[CapacityRow], run: dict) -> str:
    """Markdown: one line per mode."""
    mem = memory_outcomes.memory_of(run) or {}
    head = (f"GPU {min(g for g in mem['gpu_bytes'] if g) / 2**30:.1f} GiB, host {mem['host_bytes'] / 2**30:.1f} GiB "
            f"({mem.get('host_source') or 'as counted'}); capacity = the smaller of (GPU x "
            f"{memory_model.USABLE_GPU_SHARE:.0%} - activations) / GPU B/param and host x "
            f"{memory_model.USABLE_HOST_SHARE:.0%} / host B/param; a split mode at the share on the host (r) "
            "where its two limits meet")
    out = [head, "", "| mode | dtype | GPU B/param | host B/param | activations GiB (measured at) | capacity "
           "| limited by | largest model trained | smallest out of memory |",
           "|---|---|---:|---:|---|---:|---|---|---|"]
    for r in rows:
        fit = f"{r.largest_fit.model} ({_b(r.largest_fit.n_params)})" if r.largest_fit else "-"
        oom = f"{r.smallest_oom.model} ({_b(r.smallest_oom.n_params)})" if r.smallest_oom else "-"
        act = f"{r.activations / 2**30:.1f} ({r.measured_at})" if r.measured_at else _no_activations(r)
        mode = r.mode if r.offload_ratio is None else f"{r.mode} (r={r.offload_ratio:.2f})"
        out.append(f"| {mode} | {r.dtype} | {r.gpu_bytes_per_param:g} | {r.host_bytes_per_param:g} | {act} | "
                   f"{_b(r.capacity.params)} | {r.capacity.limit} | {fit} | {oom} |")
    return "\n".join(out)
