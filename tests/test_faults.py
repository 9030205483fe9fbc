"""Worker faults, injected through NUMABENCH_FAULT into real worker runs (the torch-free
``touch`` family): a rank killed mid-round, one that raises, one that runs out of memory,
one that exits, one that stops answering. Each fails the case quickly with the rank and
the worker's last stderr lines, every other worker is ended, no process outlives the
case, and the next case runs normally. Multi-rank behaviour uses a WorkerGroup of two
workers directly (this machine has one NUMA node, so nprocess=2 cases skip)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import cmdline_of, descendants_of, running
from numabench import faults
from numabench.cases import Case
from numabench.errors import UsageError, WorkerError
from numabench.families import family
from numabench.machine.capabilities import probe
from numabench.machine.topology import discover
from numabench.numa.launch import worker_env
from numabench.numa.policy import Policy
from numabench.workers.group import WorkerGroup
from numabench.workers.run import run_case

TOPO = discover("/")
CAPS = probe()
NODE = TOPO.memory_node_ids[0]
WORKER = [sys.executable, "-m", "numabench.workers.main", "touch"]
ROOT = Path(__file__).resolve().parents[1]


def descendants() -> set[int]:
    return {p.pid for p in descendants_of(os.getpid()) if running(p)}


@pytest.fixture(autouse=True)
def no_process_left():
    before = descendants()
    yield
    deadline = time.monotonic() + 5
    while descendants() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    left = descendants() - before
    assert not left, [(p, cmdline_of(p)) for p in left]


def two_ranks(fault: str, timeout_s: float = 30.0) -> WorkerGroup:
    return WorkerGroup([WORKER, WORKER], worker_env({faults.FAULT_ENV: fault}), timeout_s=timeout_s)


def spec(rank: int) -> dict:
    return {"rank": rank, "nprocess": 2, "gpu": None, "numel": 1 << 18}


def drive(group: WorkerGroup, steps: int = 5) -> None:
    with group:
        group.setup([spec(0), spec(1)])
        for _ in range(steps):
            group.step()


def assert_all_dead(group: WorkerGroup) -> None:
    for p in group.procs:
        assert p.poll() is not None, f"worker {p.pid} still running"
        assert not running(p.pid), f"worker {p.pid} still running"


def normal_case_runs() -> None:
    fam = family("touch")
    case = Case("touch", 1, 1 << 18, Policy.parse(f"bind:{NODE}"), "fp32")
    res = run_case(case, fam, TOPO, CAPS, rounds=3, warmup=1, timeout_s=60)
    assert len(res.phases["write"]) == 3 and res.placement[0].verdict.ok


@pytest.mark.parametrize("fault, rank, message, tail", [
    ("kill@step3:rank1", 1, "exited with code -9 (killed by SIGKILL)", "kill at step 3 on rank 1"),
    ("raise@setup:rank0", 0, "raised InjectedFault: injected fault at setup on rank 0", "raise at setup on rank 0"),
    ("raise@step2:rank1", 1, "raised InjectedFault: injected fault at step 2 on rank 1", "InjectedFault"),
    ("oom@setup:rank1", 1, f"raised MemoryError: cannot allocate {faults.OOM_BYTES} bytes of host memory",
     "MemoryError"),
    ("exit@step1:rank0", 0, "exited with code 3 (error)", "exit at step 1 on rank 0"),
], ids=["kill-mid-round", "raise-in-setup", "raise-in-step", "host-oom", "exit"])
def test_worker_fault_fails_fast_with_rank_and_stderr(fault, rank, message, tail):
    group = two_ranks(fault)
    t0 = time.monotonic()
    with pytest.raises(WorkerError) as info:
        drive(group)
    assert time.monotonic() - t0 < 15
    err = info.value
    assert err.rank == rank
    assert str(err).startswith(f"rank {rank}: ")
    assert message in str(err)
    assert tail in err.stderr_tail and "worker stderr (last lines)" in str(err)
    assert_all_dead(group)
    normal_case_runs()


def test_worker_that_stops_answering_times_out():
    group = two_ranks("hang@step2:rank1", timeout_s=2)
    t0 = time.monotonic()
    with pytest.raises(WorkerError, match=r"^rank 1: gave no answer within 2 s") as info:
        drive(group)
    took = time.monotonic() - t0
    # 2 s of silence, 1 s fail grace, start-up (seconds on a loaded 2-core machine): far from 30
    assert took < 2 + 1 + 15, f"took {took:.1f} s"
    assert "hang at step 2 on rank 1" in info.value.stderr_tail
    assert_all_dead(group)
    normal_case_runs()


@pytest.mark.parametrize("fault", ["kill@step2", "raise@setup", "hang@step1"])
def test_case_through_launcher_fails_and_next_case_runs(fault, monkeypatch):
    """The real path: run_case re-execs the worker under the policy (numactl or builtin)."""
    monkeypatch.setenv(faults.FAULT_ENV, fault)
    fam = family("touch")
    case = Case("touch", 1, 1 << 18, Policy.parse(f"bind:{NODE}"), "fp32")
    with pytest.raises(WorkerError, match="^rank 0: ") as info:
        run_case(case, fam, TOPO, CAPS, rounds=3, warmup=1, timeout_s=2)
    assert f"{fault.split('@')[0]} at" in info.value.stderr_tail
    monkeypatch.delenv(faults.FAULT_ENV)
    normal_case_runs()


def test_workers_die_with_a_parent_killed_without_cleanup(tmp_path):
    """A parent SIGKILLed (no finally, no atexit) leaves no worker: PR_SET_PDEATHSIG."""
    script = textwrap.dedent(f"""
        import json, os, signal, sys
        from numabench.numa.launch import worker_env
        from numabench.workers.group import WorkerGroup
        cmd = {WORKER!r}
        g = WorkerGroup([cmd, cmd], worker_env({{"NUMABENCH_FAULT": "hang@step1"}}))
        g.setup([{spec(0)!r}, {spec(1)!r}])
        print(json.dumps(g.pids), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    # TMPDIR: the killed parent cannot remove its group's scratch folder; keep it in tmp_path
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**worker_env(), "TMPDIR": str(tmp_path)}, timeout=60)
    assert out.returncode == -9, out.stderr
    assert [p.name[:14] for p in tmp_path.iterdir()] == ["numabench-run-"]  # what a SIGKILLed parent leaves
    pids = json.loads(out.stdout)
    deadline = time.monotonic() + 5
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if running(p)]


