"""numabench.tools.cpu_adam_speed: every variant timed per thread count, ours under both threads'
schedules, with its spread; the table names the ratios."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")

from numabench.kernels.cpu_adam import SCHEDULE_ENV  # noqa: E402
from numabench.tools import cpu_adam_speed  # noqa: E402


@pytest.mark.parametrize("before", [None, "dynamic"])
def test_every_variant_per_thread_count_with_its_spread_and_the_schedule_left_as_found(monkeypatch, before):
    if before is None:
        monkeypatch.delenv(SCHEDULE_ENV, raising=False)
    else:
        monkeypatch.setenv(SCHEDULE_ENV, before)
    rows = cpu_adam_speed.measure(numel=1 << 16, threads=(1, 2), repeats=20, warmup=1)
    names = {r["variant"] for r in rows}
    assert {"ours adam_step_", "ours, dynamic schedule", "torch Adam fused=True"} <= names
    assert len(rows) == 2 * len(names)
    assert all(r["ms"] > 0 and r["iqr_pct"] >= 0 and r["gbps"] > 0 for r in rows)
    assert os.environ.get(SCHEDULE_ENV) == before
    table = cpu_adam_speed.format_table(rows)
    assert "| IQR % of median |" in table and "dynamic schedule vs static = " in table
    assert table.count("threads=") == 2


def test_fewer_than_20_repeats_are_refused():
    with pytest.raises(ValueError, match="repeats=5"):
        cpu_adam_speed.measure(numel=1 << 10, threads=(1,), repeats=5)
