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


def test_modes_table_breaks_down_every_mode_against_no_offload():
    from numabench.results.offload_modes import mode_rows, modes_table

    def ts(mode, median_s, **parts):
        return bench(f"test_train_step[step-np1-default-bf16-{mode}-small-node]", median_s, family="train_step",
                     phase="step", nprocess=1, numel=32, dtype="bf16", policy="default", mode=mode, model="small",
                     cpu_bind="node", n_params=4_000_000, **parts)

    data = run(ts("no-offload", 0.020, forward_ms=5.0, backward_ms=10.0, optimizer_ms=5.0, pcie_bytes_per_param=0.0),
               ts("streamed", 0.023, forward_ms=5.0, backward_ms=12.0, optimizer_ms=6.0, pcie_bytes_per_param=24.0),
               ts("deepspeed-zero2", 0.175, forward_ms=20.0, backward_ms=90.0, optimizer_ms=60.0, cpu_adam_ms=45.0,
                  gpu_idle_fraction_min=0.257, pcie_bytes_per_param=6.0),
               ts("ddp", 0.021))  # no breakdown: an older run's entry, left out
    rows = {r.mode: r for r in mode_rows(data)}
    assert set(rows) == {"no-offload", "streamed", "deepspeed-zero2"}
    assert abs(rows["streamed"].over_reference - 1.15) < 1e-9 and rows["no-offload"].over_reference == 1.0
    table = modes_table(list(rows.values()))
    assert "| deepspeed-zero2 | small | bf16 | 1 | default | node | 175.00 |" in table and "26%" in table
    assert "1.15x" in table


def test_winner_sentences_name_the_fastest_offload_its_margin_and_its_cost():
    from numabench.results.offload_modes import mode_rows, winner_sentences

    def ts(mode, median_s, cpu_bind="node", policy="default", model="small"):
        return bench(f"test_train_step[step-np1-{policy}-bf16-{mode}-{model}-{cpu_bind}]", median_s,
                     family="train_step", phase="step", nprocess=1, numel=32, dtype="bf16", policy=policy,
                     mode=mode, model=model, cpu_bind=cpu_bind, n_params=4_000_000, forward_ms=1.0,
                     tokens_per_s=1000.0)

    data = run(ts("no-offload", 0.080), ts("streamed", 0.076), ts("torchao-offload", 0.092),
               ts("deepspeed-zero2", 0.200), ts("deepspeed-zero2", 0.175, cpu_bind="rank-cores"),
               ts("streamed", 0.275, model="1b"), ts("no-offload", 0.103, model="1b"),
               ts("deepspeed-zero2", 0.150, model="1b", policy="bind:0"))  # alone in its group: no sentence
    # the 1b groups hold one offload mode each: nothing to rank, no sentence
    assert winner_sentences(mode_rows(data)) == [
        ("small bf16, 1 rank, policy default: streamed wins (76.0 ms a step, cpu_bind node), 1.21x faster than "
         "the next, torchao-offload (92.0 ms); 0.95x the no-offload step (80.0 ms).")]
    # each mode at its best binding: ZeRO-2's rank-cores 175 ms, not node's 200 ms
    data = run(ts("streamed", 0.180), ts("deepspeed-zero2", 0.200), ts("deepspeed-zero2", 0.175, cpu_bind="rank-cores"))
    assert winner_sentences(mode_rows(data)) == [
        ("small bf16, 1 rank, policy default: deepspeed-zero2 wins (175.0 ms a step, cpu_bind rank-cores), "
         "1.03x faster than the next, streamed (180.0 ms).")]
