"""numabench advise --dram-budget: which kinds of adam_offload's state go to the slower node under a
DRAM budget per GPU, and what the step costs; exact on synthetic rates, what it stands on
(measured, interpolated, extrapolated in size; a measured place=budget case beside it), and the
seed's published DRAM/CXL data."""
from __future__ import annotations

import pytest
from helpers import import_seed_runs

from numabench.cli import main
from numabench.results.budget_advice import budget_advice, render_budget
from numabench.results.report import combine_runs

MiB = 2**20
NUMEL = 1 << 20  # fp32: 4 MiB per tensor, 16 MiB of state


def entry(phase: str, policy: str, seconds: float, numel: int = NUMEL, place: str | None = None) -> dict:
    tail = f"-place={place}" if place else ""
    name = f"test_adam_offload[{phase}-np1-{numel}-{policy}-fp32-ours-serial{tail}]"
    x = {"family": "adam_offload", "phase": phase, "nprocess": 1, "numel": numel, "dtype": "fp32", "policy": policy,
         "impl": "ours", "schedule": "serial", **({"place": place} if place else {})}
    return {"name": name, "fullname": f"benchmarks/test_adam_offload.py::{name}", "extra_info": x,
            "stats": {"median": seconds, "mean": seconds, "stddev": 0.0, "data": [seconds] * 3}}


def run(benchmarks: list[dict]) -> dict:
    return {"machine_info": {"numabench": {"hardware_key": "K"}}, "benchmarks": benchmarks}


def two_nodes(numel: int = NUMEL, scale: float = 1.0) -> list[dict]:
    """bind:0 (DRAM) and bind:3 (4x slower per byte) for each phase."""
    out = []
    for node, f in ((0, 1.0), (3, 4.0)):
        out += [entry("h2d", f"bind:{node}", 0.016 * f * scale, numel), entry("d2h", f"bind:{node}", 0.012 * f * scale, numel),
                entry("compute", f"bind:{node}", 0.001 * scale, numel)]
    return out


def test_the_plan_and_the_times_on_synthetic_rates():
    """10 MiB of DRAM for 16 MiB: master (4) and 6 of the moments' 8 on node 0, the other 2 and the
    grads (4) on node 3. h2d copies 10 MiB at 1 ms/MiB and 6 at 4; d2h 10 at 1 and 2 at 4."""
    [a] = budget_advice(run(two_nodes()), [10 * MiB])
    assert (a.budget.fast, a.budget.slow) == (0, 3)
    assert {s.kind: (s.fast_bytes, s.slow_bytes) for s in a.splits} == {
        "master": (4 * MiB, 0), "moments": (6 * MiB, 2 * MiB), "grads": (0, 4 * MiB)}
    assert a.predicted["h2d"] == pytest.approx(0.010 + 6 * 0.004)
    assert a.predicted["d2h"] == pytest.approx(0.010 + 2 * 0.004)
    assert a.predicted["step"] == pytest.approx(a.predicted["h2d"] + 0.001 + a.predicted["d2h"])
    assert a.fast_only == pytest.approx({"h2d": 0.016, "d2h": 0.012, "step": 0.029})
    assert a.slow_share == pytest.approx({"h2d": 6 / 16, "d2h": 2 / 12})
    assert a.size_basis == "measured"
    text = render_budget([a])
    assert "on node 3: moments 0.00 GiB of 0.01 GiB; grads 0.00 GiB (all)" in text
    assert "h2d 16 -> 34 ms (+112.5%)" in text and "no place=budget case measured" in text
    # the whole state within the budget: nothing moves
    [fits] = budget_advice(run(two_nodes()), [16 * MiB])
    assert fits.predicted == pytest.approx(fits.fast_only)
    assert "it fits, no kind on node 3" in render_budget([fits])


def test_a_measured_budget_case_is_shown_with_the_model_s_error():
    measured = [entry(p, "bind:0", t, place="budget:10M:0:3") for p, t in (("h2d", 0.0374), ("d2h", 0.018),
                                                                          ("compute", 0.001))]
    [a] = budget_advice(run(two_nodes() + measured), [10 * MiB])
    assert a.measured["h2d"] == 0.0374 and a.error_pct("h2d") == pytest.approx((0.034 / 0.0374 - 1) * 100)
    assert a.measured["step"] == pytest.approx(0.0374 + 0.018 + 0.001)
    text = render_budget([a])
    assert "(measured 37.4, -9.1%)" in text and "model error against the measured place=budget cases" in text


def test_sizes_between_and_beyond_the_measured_ones_say_so():
    r = run(two_nodes(NUMEL) + two_nodes(4 * NUMEL, scale=4.0))  # the same rate at both sizes
    [mid] = budget_advice(r, [10 * MiB], at_numel=2 * NUMEL)
    assert mid.size_basis == "interpolated between 1.05M and 4.19M"
    assert mid.fast_only["h2d"] == pytest.approx(0.032)
    [far] = budget_advice(r, [10 * MiB], at_numel=16 * NUMEL)
    assert far.size_basis == "extrapolated from 4.19M (x4)"
    assert "[rates extrapolated from 4.19M (x4);" in render_budget([far])


def test_the_seed_s_dram_and_cxl_data(tmp_path, capsys):
    """4 GiB of DRAM per GPU for Qwen2.5-7B's largest partition (545M elements, 8.12 GiB of state):
    the master weights and half the moments stay, the rest of the moments and all gradients go to
    the CXL node; from its measured rates the step costs 2.5x."""
    runs = import_seed_runs(tmp_path)
    answers = budget_advice(combine_runs(runs), [4 * 2**30], where={"nprocess": "1", "numel": "545M"})
    [a] = answers
    assert (a.budget.fast, a.budget.slow) == (0, 3)
    split = {s.kind: s for s in a.splits}
    assert split["master"].slow_bytes == 0 and split["grads"].fast_bytes == 0
    assert split["moments"].slow_bytes == 2 * 544997376 * 4 - (4 * 2**30 - 544997376 * 4) // 4096 * 4096
    assert a.fast_only["h2d"] == pytest.approx(0.15689569)  # bind:0 as measured
    assert a.predicted["step"] / a.fast_only["step"] == pytest.approx(2.457, abs=0.01)
    assert main(["advise", *runs, "--dram-budget", "4G", "--where", "nprocess=1"]) == 0
    out = capsys.readouterr().out
    assert "numel=545M: DRAM 4G per GPU on node 0 for a state of 8.12 GiB; on node 3: moments 2.09 GiB of " \
           "4.06 GiB; grads 2.03 GiB (all)" in out


def test_usage_errors_name_the_option(capsys):
    assert main(["advise", "x.json", "--at-numel", "1G"]) == 2
    assert "--at-numel answers the --dram-budget question: give --dram-budget too" in capsys.readouterr().err
    assert main(["advise", "x.json", "--dram-budget", "4T"]) == 2
    assert "bad size '4T'" in capsys.readouterr().err


def test_no_two_node_cases_says_what_to_run():
    assert "bind:A;bind:B" in render_budget(budget_advice(run(two_nodes()[:3]), [MiB]))
