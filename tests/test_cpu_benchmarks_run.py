"""A short version of the CPU benchmark families runs end to end (as CI's
benchmark smoke run): entries are produced, their extra_info carries the
placement verdict and bandwidth, and GPU families skip with one clear reason."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "run.json"
    cmd = [sys.executable, "-m", "pytest", "benchmarks", "-p", "no:cacheprovider", "-q",
           "-k", "cpu_adam or host_membw or touch or adam_offload",
           "--numa-policies=default;bind:0;interleave:all;weighted:0=1,1=3", "--param-sizes=4M",
           "--numa-rounds=5", "--numa-warmup=1", f"--benchmark-json={out}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    return {"json": json.loads(out.read_text()), "stdout": proc.stdout}


def test_cpu_families_produce_entries(run):
    benches = run["json"]["benchmarks"]
    families = {b["extra_info"]["family"] for b in benches}
    assert {"cpu_adam", "host_membw", "touch"} <= families
    for b in benches:
        x = b["extra_info"]
        assert b["stats"]["rounds"] == 5 and b["stats"]["min"] > 0
        assert x["GBps"] > 0
        for p in x["placement"]:
            if "ok" in p:
                assert p["ok"], p
    cpu = [b for b in benches if b["extra_info"]["family"] == "cpu_adam"]
    assert {b["extra_info"]["impl"] for b in cpu} >= {"ours", "ours+copy", "torch-fused", "torch-foreach"}
    assert all(b["extra_info"]["write_allocate_counted"] is False for b in cpu)


def test_skips_say_why(run):
    text = run["stdout"]
    if "adam_offload" in text:
        assert "adam_offload needs a CUDA GPU" in text or "passed" in text
    assert "needs NUMA node(s) 1" in text  # the two-node weighted template on a one-node machine


def test_machine_info_has_hardware_key(run):
    info = run["json"]["machine_info"]["numabench"]
    assert info["hardware_key"] and info["numa_nodes"] >= 1
