"""A kernel build is killed whole: the builder leads its own process group, and what it
started (ninja, c++, cc1plus; here a stand-in `sleep`) dies with it on a time-out, on an
interrupt, and when the process that asked for the build is killed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from numabench.kernels import prebuild

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
