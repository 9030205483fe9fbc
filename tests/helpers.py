"""Shared test helpers (imported by test modules; tests/ is on sys.path under pytest)."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil

from numabench.machine.capabilities import Capabilities


def fake_caps(**kw) -> Capabilities:
    """Capabilities as this 6.18 VM with numactl 2.0.16 has them; override any field."""
    base = dict(kernel_release="6.18.44-fc-v595", weighted_interleave_kernel=True, weighted_interleave_errno=0,
                preferred_many_kernel=True, weights_dir=True, weights_writable=True, weights_auto_mode=True,
                numactl_path="/usr/bin/numactl", numactl_version=None, numactl_weighted=False,
                numactl_preferred_many=True)
    base.update(kw)
    return Capabilities(**base)


def fake_weights_dir(tmp_path, auto: str = "true"):
    """A weighted_interleave sysfs folder with node0's weight and the auto-mode switch set to ``auto``."""
    wdir = tmp_path / "weighted_interleave"
    wdir.mkdir()
    (wdir / "node0").write_text("1\n")
    (wdir / "auto").write_text(f"{auto}\n")
    return wdir


# Children that run the suite: started with defined signal dispositions, in their own process
# group, and never outliving the test that started them.
INTERRUPTS = (signal.SIGINT, signal.SIGTERM)
END_GRACE_S = 20.0  # an interrupted run's time to end its workers and remove its scratch folders


def dispositions(ignored: Sequence[signal.Signals] = ()) -> Callable[[], None]:
    """A preexec_fn: SIGINT and SIGTERM at their defaults in the child, whatever this test run
    inherited, except ``ignored`` (as `trap '' INT`, a background job of a non-interactive
    shell or a CI wrapper leaves them)."""
    def preexec() -> None:
        for sig in INTERRUPTS:
            signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)
    return preexec


def start_child(cmd: Sequence[str], ignored: Sequence[signal.Signals] = (), **kw: Any) -> subprocess.Popen:
    """``cmd`` in a new session (its own process group, which end_child kills), output as text."""
    # preexec_fn: the test processes start no threads that could hold a lock across the fork
    return subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=dispositions(ignored), **kw)  # noqa: PLW1509


def end_child(proc: subprocess.Popen, grace_s: float = END_GRACE_S) -> None:
    """Stop the child's whole process group: SIGTERM first (the suite ends its workers and removes
    their scratch folders), SIGKILL after ``grace_s``; workers die with their parent
    (PR_SET_PDEATHSIG). Also clears stragglers of a child that has exited."""
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.communicate(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(proc, signal.SIGKILL)
    if proc.poll() is None:
        proc.communicate()


def finish(proc: subprocess.Popen, timeout_s: float) -> str:
    """The child's output once it exits; its group is ended whether it did or not (a timeout
    still raises TimeoutExpired, after that)."""
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    finally:
        end_child(proc)
    return out


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def scratch_left(tmpdir: Path) -> list[str]:
    """WorkerGroup scratch folders (numabench-run-*) under a child's TMPDIR."""
    return sorted(p.name for p in tmpdir.glob("numabench-run-*"))


def workers_of(pid: int) -> list[psutil.Process]:
    """The numabench workers among the process's descendants."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for p in kids:
        with contextlib.suppress(psutil.Error):
            if any("numabench.workers.main" in a for a in p.cmdline()):
                out.append(p)
    return out


def wait_for_workers(proc: subprocess.Popen, timeout_s: float = 120.0) -> list[psutil.Process]:
    """The child's workers once one runs (a case has started); AssertionError if the child
    ends or none starts within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        seen = workers_of(proc.pid)
        if seen:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"no worker started within {timeout_s:g} s (exit code {proc.poll()})")


def import_seed_runs(tmp_path: Path) -> list[str]:
    """The seed's two-node CSVs (plain and weighted interleave, DRAM and CXL) imported as
    runs under tmp_path: the committed baselines have one node."""
    from numabench.cli import main

    seed = Path(__file__).parent / "data" / "seed"
    runs = []
    for kind in ("normal", "weighted"):
        path = tmp_path / f"{kind}.json"
        assert main(["import-csv", str(seed / f"qwen2.5-7B_{kind}_interleave.csv"), "--out", str(path),
                     "--gpu", "seed GPU", "--cpu", "seed host"]) == 0
        runs.append(str(path))
    return runs


def publish_seed_site(tmp_path: Path) -> Path:
    """A site published from the seed's imported runs (its advisor and model pages)."""
    from numabench.cli import main

    out = tmp_path / "site"
    assert main(["publish", *import_seed_runs(tmp_path), "--out", str(out)]) == 0
    return out


def git_in(repo: Path, *args: str) -> None:
    """Run git in ``repo`` as a fixed test identity, with no user or system configuration."""
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})
