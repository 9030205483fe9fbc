"""`numabench ab` stopped by a signal mid-run (a CI job cancelled: SIGTERM; a closed terminal:
SIGHUP; Ctrl-C) ends in one line with the shell's code for the signal, and leaves no git
worktree, no scratch folder and no child process behind."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from helpers import dispositions, running

ROOT = Path(__file__).resolve().parents[1]


def worktrees(repo: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(repo), "worktree", "list", "--porcelain"], capture_output=True, text=True)
    return [ln for ln in out.stdout.splitlines() if ln.startswith("worktree ")]


@pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None, reason="needs a git checkout")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_mid_ab_removes_its_worktrees_and_ends_in_one_line(tmp_path, sig):
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(repo)], check=True, capture_output=True)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    # this tree's numabench runs; the repo it A/Bs is the clone
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(scratch), "PYTHONUNBUFFERED": "1"}
    # `python -m` would put the clone (the cwd) first on the path: this tree's code runs instead
    cli = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from numabench.cli import main; sys.exit(main())"
    proc = subprocess.Popen([sys.executable, "-c", cli, "ab", "HEAD", "HEAD", "--pairs", "2", "--",
                             "benchmarks/test_touch.py", "--numa-policies=default", "--param-sizes=4M"],
                            cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=dispositions())  # noqa: PLW1509
    try:
        lines = []
        deadline = time.monotonic() + 120
        while not any(ln.startswith("[ab] building head") for ln in lines):  # both worktrees exist now
            line = proc.stderr.readline()
            assert line and time.monotonic() < deadline, "".join(lines)
            lines.append(line)
        assert len(worktrees(repo)) == 3
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + sig, err
    assert err.strip().splitlines() == [f"numabench: ab interrupted ({sig.name}): stopped"], err
    assert worktrees(repo) == [f"worktree {repo}"]
    assert not list(scratch.iterdir()), sorted(p.name for p in scratch.iterdir())
    time.sleep(0.5)
    assert not [c.pid for c in children if running(c)]


def interrupt_run_child_once_ready(child: str, ready: Path, cwd: Path, relayed: bool = False) -> None:
    """run_child on ``child`` (Python source), Ctrl-C (as SIGALRM's handler) once ``ready``
    exists; asserts that run_child gave way to the KeyboardInterrupt. ``relayed``: its lines
    relayed as they come (as the A/B session's are)."""
    from numabench.ab.run import run_child

    def interrupt_once_ready() -> None:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGALRM)

    previous = signal.signal(signal.SIGALRM, signal.default_int_handler)
    waiter = threading.Thread(target=interrupt_once_ready, daemon=True)
    try:
        with pytest.raises(KeyboardInterrupt):
            waiter.start()
            run_child([sys.executable, "-c", child], cwd, dict(os.environ), "the child",
                      (lambda line: None) if relayed else None)
    finally:
        waiter.join()
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("relayed", [False, True], ids=["captured", "relayed"])
def test_an_interrupted_child_is_stopped_and_waited_for(tmp_path, relayed):
    """Ctrl-C while ab waits for a build or a session: the child gets SIGTERM and ab returns only
    once it has ended (here it takes 1 s to end what it started), never leaving it running."""
    ready, ended = tmp_path / "ready", tmp_path / "ended"
    child = ("import signal, sys, time\n"
             "def stop(*_):\n"
             f"    time.sleep(1.0); open({str(ended)!r}, 'w').write('ended'); sys.exit(143)\n"
             "signal.signal(signal.SIGTERM, stop)\n"
             f"open({str(ready)!r}, 'w').write('ready')\n"
             "time.sleep(60)\n")
    interrupt_run_child_once_ready(child, ready, tmp_path, relayed)  # once the child handles SIGTERM
    assert ended.read_text() == "ended"  # it ended its own way before run_child returned


def test_a_relayed_childs_lines_arrive_while_it_runs(tmp_path):
    """The A/B session's lines reach numabench ab's progress as they come, not at the end: the
    child prints its second line only once the first has been relayed (else it exits 3 after
    60 s); both lines, stderr's too, are in the output afterwards."""
    from numabench.ab.run import run_child

    seen = tmp_path / "seen"
    child = ("import os, sys, time\n"
             "print('first', flush=True)\n"
             "deadline = time.monotonic() + 60\n"
             f"while not os.path.exists({str(seen)!r}):\n"
             "    time.sleep(0.02)\n"
             "    if time.monotonic() > deadline: sys.exit(3)\n"
             "print('second', file=sys.stderr, flush=True)\n")
    lines = []

    def on_line(line):
        lines.append(line)
        seen.touch()

    proc = run_child([sys.executable, "-c", child], tmp_path, dict(os.environ), "the child", on_line)
    assert (proc.returncode, lines, proc.stdout, proc.stderr) == (0, ["first", "second"], "first\nsecond\n", "")


def test_an_interrupted_childs_own_children_are_waited_for(tmp_path):
    """A child that dies at once on SIGTERM while a process it started (a kernel builder, in a
    session of its own) still takes 1 s to end its work: run_child returns only after that one
    has ended too."""
    ready, ended = tmp_path / "ready", tmp_path / "ended"
    grandchild = ("import os, time\n"
                  "parent = os.getppid()\n"
                  f"open({str(ready)!r}, 'w').write('ready')\n"
                  "deadline = time.monotonic() + 60\n"
                  "while os.getppid() == parent and time.monotonic() < deadline:\n"
                  "    time.sleep(0.02)\n"
                  f"time.sleep(1.0); open({str(ended)!r}, 'w').write('ended')\n")
    child = ("import subprocess, sys, time\n"  # the grandchild holds none of run_child's pipes
             f"subprocess.Popen([sys.executable, '-c', {grandchild!r}], start_new_session=True,\n"
             "                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
             "time.sleep(60)\n")
    interrupt_run_child_once_ready(child, ready, tmp_path)
    assert ended.read_text() == "ended"  # the grandchild ended its work before run_child returned


@pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None, reason="needs a git checkout")
def test_an_interrupt_as_a_worktree_is_added_leaves_no_worktree(tmp_path, monkeypatch):
    """Ctrl-C landing in `git worktree add` (the add done, or cut short): the worktree is removed
    all the same, with the others."""
    from numabench.ab import run as ab

    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(repo)], check=True, capture_output=True)
    real = ab._git

    def interrupted_add(where: Path, *args: str) -> str:
        out = real(where, *args)
        if args[:2] == ("worktree", "add") and Path(args[-2]).name == "head":
            raise KeyboardInterrupt  # the signal, as git's add had just finished
        return out

    monkeypatch.setattr(ab, "_git", interrupted_add)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    with pytest.raises(KeyboardInterrupt):
        with ab.checkouts(repo, "HEAD", "HEAD", scratch):
            pass
    assert worktrees(repo) == [f"worktree {repo}"]
    assert not list(scratch.iterdir())
