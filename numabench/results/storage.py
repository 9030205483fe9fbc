"""Run files: the one place that finds and reads them, and baseline storage that two suites
started at once cannot corrupt.

``load_run`` reads one run file (a pytest-benchmark JSON: saved, --benchmark-json, merged or
imported from the seed's CSV) and checks it, so every command refuses a broken one with the
same one-line error naming the file: not a regular file, not UTF-8, not JSON, nested deeper
than MAX_JSON_DEPTH (which would exhaust the stack), not a run, or not of the declared shape
(``numabench.results.run_schema``: the error names the field's path, its value and what is
allowed, e.g. a timing that is NaN, zero or text, an entry held twice); ``run_files`` lists a folder's saved runs
(NNNN_name.json) in order and ``newest_run`` finds a storage's last good one. compare,
report, advise, history, fleet push, merge, the window, publish and the plan's progress
estimate all read through these.

pytest-benchmark's FileStorage picks the next run number by listing the
directory and then writes the file in place: two sessions saving at once can
both pick 0007, and one truncated file can be read by a third. ``LockedFileStorage``
(installed by fixtures/safety.py for ``file://`` storages) numbers and saves
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
import fnmatch
import json
import os
import re
from pathlib import Path
from typing import Any, Iterator

from pytest_benchmark.storage.file import FileStorage
from pytest_benchmark.utils import safe_dumps

from numabench.errors import UsageError
from numabench.results.run_schema import validate_run

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
        """The storage ``storage`` names (just made by pytest-benchmark, nothing loaded yet), locked."""
        return cls(storage.path, storage.logger, storage.default_machine_id)

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


# A saved run's file name: pytest-benchmark's NNNN_name.json (--benchmark-save), numbered per
# platform folder. --benchmark-json files and merged baselines may have any name: load_run takes them.
RUN_FILE_GLOB = "[0-9][0-9][0-9][0-9]_*.json"
ALLOWED_RUN = ("a pytest-benchmark run file (baselines/<key>/<platform>/NNNN_name.json or a "
               "--benchmark-json file)")


def load_run(path: str | Path, *, baseline_for: str | None = None) -> dict[str, Any]:
    """The run saved in ``path`` (a pytest-benchmark JSON: --benchmark-save, --benchmark-json, a
    merged or imported run), checked: a UsageError names the file, what is wrong and what is
    allowed. ``baseline_for``: the option or command that loads it as a baseline (e.g.
    "--benchmark-compare"); the error then names it, and each entry must have the 'fullname' and
    'stats' a compare reads."""
    where = _where(path, baseline_for)
    if Path(path).exists() and not Path(path).is_file() and not Path(path).is_dir():
        # a FIFO or a device: reading it would block, or never end
        raise UsageError(f"{where} is not a regular file: allowed {ALLOWED_RUN}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{where} does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"{where} is a directory: allowed {ALLOWED_RUN}") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"{where} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                         f"{e.start}): allowed a pytest-benchmark JSON") from None
    except OSError as e:
        raise UsageError(f"{where} cannot be read: {e.strerror}") from None
    return run_from_text(text, path, baseline_for=baseline_for)


def _where(name: str | Path, baseline_for: str | None) -> str:
    return f"{baseline_for}: baseline {name}" if baseline_for else f"run file {name}"


# How deep a run file may nest. A run is about 10 levels deep, and 2 more for each time a merged
# baseline is merged again (numabench_merged_from); far below this, and far below where Python's
# JSON reader and writer run out of stack (about 1000).
MAX_JSON_DEPTH = 500
_ESCAPE = re.compile(r"\\.", re.S)
_QUOTED = re.compile(r'"[^"]*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_depth(text: str, limit: int = MAX_JSON_DEPTH) -> int:
    """How deep JSON ``text`` nests (arrays and objects), counted up to ``limit + 1``; linear
    time, without recursion (a text nested 200,000 deep is read, not parsed)."""
    bare = _NOT_BRACKET.sub("", _QUOTED.sub("", _ESCAPE.sub("", text)))  # escapes, then strings, then the rest
    depth = deepest = 0
    for ch in bare:
        depth += 1 if ch in "[{" else -1
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                break
    return deepest


def loads_json(text: str, where: str) -> Any:
    """``json.loads(text)``, refusing a text nested deeper than MAX_JSON_DEPTH levels (it would
    exhaust the stack: RecursionError) with one UsageError naming ``where``."""
    if json_depth(text) > MAX_JSON_DEPTH:
        raise UsageError(f"{where} is nested deeper than {MAX_JSON_DEPTH} levels: allowed a pytest-benchmark run "
                         f"file (about 10 levels deep; at most {MAX_JSON_DEPTH})")
    return json.loads(text)


def run_from_text(text: str, name: str | Path, *, baseline_for: str | None = None) -> dict[str, Any]:
    """A run file's content (read from disk by ``load_run``, or from git) checked as ``load_run``
    checks it; ``name`` is what its errors call it (a path, or a path at a commit)."""
    where = _where(name, baseline_for)
    try:
        data = loads_json(text, where)
    except json.JSONDecodeError as e:
        raise UsageError(f"{where} is not valid JSON ({e.msg}: line {e.lineno} column {e.colno}): corrupt or "
                         "truncated; allowed a complete pytest-benchmark run file (re-save it or delete it)") from None
    benches = data.get("benchmarks") if isinstance(data, dict) else None
    if baseline_for:
        if not isinstance(benches, list) or not all(isinstance(b, dict) and isinstance(b.get("stats"), dict)
                                                    and "fullname" in b for b in benches):
            raise UsageError(f"{where} is not a pytest-benchmark run (no 'benchmarks' list with "
                             "'fullname' and 'stats' in each entry)")
    elif not isinstance(benches, list):
        raise UsageError(f"{where} has no 'benchmarks' list: not a pytest-benchmark JSON")
    problem = validate_run(data)  # the declared shape (results/run_schema.py): past here the code trusts it
    if problem:
        raise UsageError(f"{where}: {problem}")
    return data


def run_files(root: str | Path, *, platform_folders: bool = False) -> list[Path]:
    """The saved runs (NNNN_name.json) under ``root`` at any depth, in path order (per folder:
    run number order); ``platform_folders``: only those one folder down, where a storage
    (baselines/<key>/) keeps them (<platform>/NNNN_name.json). A missing ``root`` has none.

    Another pytest session of the checkout may make or remove an empty storage folder while
    this one lists (fixtures/machine.py): a folder gone mid-listing holds none (Path.glob
    raises FileNotFoundError there)."""
    root = Path(root)
    if platform_folders:
        return sorted(run for folder in _listing(root) if folder.is_dir() for run in _runs_in(folder))
    # os.walk passes over a folder that vanished, and follows no link to a folder (as Path.glob's **)
    return sorted(Path(here) / n for here, _dirs, files in os.walk(root) for n in files
                  if fnmatch.fnmatchcase(n, RUN_FILE_GLOB))


def _listing(folder: Path) -> list[Path]:
    try:
        return [folder / n for n in os.listdir(folder)]
    except (FileNotFoundError, NotADirectoryError):
        return []  # missing, or removed since its parent was listed


def _runs_in(folder: Path) -> list[Path]:
    return [p for p in _listing(folder) if fnmatch.fnmatchcase(p.name, RUN_FILE_GLOB)]


def newest_run(root: str | Path) -> tuple[dict[str, Any], Path] | None:
    """The newest saved run of the storage ``root`` (highest run number over its platform folders)
    that can be read, and its file; None when there is none. A broken newer run is passed over:
    the caller only wants an estimate from the last good one."""
    for path in sorted(run_files(root, platform_folders=True), key=lambda p: (p.name, str(p)), reverse=True):
        try:
            return load_run(path), path
        except UsageError:
            continue
    return None


def keys_with_baselines(root: Path) -> list[str]:
    """Hardware keys under ``root`` (baselines/) that hold at least one saved run."""
    return sorted(d.name for d in _listing(root) if d.is_dir() and run_files(d, platform_folders=True))


SAVE_HINT = "save one here with --benchmark-save=NAME --benchmark-save-data --numa-repeats=3"


def check_baselines(storage_path: str | Path, compare: Any, hardware_key: str | None = None, *,
                    what: str = "--benchmark-compare", hint: str = SAVE_HINT) -> list[Path]:
    """The files ``--benchmark-compare=compare`` would load from the file storage at
    ``storage_path``, each checked; raises UsageError when there is none (naming this hardware
    key and the keys that have baselines; ``what`` asked, ``hint`` says how to get one) or one
    is broken. Creates no folder."""
    path = Path(storage_path).resolve()
    files: list[Path] = []
    asked = [] if compare is True else list(compare if isinstance(compare, (list, tuple)) else [compare])
    if asked and all(Path(str(c)).is_file() for c in asked):
        # run files named by path: pytest-benchmark loads those wherever they are, storage folder or not
        files = [Path(str(c)) for c in asked]
    elif path.is_dir():
        storage = LockedFileStorage(path, None, default_machine_id=None)
        files = storage.query(*asked) if asked else storage.query("[0-9][0-9][0-9][0-9]_")[-1:]
    if not files:
        matching = "" if compare is True else f" matching {compare!r}"
        if hardware_key and path.name == hardware_key:
            keys = keys_with_baselines(path.parent)
            raise UsageError(f"{what}: no baseline{matching} for this machine's hardware key "
                             f"{hardware_key!r} in {path.parent}; keys with baselines: "
                             f"{', '.join(keys) or 'none'} ({hint})")
        raise UsageError(f"{what}: no baseline run{matching} in {path}")
    for f in files:
        load_run(f, baseline_for=what)  # raises on a broken one: pytest-benchmark would only warn
    return files
