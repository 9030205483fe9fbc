"""Baseline storage that two suites started at once cannot corrupt, and strict loading.

pytest-benchmark's FileStorage picks the next run number by listing the
directory and then writes the file in place: two sessions saving at once can
both pick 0007, and one truncated file can be read by a third. ``LockedFileStorage``
(installed by fixtures/plugin.py for ``file://`` storages) numbers and saves
under an exclusive flock on the run folder itself (no lock file), writes the JSON to
a temporary file first (fsynced) and publishes it with ``os.link``, which fails
rather than replaces when the name exists (then the next number is tried). A
reader never sees a half-written run, and no run overwrites another, even on
file systems where flock is a no-op.

Baselines are found by hardware key whatever the Python version: the storage
is ``baselines/<hardware key>/`` and a run saved under any platform folder in
it (``Linux-CPython-3.12-64bit/``, kept for upstream compatibility) is found
from any interpreter. ``check_baselines`` reads the runs a
``--benchmark-compare`` would load and turns none at all, or a corrupt or
truncated one, into a one-line usage error; pytest-benchmark itself would only
warn and compare against nothing.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any, Iterator

from pytest_benchmark.storage.file import FileStorage
from pytest_benchmark.utils import safe_dumps

from numabench.errors import UsageError

MAX_TRIES = 1000


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """flock on ``path`` (a folder is fine: nothing is created)."""
    fd = os.open(path, os.O_RDONLY) if Path(path).is_dir() else os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def publish(path: Path, data: bytes) -> bool:
    """Create ``path`` with ``data`` atomically; False (and nothing written) if it exists."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


class LockedFileStorage(FileStorage):
    @classmethod
    def adopt(cls, storage: FileStorage) -> "LockedFileStorage":
        new = cls(storage.path, storage.logger, storage.default_machine_id)
        new._cache = storage._cache
        return new

    def query(self, *globs_or_files: str) -> list[Path]:
        """As upstream, but a bare file glob matches in every platform folder, not only this
        interpreter's: a baseline saved from Python 3.12 is found from 3.11."""
        globs = [g if Path(g).is_file() or len(Path(g).parts) != 1 else f"*/{g}" for g in globs_or_files or ("*",)]
        return super().query(*globs)

    def save(self, output_json: dict[str, Any], save: str) -> Path:
        data = safe_dumps(output_json, ensure_ascii=True, indent=4).encode()
        folder = self.get("x").parent  # creates <storage>/<machine id>/
        with exclusive_lock(folder):
            for _ in range(MAX_TRIES):
                output_file = self.get(f"{self._next_num}_{save}.json")
                if publish(output_file, data):
                    break
            else:
                raise RuntimeError(f"could not find a free run number in {folder} after {MAX_TRIES} tries")
        self.logger.info(f"Saved benchmark data in: {output_file}")
        return output_file


def check_run_file(path: Path, what: str) -> None:
    try:
        data = json.loads(Path(path).read_text(encoding="utf8"))
    except json.JSONDecodeError as e:
        raise UsageError(f"{what}: baseline {path} is not valid JSON ({e.msg}: line {e.lineno} column "
                         f"{e.colno}): corrupt or truncated; allowed a complete pytest-benchmark run file "
                         "(re-save it or delete it)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{what}: baseline {path} cannot be read ({e})") from None
    benches = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(benches, list) or not all(isinstance(b, dict) and isinstance(b.get("stats"), dict)
                                                and "fullname" in b for b in benches):
        raise UsageError(f"{what}: baseline {path} is not a pytest-benchmark run (no 'benchmarks' list with "
                         "'fullname' and 'stats' in each entry)")


def keys_with_baselines(root: Path) -> list[str]:
    """Hardware keys under ``root`` (baselines/) that hold at least one saved run."""
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if d.is_dir() and any(d.glob("*/[0-9][0-9][0-9][0-9]_*.json")))


SAVE_HINT = "save one here with --benchmark-save=NAME --benchmark-save-data --numa-repeats=3"


def check_baselines(storage_path: str | Path, compare: Any, hardware_key: str | None = None, *,
                    what: str = "--benchmark-compare", hint: str = SAVE_HINT) -> list[Path]:
    """The files ``--benchmark-compare=compare`` would load from the file storage at
    ``storage_path``, each checked; raises UsageError when there is none (naming this hardware
    key and the keys that have baselines; ``what`` asked, ``hint`` says how to get one) or one
    is broken. Creates no folder."""
    path = Path(storage_path).resolve()
    files: list[Path] = []
    if path.is_dir():
        storage = LockedFileStorage(path, None, default_machine_id=None)
        if compare is True:
            files = storage.query("[0-9][0-9][0-9][0-9]_")[-1:]
        else:
            files = storage.query(*(compare if isinstance(compare, (list, tuple)) else [compare]))
    if not files:
        matching = "" if compare is True else f" matching {compare!r}"
        if hardware_key and path.name == hardware_key:
            keys = keys_with_baselines(path.parent)
            raise UsageError(f"{what}: no baseline{matching} for this machine's hardware key "
                             f"{hardware_key!r} in {path.parent}; keys with baselines: "
                             f"{', '.join(keys) or 'none'} ({hint})")
        raise UsageError(f"{what}: no baseline run{matching} in {path}")
    for f in files:
        check_run_file(f, what)
    return files
