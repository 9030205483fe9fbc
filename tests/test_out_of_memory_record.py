"""A case that runs out of memory, end to end on the CPU (NUMABENCH_FAULT=oom@setup: a real failed
allocation in the first case's worker): its record lands in the run's JSON beside the entries
(``numabench_memory``) with the error's out-of-memory line, and the next case runs normally. An
out-of-memory its family predicted (a GPU need beyond the GPU) is an expected failure that says
so; one nobody predicted fails its case."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from numabench.faults import OOM_BYTES

ROOT = Path(__file__).resolve().parents[1]
PREDICTED = "needs more than this test machine's GPU (the test's prediction)"
PLUGIN = f'''
from numabench.families import family
from numabench.families.base import MemoryFit


def pytest_configure(config):
    # the first case (batch 2) predicted not to fit, as a model beyond the GPU would be
    family("train_step").memory_fit = lambda case, gpu, host: MemoryFit(
        out_of_memory={PREDICTED!r} if case.numel == 2 else None)
'''


def run_two_cases(tmp_path: Path, *plugin: str, sizes: str = "2,4") -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "run.json"
    env = {**os.environ, "NUMABENCH_FAULT": "oom@setup", "NUMABENCH_FAULT_ONCE": str(tmp_path / "fired"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks/test_train_step.py", "-p", "no:cacheprovider", *plugin, "-q",
         "-rx", "--numa-policies=default", "--numa-rounds=2", "--numa-warmup=0", f"--param-sizes={sizes}",
         "--dtypes=fp32", "--nprocess=1", "--numa-axis", "mode=ddp", "--numa-axis", "model=tiny",
         "--numa-axis", "cpu_bind=node", f"--benchmark-json={out}", f"--benchmark-storage=file://{tmp_path}/store"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.exists(), (proc.stdout + proc.stderr)[-3000:]
    return proc, json.loads(out.read_text())


def check_record(data: dict, predicted: str | None) -> None:
    [entry] = data["benchmarks"]  # the second case ran
    assert entry["extra_info"]["numel"] == 4
    memory = data["numabench_memory"]
    [record] = memory["out_of_memory"]
    assert record["extra_info"]["numel"] == 2 and record["extra_info"]["mode"] == "ddp"
    assert record["fullname"].endswith("test_train_step[step-np1-2-default-fp32-ddp-tiny-node]")
    # the fault's allocation: on the rank's GPU where it has one, else in host memory
    assert record["message"].startswith((f"MemoryError: cannot allocate {OOM_BYTES} bytes of host memory",
                                         "OutOfMemoryError: CUDA out of memory")), record["message"]
    assert record["outcome"] == "out of memory" and record["predicted"] == predicted
    assert memory["host_source"] == "MemTotal" and memory["host_bytes"] > 0


def test_an_unpredicted_out_of_memory_fails_its_case_and_is_kept(tmp_path):
    proc, data = run_two_cases(tmp_path)
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-3000:]
    assert "1 failed, 1 passed" in proc.stdout, proc.stdout[-2000:]
    check_record(data, None)


def test_a_predicted_out_of_memory_is_an_expected_failure_that_says_so(tmp_path):
    (tmp_path / "predict_oom.py").write_text(PLUGIN)
    proc, data = run_two_cases(tmp_path, "-p", "predict_oom")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "1 passed, 1 xfailed" in proc.stdout, proc.stdout[-2000:]
    assert f"out of memory, as predicted ({PREDICTED}): " in proc.stdout
    check_record(data, PREDICTED)


def test_a_session_whose_only_case_ran_out_of_memory_still_writes_its_record(tmp_path):
    # pytest-benchmark saves nothing for a session without timings: the record must not go with it
    (tmp_path / "predict_oom.py").write_text(PLUGIN)
    proc, data = run_two_cases(tmp_path, "-p", "predict_oom", sizes="2")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "1 xfailed" in proc.stdout and "passed" not in proc.stdout, proc.stdout[-2000:]
    assert data["benchmarks"] == [] and data["machine_info"] and data["commit_info"]
    [record] = data["numabench_memory"]["out_of_memory"]
    assert record["extra_info"]["numel"] == 2 and record["predicted"] == PREDICTED
    saved = list((tmp_path / "store").rglob("*.json"))
    assert saved == [], saved  # --benchmark-save was not given: nothing stored
