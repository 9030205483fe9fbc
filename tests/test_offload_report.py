"""The report's train_step offload table over synthetic runs: each row judged against the no-offload
mode of its own recipe, the memory columns, the PCIe and host bounds from the run's own transfer
and host_membw rates, out-of-memory cases (kept beside the entries, merged, shown), each mode's
capacity and the winner sentence."""
from __future__ import annotations

import json

import pytest

from numabench.results import memory_outcomes
from numabench.results.merge import merge_runs
from numabench.results.offload_capacity import capacity_rows, capacity_table
from numabench.results.offload_limits import Rate, Rates, host_bound_s, measured_rates, pcie_bound_s
from numabench.results.offload_modes import mode_rows, modes_table, winner_sentences
from numabench.results.report import build_report
from numabench.results.tables import entries
from offload_runs import GIB, N, bench, oom, ts



def rate(family, phase, gbps, *, numel=268435456, policy="default", **axes) -> dict:
    name = f"test_{family}[{phase}-np1-{numel}-{policy}-fp32-{'-'.join(axes.values())}]"
    return bench(name, 0.01, family=family, phase=phase, nprocess=1, numel=numel, dtype="fp32", policy=policy,
                 GBps=gbps, **axes)


def rates() -> list[dict]:
    return [rate("transfer", "h2d", 50.0, memory="pinned"), rate("transfer", "d2h", 40.0, memory="pinned"),
            rate("transfer", "bidir", 80.0, memory="pinned"), rate("transfer", "bidir", 5.0, memory="pageable"),
            rate("host_membw", "time", 100.0, kernel="adam_pattern"),
            rate("host_membw", "time", 999.0, numel=16777216, kernel="adam_pattern"),  # smaller: in cache
            rate("host_membw", "time", 50.0, kernel="copy")]


def run(*benchmarks, memory: dict | None = None) -> dict:
    out = {"machine_info": {"numabench": {"hardware_key": "H100x1_k"}}, "benchmarks": list(benchmarks),
           "datetime": "2026-11-25T00:00:00"}
    if memory is not None:
        out[memory_outcomes.KEY] = memory
    return out


def test_each_row_is_judged_against_the_no_offload_mode_of_its_recipe():
    data = run(ts("no-offload", 0.110), ts("no-offload-master", 0.100), ts("streamed", 0.280),
               ts("torchao-offload", 0.330), ts("deepspeed-zero2", 0.600),
               ts("no-offload-master", 0.090, cpu_bind="rank-cores"))
    rows = {(r.mode, r.cpu_bind): r for r in mode_rows(data)}
    assert rows[("streamed", "node")].reference == "no-offload-master"
    assert rows[("streamed", "node")].over_reference == pytest.approx(2.8)
    assert rows[("deepspeed-zero2", "node")].over_reference == pytest.approx(6.0)
    assert rows[("torchao-offload", "node")].over_reference == pytest.approx(3.0)  # fp32 + autocast: no-offload's
    assert rows[("no-offload-master", "rank-cores")].over_reference == 1.0
    table = modes_table(list(rows.values()))
    assert "| streamed | bf16 + fp32 master (host) | 1b | bf16 | 1 | bind:0 | node | 280.00 |" in table
    assert "| 2.80x no-offload-master |" in table and "| 3.00x no-offload |" in table
    assert "| no-offload | fp32 + autocast (device) |" in table


def test_a_reference_measured_at_another_cpu_binding_is_taken_from_node():
    data = run(ts("no-offload-master", 0.100), ts("no-offload-master", 0.050, cpu_bind="none"),
               ts("streamed", 0.200, cpu_bind="rank-cores"))
    [streamed] = [r for r in mode_rows(data) if r.mode == "streamed"]
    assert streamed.reference_ms == 100.0 and streamed.over_reference == pytest.approx(2.0)


