"""The weighted-interleave advisor: exact on synthetic rates, within its stated error on the
seed's published DRAM/CXL data; several runs combined into one report; history with change
points from saved runs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import import_seed_runs

from numabench.cli import main
from numabench.errors import UsageError
from numabench.results.advise import advise, predict, render
from numabench.results.history import history
from numabench.results.report import build_report, combine_runs
from numabench.results.tables import grouped_tables

ROOT = Path(__file__).resolve().parents[1]


def entry(family: str, phase: str, policy: str, seconds: float, numel: int = 1 << 20, extra: dict | None = None,
          invocations: list[float] | None = None, commit: str = "") -> dict:
    name = f"test_{family}[{phase}-np1-{numel}-{policy}-fp32]"
    x = {"family": family, "phase": phase, "nprocess": 1, "numel": numel, "dtype": "fp32", "policy": policy,
         **(extra or {})}
    if invocations:
        x["invocation_medians_s"] = invocations
    return {"name": name, "fullname": f"benchmarks/test_{family}.py::{name}", "extra_info": x,
            "stats": {"median": seconds, "mean": seconds, "stddev": 0.0, "data": [seconds] * 3}}


def run(benchmarks: list[dict], key: str = "K", when: str = "2026-01-01T00:00:00", commit: str = "abc") -> dict:
    return {"machine_info": {"numabench": {"hardware_key": key}}, "benchmarks": benchmarks, "datetime": when,
            "commit_info": {"id": commit}}


def test_the_model_on_synthetic_rates():
    # host-only (CPU Adam): the nodes' bandwidth adds; the best share balances the two
    r = run([entry("cpu_adam", "step", "bind:0", 1.0), entry("cpu_adam", "step", "bind:1", 3.0),
             entry("cpu_adam", "step", "weighted:0=3,1=1", 0.75)])
    (a,) = advise(r)
    assert (a.fast, a.slow, a.link_bound, a.floor) == (0, 1, False, 0.0)
    p31 = next(p for p in a.predictions if p.weights == "0=3,1=1")
    assert p31.predicted_s == pytest.approx(0.75) and p31.error_pct == pytest.approx(0.0)
    assert a.best.weights == "0=3,1=1"  # max(0.75*1, 0.25*3) = 0.75: faster than either node alone
    # link-bound (the offloaded copy): never faster than the fast node alone; room on the slow node
    r = run([entry("adam_offload", "h2d", "bind:0", 1.0), entry("adam_offload", "h2d", "bind:3", 4.0),
             entry("adam_offload", "compute", "bind:0", 0.1), entry("adam_offload", "compute", "bind:3", 0.1)])
    (a,) = advise(r)  # compute touches no host memory: left out
    assert a.link_bound and a.floor == 1.0
    assert [round(p.predicted_s, 3) for p in a.predictions] == [1.0, 1.0, 1.333, 2.0, 2.667, 3.0, 3.2]
    assert a.max_slow_share == pytest.approx(1.02 / 4)
    assert a.best.weights == "0=3,3=1"  # as fast as 4:1 (the link bounds both) with more room on node 0
    assert predict(0.5, 1.0, 4.0, 0.0) == 2.0


def test_the_model_on_the_seeds_dram_and_cxl_data(tmp_path, capsys):
    paths = import_seed_runs(tmp_path)
    advices = advise(combine_runs(paths))
    errors = [(a.case["numel"], abs(p.error_pct)) for a in advices for p in a.predictions if p.measured_s]
    assert len(advices) == 16 and len(errors) == 64
    assert max(e for n, e in errors) < 16  # 12.8M, one GPU, 1:1: -15.3%
    assert max(e for n, e in errors if n >= 67_000_000) < 3
    big = next(a for a in advices if a.phase == "h2d" and a.case["numel"] == 544997376 and a.case["nprocess"] == 1)
    assert (big.fast, big.slow) == (0, 3) and 0.22 < big.max_slow_share < 0.24
    capsys.readouterr()
    assert main(["advise", *paths, "--where", "numel=545M"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("model: t(f) = max(") and "up to 23% of the pages can live on node 3" in text


def test_several_runs_one_report_and_one_curve(tmp_path):
    paths = import_seed_runs(tmp_path)
    rep = build_report(paths, tmp_path / "rep", where={"nprocess": "1", "dtype": "fp32"})
    weighted = [p for p in rep.images if "weighted" in p.name]
    assert len(weighted) == 1
    (h2d,) = [t for t in grouped_tables(combine_runs(paths), where={"nprocess": "1"}) if t.phase == "h2d"]
    assert h2d.header[1:] == ["bind:0", "bind:3", "weighted:0=1,3=1", "weighted:0=1,3=2", "weighted:0=1,3=3",
                              "weighted:0=1,3=4"]
    (compute,) = [t for t in grouped_tables(combine_runs(paths), where={"nprocess": "1"}) if t.phase == "compute"]
    assert compute.impossible and "GB/s !" in compute.rows[-1][1] and "not a real bandwidth" in compute.markdown()
    assert not h2d.impossible
    other = json.loads(Path(paths[0]).read_text())
    other["machine_info"]["numabench"]["hardware_key"] = "elsewhere"
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(UsageError, match="runs of different hardware"):
        combine_runs([paths[1], tmp_path / "other.json"])


def test_history_finds_a_change_the_next_run_confirms(tmp_path):
    folder = tmp_path / "baselines" / "K" / "Linux-CPython-3.11-64bit"
    folder.mkdir(parents=True)
    values = {1: [1.00, 1.01, 0.99], 2: [1.00, 1.02, 1.01], 3: [1.20, 1.21, 1.19], 4: [1.20, 1.22, 1.21],
              5: [1.50, 1.49, 1.51]}  # a step at run 3, confirmed by 4; run 5 jumps, the last run: no next run to ask
    for k, inv in values.items():
        b = entry("touch", "write", "default", sorted(inv)[1], invocations=inv)
        noise = entry("touch", "write", "bind:0", 1.0, invocations=[1.0, 1.01, 0.99])
        (folder / f"{k:04d}_r.json").write_text(json.dumps(run([b, noise], when=f"2026-01-0{k}T00:00:00",
                                                                commit=f"c{k}")))
    h = history(tmp_path / "baselines" / "K")
    by = {s.name.split("[")[1]: s for s in h.series}
    changes = by["write-np1-1048576-default-fp32]"].changes
    assert [c.run for c in changes] == [2, 4] and changes[0].change_pct == pytest.approx(18.8, abs=0.5)
    assert not by["write-np1-1048576-bind:0-fp32]"].changes
    out = subprocess.run([sys.executable, "-m", "numabench", "history", str(tmp_path / "baselines" / "K"),
                          "--out", str(tmp_path / "plots")], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and "change at run 2 (0003_r.json, commit c3)" in out.stdout, out.stdout + out.stderr
    assert (tmp_path / "plots" / "touch_history.png").exists()


def test_predictions_say_what_they_stand_on():
    # measured 1:1..1:4 (fast:slow): 4:1, 3:1, 2:1 lie beyond them
    r = run([entry("adam_offload", "h2d", "bind:0", 1.0), entry("adam_offload", "h2d", "bind:3", 4.0),
             *[entry("adam_offload", "h2d", f"weighted:0=1,3={w}", 4.0 * w / (w + 1)) for w in (1, 2, 3, 4)]])
    (a,) = advise(r)
    assert a.basis(0.8) == ("extrapolated", pytest.approx(30.0))
    assert a.basis(0.5)[0] == "measured" and a.basis(0.4)[0] == "interpolated"
    text = render([a])
    assert "4:1 1000 [extrap. 30 pts]" in text
    # 3:1 and 4:1 are extrapolations predicted at bind:0's own time: bind:0 (measured) is the choice
    assert a.best.weights == "0=3,3=1" and a.fastest == ("bind:0", 1.0, "measured")
    assert "fastest: bind:0 (1000 ms; measured)" in text and "fastest: weighted" not in text
    room, basis = a.room
    assert room == pytest.approx(1.02 / 4) and basis.startswith("extrapolated, 24 pts beyond")
    # nothing weighted measured: every prediction is the model's only
    (b,) = advise(run([entry("adam_offload", "h2d", "bind:0", 1.0), entry("adam_offload", "h2d", "bind:3", 4.0)]))
    assert b.basis(0.8)[0] == "model only" and "[model only]" in render([b])


def test_the_room_is_checked_against_the_measured_ratios_it_crosses():
    # the model says 1.02/1.4 = 73% of the pages can sit on node 1; the measured 1:2 (67%) is +10.9%
    r = run([entry("adam_offload", "h2d", "bind:0", 1.0, extra={"nprocess": 2}),
             entry("adam_offload", "h2d", "bind:1", 1.4, extra={"nprocess": 2}),
             entry("adam_offload", "h2d", "weighted:0=1,1=1", 1.01, extra={"nprocess": 2}),
             entry("adam_offload", "h2d", "weighted:0=1,1=2", 1.109, extra={"nprocess": 2})])
    (a,) = advise(r)
    assert a.max_slow_share == pytest.approx(1.02 / 1.4)
    room, basis = a.room
    assert room == pytest.approx(0.5) and "67% is +10.9%" in basis
    assert "up to 50% of the pages can live on node 1" in render([a])


def test_a_ratio_is_the_fastest_only_where_the_model_puts_it_faster_than_the_fast_node():
    # host-only: 3:1 predicted 0.75 s against bind:0's 1.0 s: the ratio; link-bound, 3:1 at the floor: bind:0
    (host,) = advise(run([entry("cpu_adam", "step", "bind:0", 1.0), entry("cpu_adam", "step", "bind:1", 3.0)]))
    assert host.fastest == ("weighted:0=3,1=1", pytest.approx(0.75), "model only: no weighted ratio measured")
    (link,) = advise(run([entry("adam_offload", "h2d", "bind:0", 1.0), entry("adam_offload", "h2d", "bind:3", 4.0)]))
    assert link.best.predicted_s == pytest.approx(1.0) and link.fastest == ("bind:0", 1.0, "measured")


def test_the_fast_node_alone_is_the_fastest_where_it_was_measured_faster():
    # two GPUs share the fast node: 4:1 predicted max(0.8*96.6, 0.2*878, 96.6) = 175.6 ms; bind:0 measured 96.6
    r = run([entry("adam_offload", "h2d", "bind:0", 0.0966), entry("adam_offload", "h2d", "bind:3", 0.878)])
    (a,) = advise(r)
    assert a.best.weights == "0=4,3=1" and a.best.predicted_s == pytest.approx(0.1756)
    assert a.fastest[0] == "bind:0"
    assert "fastest: bind:0 (96.6 ms; measured)" in render([a])


def test_host_only_families_are_what_their_family_says():
    # the advisor's "no PCIe link bounds it" follows the registry, not a hand-kept list
    from numabench.families import FAMILIES
    from numabench.results.advise import host_only

    assert {k for k in FAMILIES if host_only(k)} == {"cpu_adam", "host_membw", "touch"}
    assert not host_only("a family from elsewhere")
