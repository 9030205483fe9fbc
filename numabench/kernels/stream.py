"""STREAM-style copy/scale/add/triad (csrc/stream.cpp): the host bandwidth probe."""
from __future__ import annotations

from types import ModuleType

from numabench.kernels.build import load_extension

# Bytes counted per element (fp32): reads + writes, write-allocate not counted.
BYTES_PER_ELEMENT = {"copy": 8, "scale": 8, "add": 12, "triad": 12, "adam_pattern": 28}
KERNELS = tuple(BYTES_PER_ELEMENT)

# what load_extension builds (numabench.kernels.built reads it too)
BUILD = {"name": "numabench_stream", "sources": ["stream.cpp"], "extra_cflags": ["-O3", "-fopenmp"],
         "extra_ldflags": ["-fopenmp"]}
_ext: ModuleType | None = None


def load() -> ModuleType:
    global _ext
    if _ext is None:
        _ext = load_extension(**BUILD)
    return _ext


def run(kernel: str, a, b, c, d=None, threads: int = 0) -> None:
    """One pass of ``kernel`` over equal fp32 arrays: copy/scale write b from a,
    add/triad write a from b and c, adam_pattern reads a, b, c, d and writes a, c, d."""
    ext = load()
    if kernel == "adam_pattern":
        if d is None:
            raise ValueError("adam_pattern needs a fourth array")
        ext.adam_pattern(a, b, c, d, threads)
        return
    if kernel == "copy":
        ext.copy(b, a, threads)
    elif kernel == "scale":
        ext.scale(b, a, 3.0, threads)
    elif kernel == "add":
        ext.add(a, b, c, threads)
    elif kernel == "triad":
        ext.triad(a, b, c, 3.0, threads)
    else:
        raise ValueError(f"unknown stream kernel {kernel!r}: allowed {', '.join(KERNELS)}")