@pytest.mark.parametrize("text, fragment", [
    ("explode@setup", "bad fault 'explode@setup'"),
    ("kill@step0", "steps count from 1"),
    ("kill@later", "bad fault 'kill@later'"),
    ("misplace@step2", "write misplace@setup"),
    ("kill@step1:node1", "bad fault 'kill@step1:node1'"),
])
def test_bad_fault_spec_is_a_usage_error_before_any_worker(text, fragment, monkeypatch):
    with pytest.raises(UsageError, match="NUMABENCH_FAULT") as info:
        faults.parse(text)
    assert fragment in str(info.value) and "\n" not in str(info.value)
    monkeypatch.setenv(faults.FAULT_ENV, text)
    case = Case("touch", 1, 1 << 18, Policy.parse(f"bind:{NODE}"), "fp32")
    with pytest.raises(UsageError, match="NUMABENCH_FAULT"):
        run_case(case, family("touch"), TOPO, CAPS, rounds=1, warmup=0, timeout_s=30)


@pytest.mark.parametrize("text", ["explode@now", "kill@step\u0663", "kill@step1||raise@setup"],
                         ids=["unknown", "arabic-indic-digit", "empty-entry"])
def test_a_malformed_fault_stops_the_run_before_any_worker(text, tmp_path):
    """The pytest run: exit 4 and one line naming the value while pytest configures, not a
    failed case; no worker's scratch folder, no --benchmark-json written."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    out_json = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "-p", "no:cacheprovider", "-q",
                           "--numa-policies=default", "--param-sizes=1M", "--numa-rounds=2",
                           f"--benchmark-json={out_json}"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, faults.FAULT_ENV: text, "TMPDIR": str(tmpdir)})
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR and len(lines) == 1, proc.stdout + proc.stderr
    assert lines[0].startswith("ERROR: NUMABENCH_FAULT: ") and repr(text) in lines[0], lines[0]
    assert not out_json.exists() and not list(tmpdir.iterdir())


def test_a_fault_on_a_rank_no_case_has_stops_the_run(tmp_path):
    """kill@step1:rank99 where the selected cases run one rank would never fire (the run passed
    unfaulted): exit 4 after collection, one error line naming the rank and the ranks there are;
    no case run."""
    out_json = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "-p", "no:cacheprovider", "-q",
                           "--numa-policies=default", "--param-sizes=1M", "--nprocess=1", "--numa-rounds=2",
                           f"--benchmark-json={out_json}"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, faults.FAULT_ENV: "kill@step1:rank99"})
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("ERROR") or "Traceback" in ln]
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR and len(lines) == 1, proc.stdout + proc.stderr
    assert "no tests ran" in proc.stdout + proc.stderr
    assert lines[0] == ("ERROR: NUMABENCH_FAULT: fault 'kill@step1:rank99' names rank 99, but the selected cases have "
                        "ranks 0..0 at most (nprocess up to 1): allowed a rank below the largest nprocess selected, or "
                        "no :rankN (every rank)"), lines[0]
    assert not out_json.exists()
    with pytest.raises(UsageError, match="names rank 2"):
        faults.check_ranks(faults.parse("raise@setup|kill@step1:rank2"), 2)
    faults.check_ranks(faults.parse("raise@setup|kill@step1:rank1"), 2)  # rank 1 of a 2-rank case: fires


def test_fault_grammar():
    assert faults.parse("kill@step3:rank1|raise@setup|hang@step|oom@setup") == [
        faults.Fault("kill", "step", 3, 1), faults.Fault("raise", "setup"), faults.Fault("hang", "step"),
        faults.Fault("oom", "setup")]
    f = faults.Fault("kill", "step", 3, 1)
    assert str(f) == "kill@step3:rank1"
    assert f.hits("step", 3, 1) and not f.hits("step", 3, 0) and not f.hits("step", 2, 1)
    assert faults.Fault("hang", "step").hits("step", 7, 0)


def _cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
def test_cuda_oom_in_adam_offload_worker(monkeypatch):
    """A real CUDA out-of-memory in an adam_offload worker: after its setup, the worker asks
    torch for 1 PiB more on its GPU. The case fails with the error and the rank; the next
    case on the same GPU runs."""
    monkeypatch.setenv(faults.FAULT_ENV, "oom@setup")
    fam = family("adam_offload")
    case = Case("adam_offload", 1, 1 << 20, Policy.parse("default"), "fp32",
                tuple((k, v[0]) for k, v in fam.extra_axes.items()))
    with pytest.raises(WorkerError, match="^rank 0: raised OutOfMemoryError: CUDA out of memory") as info:
        run_case(case, fam, TOPO, CAPS, rounds=2, warmup=0, timeout_s=300)
    assert "oom at setup on rank 0" in info.value.stderr_tail
    monkeypatch.delenv(faults.FAULT_ENV)
    res = run_case(case, fam, TOPO, CAPS, rounds=2, warmup=0, timeout_s=300)
    assert all(len(v) == 2 for v in res.phases.values())
