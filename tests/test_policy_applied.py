"""train_step ranks check the memory policy they really run under against the case's."""
from __future__ import annotations

import subprocess
import sys

import pytest

from numabench.families.train_step.applied import (
    mems_allowed,
    mismatch,
    parse_list,
    running_policy,
)
from numabench.numa import mempolicy
from numabench.numa.policy import Policy

P = Policy.parse


def test_parse_node_lists():
    assert parse_list("0-3,5") == (0, 1, 2, 3, 5)
    assert parse_list("1") == (1,)
    assert mems_allowed("Name:\tx\nMems_allowed_list:\t0-1\n") == (0, 1)
    assert mems_allowed("Name:\tx\n") is None


def running(mode, nodes, allowed=(0, 1)):
    return {"mode": mempolicy.MODE_NAMES[mode], "mode_number": mode, "nodes": list(nodes), "mems_allowed": list(allowed)}


def test_mismatch_names_what_differs():
    assert mismatch(P("default"), running(mempolicy.MPOL_DEFAULT, ())) is None
    assert mismatch(P("bind:1"), running(mempolicy.MPOL_BIND, (1,))) is None
    assert mismatch(None, running(mempolicy.MPOL_BIND, (0,))) is None
    # a launcher's numactl --membind=0 over a case that asked for the default
    why = mismatch(P("default"), running(mempolicy.MPOL_BIND, (0,)))
    assert "bind:0" in why and "default" in why
    why = mismatch(P("bind:1"), running(mempolicy.MPOL_BIND, (0,)))
    assert "[0]" in why and "[1]" in why
    why = mismatch(P("interleave:0,1"), running(mempolicy.MPOL_INTERLEAVE, (0, 1), allowed=(0,)))
    assert "Mems_allowed" in why and "[1]" in why


def test_this_process_runs_under_the_default_policy():
    r = running_policy()
    assert r["mode"] == "default" and r["nodes"] == [] and r["mems_allowed"]
    assert mismatch(P("default"), r) is None


def test_a_bound_process_reports_its_binding():
    node = running_policy()["mems_allowed"][0]
    code = ("from numabench.numa.launch import apply; from numabench.numa.policy import Policy;"
            f"apply(Policy.parse('bind:{node}'), None);"
            "from numabench.families.train_step.applied import running_policy, mismatch;"
            f"r = running_policy(); print(r['mode'], r['nodes'], mismatch(Policy.parse('bind:{node}'), r), mismatch(Policy.parse('default'), r) is not None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    if out.returncode != 0 and "Operation not permitted" in out.stderr:
        pytest.skip("set_mempolicy is not permitted here")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["bind", f"[{node}]", "None", "True"]
