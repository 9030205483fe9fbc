"""A kernel builder's whole process tree, ended together.

ninja starts every compile command in a process group of its own (so that Ctrl-C at a
terminal reaches ninja alone), so killing the builder's process group leaves ``sh``, ``c++``
and ``cc1plus`` compiling on for up to a minute, writing into the build folder. So the tree
is walked instead: every descendant, whatever its group, is killed until none is left. The
builder is a child subreaper, so that what its killed ninja had started comes back to it
and is found by the next walk instead of escaping to init.

A builder ends its tree itself on SIGTERM (``end_tree_on_term``): from its parent when
the build is abandoned or timed out, and from the kernel (``PR_SET_PDEATHSIG``) when the
process that asked for the build dies, SIGKILL included. It then removes torch's build
marker, which it alone can own while it holds the build lock, and its own temporary folder
(``BUILDER_TMPDIR_ENV``: a compiler killed mid-compile leaves its ``cc*.s`` there, not in
/tmp), and exits.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import time
from typing import Any

import psutil

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
# The builder's TMPDIR, a folder of its own that its parent made and removes after it; the
# builder removes it itself when it ends its tree (its parent may be gone by then).
BUILDER_TMPDIR_ENV = "NUMABENCH_BUILDER_TMPDIR"
TREE_KILL_TIMEOUT_S = 10.0  # SIGKILLed processes are gone in milliseconds; D state may take longer


def builder_preexec() -> None:
    """In the builder child before exec: its own session, SIGTERM when its parent dies, and
    the orphans of its tree re-parented to it. Both attributes survive the exec."""
    os.setsid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
    if os.getppid() == 1:  # the parent died before the request took effect
        os._exit(1)


def live_descendants(pid: int) -> list[psutil.Process]:
    """``pid``'s descendants that have not exited (zombies are left out: they run nothing)."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    live = []
    for p in kids:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                live.append(p)
        except psutil.Error:
            pass
    return live


def kill_tree(pid: int, timeout_s: float = TREE_KILL_TIMEOUT_S) -> list[int]:
    """SIGKILL every descendant of ``pid`` (not ``pid`` itself), in whatever process group,
    until none is left or ``timeout_s`` passes; returns the pids still alive then."""
    deadline = time.monotonic() + timeout_s
    own = pid == os.getpid()
    while True:
        left = live_descendants(pid)
        if not left or time.monotonic() > deadline:
            return [p.pid for p in left]
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        time.sleep(0.02)
        if own:
            _reap_children()


def _reap_children() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _on_term(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up below runs once, to its end
    kill_tree(os.getpid())
    from numabench.kernels.build import drop_own_baton
    drop_own_baton()
    if os.environ.get(BUILDER_TMPDIR_ENV):
        shutil.rmtree(os.environ[BUILDER_TMPDIR_ENV], ignore_errors=True)
    os._exit(128 + signum)


def end_tree_on_term() -> None:
    """The builder's first statement: SIGTERM ends its whole tree, removes its torch marker
    and its temporary folder, and exits (code 143)."""
    signal.signal(signal.SIGTERM, _on_term)
