"""numabench compare: the U test against known values, verdicts, exit codes, hardware keys."""
from __future__ import annotations

import copy
import json
import math
import random
from pathlib import Path

import pytest

from numabench.cli import main
from numabench.compare import (FASTER, NO_DATA, NOT_SIGNIFICANT, SAME, SLOWER, ForeignHardwareError, _u_counts,
                               compare_runs, mann_whitney_u, parse_threshold, render)
from numabench.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "baselines/H100-80GB-HBM3x1_Intel-Xeon_1node_cuda13/Linux-CPython-3.12-64bit/0002_h100-all.json"
H200 = ROOT / "baselines/H200x2_Intel-Xeon_1node_cuda13/Linux-CPython-3.12-64bit/0003_h200x2-all.json"
KEY = "H100-80GB-HBM3x1_Intel-Xeon_1node_cuda13"


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


def bench(phase: str, numel: int, policy: str, data: list[float] | None, median: float | None = None) -> dict:
    param = f"{phase}-np1-{numel}-{policy}-fp32-ours-serial"
    return {"group": f"adam_offload:{phase} np1 {numel} fp32", "name": f"test_adam_offload[{param}]",
            "fullname": f"benchmarks/test_adam_offload.py::test_adam_offload[{param}]",
            "params": {"numa_phase": phase}, "param": param,
            "extra_info": {"family": "adam_offload", "phase": phase, "nprocess": 1, "numel": numel,
                           "dtype": "fp32", "policy": policy, "impl": "ours", "schedule": "serial",
                           "GBps": round(4 * numel * 4 / (median or sorted(data)[len(data) // 2]) / 1e9, 3),
                           "hardware_key": KEY},
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


# -- Mann-Whitney U ----------------------------------------------------------------------

def test_u_exact_known_value():
    # scipy.stats.mannwhitneyu documentation example (exact): U = 17, p = 1/9
    t = mann_whitney_u([19, 22, 16, 29, 24], [20, 11, 17, 12])
    assert t.method == "exact" and t.u == 17
    assert t.p_value == pytest.approx(1 / 9, abs=1e-12)
    # complete separation of 3 and 4 values: p = 2 / C(7, 3)
    assert mann_whitney_u([1.5, 2.5, 3.5], [4.5, 5.5, 6.5, 7.5]).p_value == pytest.approx(2 / 35, abs=1e-12)


def test_u_asymptotic_known_values():
    t = mann_whitney_u([19, 22, 16, 29, 24], [20, 11, 17, 12], method="asymptotic")
    assert t.p_value == pytest.approx(0.11134688653314041, abs=1e-12)  # scipy, continuity-corrected
    x = list(range(1, 21))
    y = [v + 0.5 for v in range(5, 25)]
    t = mann_whitney_u(x, y)
    assert t.method == "asymptotic" and t.u == 120
    assert t.p_value == pytest.approx(0.031517102074561605, abs=1e-12)


def test_u_tie_correction_known_value():
    x = [1, 2, 2, 3, 3, 3, 4, 5, 6, 7, 8, 9]
    y = [3, 4, 4, 5, 6, 7, 8, 9, 10, 10, 11]
    t = mann_whitney_u(x, y)
    assert t.method == "asymptotic" and t.u == 31
    assert t.p_value == pytest.approx(0.032807600171308585, abs=1e-12)  # scipy with ties


def test_u_edge_cases():
    assert mann_whitney_u([1.0] * 5, [1.0] * 7).p_value == 1.0
    assert mann_whitney_u([1.0], [2.0]).p_value == 1.0
    a, b = noisy(1.0, 0.05, 12, 1), noisy(1.1, 0.05, 15, 2)
    assert mann_whitney_u(a, b).p_value == pytest.approx(mann_whitney_u(b, a).p_value)
    assert sum(_u_counts(5, 9)) == math.comb(14, 5)
    with pytest.raises(ValueError):
        mann_whitney_u([], [1.0])


def test_threshold_parsing():
    assert parse_threshold("5%") == 5.0 and parse_threshold("2.5") == 2.5
    for bad in ("five", "-1%", "nan"):
        with pytest.raises(UsageError):
            parse_threshold(bad)


# -- compare -------------------------------------------------------------------------------

def test_twenty_percent_slowdown_is_flagged(tmp_path, capsys):
    old = run([bench("h2d", 1835008, "bind:0", noisy(1e-3, 0.03, 20, 1))])
    new = run([bench("h2d", 1835008, "bind:0", noisy(1.2e-3, 0.03, 20, 2))])
    res = compare_runs(old, new)
    (row,) = res.rows
    assert row.verdict == SLOWER and row.p_value < 1e-4 and 15 < row.change_pct < 25
    assert res.exit_code == 1
    rc = main(["compare", write(tmp_path, "a.json", old), write(tmp_path, "b.json", new)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "slower" in out and "REGRESSION" in out and "geometric mean" in out


def test_one_percent_change_with_noise_is_not_flagged(tmp_path, capsys):
    old = run([bench("h2d", 1835008, "bind:0", noisy(1e-3, 0.03, 20, 3))])
    new = run([bench("h2d", 1835008, "bind:0", noisy(1.01e-3, 0.03, 20, 4))])
    res = compare_runs(old, new)
    assert res.rows[0].verdict in (SAME, NOT_SIGNIFICANT)
    rc = main(["compare", write(tmp_path, "a.json", old), write(tmp_path, "b.json", new)])
    assert rc == 0
    assert "REGRESSION" not in capsys.readouterr().out


def test_verdicts_faster_not_significant_and_no_data():
    old = run([bench("h2d", 1, "default", noisy(1e-3, 0.02, 20, 5)),  # faster
               bench("d2h", 1, "default", [1e-3, 1.5e-3, 0.8e-3]),  # big change, 3 rounds: not significant
               bench("compute", 1, "default", None, median=1e-3),  # no per-round data
               bench("step", 1, "default", noisy(1e-3, 0.01, 10, 6))])  # only in old
    new = run([bench("h2d", 1, "default", noisy(0.7e-3, 0.02, 20, 7)),
               bench("d2h", 1, "default", [1.4e-3, 1.1e-3, 1.6e-3]),
               bench("compute", 1, "default", None, median=2e-3),
               bench("h2d", 2, "default", noisy(1e-3, 0.01, 10, 8))])  # only in new
    res = compare_runs(old, new, threshold="5%", alpha=0.05)
    verdicts = {r.name.split("[")[1].split("-")[0]: r for r in res.rows}
    assert verdicts["h2d"].verdict == FASTER
    assert verdicts["d2h"].verdict == NOT_SIGNIFICANT
    assert verdicts["compute"].verdict == NO_DATA and verdicts["compute"].p_value is None
    assert verdicts["compute"].change_pct == pytest.approx(100.0)
    assert len(res.only_old) == 1 and len(res.only_new) == 1
    assert res.exit_code == 0  # a doubling without per-round data is never a regression
    ratios = [r.new_median_s / r.old_median_s for r in res.rows]
    assert res.geomean_ratio == pytest.approx(math.prod(ratios) ** (1 / len(ratios)))
    text = render(res)
    assert "no data" in text and "only in old: 1, only in new: 1" in text


def test_foreign_hardware_is_refused(tmp_path, capsys):
    old = run([bench("h2d", 1, "default", noisy(1e-3, 0.03, 20, 1))])
    new = run([bench("h2d", 1, "default", noisy(1.2e-3, 0.03, 20, 2))], key="H200x2_Intel-Xeon_1node_cuda13")
    with pytest.raises(ForeignHardwareError):
        compare_runs(old, new)
    a, b = write(tmp_path, "a.json", old), write(tmp_path, "b.json", new)
    assert main(["compare", a, b]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "different hardware" in err and "--allow-foreign" in err
    assert main(["compare", a, b, "--allow-foreign"]) == 1


def test_usage_errors_exit_2(tmp_path, capsys):
    a = write(tmp_path, "a.json", run([bench("h2d", 1, "default", [1e-3, 1.1e-3])]))
    assert main(["compare", a, str(tmp_path / "missing.json")]) == 2
    assert main(["compare", a, a, "--threshold", "lots"]) == 2
    assert main(["compare", a, a, "--alpha", "1.5"]) == 2
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["compare", a, str(tmp_path / "bad.json")]) == 2
    with pytest.raises(SystemExit) as e:
        main(["compare", a])
    assert e.value.code == 2
    capsys.readouterr()


def test_real_h100_baseline_against_itself_and_a_slower_copy(capsys):
    base = json.loads(H100.read_text())
    res = compare_runs(base, base)
    assert len(res.rows) == len(base["benchmarks"]) == 624  # 512 adam_offload + 112 other families
    assert {r.verdict for r in res.rows} == {SAME} and res.geomean_ratio == pytest.approx(1.0)
    slow = copy.deepcopy(base)
    for b in slow["benchmarks"]:
        if b["extra_info"]["phase"] == "h2d" and b["extra_info"]["family"] == "adam_offload":
            b["stats"]["data"] = [v * 1.25 for v in b["stats"]["data"]]
            b["stats"]["median"] *= 1.25
    res = compare_runs(base, slow)
    assert len(res.regressions) == 128 and all("[h2d-" in r.name for r in res.regressions)
    assert main(["compare", str(H100), str(H200)]) == 2
    assert "different hardware" in capsys.readouterr().err
