"""The kernel build lock: an flock that dies with its holder, a stale torch baton removed and
named, a waiting process that says what it waits on (no compile needed: the lock alone)."""
from __future__ import annotations

import os
import signal
import time

from numabench.kernels.build import TORCH_BATON, build_lock


def test_stale_torch_baton_is_removed_and_named(tmp_path, capfd):
    folder = tmp_path / "ext-torchX-abc"
    folder.mkdir()
    (folder / TORCH_BATON).write_text("")  # what a builder killed mid-build leaves behind
    t0 = time.monotonic()
    with build_lock(folder, "cpu_adam"):
        assert not (folder / TORCH_BATON).exists()
    assert time.monotonic() - t0 < 1.0
    err = capfd.readouterr().err
    assert f"removed the stale build lock {folder / TORCH_BATON}" in err and "'cpu_adam'" in err


def _child_holding_the_lock(folder, then_kill: bool) -> int:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: take the lock, tell the parent, then die hard or linger
        os.close(r)
        with build_lock(folder, "stream"):
            (folder / TORCH_BATON).write_text("")  # as torch's baton would be, mid-build
            os.write(w, b"x")
            if then_kill:
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(1.5)
        os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"x"
    os.close(r)
    return pid


def test_a_builder_killed_mid_build_blocks_nobody(tmp_path, capfd):
    folder = tmp_path / "ext"
    folder.mkdir()
    pid = _child_holding_the_lock(folder, then_kill=True)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    t0 = time.monotonic()
    with build_lock(folder, "stream"):
        pass
    assert time.monotonic() - t0 < 1.0
    assert "removed the stale build lock" in capfd.readouterr().err


def test_a_waiting_process_says_what_it_waits_on(tmp_path, capfd):
    folder = tmp_path / "ext"
    folder.mkdir()
    pid = _child_holding_the_lock(folder, then_kill=False)
    t0 = time.monotonic()
    with build_lock(folder, "stream"):
        waited = time.monotonic() - t0
    os.waitpid(pid, 0)
    assert waited > 0.5
    err = capfd.readouterr().err
    assert f"waiting for the build lock {folder}.flock" in err and "kernel 'stream'" in err