def test_on_a_one_node_machine_a_reference_under_another_policy_stands_in():
    """Every policy places on node 0 there; on two nodes the policies differ and none stands in."""
    data = run(ts("no-offload-master", 0.100, policy="bind:0"), ts("streamed", 0.280, policy="default"),
               ts("torchao-offload", 0.330, policy="default"))
    for nodes, want in ((1, 2.8), (2, None)):
        data["machine_info"]["numabench"]["numa_nodes"] = nodes
        rows = {r.mode: r for r in mode_rows(data)}
        assert rows["streamed"].over_reference == (pytest.approx(want) if want else None), nodes
    data["machine_info"]["numabench"]["numa_nodes"] = 1
    rows = mode_rows(data)
    assert "| 2.80x no-offload-master (bind:0) |" in modes_table(rows)
    assert winner_sentences(rows)[0].endswith(
        "; 2.80x the step of no-offload-master (100.0 ms, policy bind:0), the no-offload reference of its recipe.")


def test_a_missing_reference_is_said_not_replaced_by_the_other_recipe():
    data = run(ts("no-offload", 0.110), ts("streamed", 0.280), ts("torchao-offload", 0.330))
    rows = {r.mode: r for r in mode_rows(data)}
    assert rows["streamed"].over_reference is None
    assert "| - (no-offload-master) |" in modes_table(list(rows.values()))
    [sentence] = winner_sentences(list(rows.values()))
    assert sentence == ("1b bf16, 1 rank, policy bind:0: streamed wins (280.0 ms a step, cpu_bind node; bf16 + fp32 "
                        "master), 1.18x faster than the next, torchao-offload (330.0 ms); no no-offload-master step "
                        "(the no-offload reference of its recipe) to judge it by.")


def test_the_winner_sentence_uses_the_matching_reference_and_each_mode_at_its_best_binding():
    data = run(ts("no-offload", 0.0866, model="small"), ts("no-offload-master", 0.0777, model="small"),
               ts("streamed", 0.0844, model="small"), ts("torchao-offload", 0.1008, model="small"),
               ts("deepspeed-zero2", 0.200, model="small"),
               ts("deepspeed-zero2", 0.175, model="small", cpu_bind="rank-cores"),
               ts("streamed", 0.275, policy="default"))  # alone in its group: no sentence
    assert winner_sentences(mode_rows(data)) == [
        ("small bf16, 1 rank, policy bind:0: streamed wins (84.4 ms a step, cpu_bind node; bf16 + fp32 master), "
         "1.19x faster than the next, torchao-offload (100.8 ms); 1.09x the step of no-offload-master (77.7 ms), "
         "the no-offload reference of its recipe.")]
    data = run(ts("streamed", 0.180), ts("deepspeed-zero2", 0.200), ts("deepspeed-zero2", 0.175, cpu_bind="rank-cores"),
               ts("no-offload-master", 0.100))
    assert winner_sentences(mode_rows(data))[0].startswith(
        "1b bf16, 1 rank, policy bind:0: deepspeed-zero2 wins (175.0 ms a step, cpu_bind rank-cores; bf16 + fp32 "
        "master), 1.03x faster than the next, streamed (180.0 ms); 1.75x the step of no-offload-master")


def test_memory_columns_peak_gpu_host_per_node_and_pinned():
    data = run(ts("streamed", 0.280, mem_peak_per_rank_bytes=[int(12.5 * GIB)],
                  mem_peak_reserved_per_rank_bytes=[int(14.0 * GIB)],
                  host_total_bytes_by_node_per_rank=[{"0": int(13.0 * GIB), "1": int(0.5 * GIB)}],
                  host_pinned_bytes_by_node_per_rank=[{"0": int(11.2 * GIB)}]),
               ts("no-offload", 0.110))  # an older entry: no reserved, no per-node totals
    rows = {r.mode: r for r in mode_rows(data)}
    table = modes_table(list(rows.values()))
    assert "| 12.5 / 14.0 | 4 | N0 13.0 / 11.2, N1 0.5 / 0.0 |" in table
    assert "| - / - | 22 | - |" in table


