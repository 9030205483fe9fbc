"""Compile every kernel this machine can build (``numabench build``), so that
benchmark workers find them in the cache instead of racing to build them.

The kernels compile in parallel, one child process each (each a ninja build of
one or two translation units): on a fresh machine that is the difference
between ~90 s and ~35 s of set-up.

Each builder leads its own session and is ended with its whole process tree
(numabench.kernels.builder_tree: ninja puts each compiler in a process group of its
own, so the tree is walked, not the group killed): on a time-out, when the caller is
interrupted or fails, and when the caller dies, SIGKILL included (the kernel sends the
builder SIGTERM, PR_SET_PDEATHSIG). The builder kills every process of its build, then
removes torch's build marker, and exits; a builder that does not end within
STOP_GRACE_S has its tree killed by its parent. A stopped build leaves no ninja, c++ or
cc1plus behind to keep writing into the build folder, and no marker."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from numabench import bounds
from numabench.errors import BuildError, UsageError
from numabench.interrupts import stops_held
from numabench.kernels import built
from numabench.kernels.build import BUILDER_ENV, build_lock, build_root, loaded_before
from numabench.kernels.builder_tree import BUILDER_TMPDIR_ENV, builder_preexec, kill_tree

BUILD_TIMEOUT_ENV = "NUMABENCH_BUILD_TIMEOUT_S"
DEFAULT_BUILD_TIMEOUT_S = 900.0


def build_timeout_s() -> float:
    """A kernel build's time limit: $NUMABENCH_BUILD_TIMEOUT_S, else 900 s; UsageError naming a
    value that is not a number of seconds > 0 (0 or less would kill every build at once)."""
    text = (os.environ.get(BUILD_TIMEOUT_ENV) or "").strip()
    if not text:
        return DEFAULT_BUILD_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    return bounds.check("build_timeout", value, f"{BUILD_TIMEOUT_ENV}={text!r}")


try:
    BUILD_TIMEOUT_S: float | None = build_timeout_s()
except UsageError:
    BUILD_TIMEOUT_S = None  # said where a build starts (build_outcomes), not at import

# name -> Python that builds (and imports) it in a child; its last line of output, if
# any, is a detail for the status line.
_BUILDERS = {
    "stream": "from numabench.kernels import stream; stream.load()",
    "cpu_adam": "from numabench.kernels import cpu_adam; cpu_adam.load(); print(f'SIMD {cpu_adam.simd_level()}')",
    "cuda_adam": "from numabench.kernels import cuda_adam; cuda_adam.load()",
}


def cuda_buildable() -> bool:
    """Whether this machine can build and run the CUDA kernel: CUDA GPUs this process sees (asked
    of the driver), a torch built for CUDA, and a CUDA toolkit where torch's build looks for one
    (nvcc on the PATH, $CUDA_HOME or $CUDA_PATH, /usr/local/cuda). Torch-free: importing torch
    would cost a `numabench build` that finds every kernel built seconds."""
    from numabench.machine.gpus import visible_gpus

    if built.torch_cuda_version() is None or not visible_gpus():
        return False
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    return bool(shutil.which("nvcc")) or os.path.isdir(home)


KERNELS = tuple(_BUILDERS)


def default_kernels() -> list[str]:
    """What ``numabench build`` without names builds: every kernel this machine can build."""
    return ["stream", "cpu_adam"] + (["cuda_adam"] if cuda_buildable() else [])


# The builder's first statement: SIGTERM (its parent died, or it is told to stop) ends its tree.
_END_TREE_ON_TERM = "from numabench.kernels.builder_tree import end_tree_on_term; end_tree_on_term(); "
STOP_GRACE_S = 10.0  # a builder's time to end its tree after SIGTERM (it may be inside a C call)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(proc: subprocess.Popen) -> None:
    """End a builder with its whole tree: SIGTERM (it kills its build and removes torch's
    marker), then, where it is still there after STOP_GRACE_S, its tree and itself by force."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)  # still our unreaped child: its pid is its own
    _kill_group(proc)  # the builder, or a finished builder's stragglers


@dataclass(frozen=True)
class Outcome:
    """One kernel's build: ``status`` is what ``numabench build`` prints after its name."""

    name: str
    ok: bool
    status: str
    seconds: float = 0.0
    log: Path | None = None  # the builder's whole output (None: nothing was built)


def build_all(only: Sequence[str] | None = None) -> Iterator[tuple[str, str]]:
    """Yield (kernel, status) as each build finishes; a failed build's status holds
    the compiler's first error line and the path of its build log, and raises nothing
    (the CLI decides the exit code). ``only``: these kernels (torch is not imported
    here then), else every one this machine can build."""
    outcomes = build_outcomes(only)
    try:
        for o in outcomes:
            yield o.name, o.status
    finally:  # an abandoned build_all abandons its builds (see build_outcomes)
        outcomes.close()


