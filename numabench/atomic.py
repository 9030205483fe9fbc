"""Files and folders that appear whole or not at all.

A write can fail midway: no permission, a full disk (ENOSPC), a file-size limit (``ulimit -f``:
EFBIG, Python ignores SIGXFSZ). What numabench writes is therefore built under a temporary name
beside its destination (the same file system), fsynced, and renamed into place; on any failure,
Ctrl-C included, the temporary file or folder is removed, and so are the parent folders made for
it. A reader never sees a cut file, and a failed command leaves nothing behind.

``write_file`` writes one file; ``staged_folder`` gives a folder to fill (a report, a site) and
puts it in place when the block ends. A failed write is a ``WriteError`` naming the destination
and the reason (the CLI's one line, exit 2).
"""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Iterator

from numabench.errors import WriteError


def write_error(path: str | Path, err: OSError) -> WriteError:
    """The one line for a write to ``path`` that failed with ``err``."""
    return WriteError(f"cannot write {path}: {err.strerror or err}: nothing was written (allowed a folder this "
                      "user may write, with room for the file and within the file-size limit)")


def _make_parents(folder: Path) -> list[Path]:
    """Make ``folder`` and its missing parents; the folders made, outermost first."""
    made = []
    for p in reversed([folder, *folder.parents]):
        if not p.exists():
            p.mkdir()
            made.append(p)
    return made


def _remove_made(made: list[Path]) -> None:
    for p in reversed(made):
        with contextlib.suppress(OSError):
            p.rmdir()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: str | Path, data: bytes, *, overwrite: bool = True) -> bool:
    """Write ``data`` to ``path`` through a temporary file in its folder (fsynced, then renamed;
    without ``overwrite``: linked, so an existing ``path`` is kept and False returned). Raises
    WriteError, with nothing left, when it cannot."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if not overwrite:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
        else:
            os.replace(tmp, path)
        return True
    except OSError as e:
        raise write_error(path, e) from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


@contextlib.contextmanager
def staged_folder(out: str | Path, *, into_existing: bool = False, replace: bool = False) -> Iterator[Path]:
    """A new empty folder to fill; when the block ends without an error its content becomes
    ``out``. ``out`` new, or an empty folder: the folder is renamed into place.
    ``into_existing``: an existing ``out`` keeps its other files, each staged file is renamed
    into it (one of the same name replaced). ``replace``: an existing ``out`` is replaced whole
    (the caller checked that it may be). On any error, nothing is left but what ``out`` was."""
    shown, out = out, Path(out).resolve()
    made: list[Path] = []
    stage: Path | None = None
    try:
        if out.exists() and not out.is_dir():
            raise WriteError(f"cannot write {shown}: exists and is not a folder")
        inside = into_existing and out.is_dir()
        made = [] if inside else _make_parents(out.parent)
        stage = (out if inside else out.parent) / f".{out.name}.{os.getpid()}.staged"
        stage.mkdir()
        yield stage
        for f in stage.rglob("*"):
            if f.is_file():
                _fsync(f)
        if inside:
            for f in sorted(stage.iterdir()):
                os.replace(f, out / f.name)
            stage.rmdir()
        elif replace and out.is_dir() and any(out.iterdir()):
            old = out.parent / f".{out.name}.{os.getpid()}.old"
            os.rename(out, old)
            try:
                os.rename(stage, out)
            except OSError:
                os.rename(old, out)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(stage, out)  # a new folder, or over an empty one (rename replaces it)
        stage = None
        with contextlib.suppress(OSError):
            _fsync(out.parent)
    except OSError as e:
        raise write_error(shown, e) from None
    finally:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
            _remove_made(made)