def test_bounds_are_bytes_over_the_runs_measured_rates():
    """streamed (12 + 12 B/param): both directions at once bound it (24 GB at 80 GB/s = 300 ms, above
    12 GB at 40 GB/s one way); ZeRO-2 (2 in, 4 out): the D2H one way (4 GB at 40 GB/s = 100 ms), and
    its host pass 30 GB at 100 GB/s = 300 ms: the host limits it."""
    data = run(*rates(), ts("streamed", 0.330), ts("deepspeed-zero2", 0.640), ts("no-offload-master", 0.100))
    rows = {r.mode: r for r in mode_rows(data)}
    s, z = rows["streamed"], rows["deepspeed-zero2"]
    assert s.pcie_bound_ms == pytest.approx(300.0) and s.host_bound_ms is None and s.limit == "PCIe"
    assert s.bound_ms == pytest.approx(320.0)  # forward first: no copy starts before it ends
    assert z.pcie_bound_ms == pytest.approx(100.0) and z.host_bound_ms == pytest.approx(300.0) and z.limit == "host"
    assert rows["no-offload-master"].bound_ms is None
    table = modes_table(list(rows.values()))
    assert "| 24 | 300.0 | - | 1.03 (PCIe) |" in table and "| 6 | 100.0 | 300.0 | 2.00 (host) |" in table


def test_rates_prefer_the_rows_policy_then_default_and_the_largest_size():
    es = entries(run(*rates(), rate("transfer", "bidir", 70.0, memory="pinned", policy="bind:0")))
    assert measured_rates(es, "bind:0").bidir.gbps == 70.0
    assert measured_rates(es, "interleave:all").bidir.gbps == 80.0
    assert measured_rates(es).adam_pattern.gbps == 100.0  # not the cached 16M figure
    assert measured_rates([]) == Rates()


def test_bound_arithmetic_and_its_refusals():
    r = Rates(Rate(50.0, "a"), Rate(40.0, "b"), Rate(80.0, "c"), Rate(100.0, "d"))
    assert pcie_bound_s(12e9, 12e9, r) == pytest.approx(0.3)
    assert pcie_bound_s(8e9, 0, r) == pytest.approx(0.16)  # one way only: its own rate
    assert pcie_bound_s(0, 0, r) is None
    assert pcie_bound_s(12e9, 12e9, Rates(h2d=Rate(50.0, "a"))) == pytest.approx(0.24)  # what is measured
    assert pcie_bound_s(1e9, 1e9, Rates()) is None
    assert host_bound_s(28e9, r) == pytest.approx(0.28) and host_bound_s(None, r) is None
    with pytest.raises(ValueError, match="allowed >= 0"):
        pcie_bound_s(-1, 0, r)


def test_out_of_memory_cases_are_rows_notes_and_the_reason_in_the_sentence(tmp_path):
    mem = memory_outcomes.section(128 * GIB, "--numa-host-memory", [int(79.6 * GIB)],
                                  [oom("no-offload"), oom("no-offload-master")])
    data = run(*rates(), ts("streamed", 1.400, model="5b", n_params=5_099_462_656,
                            mem_peak_per_rank_bytes=[int(35 * GIB)]),
               ts("torchao-offload", 2.100, model="5b", n_params=5_099_462_656), memory=mem)
    rows = mode_rows(data)
    ooms = [r for r in rows if r.step_ms is None]
    assert {r.mode for r in ooms} == {"no-offload", "no-offload-master"} and ooms[0].n_params == 5_099_462_656
    table = modes_table(rows)
    assert "| no-offload-master | bf16 + fp32 master (device) | 5b | bf16 | 1 | bind:0 | node | out of memory " \
           "(predicted) |" in table
    [sentence] = winner_sentences(rows)
    assert sentence.endswith("; no-offload-master, the no-offload reference of its recipe, ran out of GPU memory.")
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    md = build_report(path, plots=False).markdown
    assert "Out of memory:" in md and "predicted: needs ~99.9 GiB per GPU" in md
    assert "met: OutOfMemoryError: CUDA out of memory" in md


