"""Compile every kernel this machine can build (``numabench build``), so that
benchmark workers find them in the cache instead of racing to build them.

The kernels compile in parallel, one child process each (each a ninja build of
one or two translation units): on a fresh machine that is the difference
between ~90 s and ~35 s of set-up.

Each builder leads its own process group (ninja and the compilers it starts are in
it) and is killed with the whole group: on a time-out, when the caller is
interrupted or fails, and when the caller dies (the kernel sends the builder SIGTERM,
PR_SET_PDEATHSIG, and the builder kills its group). A killed build leaves no ninja,
c++ or cc1plus behind to keep writing into the build folder and race the next build."""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Iterator, Sequence

from numabench.errors import UsageError
from numabench.kernels.build import BUILDER_ENV

BUILD_TIMEOUT_S = float(os.environ.get("NUMABENCH_BUILD_TIMEOUT_S") or 900)

# name -> Python that builds (and imports) it in a child; its last line of output, if
# any, is a detail for the status line.
_BUILDERS = {
    "stream": "from numabench.kernels import stream; stream.load()",
    "cpu_adam": "from numabench.kernels import cpu_adam; cpu_adam.load(); print(f'SIMD {cpu_adam.simd_level()}')",
    "cuda_adam": "from numabench.kernels import cuda_adam; cuda_adam.load()",
}


def cuda_buildable() -> bool:
    import torch
    from torch.utils import cpp_extension

    return torch.cuda.is_available() and bool(shutil.which("nvcc") or cpp_extension.CUDA_HOME)


KERNELS = tuple(_BUILDERS)
PR_SET_PDEATHSIG = 1
# The builder's first statement: SIGTERM (its parent died, or it is told to stop) kills its group.
_KILL_GROUP_ON_TERM = ("import os, signal; "
                       "signal.signal(signal.SIGTERM, lambda *_: os.killpg(0, signal.SIGKILL)); ")


def _builder_session() -> None:
    """In the builder child before exec: its own session and process group, and SIGTERM when
    its parent dies."""
    os.setsid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() == 1:  # the parent died before the request took effect
        os._exit(1)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def build_all(only: Sequence[str] | None = None) -> Iterator[tuple[str, str]]:
    """Yield (kernel, status) as each build finishes; a failed build's status holds
    the tail of its output and raises nothing (the CLI decides the exit code).
    ``only``: these kernels (torch is not imported here then), else every one this
    machine can build."""
    if only is not None:
        unknown = [n for n in only if n not in _BUILDERS]
        if unknown:
            raise UsageError(f"unknown kernel(s) {', '.join(unknown)}: allowed {', '.join(KERNELS)}")
        names = list(only)
    else:
        names = ["stream", "cpu_adam"] + (["cuda_adam"] if cuda_buildable() else [])
    started = {}
    try:
        for name in names:
            started[name] = (time.perf_counter(), subprocess.Popen(
                [sys.executable, "-c", _KILL_GROUP_ON_TERM + _BUILDERS[name]], stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, env={**os.environ, BUILDER_ENV: "1"},
                preexec_fn=_builder_session))
        yield from _finish(names, started)
    finally:  # interrupted, failed or abandoned: no build outlives the caller's interest in it
        for _, proc in started.values():
            if proc.poll() is None:
                _kill_group(proc)
                proc.wait()
            else:
                _kill_group(proc)  # a finished builder's stragglers, if it left any
    if only is None and "cuda_adam" not in names:
        yield "cuda_adam", "skipped: no CUDA GPU or no CUDA toolkit here"


def _finish(names: Sequence[str], started: dict) -> Iterator[tuple[str, str]]:
    for name in names:
        t0, proc = started[name]
        try:
            out, _ = proc.communicate(timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, _ = proc.communicate()
            tail = " | ".join(out.strip().splitlines()[-3:])
            yield name, f"FAILED (still running after {BUILD_TIMEOUT_S:g} s, killed)" + (f": {tail}" if tail else "")
            continue
        lines = out.strip().splitlines()
        seconds = f"{time.perf_counter() - t0:.1f} s"
        if proc.returncode == 0:
            detail = f", {lines[-1]}" if lines else ""
            yield name, f"ready ({seconds}{detail})"
        else:
            code = proc.returncode
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
            # The error, not a traceback's tail: a Python exception's last line, else a compiler's error.
            errors = [ln.strip() for ln in lines if "Error" in ln or "error:" in ln]
            if any(ln.startswith("Traceback") for ln in lines):
                errors.append(lines[-1].strip())
            detail = errors[-1] if errors else " | ".join(lines[-6:])
            yield name, f"FAILED ({how}): {detail}"


_ready: set[str] = set()


def ensure_built(kernels: Sequence[str]) -> None:
    """Build ``kernels`` once per process, in children (the caller stays torch-free); raises
    BuildError naming the kernel and the tail of its build output."""
    from numabench.errors import BuildError

    need = [k for k in kernels if k not in _ready]
    if not need:
        return
    for name, status in build_all(need):
        if status.startswith("FAILED"):
            raise BuildError(f"kernel {name} did not build: {status}")
        _ready.add(name)
