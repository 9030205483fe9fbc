"""Build the C++/CUDA sources in csrc/ with ninja through torch's cpp_extension.

Builds are cached per (name, torch version, source hash) under
``$NUMABENCH_BUILD_DIR`` (default ``~/.cache/numabench/build``) so a second
process or a second pytest session loads the shared object in milliseconds.

One process builds at a time, under an flock on ``<build folder>.flock``: the
kernel releases it when its holder dies, whatever the death. torch's own
marker file (``<build folder>/lock``, which every later builder would wait on
forever) belongs to the flock's holder: a builder that is stopped removes its
own (``drop_own_baton``, numabench.kernels.builder_tree), and one that a builder
SIGKILLed before it could left is stale whenever we hold the flock (its owner is
dead): it is removed, and the removal named on stderr. A process that has to
wait says so on stderr first, so a time-out names what it waited on.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator, Sequence

CSRC_DIR = Path(__file__).resolve().parents[2] / "csrc"


def build_root() -> Path:
    return Path(os.environ.get("NUMABENCH_BUILD_DIR", Path.home() / ".cache" / "numabench" / "build"))


def _source_digest(paths: Sequence[Path], flags: Sequence[str]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    # Headers in csrc/ change the build too.
    for p in sorted(q for pat in ("*.h", "*.cuh", "*.hpp") for q in CSRC_DIR.glob(pat)):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    h.update("\0".join(flags).encode())
    return h.hexdigest()[:12]


def _snapshot_sources(paths: Sequence[Path], dest: Path) -> list[Path]:
    """Copies of the sources (and csrc/ headers) inside the build folder, compiled from there:
    build.ninja then names the same paths for every checkout with the same sources, so two
    checkouts (a git worktree, a second clone) share one build instead of rebuilding each other's."""
    dest.mkdir(parents=True, exist_ok=True)
    headers = [q for pat in ("*.h", "*.cuh", "*.hpp") for q in CSRC_DIR.glob(pat)]
    for src in [*paths, *headers]:
        target = dest / src.name
        data = src.read_bytes()
        if not target.is_file() or target.read_bytes() != data:
            tmp = dest / f".{src.name}.{os.getpid()}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, target)  # atomic: a concurrent builder never reads half a file
    return [dest / p.name for p in paths]


def extension_dir(name: str, sources: Sequence[str], torch_version: str, *, extra_cflags: Sequence[str] = (),
                  extra_cuda_cflags: Sequence[str] = (), extra_ldflags: Sequence[str] = ()) -> Path:
    """The build folder of the extension made of ``csrc/<sources>`` with these flags under this
    torch version (the version string as torch reports it): keyed by all of them."""
    flags = [*extra_cflags, "|", *extra_cuda_cflags, "|", *extra_ldflags]
    digest = _source_digest([CSRC_DIR / s for s in sources], flags)
    return build_root() / f"{name}-torch{torch_version.replace('+', '_')}-{digest}"


def load_extension(
    name: str,
    sources: Sequence[str],
    *,
    extra_cflags: Sequence[str] = (),
    extra_cuda_cflags: Sequence[str] = (),
    extra_ldflags: Sequence[str] = (),
) -> ModuleType:
    """Compile (once) and import the extension made of ``csrc/<sources>``."""
    import torch
    from torch.utils import cpp_extension

    paths = [CSRC_DIR / s for s in sources]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"kernel sources missing: {', '.join(missing)}")
    build_dir = extension_dir(name, sources, torch.__version__, extra_cflags=extra_cflags,
                              extra_cuda_cflags=extra_cuda_cflags, extra_ldflags=extra_ldflags)
    build_dir.mkdir(parents=True, exist_ok=True)
    with build_lock(build_dir, name):
        _fault_point(build_dir)
        found = loaded_before(build_dir)
        if found is not None:  # built and loaded before: import it, no ninja to ask
            return _import_shared_object(found)
        module = cpp_extension.load(
            name=name,
            sources=[str(p) for p in _snapshot_sources(paths, build_dir / "src")],
            extra_cflags=list(extra_cflags),
            extra_cuda_cflags=list(extra_cuda_cflags),
            extra_ldflags=list(extra_ldflags),
            build_directory=str(build_dir),
            verbose=bool(os.environ.get("NUMABENCH_BUILD_VERBOSE")),
        )
        _stamp_loaded(build_dir, Path(module.__file__))
        return module


# Written in a build folder after a load from it succeeded: the shared object's name, size and
# modification time. torch's load asks ninja whether anything is out of date (a few seconds of
# checks and subprocesses in every process that loads); a folder is keyed by its sources, flags
# and torch version (extension_dir), so while that file is unchanged the answer is known.
LOADED_STAMP = "loaded.json"


def loaded_before(build_dir: Path) -> Path | None:
    """The shared object a load from ``build_dir`` imported, where that file is still the one it
    imported (same size and modification time); None otherwise (never loaded, rebuilt since, or a
    stamp that cannot be read)."""
    try:
        stamp = json.loads((build_dir / LOADED_STAMP).read_text())
        path = build_dir / Path(stamp["file"]).name
        st = path.stat()
        same = st.st_size == stamp["size"] and st.st_mtime_ns == stamp["mtime_ns"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return path if same else None


def _stamp_loaded(build_dir: Path, shared_object: Path) -> None:
    """Record ``shared_object`` as loaded from ``build_dir`` (best effort: an unwritable folder
    keeps no stamp, and every load asks ninja)."""
    try:
        st = shared_object.stat()
        tmp = build_dir / f".{LOADED_STAMP}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"file": shared_object.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))
        os.replace(tmp, build_dir / LOADED_STAMP)
    except OSError:
        pass


def _import_shared_object(path: Path) -> ModuleType:
    """The extension module in ``path``, imported as torch's load imports it (torch is imported)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not an extension module Python can import")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TORCH_BATON = "lock"  # torch.utils.file_baton's marker file in the build folder
BUILDER_ENV = "NUMABENCH_KERNEL_BUILDER"  # set in the children of numabench.kernels.prebuild


def _fault_point(build_dir: Path) -> None:
    """Fault injection (tests of the suite): ``load`` in a worker, ``build`` in a prebuild child."""
    from numabench import faults

    found = faults.from_env()
    if found:
        when = "build" if os.environ.get(BUILDER_ENV) else "load"
        faults.fire(found, when, None, None, before_kill=lambda: (build_dir / TORCH_BATON).touch())


_held: list[Path] = []  # build folders whose flock this process holds (build_lock), innermost last


def drop_own_baton() -> None:
    """Remove torch's marker in the build folder whose lock this process holds: the marker is
    this process's own (or a dead builder's) there. For a builder that is ending its build,
    after its compilers are gone (numabench.kernels.builder_tree); the flock goes with the process."""
    for build_dir in _held:
        (build_dir / TORCH_BATON).unlink(missing_ok=True)


@contextlib.contextmanager
def build_lock(build_dir: Path, name: str) -> Iterator[None]:
    """Hold the build folder's flock; clear a stale torch baton found under it."""
    lock_path = build_dir.with_name(build_dir.name + ".flock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"numabench: waiting for the build lock {lock_path} (another process is building or loading "
                  f"kernel {name!r})", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        baton = build_dir / TORCH_BATON
        if baton.exists():
            baton.unlink(missing_ok=True)
            print(f"numabench: removed the stale build lock {baton}: a process died while building kernel "
                  f"{name!r} (nobody holds {lock_path.name})", file=sys.stderr, flush=True)
        _held.append(build_dir)
        try:
            yield
        finally:
            _held.remove(build_dir)
    finally:
        os.close(fd)  # releases the flock