def test_capacity_per_mode_from_bytes_per_parameter_checked_by_the_nearest_runs():
    mem = memory_outcomes.section(128 * GIB, "--numa-host-memory", [80 * GIB], [oom("no-offload-master")])
    data = run(ts("no-offload-master", 0.100, mem_peak_per_rank_bytes=[int(18 * N + 10 * GIB)]),
               ts("streamed", 1.400, model="5b", n_params=5_099_462_656,
                  mem_peak_per_rank_bytes=[int(4 * 5_099_462_656 + 14 * GIB)]), memory=mem)
    caps = {c.mode: c for c in capacity_rows(mode_rows(data), data)}
    master = caps["no-offload-master"]
    assert master.activations == pytest.approx(10 * GIB)
    assert master.capacity.params == pytest.approx((0.95 * 80 * GIB - 10 * GIB) / 18)  # ~3.9B: the GPU limits it
    assert master.capacity.limit == "GPU" and master.largest_fit.model == "1b" and master.smallest_oom.model == "5b"
    streamed = caps["streamed"]
    assert streamed.capacity.limit == "host" and streamed.capacity.params == pytest.approx(0.8 * 128 * GIB / 12)
    table = capacity_table(list(caps.values()), data)
    assert "| streamed | bf16 | 4 | 12 | 14.0 (" in table and "| 9.16B | host | 5b (5.10B) | - |" in table
    assert capacity_rows(mode_rows(run(ts("streamed", 0.2))), run()) == []  # no machine figures recorded


def test_a_peak_under_the_modelled_state_is_named_not_taken_for_activations():
    # torchao's 10 B/param counts autocast's bf16 copies beside every gradient; on an H100 its 5b
    # peak (43.4 GiB) was under that state (47.5 GiB): the row says so, with 0 activations
    n = 5_099_462_656
    data = run(ts("torchao-offload", 1.337, model="5b", n_params=n, mem_peak_per_rank_bytes=[int(43.4 * GIB)]),
               memory=memory_outcomes.section(128 * GIB, "--numa-host-memory", [80 * GIB], []))
    [cap] = [c for c in capacity_rows(mode_rows(data), data) if c.mode == "torchao-offload"]
    assert cap.activations == 0 and cap.measured_at is None
    assert "| 0: the peak, 43.4 GiB, is under the 47.5 GiB of state its 10 B/param model (test_train_step[" \
        in capacity_table([cap], data)


def test_out_of_memory_lines_are_recognised_and_other_errors_are_not():
    assert memory_outcomes.oom_message(
        "rank 0: raised OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB (during setup)\n"
        "--- worker stderr ---").startswith("OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB")
    assert memory_outcomes.oom_message(
        "rank 0: raised MemoryError: cannot allocate 1125899906842624 bytes of host memory (during setup)") == \
        "MemoryError: cannot allocate 1125899906842624 bytes of host memory (during setup)"
    assert "cudaHostRegister(64 bytes) failed with CUDA error 2" in memory_outcomes.oom_message(
        "raised RuntimeError: cudaHostRegister(64 bytes) failed with CUDA error 2")
    assert memory_outcomes.oom_message("raised RuntimeError: loss does not fall over 4 steps") is None
    assert memory_outcomes.oom_message("exited with code -9 (killed by SIGKILL) mid-request") is None
    assert len(memory_outcomes.oom_message("OutOfMemoryError: " + "x" * 2000)) == memory_outcomes.MESSAGE_CHARS


def test_merge_and_report_keep_every_runs_out_of_memory_records(tmp_path):
    first = run(ts("streamed", 1.4, model="5b"), memory=memory_outcomes.section(
        100 * GIB, "MemTotal", [80 * GIB], [oom("no-offload"), oom("torchao-offload")]))
    second = run(ts("torchao-offload", 2.1, model="5b", numel=4), memory=memory_outcomes.section(
        128 * GIB, "--numa-host-memory", [80 * GIB], [oom("no-offload-master")]))
    paths = []
    for i, r in enumerate((first, second)):
        paths.append(tmp_path / f"000{i + 1}_r.json")
        paths[-1].write_text(json.dumps(r))
    merged = merge_runs(paths).run
    kept = merged[memory_outcomes.KEY]
    # torchao ran in the later run: its earlier out-of-memory is dropped
    assert sorted(r["extra_info"]["mode"] for r in kept["out_of_memory"]) == ["no-offload", "no-offload-master"]
    assert kept["host_bytes"] == 128 * GIB and kept["host_source"] == "--numa-host-memory"
    md = build_report(paths, plots=False).markdown
    assert md.count("out of memory (predicted)") == 2
    assert memory_outcomes.combined([run(ts("streamed", 1.0))]) is None


