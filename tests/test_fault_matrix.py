"""The fault matrix: for each family that runs on CPU and each moment (building a kernel in the
parent's build child, loading it in a worker, set-up, mid-step), a worker killed with
SIGKILL, one that hangs, one that raises. Each run holds two cases; the fault fires once
(NUMABENCH_FAULT_ONCE), in the first. Each time: that case fails quickly (a hang: within its
time-out) with a message naming the rank or kernel, the moment and the cause; the second case
passes (a kernel that did not build is not built again in the session: the second case's error
says so in one line, naming the build log); no worker process or temporary file outlives the run; no build lock is left held or stale. (The real
weighted-interleave settings are checked unchanged by tests/conftest.py.) The GPU variants
(adam_offload: its CUDA kernel's load, a CUDA worker killed or hung mid-step) are
gpu-marked cells that the GPU script (.ci/gpu) runs; tests/test_faults.py adds a real CUDA out-of-memory."""
from __future__ import annotations

import fcntl
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import psutil
import pytest

from numabench.kernels.build import TORCH_BATON, build_root

ROOT = Path(__file__).resolve().parents[1]
HANG_TIMEOUT_S = 4  # a step that gets no answer
SETUP_TIMEOUT_S = 25  # set-up (imports torch, builds nothing: the parent built first)
GPU_SETUP_S = 20  # what a GPU worker's set-up may add before step 2
BUILD_TIMEOUT_S = 30  # a build child starts Python and torch first: seconds on a loaded 2-core runner

FAMILIES = {  # family -> arguments selecting two small cases of one variant
    "touch": ["--param-sizes=1M,2M"],
    "host_membw": ["--param-sizes=1M,2M", "--numa-axis", "kernel=copy"],
    "cpu_adam": ["--param-sizes=1M,2M", "--numa-axis", "impl=ours"],
    "dataloader": ["--param-sizes=8,16", "--numa-axis", "binding=bound"],
    "train_step": ["--param-sizes=2,4", "--numa-axis", "mode=ddp", "--numa-axis", "model=tiny"],
}
# The GPU variants (gpu-marked: .ci/gpu runs them): the core family, one rank, small sizes.
GPU_FAMILIES = {
    "adam_offload": ["--param-sizes=1M,2M", "--dtypes=fp32", "--nprocess=1", "--numa-axis", "impl=ours",
                     "--numa-axis", "schedule=serial"],
}
FAMILIES.update(GPU_FAMILIES)
KERNEL_OF = {"host_membw": "stream", "cpu_adam": "cpu_adam", "adam_offload": "cuda_adam"}
CAUSE = {"kill": r"killed by SIGKILL", "raise": r"raised InjectedFault", "hang": r"gave no answer within"}
CPU_FAMILIES = [f for f in FAMILIES if f not in GPU_FAMILIES]
# Every moment and kind on the CPU families (CI runs them). On the GPU what the CPU cells cannot
# show: a worker killed while it loads the CUDA kernel, and one killed or hung mid-step with its
# CUDA context and pinned buffers. A raised fault, and a kill or hang at set-up, take the same
# path in every family's worker, and a build fault the same build child whatever the kernel (it
# fires under the build lock, before torch compiles or loads anything); the GPU machine's one
# call has no minutes to spare for them.
GPU_CELLS = [("adam_offload", m, k) for m, k in (("load", "kill"), ("step2", "kill"), ("step2", "hang"))]
CELLS = ([(f, m, k) for f in CPU_FAMILIES for m in ("setup", "step2") for k in ("kill", "hang", "raise")]
         + [(f, m, k) for f in KERNEL_OF if f in CPU_FAMILIES for m in ("load", "build")
            for k in ("kill", "hang", "raise")]
         + GPU_CELLS)


def workers_with(marker: str) -> list[int]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get("NUMABENCH_FAULT_ONCE") == marker:
                out.append(p.pid)
        except (psutil.Error, OSError):
            pass
    return out


def _cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


