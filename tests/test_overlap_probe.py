"""The overlap probe's command-line schedule parser (the probe itself needs a GPU:
it runs through .ci/gpu's sibling commands on the device, see docs/RESULTS.md)."""
from __future__ import annotations

import pytest

from numabench.tools.overlap_probe import Schedule, parse_schedules


def test_schedules_parse_with_the_default_chunk():
    got = parse_schedules("chunk=8388608;d2h_group=4,priority;h2d_engine=sm,huge=1", 2097152)
    assert got == [Schedule(chunk=8388608), Schedule(chunk=2097152, d2h_group=4, priority=True),
                   Schedule(chunk=2097152, h2d_engine="sm", huge=True)]
    assert [s.label() for s in got] == ["chunk=8M", "chunk=2M d2h_group=4 priority", "chunk=2M h2d=sm hugepages"]


@pytest.mark.parametrize("text, message", [("chunks=4", "unknown schedule key 'chunks'"),
                                           ("d2h_engine=dma", "d2h_engine='dma': allowed ce, sm")])
def test_bad_schedules_name_the_value_and_what_is_allowed(text, message):
    with pytest.raises(ValueError, match=message):
        parse_schedules(text, 1 << 20)


def fake_rank(numel, dtype, schedules, rounds, rank, nprocess):
    """A rank of the probe without a GPU: meets the others like the real one, slower by rank."""
    from numabench.toolkit.rank_barrier import meet

    meet("fake", rank, nprocess)
    if numel < 0 and rank == 1:
        raise RuntimeError("no GPU here")
    return {"times": {"serial": [1.0 + rank] * rounds, **{s.label(): [0.5 + rank] * rounds for s in schedules}},
            "rank": rank}


def test_ranks_run_in_their_own_processes_and_report_by_rank():
    from numabench.tools.overlap_probe import _all_ranks

    got = _all_ranks(8, "fp32", [Schedule(4)], 3, 2, rank_fn=fake_rank)
    assert [g["rank"] for g in got] == [0, 1]
    assert got[1]["times"] == {"serial": [2.0] * 3, "chunk=4": [1.5] * 3}


def test_a_failing_rank_fails_the_probe_naming_it():
    from numabench.tools.overlap_probe import _all_ranks

    with pytest.raises(RuntimeError, match="probe rank 1 failed: RuntimeError: no GPU here"):
        _all_ranks(-1, "fp32", [Schedule(4)], 3, 2, rank_fn=fake_rank)


def test_more_ranks_than_gpus_is_refused_naming_the_count(capsys):
    import torch

    from numabench.tools.overlap_probe import main

    with pytest.raises(SystemExit) as exit_:
        main(["--nprocess", str(torch.cuda.device_count() + 1)])
    assert exit_.value.code == 2
    assert "CUDA GPU(s); rank r runs on GPU r" in capsys.readouterr().err
