"""Weighted-interleave node weights in sysfs: set for a case, always restore.

The weights are system wide (``/sys/kernel/mm/mempolicy/weighted_interleave/
nodeN``, root only). Kernels from 6.16 also have an auto-tuning switch that
turns off as soon as a weight is written; it is restored too. Its file is
``auto``; some kernels built with C23 show it as ``__auto_type`` (the macro
that names the attribute expands the keyword), so both names are accepted.

Turning auto mode back on makes the kernel recompute weights from firmware
bandwidth data (HMAT/CXL, seen as ``/sys/devices/system/node/nodeN/access0/
initiators/*_bandwidth``). Without such data the kernel refuses (ENODEV): on
such machines a weight write turns auto mode off until reboot. The weights
shown while auto mode is on are then all 1, so restoring the saved weights
restores the behaviour; restore() says so in one line on stderr instead of
failing. Weights equal to the current ones are not written at all, so a case
asking for what is already set changes nothing.

Restoration never raises over an exception already on its way out (an
interrupt, a worker fault): it tries every file, and reports what it could not
restore on stderr.

Two suites on one machine (or two xdist workers) must not interleave: A saves
1 and writes 3, B saves A's 3 and writes 5, A restores 1, B restores 3, and the
machine is left changed (and A measured under B's weights). A ``WeightSetting``
therefore holds a machine-wide lock (flock on the weights directory itself,
so no lock file is ever left behind) from before it reads the
weights until it has restored them; another process waits for it (up to
``NUMABENCH_WEIGHTS_LOCK_TIMEOUT_S``, default 1800 s). Nested settings in one
process share the lock.
"""
from __future__ import annotations

import atexit
import errno
import fcntl
import os
import time
import warnings
from pathlib import Path
from typing import Mapping

from numabench import bounds
from numabench.errors import UsageError
from numabench.machine.weights_sysfs import (
    NODE_SYSFS,
    WEIGHTS_DIR,
    auto_mode_file,
    kernel_has_bandwidth_data,
    read_weights,
)

MAX_WEIGHT = 255


LOCK_POLL_S = 0.1
_held: dict[Path, list[int]] = {}  # lock path -> [fd, depth] for locks this process holds


def lock_timeout_s() -> float:
    text = os.environ.get("NUMABENCH_WEIGHTS_LOCK_TIMEOUT_S", "1800")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    return bounds.check("lock_timeout", value, f"NUMABENCH_WEIGHTS_LOCK_TIMEOUT_S={text!r}")


def lock_path(weights_dir: Path = WEIGHTS_DIR) -> Path:
    """What is flocked for one weights directory: the directory itself (one inode per
    machine; flock works on sysfs directories), so nothing is created and nothing left."""
    return Path(weights_dir).resolve()


def acquire_lock(weights_dir: Path, timeout_s: float) -> Path:
    """Take (or, in a process that holds it, re-enter) the weights lock; UsageError after ``timeout_s``."""
    path = lock_path(weights_dir)
    if path in _held:
        _held[path][1] += 1
        return path
    # Read-only is enough for flock, and any user may open the directory (a non-root process
    # then fails on the weight write itself, with the message that says why).
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise UsageError(
                        f"weighted interleave weights in {weights_dir} are in use by another process (lock {path} "
                        f"held for more than {timeout_s:g} s): another numabench suite runs a weighted case; "
                        "wait for it or raise NUMABENCH_WEIGHTS_LOCK_TIMEOUT_S") from None
                time.sleep(LOCK_POLL_S)
    except BaseException:
        os.close(fd)
        raise
    _held[path] = [fd, 1]
    return path


def release_lock(path: Path) -> None:
    entry = _held.get(path)
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] == 0:
        del _held[path]
        os.close(entry[0])  # releases the flock


def _write(path: Path, value: str) -> None:
    # sysfs wants one write() of the whole value.
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


