"""Worker groups' scratch folders, named after their owner so that an abandoned one is
removed by the next run.

A group removes its folder when it closes; an owner killed outright (SIGKILL, the OOM
killer) cannot. So the name says who made it: ``numabench-run-NS-PID-START-XXXXXXXX``, the
owner's PID namespace (the inode of /proc/self/ns/pid), its pid and its start time (clock
ticks after boot, /proc/PID/stat field 22, so that a reused pid does not pass for the
owner). Before a group makes its folder it removes those in the same temporary folder
whose owner is dead. It leaves alone a live owner's, one made in another PID namespace
(its pid means nothing here), and one whose name does not say its owner.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

PREFIX = "numabench-run-"
_NAME = re.compile(r"numabench-run-(\d+)-(\d+)-(\d+)-[a-z0-9_]+", re.ASCII)


def pid_namespace() -> int | None:
    """This process's PID namespace (the inode of /proc/self/ns/pid), or None where unreadable."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot), or None where there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after the command name, which may hold spaces
    try:
        return int(fields[19])  # field 22; fields[0] is field 3 (the state)
    except (IndexError, ValueError):
        return None


def make() -> str:
    """A new scratch folder under the temporary folder, named after this process (where /proc
    cannot say who it is, a plain name that no sweep removes)."""
    pid = os.getpid()
    ns, start = pid_namespace(), start_time(pid)
    owner = f"{ns}-{pid}-{start}-" if ns is not None and start is not None else ""
    return tempfile.mkdtemp(prefix=PREFIX + owner)


def abandoned(tmpdir: str | None = None) -> list[Path]:
    """The scratch folders under ``tmpdir`` (default: the temporary folder) whose owner is dead."""
    ns = pid_namespace()
    if ns is None:
        return []
    root = Path(tmpdir or tempfile.gettempdir())
    try:
        entries = list(root.glob(PREFIX + "*"))
    except OSError:
        return []
    out = []
    for path in entries:
        m = _NAME.fullmatch(path.name)
        if not m or int(m[1]) != ns:
            continue
        pid, start = int(m[2]), int(m[3])
        if start_time(pid) != start and path.is_dir() and not path.is_symlink():
            out.append(path)
    return out


def sweep(tmpdir: str | None = None) -> list[Path]:
    """Remove the abandoned scratch folders (best effort: another user's stays); returns them."""
    found = abandoned(tmpdir)
    for path in found:
        shutil.rmtree(path, ignore_errors=True)
    return found
