"""Seed CSV <-> pytest-benchmark JSON: import shape, round trips, errors."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from numabench.cli import main
from numabench.errors import UsageError
from numabench.gate.rule import NO_DATA
from numabench.results.compare import compare_runs
from numabench.results.csv_import import import_csv, policy_from_seed
from numabench.results.seed_csv import PLAIN, WEIGHTED, run_json_to_csv

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "baselines/H100-80GB-HBM3x1_Intel-Xeon_1node_cuda13/Linux-CPython-3.12-64bit/0005_h100-all.json"

PLAIN_CSV = """ngpus,numa_nodes,update_element,avg_h2d_latency(ms),avg_compute_latency(ms),avg_d2h_latency(ms)
1,0,1835008,0.588893,0.021066,0.417720
1,0,12845056,4.177656,0.133930,2.953712
1,1,1835008,0.701234,0.021100,0.512345
1,"0,1",1835008,0.640000,0.021050,0.460000
8,default,544997376,171.123456,5.383000,121.999999
8,interleave:all,544997376,170.000001,5.380000,122.500000
"""

WEIGHTED_CSV = """ngpus,numa_nodes,numa_weight,update_element,avg_h2d_latency(ms),avg_compute_latency(ms),avg_d2h_latency(ms)
2,"0,2","1,3",12845056,4.500000,0.134000,3.100000
2,"0,2","1,1",12845056,4.300000,0.134000,3.000000
2,"0,2","3,1",12845056,4.100000,0.133500,2.950000
"""


def rows(text: str) -> list[list[str]]:
    return sorted(list(csv.reader(io.StringIO(text)))[1:])


def roundtrip(tmp_path: Path, text: str, **kw) -> tuple[dict, str]:
    src = tmp_path / "seed.csv"
    src.write_text(text)
    out = tmp_path / "run.json"
    assert main(["import-csv", str(src), "--out", str(out), *kw.get("args", [])]) == 0
    return json.loads(out.read_text()), run_json_to_csv(out)


def test_plain_csv_json_csv_same_rows(tmp_path):
    run, back = roundtrip(tmp_path, PLAIN_CSV, args=["--gpu", "NVIDIA H100 80GB HBM3"])
    assert back.splitlines()[0] == ",".join(PLAIN)
    assert rows(back) == rows(PLAIN_CSV)
    assert len(run["benchmarks"]) == 3 * 6


def test_weighted_csv_json_csv_same_rows(tmp_path):
    run, back = roundtrip(tmp_path, WEIGHTED_CSV)
    assert back.splitlines()[0] == ",".join(WEIGHTED)
    assert rows(back) == rows(WEIGHTED_CSV)
    pols = {b["extra_info"]["policy"] for b in run["benchmarks"]}
    assert pols == {"weighted:0=1,2=3", "weighted:0=1,2=1", "weighted:0=3,2=1"}


def test_imported_json_has_pytest_benchmark_shape(tmp_path):
    run, _ = roundtrip(tmp_path, PLAIN_CSV, args=["--gpu", "NVIDIA H100 80GB HBM3"])
    assert set(run) >= {"machine_info", "commit_info", "benchmarks", "datetime", "version"}
    nb = run["machine_info"]["numabench"]
    assert nb["gpu_count"] == 8 and nb["hardware_key"].startswith("H100-80GB-HBM3x8_")
    b = next(b for b in run["benchmarks"] if b["extra_info"]["phase"] == "h2d"
             and b["extra_info"]["policy"] == "interleave:0,1")
    assert b["name"] == "test_adam_offload[h2d-np1-1.84M-interleave:0,1-fp32]"
    assert b["fullname"].endswith("::" + b["name"]) and b["param"] in b["name"]
    x = b["extra_info"]
    assert x["source"] == "seed-csv" and x["stats_from"] == "mean only"
    assert x["family"] == "adam_offload" and x["nprocess"] == 1 and x["numel"] == 1835008
    assert x["seed_numa_nodes"] == "0,1" and x["csv_line"] == 5
    assert x["GBps"] == pytest.approx(4 * 1835008 * 4 / 0.64e-3 / 1e9, rel=1e-3)
    st = b["stats"]
    assert {"mean", "median", "min", "max", "stddev", "rounds"} <= set(st) and "data" not in st
    assert st["mean"] == st["median"] == st["min"] == st["max"] == pytest.approx(0.64e-3)
    assert st["stddev"] == 0.0 and st["rounds"] == 1


def test_stamped_impl_schedule_names_match_new_runs_and_compare_says_no_data(tmp_path):
    src = tmp_path / "h100.csv"
    src.write_text(run_json_to_csv(H100))
    imported = import_csv(src, gpus=["NVIDIA H100 80GB HBM3"], impl="ours", schedule="serial", alloc="register",
                          hardware_key="H100-80GB-HBM3x1_Intel-Xeon_1node_cuda13")
    res = compare_runs(H100, imported)
    assert len(res.rows) == 48
    assert {r.verdict for r in res.rows} == {NO_DATA} and res.exit_code == 0


def test_real_baseline_json_csv_json_csv(tmp_path):
    first = run_json_to_csv(H100)
    assert len(first.splitlines()) == 1 + 16
    src = tmp_path / "h100.csv"
    src.write_text(first)
    out = tmp_path / "h100.json"
    out.write_text(json.dumps(import_csv(src)))
    assert run_json_to_csv(out) == first  # same rows, same order


def test_policy_mapping():
    assert policy_from_seed("0").id == "bind:0"
    assert policy_from_seed("0,1").id == "interleave:0,1"
    assert policy_from_seed("0,1", "1,3").id == "weighted:0=1,1=3"
    assert policy_from_seed("interleave:all").id == "interleave:all"
    with pytest.raises(UsageError):
        policy_from_seed("0,1", "1")


@pytest.mark.parametrize("text, message", [
    ("a,b,c\n1,2,3\n", "not the seed's"),
    (PLAIN_CSV.splitlines()[0] + "\n1,0,1835008,fast,fast,fast\n", "no data rows"),  # each phase cell left out
    (PLAIN_CSV.splitlines()[0] + "\none,0,1835008,0.5,0.02,0.4\n", "bad.csv line 2: ngpus 'one'"),
    (PLAIN_CSV.splitlines()[0] + "\n1,0,1835008,0.5,0.02\n", "5 fields"),
    (PLAIN_CSV.splitlines()[0] + "\n1,nowhere,1835008,0.5,0.02,0.4\n", "line 2: numa_nodes 'nowhere'"),
    (PLAIN_CSV.splitlines()[0] + "\n1,0,1835008,0.5,0.02,0.4\n1,0,1835008,0.6,0.02,0.4\n", "as line 2"),
    (PLAIN_CSV.splitlines()[0] + "\n", "no data rows"),
])
def test_bad_csv_is_a_usage_error(tmp_path, capsys, text, message):
    src = tmp_path / "bad.csv"
    src.write_text(text)
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        import_csv(src)
    assert main(["import-csv", str(src), "--out", str(tmp_path / "o.json")]) == 2
    assert "numabench:" in capsys.readouterr().err


def test_import_csv_stores_no_path_of_this_machine(tmp_path):
    import json as _json

    from numabench.cli import main as _main

    src = Path(__file__).resolve().parent / "data" / "seed" / "qwen2.5-7B_normal_interleave.csv"
    out = tmp_path / "n.json"
    assert _main(["import-csv", str(src), "--out", str(out), "--gpu", "seed GPU", "--cpu", "seed host"]) == 0
    text = out.read_text()
    assert str(src.parent) not in text and str(tmp_path) not in text
    info = _json.loads(text)["commit_info"]
    assert info["csv_file"] == src.name and len(info["csv_sha256"]) == 64