def build_outcomes(only: Sequence[str] | None = None) -> Iterator[Outcome]:
    """build_all's builds, each as an Outcome."""
    if BUILD_TIMEOUT_S is None:
        build_timeout_s()  # the bad value, named
    if only is not None:
        unknown = [n for n in only if n not in _BUILDERS]
        if unknown:
            raise UsageError(f"unknown kernel(s) {', '.join(unknown)}: allowed {', '.join(KERNELS)}")
        names = list(only)
    else:
        names = default_kernels()
    # kernels found unbuilt: a successful build compiled them, and its time is kept for time plans
    compiles = {n for n in names if n in built.MODULES and not built.is_built(n)}
    # kernels built and loaded before from their folder, unchanged since: no builder to start (one
    # would import torch and ask ninja, seconds for nothing), unless a fault is to be injected there
    found = [] if _fault_at_build() else [n for n in names if n in built.MODULES and _loaded_before(n)]
    for name in found:
        yield Outcome(name, True, "ready (built and loaded before)")
    to_build = [n for n in names if n not in found]
    started = {}
    tmpdirs: dict[str, str] = {}
    try:
        for name in to_build:
            # the compilers' temporary files go to a folder of the builder's, removed with it
            tmp = tmpdirs[name] = tempfile.mkdtemp(prefix=f"numabench-build-{name}-")
            env = {**os.environ, BUILDER_ENV: "1", "TMPDIR": tmp, BUILDER_TMPDIR_ENV: tmp}
            with stops_held():  # an interrupt during the start is raised once `started` holds the builder
                started[name] = (time.perf_counter(), subprocess.Popen(
                    [sys.executable, "-c", _END_TREE_ON_TERM + _BUILDERS[name]], stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True, env=env, preexec_fn=builder_preexec))
        for o in _finish(to_build, started):
            if o.ok and o.name in compiles:
                built.record_build_seconds(o.name, o.seconds)
            yield o
    finally:  # interrupted, failed or abandoned: no build outlives the caller's interest in it
        for _, proc in started.values():
            _stop(proc)
            proc.wait()
        for tmp in tmpdirs.values():
            shutil.rmtree(tmp, ignore_errors=True)
    if only is None and "cuda_adam" not in names:
        yield Outcome("cuda_adam", True, "skipped: no CUDA GPU or no CUDA toolkit here")


def _loaded_before(kernel: str) -> bool:
    """Whether ``kernel`` was loaded from its build folder before and is unchanged since, asked
    under the folder's build lock, as a builder would (which also clears what a killed builder
    left there)."""
    folder = built.kernel_dir(kernel)
    if folder is None or not folder.is_dir():
        return False
    with build_lock(folder, kernel):
        return loaded_before(folder) is not None


def _fault_at_build() -> bool:
    """Whether NUMABENCH_FAULT asks for a fault in a kernel builder (tests of the suite)."""
    from numabench import faults

    return any(f.kind in faults.WORKER_KINDS and f.hits("build", None, None) for f in faults.from_env())


def _finish(names: Sequence[str], started: dict) -> Iterator[Outcome]:
    for name in names:
        t0, proc = started[name]
        killed = None
        try:
            out, _ = proc.communicate(timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _stop(proc)
            out, _ = proc.communicate()
            killed = f"still running after {BUILD_TIMEOUT_S:g} s, killed"
        seconds = time.perf_counter() - t0
        log = write_log(name, out)
        lines = out.strip().splitlines()
        if killed is None and proc.returncode == 0:
            detail = f", {lines[-1]}" if lines else ""
            yield Outcome(name, True, f"ready ({seconds:.1f} s{detail})", seconds, log)
            continue
        code = proc.returncode
        how = killed or (f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}")
        detail = first_error(lines)
        where = f"build log: {log}" if log else "no build log written"
        yield Outcome(name, False, f"FAILED ({how}): " + (f"{detail}; " if detail else "") + where, seconds, log)


def first_error(lines: Sequence[str]) -> str:
    """The line that says what went wrong: the compiler's first error, else a Python
    exception's last line, else the last lines joined."""
    for ln in lines:
        if _COMPILER_ERROR.search(ln):
            return ln.strip()
    if any(ln.startswith("Traceback") for ln in lines):
        return lines[-1].strip()
    return " | ".join(ln.strip() for ln in lines[-3:] if ln.strip())


_COMPILER_ERROR = re.compile(r"(^|\s|:)(fatal )?error( #\d+)?:", re.IGNORECASE)  # gcc, clang, nvcc


def log_path(name: str) -> Path:
    """Where the last build of kernel ``name`` left its whole output."""
    return build_root() / "logs" / f"{name}.log"


def write_log(name: str, text: str) -> Path | None:
    """The builder's output into log_path(name) (replaced whole); None where it cannot be written."""
    path = log_path(name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        return None
    return path


_ready: set[str] = set()
_failed: dict[str, Path | None] = {}  # kernel -> its build log, for the cases after the first


def ensure_built(kernels: Sequence[str]) -> None:
    """Build ``kernels`` once per process, in children (the caller stays torch-free); raises
    BuildError naming the kernel, the compiler's first error and the build log, once per
    kernel: a kernel that failed before is not built again, and its BuildError says so in a line."""
    fresh = None
    need = [k for k in kernels if k not in _ready and k not in _failed]
    if need:
        for o in build_outcomes(need):
            if o.ok:
                _ready.add(o.name)
            else:
                _failed[o.name] = o.log
                fresh = fresh or BuildError(f"kernel {o.name} did not build: {o.status}", kernel=o.name,
                                            log=o.log)
    if fresh is not None:
        raise fresh
    earlier = [k for k in kernels if k in _failed]
    if earlier:
        k = earlier[0]
        raise BuildError(f"kernel {k} build failed earlier: {_failed[k] or 'no build log written'}", kernel=k,
                         log=_failed[k])


def build_failed(kernels: Sequence[str]) -> bool:
    """Whether one of ``kernels`` failed to build in this process."""
    return any(k in _failed for k in kernels)
