"""The report's row that sets adam_offload beside DeepSpeed's optimizer step (synthetic runs:
the pairing rules; the CPU DeepSpeed run itself is in test_train_step)."""
from __future__ import annotations

import json

from numabench.results.offload_share import share_rows, share_table
from numabench.results.report import build_report


def bench(name: str, median_s: float, **extra) -> dict:
    return {"name": name, "fullname": f"benchmarks/x.py::{name}", "extra_info": extra,
            "stats": {"median": median_s, "mean": median_s, "stddev": median_s / 100, "min": median_s,
                      "max": median_s, "rounds": 5, "data": [median_s] * 5}}


def ds(mode="deepspeed-zero2", nprocess=2, policy="default", dtype="bf16", n_params=4_000_000):
    return bench(f"test_train_step[step-np{nprocess}-{policy}-{dtype}-{mode}]", 0.2, family="train_step",
                 phase="step", nprocess=nprocess, numel=32, dtype=dtype, policy=policy, mode=mode, model="small",
                 cpu_bind="node", n_params=n_params, optimizer_ms=12.0, deepspeed_timer_step_ms=11.8,
                 deepspeed_timer_optimizer_step_ms=6.5)


def adam(numel_per_rank, median_s, nprocess=2, policy="default", dtype="bf16", schedule="overlap"):
    return bench(f"test_adam_offload[step-np{nprocess}-{numel_per_rank}-{policy}-{dtype}-{schedule}]", median_s,
                 family="adam_offload", phase="step", nprocess=nprocess, numel=numel_per_rank * nprocess,
                 numel_per_rank=numel_per_rank, dtype=dtype, policy=policy, impl="ours", schedule=schedule)


def run(*benchmarks) -> dict:
    return {"machine_info": {"numabench": {"hardware_key": "k"}}, "benchmarks": list(benchmarks)}


def test_pairs_the_same_partition_ranks_policy_and_dtype():
    r = run(ds(), adam(2_050_000, 0.006), adam(2_000_000, 0.004, schedule="serial"),
            adam(2_000_000, 0.001, policy="bind:0"), adam(2_000_000, 0.001, dtype="fp32"),
            adam(2_000_000, 0.001, nprocess=1), adam(4_000_000, 0.001))
    [row] = share_rows(r)
    assert row.params_per_rank == 2_000_000 and row.engine_step_ms == 12.0
    assert row.deepspeed_step_ms == 11.8 and row.deepspeed_cpu_adam_ms == 6.5
    # of the two at this size (within 10%), ranks, policy and dtype: the faster schedule
    assert row.adam_offload_ms == 4.0 and "serial" in row.adam_offload_name
    assert abs(row.explained - 4.0 / 12.0) < 1e-9
    table = share_table([row])
    assert "| 2M | 12.000 | 11.800 | 6.500 | 4.000 (" in table and "| 33% |" in table


def test_without_a_matching_size_says_how_to_measure_it():
    [row] = share_rows(run(ds(mode="deepspeed-zero3"), adam(3_000_000, 0.004)))
    assert row.adam_offload_ms is None and row.explained is None
    assert ("none at this size: `pytest benchmarks/test_adam_offload.py --nprocess=2 --param-sizes=4000000 "
            "--numa-policies=default --dtypes=bf16`") in share_table([row])


def test_other_modes_and_runs_without_deepspeed_give_no_rows(tmp_path):
    ddp = ds(mode="ddp")
    del ddp["extra_info"]["optimizer_ms"]
    assert share_rows(run(ddp, adam(2_000_000, 0.004))) == []
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run(ds(), adam(2_000_000, 0.004))))
    rep = build_report(path, plots=False)
    assert "## adam_offload beside DeepSpeed's optimizer step" in rep.markdown and "33%" in rep.text
    path.write_text(json.dumps(run(ddp, adam(2_000_000, 0.004))))
    assert "DeepSpeed" not in build_report(path, plots=False).markdown


def test_zenflow_and_partial_zero3_are_not_set_beside_the_whole_state_step():
    """ZenFlow's engine.step() starts an overlapped CPU update every few steps, a ZeRO-3 ratio below 1
    steps part of the state on the GPU: adam_offload (all the state there and back) explains neither."""
    zenflow = ds(mode="deepspeed-zenflow")
    partial = ds(mode="deepspeed-zero3", nprocess=2)
    partial["name"] += "-r0.5"
    partial["extra_info"]["offload_ratio_used"] = 0.497
    whole = ds(mode="deepspeed-zero3")
    whole["extra_info"]["offload_ratio_used"] = 1.0
    rows = share_rows(run(zenflow, partial, whole, adam(2_000_000, 0.004)))
    assert [(r.mode, r.name) for r in rows] == [("deepspeed-zero3", whole["name"])]
