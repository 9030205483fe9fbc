"""Compile every kernel this machine can build (``numabench build``), so that
benchmark workers find them in the cache instead of racing to build them."""
from __future__ import annotations

import shutil
import time
from typing import Iterator


def build_all() -> Iterator[tuple[str, str]]:
    import torch

    from . import cpu_adam, cuda_adam, stream

    t0 = time.perf_counter()
    stream.load()
    yield "stream", f"ready ({time.perf_counter() - t0:.1f} s)"
    t0 = time.perf_counter()
    cpu_adam.load()
    yield "cpu_adam", f"ready ({time.perf_counter() - t0:.1f} s, SIMD {cpu_adam.simd_level()})"
    if torch.cuda.is_available() and (shutil.which("nvcc") or torch.utils.cpp_extension.CUDA_HOME):
        t0 = time.perf_counter()
        cuda_adam.load()
        yield "cuda_adam", f"ready ({time.perf_counter() - t0:.1f} s)"
    else:
        yield "cuda_adam", "skipped: no CUDA GPU or no CUDA toolkit here"
