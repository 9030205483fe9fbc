"""The main job never loses the last results: a usage error or an interrupted run leaves
results/last-run.json as it was; a finished run replaces it whole."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bench(tmp_path: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "NUMABENCH_RESULTS_DIR": str(tmp_path)}
    return subprocess.Popen(["bash", str(ROOT / ".ci/bench"), "-k", "test_touch", "-p", "no:cacheprovider",
                             "-q", f"--benchmark-storage=file://{tmp_path}/store", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def test_usage_error_and_interrupt_keep_the_last_results_and_a_run_replaces_them(tmp_path):
    last = tmp_path / "last-run.json"
    last.write_text('{"previous": true}')
    p = bench(tmp_path, "--numa-policies=nonsense")
    out, _ = p.communicate(timeout=300)
    assert p.returncode == 4, out
    assert json.loads(last.read_text()) == {"previous": True}
    # Ctrl-C while a case runs (the worker hangs at its first step; SIGINT to the whole job)
    env_fault = {"NUMABENCH_FAULT": "hang@step1"}
    os.environ.update(env_fault)
    try:
        p = bench(tmp_path, "--numa-policies=default", "--param-sizes=1M")
        time.sleep(8)
        os.killpg(p.pid, signal.SIGINT)
        out, _ = p.communicate(timeout=120)
    finally:
        os.environ.pop("NUMABENCH_FAULT")
    assert p.returncode != 0, out
    assert json.loads(last.read_text()) == {"previous": True}
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".last-run")]
    p = bench(tmp_path, "--numa-policies=default", "--param-sizes=1M", "--numa-rounds=2")
    out, _ = p.communicate(timeout=300)
    assert p.returncode == 0, out
    assert json.loads(last.read_text())["benchmarks"][0]["name"].startswith("test_touch[")
