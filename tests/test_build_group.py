"""A kernel build is killed whole: the builder leads its own session, and what it
started (ninja, c++, cc1plus; here a stand-in `sleep`) dies with it on a time-out, on an
interrupt, and when the process that asked for the build is killed."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from helpers import end_child, start_child
from numabench.kernels import prebuild
from numabench.kernels.build import TORCH_BATON

ROOT = Path(__file__).resolve().parents[1]


def _slow_builder(pidfile: Path) -> str:
    """A builder that starts a long child (as ninja starts compilers) and waits on it."""
    return (f"import subprocess; p = subprocess.Popen(['sleep', '300']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); p.wait()")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait_for(pidfile: Path, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pidfile.exists() and pidfile.read_text().strip():
            return int(pidfile.read_text())
        time.sleep(0.05)
    raise AssertionError(f"the builder never started its child ({pidfile})")


def _gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_a_timed_out_build_is_killed_with_its_children(tmp_path, monkeypatch):
    pidfile = tmp_path / "child.pid"
    monkeypatch.setitem(prebuild._BUILDERS, "slow", _slow_builder(pidfile))
    monkeypatch.setattr(prebuild, "BUILD_TIMEOUT_S", 3.0)
    [(name, status)] = list(prebuild.build_all(["slow"]))
    assert name == "slow" and status.startswith("FAILED (still running after 3 s, killed)"), status
    assert _gone(_wait_for(pidfile)), "the builder's child outlived the time-out"


def test_an_abandoned_build_is_killed_with_its_children(tmp_path, monkeypatch):
    """The caller stops waiting (an interrupt raised while it waits, or the generator closed)."""
    pidfile = tmp_path / "child.pid"
    monkeypatch.setitem(prebuild._BUILDERS, "slow", _slow_builder(pidfile))
    monkeypatch.setitem(prebuild._BUILDERS, "quick", "print('done')")
    gen = prebuild.build_all(["quick", "slow"])
    assert next(gen)[0] == "quick"
    child = _wait_for(pidfile)
    gen.close()
    assert _gone(child), "the builder's child outlived the caller's interest in it"


def test_a_killed_caller_takes_its_builds_with_it(tmp_path):
    pidfile = tmp_path / "child.pid"
    caller = textwrap.dedent(f"""
        from numabench.kernels import prebuild
        prebuild._BUILDERS["slow"] = {_slow_builder(pidfile)!r}
        list(prebuild.build_all(["slow"]))
    """)
    proc = subprocess.Popen([sys.executable, "-c", caller], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        child = _wait_for(pidfile)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert _gone(child), "the build's child outlived the process that asked for the build"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("kernel", ["stream"])
def test_builders_still_build(kernel, tmp_path, monkeypatch):
    monkeypatch.setenv("NUMABENCH_BUILD_DIR", str(tmp_path / "build"))
    [(name, status)] = list(prebuild.build_all([kernel]))
    assert name == kernel and status.startswith("ready"), status


def _in_folder(folder: Path) -> list[str]:
    """Processes whose working folder or command line is inside ``folder`` (a build's compilers)."""
    found = []
    for p in psutil.process_iter(["pid", "name", "cmdline", "cwd", "status"]):
        info = p.info
        if info["status"] == psutil.STATUS_ZOMBIE or info["pid"] == os.getpid():
            continue
        if str(folder) in (info["cwd"] or "") or any(str(folder) in a for a in info["cmdline"] or ()):
            found.append(f"{info['pid']} {info['name']}")
    return found


def _compiling(pid: int, timeout_s: float = 180) -> list[str]:
    """The compilers under process ``pid`` once one runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            names = [p.name() for p in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            names = []
        if "cc1plus" in names:
            return names
        time.sleep(0.05)
    raise AssertionError(f"no compiler started under {pid} within {timeout_s:g} s")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_a_caller_stopped_mid_compile_leaves_no_compiler_and_no_marker(sig, tmp_path):
    """A real compile (the stream kernel into a fresh build folder): ninja puts each compiler in a
    process group of its own, so the builder's group alone is not the build. Killing or
    interrupting the process that asked for it ends every compiler at once, and torch's
    marker (`lock`) is not left in the build folder, nor a killed compiler's temporary file
    (`cc*.s`) in the caller's TMPDIR."""
    build, scratch = tmp_path / "build", tmp_path / "tmp"
    scratch.mkdir()
    caller = "from numabench.kernels import prebuild; list(prebuild.build_all(['stream']))"
    proc = start_child([sys.executable, "-c", caller], cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "NUMABENCH_BUILD_DIR": str(build),
                            "TMPDIR": str(scratch)})
    try:
        _compiling(proc.pid)
        proc.send_signal(sig)
        proc.communicate(timeout=60)
        # the builder kills its compilers, then removes the marker, then exits: wait for all of it
        # (an orphaned compile goes on for 20 s and more here, a left marker for ever)
        deadline = time.monotonic() + 8.0
        while (_in_folder(build) or list(build.rglob(TORCH_BATON))) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _in_folder(build), "compilers outlived the process that asked for the build"
        assert not list(build.rglob(TORCH_BATON)), "torch's build marker was left behind"
        assert not list(scratch.rglob("*")), "temporary files left: " + ", ".join(
            str(f.relative_to(scratch)) for f in scratch.rglob("*"))
    finally:
        end_child(proc)
        for line in _in_folder(build):  # whatever a failed check left, so that nothing outlives the test
            with contextlib.suppress(psutil.Error):
                psutil.Process(int(line.split()[0])).kill()
