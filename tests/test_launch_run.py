"""The launcher really re-execs a child under a policy, both ways, and the
placement check on the child's touched buffer sees where its pages are."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from numabench.cases import Case
from numabench.errors import PlacementError
from numabench.families import family
from numabench.machine.capabilities import probe
from numabench.machine.topology import discover
from numabench.numa.launch import build_command, worker_env
from numabench.numa.placement import Expectation, PlacementReport, compare
from numabench.numa.policy import Policy
from numabench.workers.run import run_case

CHILD = r"""
import ctypes, json, mmap
from numabench.numa.mempolicy import get_mempolicy
from numabench.numa.placement import numa_maps_report, pages_report
n = 64 * 2**20
buf = mmap.mmap(-1, n)
addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
ctypes.memset(addr, 0x5A, n)
mode, nodes = get_mempolicy()
print(json.dumps({"mode": mode, "nodes": nodes, "pages": pages_report([(addr, n)]).to_dict(),
                  "maps": numa_maps_report(ranges=[(addr, n)]).to_dict()}))
"""

TOPO = discover("/")
CAPS = probe()
NODE = TOPO.memory_node_ids[0]
LAUNCHERS = ["builtin"] + (["numactl"] if CAPS.numactl_path else [])


def run_child(policy: Policy, launcher: str) -> dict:
    cmd, how = build_command([sys.executable, "-c", CHILD], policy, TOPO, CAPS,
                             cpu_node=TOPO.cpu_node_ids[0], launcher=launcher)
    assert how == launcher
    out = subprocess.run(cmd, capture_output=True, text=True, env=worker_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("text, mode", [(f"bind:{NODE}", 2), (f"interleave:{NODE}", 3)])
def test_child_runs_under_policy_and_pages_land(text, mode, launcher):
    got = run_child(Policy.parse(text), launcher)
    assert got["mode"] == mode, f"child runs under mode {got['mode']}, wanted {mode}"
    assert got["nodes"] == [NODE]
    for key in ("pages", "maps"):
        report = PlacementReport.from_dict(got[key])
        assert report.total_bytes >= 64 * 2**20
        verdict = compare(report, Expectation(within=(NODE,)))
        assert verdict.ok and verdict.deviation_pp == 0.0, verdict.message


def test_builtin_launcher_rejects_bad_policy_with_one_line():
    out = subprocess.run([sys.executable, "-m", "numabench.numa.launch", "--policy", "weighted:0=0", "--", "true"],
                         capture_output=True, text=True, env=worker_env())
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert "weight 0" in out.stderr and "1..255" in out.stderr


def test_placement_check_can_fail():
    """A wrong expectation (all pages on a node that has none) fails, saying by how much."""
    report = PlacementReport({NODE: 100 * 2**20})
    verdict = compare(report, Expectation(within=(NODE + 1,)))
    assert not verdict.ok and verdict.deviation_pp == pytest.approx(100.0)
    assert "off by 100.00 percentage points" in verdict.message


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_touch_case_through_the_whole_machinery(launcher):
    fam = family("touch")
    case = Case("touch", 1, 16 * 2**20, Policy.parse(f"bind:{NODE}"), "fp32")
    res = run_case(case, fam, TOPO, CAPS, rounds=3, warmup=1, launcher=launcher, timeout_s=120)
    assert res.launcher == launcher
    assert len(res.phases["write"]) == 3 and min(res.phases["write"]) > 0
    [p] = res.placement
    assert p.verdict is not None and p.verdict.ok
    assert p.report.total_bytes == 64 * 2**20
    # where the run's fixed time went (time plans): the parts are within the whole
    parts = res.fixed_parts_s
    assert {"start", "import", "setup", "checks", "close"} <= set(parts), parts
    assert all(v >= 0 for v in parts.values()) and res.fixed_s > 0
    assert sum(parts[k] for k in ("start", "import", "setup", "checks", "close")) <= res.fixed_s + 0.05, parts
    assert res.affinity[0] and set(res.affinity[0]) <= set(TOPO.node(NODE).cpus)
    assert res.setup_info[0].bytes == 64 * 2**20  # the family's typed reply, parsed in the parent


def test_wrong_promise_fails_the_case(monkeypatch):
    """If the policy's promise is not met the case raises before any timing."""
    fam = family("touch")
    case = Case("touch", 1, 4 * 2**20, Policy.parse(f"bind:{NODE}"), "fp32")
    monkeypatch.setattr(Policy, "expectation", lambda self, cpu_node=None: Expectation(within=(NODE + 7,)))
    with pytest.raises(PlacementError, match="off by 100.00 percentage points"):
        run_case(case, fam, TOPO, CAPS, rounds=2, warmup=0, timeout_s=120)
