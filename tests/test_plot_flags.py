"""Plots carry the flags their tables do ('!' impossible, '?' ceiling unknown); an unknown GPU
model's ceiling is not a silent 8000 GB/s; the weighted-interleave figure: no legend over a
point, no colliding labels, no line across the unmeasured ratios, more than one y tick; np>1
bandwidth says it is summed over the GPUs."""
from __future__ import annotations

import pytest

from numabench.results import plots
from numabench.results.tables import entries, grouped_tables


def bench(phase: str, policy: str, ms: float, gbps: float | None, np: int = 1, numel: int = 1 << 20) -> dict:
    name = f"{phase}-np{np}-{numel}-{policy}-fp32"
    x = {"family": "adam_offload", "phase": phase, "nprocess": np, "numel": numel, "dtype": "fp32",
         "policy": policy, "stats_from": "mean only"}
    if gbps is not None:
        x["GBps"] = gbps
    s = ms / 1e3
    return {"name": name, "fullname": f"benchmarks/test_adam_offload.py::test_adam_offload[{name}]", "extra_info": x,
            "stats": {"median": s, "mean": s, "stddev": 0.0}}


def run(benches: list[dict], gpus: list[str]) -> dict:
    return {"machine_info": {"numabench": {"hardware_key": "seed", "gpu_models": gpus}}, "benchmarks": benches,
            "datetime": "2026-01-01T00:00:00"}


@pytest.fixture
def figures(monkeypatch):
    kept = []
    real = plots._save

    def keep(fig, path, top_legend=True):
        kept.append(fig)
        return real(fig, path, top_legend)

    monkeypatch.setattr(plots, "_save", keep)
    return kept


def test_an_unknown_gpu_model_leaves_the_ceiling_unknown_not_8000():
    r = run([bench("compute", "bind:0", 0.01, 5953.0), bench("compute", "bind:1", 0.01, 9000.0)], ["seed GPU"])
    by = {e.axes["policy"]: e for e in entries(r)}
    assert by["bind:0"].flag == "?" and by["bind:1"].flag == "!"
    (t,) = grouped_tables(r)
    assert "5953 GB/s ?" in t.text() and "GPU model is unknown" in t.text()
    known = run([bench("compute", "bind:0", 0.01, 5953.0)], ["NVIDIA H100 80GB HBM3"])
    assert entries(known)[0].flag == "!"


def test_bandwidth_bars_carry_the_tables_flags(tmp_path, figures):
    r = run([bench("h2d", "bind:0", 1.0, 107.0), bench("h2d", "bind:1", 1.0, 50.0),
             bench("compute", "bind:0", 0.01, 150000.0), bench("compute", "bind:1", 0.01, 3000.0)],
            ["NVIDIA H100 80GB HBM3"])
    plots.bandwidth_plots(r, tmp_path)
    (fig,) = figures
    hatched = [p for ax in fig.axes for p in ax.patches if p.get_hatch()]
    assert len(hatched) == 2  # 107 GB/s over one PCIe Gen5 link, 150000 GB/s compute
    marks = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert marks.count("!") == 2
    assert any("not a real bandwidth" in t.get_text() for t in fig.texts)


def test_latency_points_carry_the_flags(tmp_path, figures):
    r = run([bench("compute", "bind:0", 0.01, 150000.0), bench("compute", "bind:0", 0.02, 2000.0, numel=1 << 22)],
            ["NVIDIA H100 80GB HBM3"])
    plots.latency_plots(r, tmp_path)
    (fig,) = figures
    assert [t.get_text() for ax in fig.axes for t in ax.texts] == ["!"]


def test_multi_gpu_bandwidth_says_it_is_summed(tmp_path, figures):
    r = run([bench("h2d", "bind:0", 1.0, 110.0, np=2), bench("h2d", "bind:1", 1.0, 50.0, np=2)],
            ["NVIDIA H200"] * 2)
    plots.bandwidth_plots(r, tmp_path)
    assert "summed over 2 GPUs" in figures[0].axes[0].get_ylabel()


def weighted_run() -> dict:
    pols = {"bind:0": 100, "weighted:0=1,3=1": 50, "weighted:0=1,3=2": 33, "weighted:0=1,3=3": 25,
            "weighted:0=1,3=4": 20, "bind:3": 0}
    bs = []
    for pol, share in pols.items():
        for k, numel in enumerate((1 << 20, 1 << 24, 1 << 28)):
            base = 10.0 ** k
            bs.append(bench("h2d", pol, base * (2 - share / 100), None, np=2, numel=numel))
            bs.append(bench("compute", pol, 0.02 + 0.002 * (share % 7), None, np=2, numel=numel))
    return run(bs, ["NVIDIA H200"] * 2)


def test_weighted_figure_is_readable(tmp_path, figures):
    plots.weighted_plots(weighted_run(), tmp_path)
    (fig,) = figures
    assert plots.overlapping_labels(fig) == []
    assert plots.covered_points(fig) == []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        # no line joins 1:1 (50%) to DRAM-only (100%): nothing was measured between them
        for line in ax.get_lines():
            xs = list(line.get_xdata())
            assert not any(a <= 50 and b >= 100 for a, b in zip(xs, xs[1:])), xs
        lo, hi = ax.get_ylim()
        assert sum(1 for t in ax.get_yticks() if lo <= t <= hi) >= 2, ax.get_title()
        assert any("not measured" in t.get_text() for t in ax.texts)
    # the advisor's model across the unmeasured ratios of a host-link phase: dotted, said to extrapolate
    h2d = next(ax for ax in fig.axes if ax.get_title().startswith("H2D"))
    dotted = [ln for ln in h2d.get_lines() if ln.get_linestyle() == ":"]
    assert len(dotted) == 3 and all(min(ln.get_xdata()) == 50 and max(ln.get_xdata()) == 100 for ln in dotted)
    assert any("model dotted" in t.get_text() and "extrapolated up to 25 pts" in t.get_text() for t in h2d.texts)
    compute = next(ax for ax in fig.axes if ax.get_title().startswith("compute"))
    assert not [ln for ln in compute.get_lines() if ln.get_linestyle() == ":"]  # no host memory: no model


def test_overlapping_labels_finds_collisions():
    plt = plots._plt()
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.set_xticks([20, 25], ["20%", "25%"], fontsize=14)
    ax.set_xlim(0, 100)
    assert plots.overlapping_labels(fig)
    plt.close(fig)
