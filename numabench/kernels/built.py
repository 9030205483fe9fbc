"""Which kernels are built in the build folder for this checkout's sources and the installed
torch, and how long their last build took here: what a time plan needs, without torch.

A kernel is built when its build folder (``numabench.kernels.build.extension_dir``: name,
sources, flags, torch version) holds its shared object. The seconds of each build that
compiled (one that found its kernel built only loads it) are kept in
``<build root>/build-times.json``, the kernel's last one.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import time
from importlib import metadata
from pathlib import Path

from numabench.kernels import build
from numabench.kernels.build import build_root, extension_dir

MODULES = {"stream": "numabench.kernels.stream", "cpu_adam": "numabench.kernels.cpu_adam",
           "cuda_adam": "numabench.kernels.cuda_adam"}
TIMES_FILE = "build-times.json"


_VERSION_LINE = re.compile(r"""^__version__\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", re.M)
# `cuda: Optional[str] = '13.0'` (a CUDA build) or `cuda: Optional[str] = None` (a CPU build)
_CUDA_LINE = re.compile(r"""^cuda\s*(?::[^=\n]*)?=\s*['"]?([^'"\s]+)['"]?""", re.M)


def torch_cuda_version() -> str | None:
    """The CUDA version the installed torch was built for (torch.version.cuda), read from
    torch/version.py without importing torch; None for a CPU build or without torch."""
    found = _torch_version_file_line(_CUDA_LINE)
    return found if found and found != "None" else None


def torch_version() -> str | None:
    """The installed torch's version as torch.__version__ says it (the build folders are keyed by
    it), read from torch/version.py without importing torch; else its package metadata, which
    can differ (a PyPI CUDA wheel's metadata says 2.11.0 where torch.__version__ says
    2.11.0+cu130)."""
    found = _torch_version_file_line(_VERSION_LINE)
    if found:
        return found
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def _torch_version_file_line(line: re.Pattern) -> str | None:
    """The value ``line`` finds in the installed torch's torch/version.py (None: no torch, no such line)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            try:
                found = line.search((Path(folder) / "version.py").read_text())
            except OSError:
                continue
            if found:
                return found.group(1)
    return None


def kernel_dir(kernel: str) -> Path | None:
    """The build folder of ``kernel`` (a numabench.kernels.prebuild name); None without torch."""
    if kernel not in MODULES:
        raise ValueError(f"unknown kernel {kernel!r}: allowed {', '.join(MODULES)}")
    version = torch_version()
    if version is None:
        return None
    return extension_dir(torch_version=version, **importlib.import_module(MODULES[kernel]).BUILD)


def is_built(kernel: str) -> bool:
    """Whether ``kernel``'s build folder holds its shared object: loading it compiles nothing."""
    folder = kernel_dir(kernel)
    return folder is not None and any(folder.glob("*.so"))


def loaded_before(kernel: str) -> bool:
    """Whether ``kernel`` was built and loaded from its build folder, which still holds that shared
    object (numabench.kernels.build.loaded_before): loading it again runs no build tool."""
    folder = kernel_dir(kernel)
    return folder is not None and build.loaded_before(folder) is not None


def _times_path() -> Path:
    return build_root() / TIMES_FILE


def recorded_build_seconds(kernel: str) -> float | None:
    """How long ``kernel``'s last build that compiled took here, or None (none recorded, or an
    unreadable record)."""
    try:
        entry = json.loads(_times_path().read_text()).get(kernel)
        seconds = float(entry["seconds"]) if isinstance(entry, dict) else None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return seconds if seconds is not None and seconds > 0 else None


def record_build_seconds(kernel: str, seconds: float) -> None:
    """Keep ``seconds`` as ``kernel``'s last build time (best effort: a folder that cannot be
    written keeps nothing)."""
    path = _times_path()
    try:
        try:
            times = json.loads(path.read_text())
            times = times if isinstance(times, dict) else {}
        except (OSError, ValueError):
            times = {}
        times[kernel] = {"seconds": round(seconds, 1), "torch": torch_version(),
                         "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass
