"""Run tiers: smoke inside ci inside full on every recorded machine, ci's policies (one of
each kind the machine can apply), explicit axis options over the tier, the markers, and the
time plan's line (with a baseline: from its recorded costs)."""
from __future__ import annotations

import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from helpers import fake_caps

from numabench.families import FAMILIES, family
from numabench.machine.topology import Topology, discover
from numabench.plan import placed_seconds, plan_runs
from numabench.tiers import ci_policies, selection, tier_case_ids

ROOT = Path(__file__).resolve().parents[1]
MACHINES = ROOT / "tests" / "data" / "machines"
TREES = ["vm-1node", "h200x2-vm", "dgx-2socket-8gpu", "cxl-3node", "old-kernel-2node"]


@lru_cache(maxsize=None)
def topo(name: str) -> Topology:
    return discover(MACHINES / name)


@pytest.mark.parametrize("tree", TREES)
def test_smoke_is_inside_ci_inside_full_and_smoke_is_each_family_once(tree):
    t, caps = topo(tree), fake_caps()
    for key in FAMILIES:
        fam = family(key)
        smoke, ci, full = (tier_case_ids(tier, fam, t, caps) for tier in ("smoke", "ci", "full"))
        assert len(smoke) == 1, (key, smoke)
        assert smoke <= ci <= full, key
        assert len(ci) < len(full), key


@pytest.mark.parametrize("tree, caps_kw, want", [
    # one memory node: bind:0 places what default places; the weighted case is there to skip, saying why
    ("vm-1node", {}, ["default", "weighted:0=3,1=1"]),
    ("dgx-2socket-8gpu", {}, ["default", "bind:0", "bind:1", "interleave:all", "weighted:0=3,1=1"]),
    # the DRAM-heavy side is the CPU node, the light side the CPU-less (CXL-like) node
    ("cxl-3node", {}, ["default", "bind:0", "bind:1", "bind:3", "interleave:all", "weighted:0=3,3=1"]),
    # no weighted interleave in this kernel: the weighted case is collected, and skips saying so
    ("dgx-2socket-8gpu", {"weighted_interleave_kernel": False, "weighted_interleave_errno": 22},
     ["default", "bind:0", "bind:1", "interleave:all", "weighted:0=3,1=1"]),
])
def test_ci_takes_one_policy_of_each_kind_the_machine_can_apply(tree, caps_kw, want):
    assert [p.id for p in ci_policies(topo(tree), fake_caps(**caps_kw))] == want


def test_ci_narrows_where_a_family_says_so():
    t, caps = topo("h200x2-vm"), fake_caps()
    sel = selection("ci", family("adam_offload"), t, caps)
    assert sel.axis_values["impl"] == ("ours",) and sel.axis_values["schedule"] == ("serial", "overlap")
    assert sel.sizes is None and sel.dtypes is None and sel.max_rounds == 10
    assert selection("full", family("adam_offload"), t, caps).max_rounds is None
    # train_step: the offloaded step and its GPU-resident reference, the tiny model
    ts = selection("ci", family("train_step"), t, caps)
    assert ts.axis_values["mode"] == ("ddp", "fsdp-offload") and ts.dtypes == ("bf16",)
    assert selection("ci", family("train_step"), topo("vm-1node"), caps).dtypes is None  # no GPU: fp32 runs


