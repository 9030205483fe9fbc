"""numabench report: grouped tables, PNG plots, report.md, over synthetic runs and the H100 baseline."""
from __future__ import annotations

import json
import math
import random
import zlib
from pathlib import Path

import pytest

from numabench.cli import main
from numabench.errors import UsageError
from numabench.results.report import build_report
from numabench.results.tables import entries, format_ms, grouped_tables, parse_where

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "baselines/H100-80GB-HBM3x1_Intel-Xeon_1node_cuda13/Linux-CPython-3.12-64bit/0005_h100-all.json"
PNG = b"\x89PNG\r\n\x1a\n"
BYTES = {"h2d": 4, "compute": 7, "d2h": 3, "step": 7}


def bench(phase: str, numel: int, policy: str, ms: float, *, impl="ours", schedule="serial", nprocess=1,
          seed=0) -> dict:
    """One entry shaped like the H100 baseline's (the fields tables and plots read)."""
    rng = random.Random(zlib.crc32(f"{phase}{numel}{policy}{impl}{schedule}{seed}".encode()))
    data = [ms / 1e3 * (1 + rng.gauss(0, 0.02)) for _ in range(8)]
    s = sorted(data)
    med = (s[3] + s[4]) / 2
    mean = sum(s) / 8
    param = f"{phase}-np{nprocess}-{numel}-{policy}-fp32-{impl}-{schedule}"
    return {"group": f"adam_offload:{phase} np{nprocess} {numel} fp32", "name": f"test_adam_offload[{param}]",
            "fullname": f"benchmarks/test_adam_offload.py::test_adam_offload[{param}]", "param": param,
            "extra_info": {"family": "adam_offload", "phase": phase, "nprocess": nprocess, "numel": numel,
                           "numel_per_rank": numel // nprocess, "dtype": "fp32", "policy": policy, "impl": impl,
                           "schedule": schedule, "GBps": round(BYTES[phase] * numel * 4 / med / 1e9, 3),
                           "hardware_key": "H100x8_Xeon_2node_cuda13"},
            "stats": {"min": s[0], "max": s[-1], "mean": mean, "median": med, "rounds": 8, "iterations": 1,
                      "stddev": math.sqrt(sum((v - mean) ** 2 for v in s) / 7), "iqr": s[5] - s[2], "data": data}}


def synthetic_run(weighted: bool = True) -> dict:
    pols = {"bind:0": 1.0, "bind:1": 1.4, "interleave:0,1": 1.15}
    if weighted:
        pols.update({"weighted:0=3,1=1": 1.07, "weighted:0=1,1=3": 1.3})
    out = []
    for numel in (1_000_000, 10_000_000, 100_000_000):
        for pol, f in pols.items():
            out.append(bench("h2d", numel, pol, f * numel / 1.3e7))
            out.append(bench("step", numel, pol, 2 * f * numel / 1.3e7))
    return {"machine_info": {"numabench": {"hardware_key": "H100x8_Xeon_2node_cuda13", "gpus": ["H100"] * 8,
                                           "gpu_count": 8, "gpu_models": ["H100"], "cpu_model": "Xeon",
                                           "numa_nodes": 2}},
            "commit_info": {"id": "0123456789abcdef"}, "benchmarks": out, "datetime": "2026-11-21T00:00:00",
            "version": "5.2.3"}