def _cell(family: str, moment: str, kind: str):
    # Cells of kernel families share the build cache (and its lock): one xdist worker runs them
    # all, one after another (.ci/test runs -n 2 --dist loadgroup), so a hung build in one cell
    # never holds up another's.
    marks = [pytest.mark.xdist_group("kernel-builds")] if family in KERNEL_OF else []
    if family in GPU_FAMILIES:
        marks += [pytest.mark.gpu, pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")]
    return pytest.param(family, moment, kind, id=f"{family}-{moment}-{kind}", marks=marks)


@functools.lru_cache(maxsize=None)
def kernel_built(family: str) -> None:
    """The family's kernel built (once per process, in the session's build folder: see
    tests/conftest.py) before its cells: a cell's case is timed from its start, and a first
    compile (20-40 s on a loaded 2-core runner) is not the fault's doing. The build cells
    still fire: with a fault at build asked for, the parent starts a builder (which goes
    through the build lock and the fault point) even for a kernel loaded before."""
    from numabench.kernels.prebuild import build_all

    for name, status in build_all([KERNEL_OF[family]]):
        assert not status.startswith("FAILED"), f"{name}: {status}"


@pytest.mark.parametrize("family,moment,kind", [_cell(*c) for c in CELLS])
def test_fault_fails_its_case_and_the_next_runs(family, moment, kind, tmp_path, request):
    if family in KERNEL_OF:
        kernel_built(family)
    once = str(tmp_path / "fired")
    env = {**os.environ, "NUMABENCH_FAULT": f"{kind}@{moment}", "NUMABENCH_FAULT_ONCE": once,
           "NUMABENCH_SETUP_TIMEOUT_MIN_S": str(SETUP_TIMEOUT_S), "NUMABENCH_BUILD_TIMEOUT_S": str(BUILD_TIMEOUT_S)}
    # The run's TMPDIR: whatever it leaves behind shows up here. Short: multiprocessing puts
    # AF_UNIX sockets in it (108 bytes at most for their path).
    tmpdir = Path(tempfile.mkdtemp(prefix="nbfm-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(tmpdir, ignore_errors=True))
    env["TMPDIR"] = str(tmpdir)
    xml = tmp_path / "junit.xml"
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "pytest", f"benchmarks/test_{family}.py", "-p", "no:cacheprovider",
                          "-q", "--numa-policies=default", "--numa-rounds=3", "--numa-warmup=1",
                          f"--numa-timeout={HANG_TIMEOUT_S}", f"--junitxml={xml}",
                          f"--benchmark-storage=file://{tmp_path}/store", *FAMILIES[family]],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - t0
    text = out.stdout + out.stderr
    assert os.path.exists(once), f"the fault never fired\n{text[-3000:]}"
    assert out.returncode == 1, text[-3000:]
    cases = ET.parse(xml).getroot().iter("testcase")
    # a failed run is a failure of its cases; a kernel that did not build, an error (at set-up) of those needing it
    results = [(c.get("name"), float(c.get("time")), c.find("failure") if c.find("failure") is not None
                else c.find("error")) for c in cases]
    failed = [r for r in results if r[2] is not None]
    passed = [r for r in results if r[2] is None and r[0]]
    first = failed[0]
    message = first[2].get("message", "") + (first[2].text or "")
    # the message names who, when and why
    if moment == "build":
        # the build is not tried again in the session: the second case says so in a line of its own
        assert len(failed) == 2 and not passed, results
        kernel = KERNEL_OF[family]
        cause = {"kill": "killed by SIGKILL", "raise": "exit 1", "hang": f"still running after {BUILD_TIMEOUT_S} s"}
        assert f"kernel {kernel} did not build: FAILED ({cause[kind]}" in message, message[-2000:]
        assert f"{kind} at build" in message or "injected fault at build" in message, message[-2000:]
        assert f"build log: {build_root() / 'logs' / kernel}.log" in message, message[-2000:]
        second = (failed[1][2].text or "").strip()  # the report: one line
        assert second == f"kernel {kernel} build failed earlier: {build_root() / 'logs' / kernel}.log", second
    else:
        assert failed and passed, results
        assert "rank 0: " in message, message[-2000:]
        assert re.search(CAUSE[kind], message), message[-2000:]
        during = "during setup" if moment in ("setup", "load") else "during step 2"
        assert during in message, message[-2000:]
        assert f"{kind} at {moment.replace('step2', 'step 2')}" in message, message[-2000:]
    # how soon: a kill or a raise within 20 s of the case's start (plus the next case's time, below) (worker start and set-up included: on a
    # loaded 2-core runner a torch import alone takes seconds; observed 0.1-3.1 s); a hang
    # within its time-out
    limit = {"kill": 20, "raise": 20}.get(kind) or (
        BUILD_TIMEOUT_S if moment == "build" else SETUP_TIMEOUT_S if moment in ("setup", "load") else HANG_TIMEOUT_S) + 10
    if family in GPU_FAMILIES and moment == "step2":
        # a GPU worker's set-up comes first: CUDA context, correctness checks, copy ceilings
        # (H100: a step-2 hang failed its case 18.7 s after the start, 14 s of it set-up)
        limit += GPU_SETUP_S
    # A loaded runner stretches the worker's start-up and set-up that come before the fault
    # (a step-2 hang failed its case 17 s after its start beside other work, 4 s of it the
    # time-out): the next case of the run, which starts and sets up the same workers under the
    # same load, measures that stretch, and the limit grows by its time.
    startup = max((r[1] for r in passed), default=0.0)
    assert first[1] < limit + startup, (first[1], limit, startup)
    assert wall < 200
    # nothing left behind: no worker, no temporary file, no held or stale build lock
    assert not workers_with(once)
    assert not list(tmpdir.iterdir()), sorted(p.name for p in tmpdir.iterdir())
    if moment == "build":
        # the session never built the kernel again: what a killed builder left (torch's marker) is
        # cleared by the next build, another session's
        from numabench.kernels.prebuild import build_all

        assert all(not status.startswith("FAILED") for _, status in build_all([KERNEL_OF[family]]))
    if family in KERNEL_OF:
        for folder in build_root().glob(f"numabench_{KERNEL_OF[family]}-*"):
            if folder.is_dir():
                assert not (folder / TORCH_BATON).exists(), f"stale {folder / TORCH_BATON}"
            elif folder.suffix == ".flock":
                fd = os.open(folder, os.O_RDONLY)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody holds it
                finally:
                    os.close(fd)
