"""Synthetic train_step runs for the offload report's and the site's tests: entries with a mode's
step broken down, and out-of-memory records as fixtures/ writes them."""
from __future__ import annotations

from numabench.results import memory_outcomes

N = 1_000_000_000  # parameters of the synthetic rows
GIB = 2**30


def bench(name: str, median_s: float, **extra) -> dict:
    data = [median_s * f for f in (0.99, 1.0, 1.01)]
    return {"name": name, "fullname": f"benchmarks/test_{extra['family']}.py::{name}", "extra_info": extra,
            "stats": {"median": median_s, "mean": median_s, "stddev": median_s / 100, "min": data[0],
                      "max": data[-1], "rounds": 3, "data": data}}


def ts(mode, median_s, *, model="1b", policy="bind:0", cpu_bind="node", n_params=N, numel=8, **extra) -> dict:
    name = f"test_train_step[step-np1-{numel}-{policy}-bf16-{mode}-{model}-{cpu_bind}]"
    return bench(name, median_s, family="train_step", phase="step", nprocess=1, numel=numel, dtype="bf16",
                 policy=policy, mode=mode, model=model, cpu_bind=cpu_bind, n_params=n_params, forward_ms=20.0,
                 backward_ms=50.0, optimizer_ms=5.0, tokens_per_step=8192, **extra)


def oom(mode, *, model="5b", predicted="needs ~99.9 GiB per GPU; the GPU has 79.6 GiB") -> dict:
    name = f"test_train_step[step-np1-4-bind:0-bf16-{mode}-{model}-node]"
    return memory_outcomes.outcome(
        name, f"benchmarks/test_train_step.py::{name}",
        {"family": "train_step", "phase": "step", "nprocess": 1, "numel": 4, "dtype": "bf16", "policy": "bind:0",
         "mode": mode, "model": model, "cpu_bind": "node"},
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 19.00 GiB.", predicted)
