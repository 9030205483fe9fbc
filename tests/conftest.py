"""Guards for the whole test session: the machine's real weighted-interleave settings end
byte-for-byte as they began (tests write fake trees only; see tests/test_interrupts.py);
kernels are built into a temporary folder, not the user's cache (~/.cache/numabench/build),
which the fault matrix would otherwise fill with injected faults and which another
process on the machine could be using (.ci/test names one folder for all its pytest runs);
torch's inductor cache and DeepSpeed's JIT-built ops go to temporary folders too."""
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


# Folders the session's processes (tests, benchmark runs, workers: they inherit the variables)
# write into: kernel builds; torch's inductor cache, which torch.optim's first step creates
# (/tmp/torchinductor_<user> by default; the workers' float64 reference takes one); and
# torch's extensions folder, where DeepSpeed JIT-builds its ops (~/.cache/torch_extensions).
TEMP_FOLDERS = {"NUMABENCH_BUILD_DIR": "numabench-test-build-", "TORCHINDUCTOR_CACHE_DIR": "torchinductor-test-",
                "TORCH_EXTENSIONS_DIR": "torch-extensions-test-"}
_own_folders: dict[str, str] = {}


def pytest_configure(config: pytest.Config) -> None:
    # In the controller (or a plain session) only: xdist workers inherit the variables.
    if hasattr(config, "workerinput"):
        return
    for var, prefix in TEMP_FOLDERS.items():
        if var not in os.environ:
            _own_folders[var] = os.environ[var] = tempfile.mkdtemp(prefix=prefix)


def pytest_unconfigure(config: pytest.Config) -> None:
    for var, folder in list(_own_folders.items()):
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(var, None)
        del _own_folders[var]
