"""Weighted-interleave node weights in sysfs: set for a case, always restore.

The weights are system wide (``/sys/kernel/mm/mempolicy/weighted_interleave/
nodeN``, root only). Kernels from 6.16 also have an auto-tuning switch that
turns off as soon as a weight is written; it is restored too. Its file is
``auto``; some kernels built with C23 show it as ``__auto_type`` (the macro
that names the attribute expands the keyword), so both names are accepted.
"""
from __future__ import annotations

import atexit
import os
from pathlib import Path
from typing import Mapping

from .errors import UsageError

WEIGHTS_DIR = Path("/sys/kernel/mm/mempolicy/weighted_interleave")
AUTO_NAMES = ("auto", "__auto_type")
MAX_WEIGHT = 255


def auto_mode_file(weights_dir: Path = WEIGHTS_DIR) -> Path | None:
    for name in AUTO_NAMES:
        p = weights_dir / name
        if p.is_file():
            return p
    return None


def read_weights(weights_dir: Path = WEIGHTS_DIR) -> dict[int, int]:
    out = {}
    for p in sorted(weights_dir.glob("node[0-9]*")):
        out[int(p.name[4:])] = int(p.read_text().strip())
    return out


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
    """

    def __init__(self, weights: Mapping[int, int], weights_dir: Path = WEIGHTS_DIR) -> None:
        for node, w in weights.items():
            if not 1 <= w <= MAX_WEIGHT:
                raise UsageError(f"weight {w} for node {node} is out of range: allowed 1..{MAX_WEIGHT}")
        self.weights = dict(weights)
        self.dir = Path(weights_dir)
        self._saved: dict[int, int] | None = None
        self._saved_auto: str | None = None

    def __enter__(self) -> "WeightSetting":
        if not self.dir.is_dir():
            raise UsageError(f"weighted interleave weights directory {self.dir} is missing (kernel < 6.9?)")
        current = read_weights(self.dir)
        missing = sorted(set(self.weights) - set(current))
        if missing:
            raise UsageError(f"no weight file for node(s) {missing} in {self.dir}; nodes there: {sorted(current)}")
        auto = auto_mode_file(self.dir)
        self._saved_auto = auto.read_text().strip() if auto else None
        self._saved = {n: current[n] for n in self.weights}
        atexit.register(self.restore)
        try:
            for node, w in self.weights.items():
                _write(self.dir / f"node{node}", str(w))
        except OSError as e:
            self.restore()
            raise PermissionError(f"cannot write weighted interleave weights in {self.dir}: {e.strerror}; "
                                  "this needs root") from e
        return self

    def restore(self) -> None:
        if self._saved is None:
            return
        saved, self._saved = self._saved, None
        atexit.unregister(self.restore)
        for node, w in saved.items():
            _write(self.dir / f"node{node}", str(w))
        auto = auto_mode_file(self.dir)
        if auto is not None and self._saved_auto is not None and auto.read_text().strip() != self._saved_auto:
            # Writing "true" makes the kernel recompute weights from firmware bandwidth data, as before.
            _write(auto, self._saved_auto)

    def __exit__(self, *exc: object) -> None:
        self.restore()
