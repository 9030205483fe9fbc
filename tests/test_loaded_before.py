"""A kernel built and loaded once loads again without torch's build machinery (no ninja, no
builder process): its build folder keeps a stamp of the shared object it loaded, and only that
very file (same size and modification time) is imported directly. A rebuilt or replaced file,
or a stamp that cannot be read, goes through torch's load as before."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from numabench.kernels import built, prebuild, stream
from numabench.kernels.build import LOADED_STAMP, load_extension, loaded_before

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def stream_folder(tmp_path, monkeypatch):
    """The stream kernel's build folder, loaded once, copied into a build root of this test's own
    (the session's stays as it was)."""
    stream.load()  # built (or found) in the session's build root, and stamped
    session_folder = built.kernel_dir("stream")
    monkeypatch.setenv("NUMABENCH_BUILD_DIR", str(tmp_path / "build"))
    folder = built.kernel_dir("stream")
    shutil.copytree(session_folder, folder, symlinks=True)  # copy2: sizes and modification times kept
    return folder


def _torch_load_refused(monkeypatch) -> list[str]:
    """Make torch's load fail, noting each call (it must not be called)."""
    from torch.utils import cpp_extension

    calls: list[str] = []

    def refuse(**kwargs):
        calls.append(kwargs["name"])
        raise RuntimeError("torch's load was called")

    monkeypatch.setattr(cpp_extension, "load", refuse)
    return calls


def test_a_loaded_kernel_loads_again_without_torch_s_build(stream_folder, monkeypatch):
    shared_object = loaded_before(stream_folder)
    assert shared_object is not None and shared_object.suffix == ".so", sorted(os.listdir(stream_folder))
    assert built.loaded_before("stream")
    calls = _torch_load_refused(monkeypatch)
    module = load_extension(**stream.BUILD)
    # (this process loaded the session's copy first: the dynamic loader hands that one back)
    assert calls == [] and module.__file__.endswith(shared_object.name)
    assert callable(module.triad), dir(module)


@pytest.mark.parametrize("change", ["rebuilt", "replaced", "stamp unreadable", "stamp gone"])
def test_anything_but_the_stamped_file_goes_through_torch_s_load(stream_folder, monkeypatch, change):
    shared_object = loaded_before(stream_folder)
    st = shared_object.stat()
    if change == "rebuilt":  # the same bytes written again later
        os.utime(shared_object, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    elif change == "replaced":  # other bytes, the same time
        with open(shared_object, "ab") as f:
            f.write(b"\0")
        os.utime(shared_object, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif change == "stamp unreadable":
        (stream_folder / LOADED_STAMP).write_text("{not json")
    else:
        (stream_folder / LOADED_STAMP).unlink()
    assert loaded_before(stream_folder) is None and not built.loaded_before("stream")
    calls = _torch_load_refused(monkeypatch)
    with pytest.raises(RuntimeError, match="torch's load was called"):
        load_extension(**stream.BUILD)
    assert calls == ["numabench_stream"]


def test_a_stamp_names_a_file_in_its_own_folder_only(stream_folder):
    stamp = json.loads((stream_folder / LOADED_STAMP).read_text())
    (stream_folder / LOADED_STAMP).write_text(json.dumps({**stamp, "file": "../../elsewhere/" + stamp["file"]}))
    assert loaded_before(stream_folder) == stream_folder / stamp["file"]  # the name only, in this folder


def test_numabench_build_starts_no_builder_for_a_kernel_loaded_before(stream_folder, monkeypatch):
    def no_builder(*args, **kwargs):
        raise AssertionError(f"a builder was started: {args[0] if args else kwargs}")

    monkeypatch.setattr(subprocess, "Popen", no_builder)
    assert list(prebuild.build_all(["stream"])) == [("stream", "ready (built and loaded before)")]


def test_the_cuda_kernel_loaded_before_is_ready_not_skipped(monkeypatch):
    """On a CUDA machine where every kernel was loaded before, `numabench build` says each is
    ready and never also says the CUDA kernel was skipped (no builder started for it is not
    the same as no CUDA here)."""
    monkeypatch.setattr(prebuild, "default_kernels", lambda: ["stream", "cpu_adam", "cuda_adam"])
    monkeypatch.setattr(prebuild, "_loaded_before", lambda kernel: True)
    assert list(prebuild.build_all()) == [
        ("stream", "ready (built and loaded before)"),
        ("cpu_adam", "ready (built and loaded before)"),
        ("cuda_adam", "ready (built and loaded before)"),
    ]


def test_a_fault_at_build_still_reaches_the_builder(stream_folder, monkeypatch):
    """The suite's own fault tests inject into the builder process: it must start."""
    started = []

    class Stand:  # a builder that fails at once, as an injected raise would
        def __init__(self, args, **kwargs):
            started.append(args)
            self.pid, self.returncode = os.getpid(), 1

        def communicate(self, timeout=None):
            return "injected fault at build\n", None

        def poll(self):
            return self.returncode

        def wait(self, timeout=None):
            return self.returncode

    monkeypatch.setenv("NUMABENCH_FAULT", "raise@build")
    monkeypatch.setattr(prebuild.subprocess, "Popen", Stand)
    monkeypatch.setattr(prebuild, "_kill_group", lambda proc: None)
    [(name, status)] = list(prebuild.build_all(["stream"]))
    assert len(started) == 1 and name == "stream" and status.startswith("FAILED (exit 1)"), status


def test_a_fresh_process_loads_a_stamped_kernel_with_no_working_ninja(stream_folder, tmp_path):
    """Only a build asks ninja: with a ninja that fails first on the PATH, a new process loads the
    stamped kernel, and fails where the stamp is gone (torch's load then asks it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ninja").write_text("#!/bin/sh\necho 'ninja refused' >&2\nexit 3\n")
    (bin_dir / "ninja").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "NUMABENCH_BUILD_DIR": str(stream_folder.parent)}
    code = "from numabench.kernels import stream; print(stream.load().__file__)"
    run = [sys.executable, "-c", code]
    ok = subprocess.run(run, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and ok.stdout.strip() == str(loaded_before(stream_folder)), ok.stderr[-2000:]
    (stream_folder / LOADED_STAMP).unlink()
    refused = subprocess.run(run, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0, refused.stdout + refused.stderr[-2000:]


def test_numabench_build_imports_no_torch_when_every_kernel_was_loaded_before(tmp_path):
    """`numabench build` (every kernel this machine can build) in a new process: with each found
    loaded before, it starts no builder and never imports torch (seconds on a GPU machine)."""
    import importlib

    kernels = prebuild.default_kernels()
    build = tmp_path / "build"
    for kernel in kernels:
        importlib.import_module(built.MODULES[kernel]).load()  # the session's build root: stamped
        shutil.copytree(built.kernel_dir(kernel), build / built.kernel_dir(kernel).name, symlinks=True)
    code = ("import sys; from numabench.kernels import prebuild; "
            "print([s for _, s in prebuild.build_all()], 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "NUMABENCH_BUILD_DIR": str(build)},
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    want = ["ready (built and loaded before)"] * len(kernels)
    if "cuda_adam" not in kernels:
        want.append("skipped: no CUDA GPU or no CUDA toolkit here")
    assert proc.stdout.strip() == f"{want} False"


@pytest.mark.parametrize("line, version", [("cuda: Optional[str] = '13.0'", "13.0"),
                                           ("cuda: Optional[str] = None", None), ("cuda = '12.4'", "12.4")])
def test_torch_s_cuda_version_is_read_without_torch(line, version, tmp_path, monkeypatch):
    from types import SimpleNamespace

    (tmp_path / "version.py").write_text(f"__version__ = '2.11.0+cu130'\n{line}\ngit_version = 'abc'\n")
    monkeypatch.setattr(built.importlib.util, "find_spec",
                        lambda name: SimpleNamespace(submodule_search_locations=[str(tmp_path)]))
    assert built.torch_cuda_version() == version and built.torch_version() == "2.11.0+cu130"


def test_numabench_build_clears_what_a_killed_builder_left_by_a_loaded_kernel(stream_folder, capfd):
    """A builder killed mid-build leaves torch's marker; the next build, found loaded before,
    still takes the folder's lock as a builder would, and that clears the marker."""
    from numabench.kernels.build import TORCH_BATON

    (stream_folder / TORCH_BATON).write_text("")
    assert list(prebuild.build_all(["stream"])) == [("stream", "ready (built and loaded before)")]
    assert not (stream_folder / TORCH_BATON).exists()
    assert f"removed the stale build lock {stream_folder / TORCH_BATON}" in capfd.readouterr().err