def write(tmp_path: Path, data: dict, name="run.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p


def test_format_ms():
    assert format_ms(1.2191999e-05, 4.589e-07) == "0.01219 ± 0.00046"
    assert format_ms(0.16271, 0.0196) == "162.7 ± 19.6"
    assert format_ms(0.0020991, None) == "2.099*"


def test_grouped_table_columns_by_policy(tmp_path):
    tables = grouped_tables(synthetic_run())
    assert [t.phase for t in tables] == ["h2d", "step"]
    t = tables[0]
    assert t.header == ["size", "bind:0", "bind:1", "interleave:0,1", "weighted:0=1,1=3", "weighted:0=3,1=1"]
    assert [r[0] for r in t.rows] == ["1M", "10M", "100M"]
    # bind:0 is fastest in every row, bold where its rounds all lie below every other cell's:
    # at 1M its range overlaps weighted 3:1's (5.6% apart, 2% noise), so that row has no bold
    assert t.best == [None, 1, 1]
    assert " ± " in t.rows[0][1] and "GB/s" in t.rows[0][1]
    assert t.impossible  # 204 GB/s from one H100 over PCIe: the synthetic numbers are faster than any link
    md = t.markdown()
    assert md.startswith("### adam_offload — h2d") and "| **" in md
    assert "bind:1" in t.text().splitlines()[1]


def test_grouped_table_columns_by_impl_schedule_when_one_policy():
    run = {"benchmarks": [bench("h2d", n, "default", n / 1e7, impl=i, schedule=s, nprocess=p)
                          for n in (10**6, 10**7) for i in ("ours", "torch") for s in ("serial", "overlap")
                          for p in (1, 2)]}
    (t,) = grouped_tables(run)
    assert t.header == ["np", "size", "ours/overlap", "ours/serial", "torch/overlap", "torch/serial"]
    assert len(t.rows) == 4


def test_where_filter():
    assert parse_where(["dtype=fp32", "impl=ours"]) == {"dtype": "fp32", "impl": "ours"}
    with pytest.raises(UsageError):
        parse_where(["colour=red"])
    es = entries(synthetic_run(), {"policy": "bind:1", "numel": "10M"})
    assert len(es) == 2 and {e.phase for e in es} == {"h2d", "step"}


def test_report_writes_markdown_and_pngs(tmp_path):
    run = write(tmp_path, synthetic_run())
    rep = build_report(run, tmp_path / "out")
    names = sorted(p.name for p in rep.images)
    assert names == ["adam_offload_bandwidth.png", "adam_offload_latency.png", "adam_offload_weighted_N0-1.png"]
    for p in rep.images:
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 10_000
    md = (tmp_path / "out" / "report.md").read_text()
    assert "![adam_offload_latency](adam_offload_latency.png)" in md
    assert "### adam_offload — step" in md and "hardware key: H100x8_Xeon_2node_cuda13" in md
    assert "adam_offload — h2d" in rep.text


def test_no_weighted_plot_without_weighted_policies(tmp_path):
    rep = build_report(write(tmp_path, synthetic_run(weighted=False)), tmp_path / "out")
    assert not any("weighted" in p.name for p in rep.images)


def test_cli_report(tmp_path, capsys):
    run = write(tmp_path, synthetic_run(weighted=False))
    assert main(["report", str(run)]) == 0  # tables only
    out = capsys.readouterr().out
    assert "adam_offload — h2d (median ± std, ms)" in out and "|" not in out
    assert main(["report", str(run), "--out", str(tmp_path / "r"), "--markdown", "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "| size | bind:0 |" in out and (tmp_path / "r" / "report.md").exists()
    assert not list((tmp_path / "r").glob("*.png"))
    assert main(["report", str(tmp_path / "nope.json")]) == 2
    assert main(["report", str(run), "--where", "bogus"]) == 2
    capsys.readouterr()


def test_real_h100_baseline_report(tmp_path):
    assert sorted({t.family for t in grouped_tables(H100)}) == ["adam_offload", "cpu_adam", "dataloader", "host_membw",
                                                                 "pinned_alloc", "touch", "train_step", "transfer"]
    tables = grouped_tables(H100, "adam_offload")
    assert [t.phase for t in tables] == ["h2d", "compute", "d2h", "step"]
    for t in tables:
        assert t.header[-4:] == ["default", "local", "bind:0", "interleave:all"]
        assert len(t.rows) == 4 * 2 * 2 * 2  # sizes x dtypes x impls x schedules
    raw = json.loads(H100.read_text())
    b = next(b for b in raw["benchmarks"] if b["name"] ==
             "test_adam_offload[h2d-np1-1.84M-bind:0-fp32-ours-serial-register]")
    row = next(r for r in tables[0].rows if r[:4] == ["fp32", "ours", "serial", "1.84M"])
    assert row[6].startswith(format_ms(b["stats"]["median"], b["stats"]["stddev"]))
    rep = build_report(H100, tmp_path / "h100", family="adam_offload", where={"dtype": "fp32", "impl": "ours", "schedule": "serial"})
    assert [p.name for p in rep.images] == ["adam_offload_latency.png", "adam_offload_bandwidth.png"]
    assert all(p.read_bytes()[:8] == PNG for p in rep.images)


def test_a_family_axis_keeps_its_rows_and_can_be_selected(tmp_path):
    """dataloader's binding axis: bound and unbound are two rows, and --where binding=... selects."""
    from numabench.results.tables import parse_where

    out = []
    for binding, ms in (("bound", 29.83), ("unbound", 32.30)):
        b = bench("step", 32, "default", ms)
        param = f"batch-np1-32-default-fp32-{binding}"
        b.update(name=f"test_dataloader[{param}]", fullname=f"benchmarks/test_dataloader.py::test_dataloader[{param}]",
                 group="dataloader:batch np1 32 fp32", param=param)
        x = b["extra_info"]
        for k in ("impl", "schedule", "GBps"):
            x.pop(k)
        x.update(family="dataloader", phase="batch", binding=binding)
        out.append(b)
    run = {**synthetic_run(), "benchmarks": out}
    path = write(tmp_path, run)
    text = build_report([str(path)], None).text
    header = next(ln for ln in text.splitlines() if ln.startswith("size"))
    assert header.split() == ["size", "bound", "unbound"], text  # one column each, not one row for both
    assert parse_where(["binding=bound"]) == {"binding": "bound"}
    only = build_report([str(path)], None, where={"binding": "bound"}).text
    assert "unbound" not in only and "30.0" in only, only
