"""Reports that tell the truth: per-family axis labels and phase titles, imported means not
called medians, figures saved with tight bounds, bold only beyond noise, readable saved
params, seed CSV cells that are no number left out with a warning, no traceback on a closed
pipe."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from numabench.results import plots
from numabench.results.tables import Entry, clearly_fastest

ROOT = Path(__file__).resolve().parents[1]
H200X2 = sorted((ROOT / "baselines" / "H200x2_Intel-Xeon_1node_cuda13").glob("*/[0-9]*_*.json"))[-1]


@pytest.fixture
def saved_figures(monkeypatch):
    figs = []
    original = plots._save

    def keep(fig, path, top_legend=True):
        figs.append((path.name, [ax for ax in fig.axes if ax.get_visible()], fig._suptitle.get_text()))
        return original(fig, path, top_legend)

    monkeypatch.setattr(plots, "_save", keep)
    return figs


def test_each_family_has_its_own_size_axis_and_phase_titles(tmp_path, saved_figures):
    run = json.loads(H200X2.read_text())
    paths = plots.all_plots(run, tmp_path)
    assert paths and all(p.read_bytes().startswith(b"\x89PNG") for p in paths)
    by_family: dict[str, set] = {}
    for name, axes, title in saved_figures:
        fam = title.split(":")[0]
        by_family.setdefault(fam, set()).update((ax.get_xlabel(), ax.get_title()) for ax in axes)
    assert ("global batch (sequences)", "training step (forward, backward, optimizer)") in by_family["train_step"]
    assert any(x == "batch size (samples per rank)" for x, _ in by_family["dataloader"])
    assert ("size (elements)", "step (H2D + compute + D2H)") in by_family["adam_offload"]
    assert not any("H2D + compute" in t for fam in ("train_step", "dataloader") for _, t in by_family[fam])


def test_saved_with_tight_bounds(tmp_path, monkeypatch):
    calls = []
    import matplotlib.figure

    original = matplotlib.figure.Figure.savefig

    def savefig(self, *a, **kw):
        calls.append(kw.get("bbox_inches"))
        return original(self, *a, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    plots.all_plots(json.loads(H200X2.read_text()), tmp_path, family="broadcast")
    assert calls and set(calls) == {"tight"}


def _entry(median: float, data=None, invocations=(), mean_only=False) -> Entry:
    return Entry("touch", "write", {}, median, None, median, None, "n", "f", data, mean_only, list(invocations))


def test_bold_only_beyond_noise():
    apart = [_entry(1.0, [0.98, 1.0, 1.02]), _entry(2.0, [1.9, 2.0, 2.1])]
    assert clearly_fastest(apart) == 0
    overlapping = [_entry(1.0, [0.9, 1.0, 1.3]), _entry(1.1, [1.05, 1.1, 1.2])]
    assert clearly_fastest(overlapping) is None
    # invocation medians, where there are three, decide over rounds
    assert clearly_fastest([_entry(1.0, [0.5, 1.5], [0.99, 1.0, 1.01]), _entry(1.2, [1.1, 1.3])]) == 0
    assert clearly_fastest([_entry(1.0, mean_only=True), _entry(2.0, [1.9, 2.1])]) is None
    assert clearly_fastest([_entry(1.0, [1.0])]) is None


def test_imported_means_are_not_called_medians(tmp_path, saved_figures):
    csv = tmp_path / "seed.csv"
    csv.write_text("ngpus,numa_nodes,update_element,avg_h2d_latency(ms),avg_compute_latency(ms),avg_d2h_latency(ms)\n"
                   "1,0,1835008,1.5,step:,1.2\n1,0,12845056,8.1,0.2,7.0\n")
    out = subprocess.run([sys.executable, "-m", "numabench", "import-csv", str(csv), "--out", str(tmp_path / "s.json"),
                          "--gpu", "NVIDIA H100 80GB HBM3"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert f"warning: {csv} line 2: avg_compute_latency(ms) 'step:' is not a number: left out" in out.stderr
    assert "2 rows -> 5 benchmarks" in out.stdout
    plots.latency_plots(json.loads((tmp_path / "s.json").read_text()), tmp_path)
    labels = {ax.get_ylabel() for _, axes, _ in saved_figures for ax in axes}
    titles = {t for _, _, t in saved_figures}
    assert labels == {"mean latency (ms; imported means, spread unknown)"}
    assert all("mean latency vs size" in t for t in titles)


def test_report_into_a_closed_pipe_ends_quietly():
    out = subprocess.run(f"{sys.executable} -m numabench report {H200X2} | head -1", shell=True, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.startswith("numabench report:") and "Traceback" not in out.stderr, out.stderr


def test_saved_params_name_the_case(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "-q", "-p", "no:cacheprovider",
                          "--numa-tier=smoke", "--param-sizes=1M", "--numa-rounds=2",
                          f"--benchmark-json={tmp_path}/r.json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:]
    params = json.loads((tmp_path / "r.json").read_text())["benchmarks"][0]["params"]
    assert params == {"numa_phase": "write", "numa_case": "np1-1M-default-fp32"}


def test_cpuless_nodes_are_marked(tmp_path, saved_figures):
    from numabench.results.tables import grouped_tables

    def bench(policy: str, ms: float) -> dict:
        name = f"test_touch[write-np1-1048576-{policy}-fp32]"
        return {"name": name, "fullname": f"benchmarks/test_touch.py::{name}",
                "extra_info": {"family": "touch", "phase": "write", "nprocess": 1, "numel": 1 << 20, "dtype": "fp32",
                               "policy": policy, "GBps": 1.0},
                "stats": {"median": ms / 1e3, "mean": ms / 1e3, "stddev": 0.0, "data": [ms / 1e3] * 3}}

    run = {"machine_info": {"numabench": {"hardware_key": "K", "nodes": [
        {"id": 0, "cpus": 4, "cpuless": False}, {"id": 3, "cpus": 0, "cpuless": True}]}},
        "benchmarks": [bench("bind:0", 1.0), bench("bind:3", 3.0), bench("weighted:0=3,3=1", 1.2)]}
    (t,) = grouped_tables(run)
    assert t.header == ["size", "bind:0", "bind:3 ‡", "weighted:0=3,3=1 ‡"]
    assert "‡ places memory on a CPU-less (CXL-like) node: node 3." in t.markdown() and t.cpuless == (3,)
    plots.latency_plots(run, tmp_path)
    (name, axes, title) = saved_figures[0]
    legend = axes[0].figure.legends[0]
    assert [x.get_text() for x in legend.get_texts()] == ["bind:0", "bind:3 ‡", "weighted:0=3,3=1 ‡"]
    assert "CPU-less node" in legend.get_title().get_text()


def test_throughput_metrics_are_plotted(tmp_path, saved_figures):
    run = json.loads(H200X2.read_text())
    paths = plots.throughput_plots(run, tmp_path)
    names = {p.name.split("_throughput")[0] for p in paths}
    assert names == {"train_step", "dataloader"}
    ylabels = {ax.get_ylabel() for _, axes, _ in saved_figures for ax in axes}
    assert {"tokens/s (from the median step)", "model TFLOPS (6 x params x tokens / time) (from the median step)",
            "samples/s into the rank's device (from the median step)"} <= ylabels
    lines = [ln for _, axes, _ in saved_figures for ax in axes for ln in ax.get_lines()]
    assert lines and all(len(ln.get_xdata()) >= 1 for ln in lines)