def test_runs_whose_only_cases_ran_out_of_memory_merge_and_a_copy_of_one_is_refused(tmp_path):
    """A model run one mode at a time: the modes that ran out of memory leave runs without entries,
    one record each. They are different runs (not copies of each other for having no entries); a
    copy of one under another name is still refused."""
    from numabench.errors import UsageError

    def oom_only(mode: str, when: str) -> dict:
        r = run(memory=memory_outcomes.section(128 * GIB, "--numa-host-memory", [80 * GIB], [oom(mode)]))
        return {**r, "datetime": when}

    paths = [tmp_path / "0001_streamed.json", tmp_path / "0002_no-offload.json", tmp_path / "0003_master.json"]
    paths[0].write_text(json.dumps(run(ts("streamed", 1.5, model="5b", numel=4))))
    paths[1].write_text(json.dumps(oom_only("no-offload", "2026-11-25T01:00:00")))
    paths[2].write_text(json.dumps(oom_only("no-offload-master", "2026-11-25T02:00:00")))
    kept = merge_runs(paths).run[memory_outcomes.KEY]["out_of_memory"]
    assert sorted(r["extra_info"]["mode"] for r in kept) == ["no-offload", "no-offload-master"]
    copy = tmp_path / "0004_copy.json"
    copy.write_text(paths[1].read_text())
    with pytest.raises(UsageError, match="same run|same entries"):
        merge_runs([*paths, copy])


def test_a_split_that_kept_everything_on_the_gpu_is_named_but_not_ranked_as_an_offload():
    """streamed-split at auto on a model that fits the GPU runs at share 0 (nothing on the host): it is
    no-offload-master's arithmetic, so ranking it first among the offloads would hide the real answer."""
    def split(ratio, median_s, cpu_bind):
        return ts("streamed-split", median_s, model="small", cpu_bind=cpu_bind, offload_ratio_used=ratio)

    data = run(ts("no-offload-master", 0.0712, model="small"), ts("streamed", 0.0760, model="small"),
               ts("deepspeed-zero2", 0.1831, model="small"), split(0.0, 0.0704, "node"),
               split(0.76, 0.0705, "rank-cores"))
    rows = mode_rows(data)
    assert {r.variant for r in rows} >= {"streamed-split r=0.00", "streamed-split r=0.76"}
    [sentence] = winner_sentences(rows)
    assert sentence.startswith("small bf16, 1 rank, policy bind:0: streamed-split r=0.76 wins (70.5 ms a step")
    assert "1.08x faster than the next, streamed (76.0 ms)" in sentence
    assert sentence.endswith("; streamed-split r=0.00 (70.4 ms) kept all its state on the GPU, nothing on the host: "
                             "not an offload, not ranked.")


def test_the_winner_is_ranked_against_another_mode_not_its_own_second_share():
    """Two shares of the split mode both beat torchao (the H100 x1 5b rows): the sentence names the
    split's best share and how far it is ahead of torchao, not of its own next share."""
    def split(ratio, median_s):
        entry = ts("streamed-split", median_s, model="5b", numel=4, offload_ratio=str(ratio), offload_ratio_used=ratio)
        for key in ("name", "fullname"):  # one entry per share, as the offload_ratio axis names them
            entry[key] = entry[key].replace("]", f"-offload_ratio={ratio}]")
        return entry

    data = run(split(0.39, 0.5970), split(0.51, 0.7185), split(0.76, 1.0573),
               ts("torchao-offload", 1.3372, model="5b", numel=4), ts("streamed", 1.5255, model="5b", numel=4))
    [sentence] = winner_sentences(mode_rows(data))
    assert sentence.startswith("5b bf16, 1 rank, policy bind:0: streamed-split r=0.39 wins (597.0 ms a step")
    assert "2.24x faster than the next, torchao-offload (1337.2 ms)" in sentence
    assert "r=0.51" not in sentence
