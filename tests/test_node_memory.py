"""Each rank's memory per NUMA node as ``numastat -p`` counts it (numabench.numa.numastat): its
categories, agreement with numastat itself where installed, and the report's tables of it and of
the place axis's kinds (numabench.results.host_memory)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from numabench.numa.numastat import NodeMemory, category, helper_memory, node_memory, numastat_table
from numabench.numa.placement import parse_numa_maps
from numabench.results.report import build_report

MAPS = """\
55d0c0a00000 default file=/usr/bin/python3.11 mapped=300 N0=300 kernelpagesize_kB=4
55d0c1e00000 default heap anon=20000 dirty=20000 N0=15000 N2=5000 kernelpagesize_kB=4
7f0000000000 bind:2 anon=262144 dirty=262144 N2=262144 kernelpagesize_kB=4
7f1000000000 default file=/dev/zero\\040(deleted) dirty=262144 N0=262144 kernelpagesize_kB=4
7f2000000000 default file=/dev/hugepages/x huge dirty=4 N1=4 kernelpagesize_kB=2048
7ffc00000000 default stack anon=30 dirty=30 N0=30 kernelpagesize_kB=4
7ffd00000000 default stack:1234 anon=8 dirty=8 N1=8 kernelpagesize_kB=4
"""


def test_categories_are_numastat_s():
    es = parse_numa_maps(MAPS)
    assert [category(e) for e in es] == ["private", "heap", "private", "private", "huge", "stack", "stack"]
    mem = node_memory(entries=es)
    page = 4096
    assert mem.by_category["heap"] == {0: 15000 * page, 2: 5000 * page}
    assert mem.by_category["huge"] == {1: 4 * 2**21}
    assert mem.by_category["stack"] == {0: 30 * page, 1: 8 * page}
    assert mem.by_category["private"] == {0: (300 + 262144) * page, 2: 262144 * page}
    assert mem.total_by_node()[2] == (5000 + 262144) * page
    assert NodeMemory.from_dict(json.loads(json.dumps(mem.to_dict()))) == mem
    table = numastat_table(mem)
    assert table[0] == ["", "Node 0", "Node 1", "Node 2", "Total"]
    assert table[2][0] == "Heap" and table[2][1] == f"{15000 * page / 2**20:.2f}"
    assert table[-1][0] == "Total" and float(table[-1][-1]) == pytest.approx(sum(mem.total_by_node().values()) / 2**20,
                                                                             abs=0.01)
    with pytest.raises(ValueError, match="unknown categories \\['swap'\\]"):
        NodeMemory.from_dict({"swap": {}})


@pytest.mark.skipif(shutil.which("numastat") is None, reason="numastat (package numactl) is not installed here")
def test_the_same_figures_as_numastat_itself():
    """An idle process read both ways: numastat -p's MB per node and category are ours."""
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(60)"])
    try:
        time.sleep(2.0)
        out = subprocess.run(["numastat", "-p", str(child.pid)], capture_output=True, text=True, check=True).stdout
        ours = node_memory(child.pid)
    finally:
        child.kill()
        child.wait()
    lines = out.splitlines()
    header = next(l for l in lines if "Node" in l and "Total" in l)
    nodes = [int(n) for n in re.findall(r"Node (\d+)", header)]
    for name in ("Huge", "Heap", "Stack", "Private"):
        row = next(l for l in lines if l.startswith(name))
        theirs = [float(v) for v in row.split()[1:]]
        mine = [ours.by_category[name.lower()].get(n, 0) / 2**20 for n in nodes]
        assert mine == pytest.approx(theirs[:len(nodes)], abs=0.011), (name, mine, theirs)
    assert ours.by_category["private"].get(nodes[0], 0) > 64 * 2**20  # the bytearray is there


def test_the_report_shows_kinds_and_memory_per_node(tmp_path: Path):
    mem = {"huge": {}, "heap": {"0": 239 << 20}, "stack": {"0": 1 << 16},
           "private": {"0": 67812 << 20, "2": 135455 << 20}}
    kinds = [{"kind": "master", "policy": "bind:0", "planned_bytes": 8 << 30, "bytes_by_node": {"0": 8 << 30},
              "untouched_bytes": 0, "ok": True, "deviation_pp": 0.0, "message": "m"},
             {"kind": "moments", "policy": "bind:2", "planned_bytes": 16 << 30, "bytes_by_node": {"2": 16 << 30},
              "untouched_bytes": 0, "ok": True, "deviation_pp": 0.0, "message": "m"}]
    case = "np1-16.8M-bind:0-fp32-ours-place=master:bind:0+moments:bind:2"
    benches = []
    for impl in ("ours", "torch-fused"):  # two entries of one worker run: its memory shown once
        param = f"step-{case.replace('-ours-', f'-{impl}-')}"
        benches.append({
            "name": f"test_cpu_adam[{param}]", "fullname": f"benchmarks/test_cpu_adam.py::test_cpu_adam[{param}]",
            "stats": {"min": 1e-3, "max": 1e-3, "mean": 1e-3, "median": 1e-3, "stddev": 0.0, "rounds": 1,
                      "data": [1e-3]},
            "extra_info": {"family": "cpu_adam", "phase": "step", "nprocess": 1, "numel": 16777216, "dtype": "fp32",
                           "policy": "bind:0", "impl": impl, "place": "master:bind:0+moments:bind:2",
                           "placement": [{"rank": 0, "policy": "bind:0", "bytes_by_node": {}, "kinds": kinds}],
                           "node_memory_per_rank": [mem]}})
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"machine_info": {"numabench": {"hardware_key": "k"}}, "benchmarks": benches}))
    rep = build_report(run)
    text = rep.text
    assert "Placement by tensor kind (place)" in text
    assert "| cpu_adam | `np1-16.8M-bind:0-fp32-ours-place=master:bind:0+moments:bind:2` | 0 | moments | bind:2 | " \
           "16384.00 | 0.00 | 16384.00 | ok (0 pp) |" in text
    assert "Host memory per NUMA node after set-up (numastat -p)" in text
    assert "|  |  |  | Private | 67812.00 | 135455.00 | 203267.00 |" in text
    assert text.count("| Private |") == 1  # one worker run, one table
    assert "| family | case | rank | MiB | Node 0 | Node 2 | Total |" in text


def test_a_helper_process_private_pages_are_counted_and_what_it_shares_is_not():
    """A helper (as ZenFlow's optimizer process is to a rank), forked: the 32 MiB it touches of its
    own count; the parent's 64 MiB it inherited (pages shared until written) and a shared buffer do not."""
    import mmap
    import os

    inherited = bytearray(64 * 2**20)
    inherited[::4096] = b"p" * len(inherited[::4096])
    shared = mmap.mmap(-1, 16 * 2**20)  # MAP_SHARED: a file (/dev/zero) in numa_maps
    shared.write(b"s" * (16 * 2**20))
    before = sum(helper_memory().values())
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the helper: touch its own, then wait to be read and killed
        own = bytearray(32 * 2**20)
        own[::4096] = b"c" * len(own[::4096])
        os.write(ready_w, b"r")
        time.sleep(60)
        os._exit(0)
    try:
        assert os.read(ready_r, 1) == b"r"
        counted = sum(helper_memory().values()) - before
        assert 32 * 2**20 <= counted < 60 * 2**20, counted  # its 32 MiB, not the 64 + 16 it shares
        assert helper_memory(pid) == {}  # it has no helpers of its own
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(ready_r)
        os.close(ready_w)
        shared.close()
    assert sum(helper_memory().values()) == before