class WeightSetting:
    """Context manager: write ``weights`` ({node: weight}) and restore the old state on exit.

    Restoration also runs at interpreter exit if the block never finished
    (e.g. the process is being torn down by a signal turned into SystemExit).
    ``problems`` lists, after restore(), what could not be put back.
    """

    def __init__(self, weights: Mapping[int, int], weights_dir: Path = WEIGHTS_DIR,
                 node_root: Path = NODE_SYSFS) -> None:
        for node, w in weights.items():
            if not 1 <= w <= MAX_WEIGHT:
                raise UsageError(f"weight {w} for node {node} is out of range: allowed 1..{MAX_WEIGHT}")
        self.weights = dict(weights)
        self.dir = Path(weights_dir)
        self._saved: dict[int, int] | None = None
        self._saved_auto: str | None = None
        self._lock: Path | None = None
        self.node_root = Path(node_root)
        self.problems: list[str] = []  # what restore() could not put back
        self._record: dict[str, dict[str, str]] = {}

    def __enter__(self) -> "WeightSetting":
        if not self.dir.is_dir():
            raise UsageError(f"weighted interleave weights directory {self.dir} is missing (kernel < 6.9?)")
        self._lock = acquire_lock(self.dir, lock_timeout_s())
        try:
            current = read_weights(self.dir)
            missing = sorted(set(self.weights) - set(current))
            if missing:
                raise UsageError(f"no weight file for node(s) {missing} in {self.dir}; "
                                 f"nodes there: {sorted(current)}")
            auto = auto_mode_file(self.dir)
            self._saved_auto = auto.read_text().strip() if auto else None
        except BaseException:
            self._unlock()
            raise
        self._saved = {n: current[n] for n in self.weights}
        self._record = {"before": self._snapshot()}
        atexit.register(self.restore)
        try:
            for node, w in self.weights.items():
                if current[node] != w:
                    _write(self.dir / f"node{node}", str(w))
        except OSError as e:
            self.restore(raise_errors=False)
            raise PermissionError(f"cannot write weighted interleave weights in {self.dir}: {e.strerror}; "
                                  "this needs root") from e
        self._record["during"] = self._snapshot()
        return self

    def _unlock(self) -> None:
        if self._lock is not None:
            lock, self._lock = self._lock, None
            release_lock(lock)

    def restore(self, raise_errors: bool = True) -> None:
        """Put back the saved weights and auto mode, then let other processes at them. Tries
        everything; with ``raise_errors`` a failure to write a node weight raises after all
        were tried, else it is reported."""
        if self._saved is None:
            self._unlock()
            return
        saved, self._saved = self._saved, None
        atexit.unregister(self.restore)
        try:
            self._restore(saved, raise_errors)
        finally:
            self._record["after"] = self._snapshot()
            self._unlock()

    def _restore(self, saved: dict[int, int], raise_errors: bool) -> None:
        failed: list[str] = []
        for node, w in saved.items():
            path = self.dir / f"node{node}"
            try:
                if read_weights(self.dir).get(node) != w:
                    _write(path, str(w))
            except OSError as e:
                failed.append(f"{path}={w} ({e.strerror or e})")
        auto = auto_mode_file(self.dir)
        try:
            if auto is not None and self._saved_auto is not None and auto.read_text().strip() != self._saved_auto:
                # Writing "true" makes the kernel recompute weights from firmware bandwidth data, as before.
                _write(auto, self._saved_auto)
        except OSError as e:
            if e.errno == errno.ENODEV and not kernel_has_bandwidth_data(self.node_root):
                self.problems.append(
                    f"{auto} stays 'false': the kernel has no firmware bandwidth data to turn auto mode back on "
                    f"(ENODEV); node weights are back to {saved}, the values auto mode showed")
            else:
                failed.append(f"{auto}={self._saved_auto} ({e.strerror or e})")
        self.problems += [f"could not restore {f}" for f in failed]
        for p in self.problems:  # library code warns; pytest and the CLI show it
            warnings.warn(f"numabench.numa.weights: {p}", RuntimeWarning, stacklevel=2)
        if failed and raise_errors:
            raise OSError(f"could not restore weighted interleave settings: {'; '.join(failed)}")

    def __exit__(self, exc_type: object, *exc: object) -> None:
        # Never replace an exception already on its way out (an interrupt, a worker fault).
        try:
            self.restore(raise_errors=exc_type is None)
        finally:
            if self._record:
                TOUCHED.append(self._record)

    def _snapshot(self) -> dict[str, str]:
        files = [self.dir / f"node{n}" for n in self.weights] + [f for f in [auto_mode_file(self.dir)] if f]
        out = {}
        for f in files:
            try:
                out[str(f)] = f.read_text().strip()
            except OSError as e:
                out[str(f)] = f"unreadable ({e.strerror or e})"
        return out


# Every setting a WeightSetting touched in this process: path -> value before, during, after.
TOUCHED: list[dict[str, dict[str, str]]] = []


def settings_touched() -> list[dict[str, str]]:
    """One entry per file and setting: {"path", "before", "during", "after"} (the run's record)."""
    out = []
    for rec in TOUCHED:
        for path, before in rec.get("before", {}).items():
            out.append({"path": path, "before": before, "during": rec.get("during", {}).get(path, ""),
                        "after": rec.get("after", {}).get(path, "")})
    return out
