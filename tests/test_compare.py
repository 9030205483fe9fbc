"""numabench compare: the band of invocation medians, verdicts, confirmation, exit codes, hardware keys."""
from __future__ import annotations

import copy
import json
import math
import random
from pathlib import Path

import pytest

from numabench.cli import main
from numabench.errors import UsageError
from numabench.gate.band import INFORMATIONAL, INSUFFICIENT, Band, GateRule
from numabench.gate.rule import (
    FASTER,
    NO_BASELINE,
    SAME,
    SLOWER,
    ForeignHardwareError,
    confirm,
    judge,
    judge_entry,
    parse_threshold,
)
from numabench.gate.table import render
from numabench.results.compare import compare_runs
from numabench.gate.invocations import INVOCATION_MEDIANS, INVOCATION_SOURCES

ROOT = Path(__file__).resolve().parents[1]
KEY = "H100-80GB-HBM3x1_Intel-Xeon_1node_cuda13"


def newest_baseline(key: str) -> Path:
    return sorted((ROOT / "baselines" / key).glob("*/[0-9][0-9][0-9][0-9]_*.json"), key=lambda p: p.name)[-1]


H100 = newest_baseline(KEY)
H200 = newest_baseline("H200x2_Intel-Xeon_1node_cuda13")


# -- synthetic runs, shaped like the H100 baseline's entries ---------------------------