def test_k_weighted_shows_every_weighted_case_skipped_with_its_reason():
    """`pytest benchmarks -k weighted`, the design's own filter, on a one-node machine: exit 0, each
    weighted case of the tier SKIPPED with why (not "nothing selected", exit 5)."""
    out = subprocess.run([sys.executable, "-m", "pytest", "benchmarks", "-k", "weighted", "-q", "-rs",
                          "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    skips = [ln for ln in out.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert "skipped" in out.stdout.splitlines()[-1], out.stdout[-3000:]
    if len(discover("/").memory_node_ids) < 2:  # this CI machine: the reason is the missing node
        assert any("test_touch.py: policy weighted:0=3,1=1 needs NUMA node(s) 1 with memory" in ln for ln in skips), \
            out.stdout[-3000:]


def collect(*args: str) -> tuple[list[str], str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return [ln for ln in out.stdout.splitlines() if "::" in ln], out.stdout


def test_tier_option_markers_and_explicit_axes():
    smoke, text = collect("benchmarks", "--numa-tier=smoke")
    assert len(smoke) == sum(len(family(k).phases) for k in FAMILIES)
    assert "numabench plan:" in text and "(smoke tier)" in text
    ci, _ = collect("benchmarks")  # the default tier
    assert set(smoke) < set(ci)
    assert collect("benchmarks", "-m", "smoke")[0] == smoke  # the smoke items of the ci tier
    full_ci, _ = collect("benchmarks", "--numa-tier=full", "-m", "ci")
    assert full_ci == ci
    # an explicit axis option overrides the tier's axis
    bound, _ = collect("benchmarks/test_touch.py", "--numa-tier=smoke", "--param-sizes=1M,2M")
    assert [n.split("[")[1] for n in bound] == ["write-np1-1M-default-fp32]", "write-np1-2M-default-fp32]"]


def test_plan_from_a_baseline_uses_its_recorded_costs():
    fam = family("touch")
    t, caps = topo("vm-1node"), fake_caps()
    from numabench.families.matrix import case_matrix, worker_run_key

    case = case_matrix(fam, t, caps, sizes=(1 << 20,), policies=selection("smoke", fam, t, caps).policies)[0][0]
    key = worker_run_key(case, fam)
    entry = {"name": "test_touch[write-" + case.id + "]", "stats": {"median": 0.001},
             "extra_info": {"family": "touch", "phase": "write", "nprocess": 1, "numel": 1 << 20,
                            "policy": "default", "dtype": "fp32", "run_fixed_s": 2.0, "run_step_wall_s": 0.01}}
    plan = plan_runs([(key, fam, case, 1, 1, 10, 3)], {"benchmarks": [entry]}, "0001_x.json", 0)
    assert plan.runs[0].source == "baseline" and plan.runs[0].seconds == pytest.approx(2.0 + 13 * 0.01)
    model = plan_runs([(key, fam, case, 1, 1, 10, 3)], None, None, 0)
    assert model.runs[0].source == "model" and "model estimates" in model.summary()
    assert "1 of 1 runs timed from the baseline 0001_x.json" in plan.summary("ci")
    # a run the baseline lacks at this size: the baseline's run at another size, its steps scaled by
    # the elements and its placing re-modelled
    other = case_matrix(fam, t, caps, sizes=(1 << 22,), policies=selection("smoke", fam, t, caps).policies)[0][0]
    [run] = plan_runs([(worker_run_key(other, fam), fam, other, 1, 1, 10, 3)], {"benchmarks": [entry]},
                      "0001_x.json", 0).runs
    assert run.source == "baseline, scaled from 1.05M"
    assert run.steps_s == pytest.approx(13 * 0.01 * 4)
    assert run.seconds == pytest.approx(2.0 - placed_seconds(fam, case) + placed_seconds(fam, other) + 13 * 0.04)
    # without recorded step times there: the family's start-up as the baseline recorded it, the rest modelled
    unstepped = {**entry, "extra_info": {k: v for k, v in entry["extra_info"].items() if k != "run_step_wall_s"}}
    [run] = plan_runs([(worker_run_key(other, fam), fam, other, 1, 1, 10, 3)], {"benchmarks": [unstepped]},
                      "0001_x.json", 0).runs
    assert run.source == "model, start-up from the baseline"
    modelled = plan_runs([(worker_run_key(other, fam), fam, other, 1, 1, 10, 3)], None, None, 0).runs[0]
    assert run.seconds < modelled.seconds  # 2.0 s recorded start-up, not the model's 4 s


def test_a_forked_plan_leaves_the_recorded_imports_out_and_counts_the_servers_once():
    fam = family("touch")
    t, caps = topo("vm-1node"), fake_caps()
    from numabench.families.matrix import case_matrix, worker_run_key

    cases = case_matrix(fam, t, caps, sizes=(1 << 20, 1 << 22), policies=selection("smoke", fam, t, caps).policies)
    runs, entries = [], []
    for (case, _), imp in zip(cases, (1.5, 1.25)):
        runs.append((worker_run_key(case, fam), fam, case, 1, 1, 10, 3))
        entries.append({"name": "test_touch[write-" + case.id + "]", "stats": {"median": 0.001},
                        "extra_info": {"family": "touch", "phase": "write", "nprocess": 1, "numel": case.numel,
                                       "policy": "default", "dtype": "fp32", "run_fixed_s": 2.0,
                                       "run_step_wall_s": 0.01, "launcher": "none",
                                       "run_fixed_parts_s": {"import": imp, "setup": 0.2}}})
    execd = plan_runs(runs, {"benchmarks": entries}, "0001_x.json", 0)
    forked = plan_runs(runs, {"benchmarks": entries}, "0001_x.json", 0, forked=True)
    assert [r.seconds for r in forked.runs] == pytest.approx([r.seconds - i for r, i in zip(execd.runs, (1.5, 1.25))])
    assert forked.server_s == 1.5 and forked.seconds == pytest.approx(execd.seconds - 2.75 + 1.5)
    assert forked.to_dict()["server_seconds"] == 1.5 and execd.to_dict()["server_seconds"] == 0.0
    assert "workers forked from a server: 3 s of recorded imports left out" in forked.summary()
    # a baseline run that was forked itself has no import of its own to leave out
    forked_entries = [{**e, "extra_info": {**e["extra_info"], "launcher": "none (forked)"}} for e in entries]
    again = plan_runs(runs, {"benchmarks": forked_entries}, "0001_x.json", 0, forked=True)
    assert [r.seconds for r in again.runs] == pytest.approx([r.seconds for r in execd.runs])
