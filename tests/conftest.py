"""Guard for the whole test session: the machine's real weighted-interleave settings end
byte-for-byte as they began (tests write fake trees only; see tests/test_interrupts.py)."""
from __future__ import annotations

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
