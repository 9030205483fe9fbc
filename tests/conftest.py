"""Guards for the whole test session: the machine's real weighted-interleave settings end
byte-for-byte as they began (tests write fake trees only; see tests/test_interrupts.py);
kernels are built into a temporary folder, not the user's cache (~/.cache/numabench/build),
which the fault matrix would otherwise fill with injected faults and which another
process on the machine could be using (.ci/test names one folder for all its pytest runs)."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

REAL_WEIGHTS = Path("/sys/kernel/mm/mempolicy/weighted_interleave")


def _snapshot() -> dict[str, bytes]:
    if not REAL_WEIGHTS.is_dir():
        return {}
    out = {}
    for f in sorted(REAL_WEIGHTS.iterdir()):
        try:
            out[f.name] = f.read_bytes()
        except OSError as e:
            out[f.name] = f"unreadable: {e.strerror}".encode()
    return out


@pytest.fixture(scope="session", autouse=True)
def real_weights_unchanged():
    before = _snapshot()
    yield
    after = _snapshot()
    assert after == before, f"the tests changed {REAL_WEIGHTS}: before {before}, after {after}"


_own_build_dir: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    # In the controller (or a plain session) only: xdist workers inherit the variable.
    global _own_build_dir
    if "NUMABENCH_BUILD_DIR" not in os.environ and not hasattr(config, "workerinput"):
        _own_build_dir = tempfile.mkdtemp(prefix="numabench-test-build-")
        os.environ["NUMABENCH_BUILD_DIR"] = _own_build_dir


def pytest_unconfigure(config: pytest.Config) -> None:
    global _own_build_dir
    if _own_build_dir is not None:
        shutil.rmtree(_own_build_dir, ignore_errors=True)
        os.environ.pop("NUMABENCH_BUILD_DIR", None)
        _own_build_dir = None