def _stats(data: list[float] | None, median: float | None = None) -> dict:
    vals = sorted(data) if data else [median]
    n = len(vals)
    mean = sum(vals) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else 0.0
    med = vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2
    st = {"min": vals[0], "max": vals[-1], "mean": mean, "stddev": sd, "rounds": n, "median": med,
          "iqr": 0.0, "q1": vals[n // 4], "q3": vals[3 * n // 4], "iqr_outliers": 0, "stddev_outliers": 0,
          "outliers": "0;0", "ld15iqr": vals[0], "hd15iqr": vals[-1], "ops": 1 / mean, "total": sum(vals),
          "iterations": 1}
    if data:
        st["data"] = list(data)
    return st


def bench(phase: str, numel: int, policy: str, data: list[float] | None, median: float | None = None,
          invocations: list[float] | None = None, runs: int = 2) -> dict:
    """An entry; its ``invocations`` labelled as coming from ``runs`` runs in turn (the gate wants
    bands of 2+ runs)."""
    param = f"{phase}-np1-{numel}-{policy}-fp32-ours-serial"
    sources = {INVOCATION_SOURCES: [f"run-{i % runs}.json" for i in range(len(invocations))]} if invocations else {}
    return {"group": f"adam_offload:{phase} np1 {numel} fp32", "name": f"test_adam_offload[{param}]",
            "fullname": f"benchmarks/test_adam_offload.py::test_adam_offload[{param}]",
            "params": {"numa_phase": phase}, "param": param,
            "extra_info": {"family": "adam_offload", "phase": phase, "nprocess": 1, "numel": numel,
                           "dtype": "fp32", "policy": policy, "impl": "ours", "schedule": "serial",
                           "GBps": round(4 * numel * 4 / (median or sorted(data)[len(data) // 2]) / 1e9, 3),
                           "hardware_key": KEY, **({INVOCATION_MEDIANS: invocations} if invocations else {}),
                           **sources},
            "options": {"timer": "virtual_clock", "min_rounds": 5}, "stats": _stats(data, median)}


def run(benchmarks: list[dict], key: str = KEY) -> dict:
    return {"machine_info": {"node": "vm", "numabench": {"hardware_key": key, "gpu_count": 1}},
            "commit_info": {"id": "unknown"}, "benchmarks": benchmarks, "datetime": "2026-11-21T00:00:00",
            "version": "5.2.3"}


def noisy(center: float, rel_noise: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [center * (1 + rng.gauss(0, rel_noise)) for _ in range(n)]


def write(tmp_path: Path, name: str, data: dict) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return str(p)


def test_threshold_parsing():
    assert parse_threshold("5%") == 5.0 and parse_threshold("2.5") == 2.5
    for bad in ("five", "-1%", "nan"):
        with pytest.raises(UsageError):
            parse_threshold(bad)


# -- the band and the verdict ---------------------------------------------------------------

def test_band_and_judge():
    band = Band.of([1.00, 1.04, 0.98])
    assert (band.low, band.high, band.center, band.invocations) == (0.98, 1.04, 1.00, 3)
    assert band.width_pct == pytest.approx(6.1224, abs=1e-3)
    assert judge(band, 1.04 * 1.029, 3.0) == SAME  # inside band + threshold
    assert judge(band, 1.04 * 1.031, 3.0) == SLOWER
    assert judge(band, 0.98 / 1.031, 3.0) == FASTER
    assert judge(band, 0.98 / 1.029, 3.0) == SAME
    with pytest.raises(ValueError):
        Band.of([])


def test_entry_rows_change_beyond_band_and_confirmation():
    base = bench("h2d", 1, "default", [1e-3] * 5, invocations=[1.0e-3, 1.02e-3, 0.99e-3])
    rule = GateRule(3.0)
    row = judge_entry("n", "f", base, [1.10e-3], rule)
    assert row.verdict == SLOWER and row.change_pct == pytest.approx(10.0)
    assert row.beyond_band_pct == pytest.approx((1.10 / 1.02 - 1) * 100)
    assert row.regression and row.confirmed_text == "-"  # no confirmation ran: slower counts
    confirm(row, [1.0e-3, 1.01e-3])
    assert row.confirm_verdict == SAME and not row.regression and "not confirmed" in row.confirmed_text
    row2 = confirm(judge_entry("n", "f", base, [1.10e-3], rule), [1.09e-3, 1.12e-3])
    assert row2.regression and row2.confirmed_text == "confirmed"
    assert judge_entry("n", "f", None, [1e-3], rule).verdict == NO_BASELINE
    inside = judge_entry("n", "f", base, [1.01e-3], rule)
    assert inside.verdict == SAME and inside.beyond_band_pct == 0.0


def test_entry_without_invocations_is_a_band_of_one_and_not_gated():
    base = bench("h2d", 1, "default", [1e-3, 1.2e-3, 0.9e-3])  # old-style entry: stats.median only
    row = judge_entry("n", "f", base, [1.0e-3 * 1.5], GateRule(3.0))
    assert row.band.invocations == 1 and row.band.center == pytest.approx(1e-3)
    assert row.verdict == "insufficient data" and row.direction == SLOWER and not row.regression


def test_compare_files_slower_faster_same_and_missing(tmp_path, capsys):
    old = run([bench("h2d", 1, "default", noisy(1e-3, 0.01, 15, 1), invocations=[1e-3, 1.01e-3, 0.995e-3]),
               bench("d2h", 1, "default", noisy(1e-3, 0.01, 15, 2), invocations=[1e-3, 1.01e-3, 0.995e-3]),
               bench("step", 1, "default", noisy(1e-3, 0.01, 15, 3), invocations=[1e-3, 1.1e-3, 0.95e-3]),
               bench("compute", 1, "default", noisy(1e-3, 0.01, 15, 4))])  # only in old
    new = run([bench("h2d", 1, "default", noisy(1.2e-3, 0.01, 15, 5), invocations=[1.2e-3]),
               bench("d2h", 1, "default", noisy(0.8e-3, 0.01, 15, 6), invocations=[0.8e-3]),
               bench("step", 1, "default", noisy(1.1e-3, 0.01, 15, 7), invocations=[1.12e-3]),  # in its wide band
               bench("h2d", 2, "default", noisy(1e-3, 0.01, 15, 8), invocations=[1e-3])])  # only in new
    res = compare_runs(old, new)
    verdicts = {tuple(r.fullname.split("[")[1].split("-")[0:3:2]): r.verdict for r in res.rows}
    # step's band (0.95-1.1 ms) spreads 7.6% between invocations: 3 x that is too coarse to gate
    assert verdicts == {("h2d", "1"): SLOWER, ("d2h", "1"): FASTER, ("step", "1"): INFORMATIONAL,
                        ("h2d", "2"): NO_BASELINE}
    assert len(res.regressions) == 1 and res.exit_code == 1 and len(res.only_baseline) == 1
    text = render(res)
    assert "NOT GATED" in text and "REGRESSION: 1" in text and "1.01" in text
    rc = main(["compare", write(tmp_path, "a.json", old), write(tmp_path, "b.json", new)])
    out = capsys.readouterr().out
    assert rc == 1 and "slower" in out and "geometric mean" in out
    same = run([bench("h2d", 1, "default", noisy(1e-3, 0.01, 15, 9), invocations=[1.015e-3])])
    assert main(["compare", write(tmp_path, "a2.json", old), write(tmp_path, "c.json", same)]) == 0
    assert "REGRESSION" not in capsys.readouterr().out


def test_foreign_hardware_is_refused(tmp_path, capsys):
    old = run([bench("h2d", 1, "default", noisy(1e-3, 0.03, 20, 1), invocations=[1e-3, 1.01e-3, 0.99e-3])])
    new = run([bench("h2d", 1, "default", noisy(1.2e-3, 0.03, 20, 2))], key="H200x2_Intel-Xeon_1node_cuda13")
    with pytest.raises(ForeignHardwareError):
        compare_runs(old, new)
    a, b = write(tmp_path, "a.json", old), write(tmp_path, "b.json", new)
    assert main(["compare", a, b]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "different hardware" in err and "--allow-foreign" in err
    # allowed: a difference between two machines' hardware is no regression, and every format says so
    assert main(["compare", a, b, "--allow-foreign"]) == 0
    assert "different hardware" in capsys.readouterr().out
    for fmt in ("markdown", "json", "github"):
        assert main(["compare", a, b, "--allow-foreign", "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert "different hardware" in out and "::error" not in out, fmt
    # refused: in the format asked for, on stdout (stderr keeps its line)
    assert main(["compare", a, b, "--format", "json"]) == 2
    cap = capsys.readouterr()
    assert json.loads(cap.out)["exit_code"] == 2 and "different hardware" in json.loads(cap.out)["error"]
    assert "different hardware" in cap.err
    assert main(["compare", a, b, "--format", "github"]) == 2
    assert capsys.readouterr().out.startswith("::error title=numabench compare refused::runs were measured")


def test_same_under_the_absolute_floor_says_so():
    # 20 us band, +7.7% beyond it: 1.5 us, under the 2 us floor
    old = run([bench("h2d", 1, "default", noisy(20e-6, 0.001, 20, 1), invocations=[19.9e-6, 20e-6, 20.1e-6])])
    new = run([bench("h2d", 1, "default", noisy(21.6e-6, 0.001, 20, 2), invocations=[21.65e-6])])
    (row,) = compare_runs(old, new).rows
    assert row.verdict == SAME and row.under_floor
    assert row.verdict_text == "same (under the 2 us floor)"
    assert "under the 2 us floor" in render(compare_runs(old, new))


def test_usage_errors_exit_2(tmp_path, capsys):
    a = write(tmp_path, "a.json", run([bench("h2d", 1, "default", [1e-3, 1.1e-3])]))
    assert main(["compare", a, str(tmp_path / "missing.json")]) == 2
    assert main(["compare", a, a, "--threshold", "lots"]) == 2
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["compare", a, str(tmp_path / "bad.json")]) == 2
    assert main(["compare", a, a, a]) == 2
    assert "compare takes [BASELINE] NEW: got 3 runs" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["compare"])
    assert e.value.code == 2
    capsys.readouterr()


def test_real_h100_baseline_against_itself_and_a_slower_copy(capsys):
    """Judged from another machine (the new run names one the baseline never saw): entries pooled
    from several VMs are gated, entries of one invocation are insufficient data; a 25% slower
    copy of every adam_offload h2d entry fails on each gated one and on nothing else."""
    base = json.loads(H100.read_text())
    new = copy.deepcopy(base)
    new["machine_info"]["numabench"]["machine_instance"] = "another-vm"
    res = compare_runs(base, new)
    assert len(res.rows) == len(base["benchmarks"]) > 100
    assert {r.verdict for r in res.rows} == {SAME, INSUFFICIENT, INFORMATIONAL} and res.geomean_ratio == pytest.approx(1.0)
    assert len(res.gated) > 80 and not res.regressions
    for b in new["benchmarks"]:
        if b["extra_info"]["phase"] == "h2d" and b["extra_info"]["family"] == "adam_offload":
            b["stats"]["median"] *= 1.25
            if INVOCATION_MEDIANS in b["extra_info"]:
                b["extra_info"][INVOCATION_MEDIANS] = [v * 1.25 for v in b["extra_info"][INVOCATION_MEDIANS]]
    res = compare_runs(base, new)
    gated_h2d = {r.name for r in res.gated if "adam_offload[h2d-" in r.name}
    assert len(gated_h2d) >= 15 and {r.name for r in res.regressions} == gated_h2d
    assert main(["compare", str(H100), str(H200)]) == 2
    assert "different hardware" in capsys.readouterr().err
