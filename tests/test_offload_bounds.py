"""adam_offload's step bounds (one-way, duplex) and the overlap schedule's serial fallback as its
metrics report them, and the file meeting that lets ranks measure their shared ceilings at once."""
from __future__ import annotations

import multiprocessing
import os
import time

import pytest
from helpers import plausible_reply

from numabench.cases import Case, CaseResult
from numabench.families import family
from numabench.families.adam_offload import duplex_bound_s, one_way_bound_s
from numabench.numa.policy import Policy
from numabench.toolkit.rank_barrier import meet


def limits(h2d, d2h, bidir_h2d, bidir_d2h, **kw):
    return plausible_reply("adam_offload", limit_h2d_GBps=h2d, limit_d2h_GBps=d2h, limit_bidir_h2d_GBps=bidir_h2d,
                           limit_bidir_d2h_GBps=bidir_d2h, **kw)


def test_duplex_bound_is_the_hand_figure_of_the_h100_545m_step():
    # docs/RESULTS.md: D2H's 6.54 GB at 51.6 GB/s while H2D moves at 47.1, the rest of H2D's
    # 8.72 GB alone at 55.1: 126.7 + 49.9 = 176.6 ms
    n = 544997376 * 4
    lim = limits(55.1, 55.1, 47.1, 51.6)
    assert duplex_bound_s(4 * n, 3 * n, lim) == pytest.approx(0.1766, abs=2e-4)
    assert one_way_bound_s(4 * n, 3 * n, lim) == pytest.approx(4 * n / 55.1e9)


def test_duplex_bound_when_h2d_ends_first_and_never_under_the_one_way_bound():
    lim = limits(50.0, 50.0, 45.0, 10.0)  # D2H starved while H2D runs
    h, d = 4 * 10**9, 3 * 10**9
    t = duplex_bound_s(h, d, lim)
    assert t == pytest.approx(h / 45e9 + (d - 10e9 * h / 45e9) / 50e9)
    for bidir in ((55.0, 55.0), (40.3, 52.8), (20.0, 50.0), (50.0, 5.0)):
        lim = limits(55.3, 55.0, *bidir)
        assert duplex_bound_s(h, d, lim) >= one_way_bound_s(h, d, lim) - 1e-12


def result(nprocess, numel, schedule, infos, step_s):
    case = Case("adam_offload", nprocess, numel, Policy.parse("default"), "fp32",
                (("impl", "ours"), ("schedule", schedule), ("alloc", "register")))
    phases = {p: [step_s] * 3 for p in ("h2d", "compute", "d2h", "step")}
    return CaseResult(case=case, phases=phases, per_rank=[phases] * nprocess, setup_info=infos, placement=[],
                      launcher="none", commands=[])


def test_step_bounds_are_the_slowest_ranks_and_overlap_says_what_ran():
    mod = family("adam_offload")
    fast, slow = limits(55.3, 55.0, 52.0, 51.0), limits(55.3, 55.0, 40.3, 52.8)
    res = result(2, 2 * 272629760, "overlap", [fast, slow], 0.0995)
    m = mod.metrics(res, "step")
    per_rank = 272629760 * 4
    assert m["duplex_bound_s"] == pytest.approx(duplex_bound_s(4 * per_rank, 3 * per_rank, slow))
    assert m["duplex_bound_s"] > duplex_bound_s(4 * per_rank, 3 * per_rank, fast)
    assert m["ratio_to_duplex_bound"] == pytest.approx(0.0995 / m["duplex_bound_s"], abs=1e-3)
    assert m["overlap_chunks"] == 32 and m["schedule_ran"] == "overlap"
    one = limits(55.3, 55.0, 52.0, 51.0, overlap_chunks=1)
    m = mod.metrics(result(1, 1835008, "overlap", [one], 0.0005), "h2d")
    assert m["schedule_ran"] == "serial" and m["overlap_chunks"] == 1
    assert "schedule_ran" not in mod.metrics(result(1, 1835008, "serial", [one], 0.0005), "step")


def _meet_and_stamp(directory, rank, n, delay, out):
    time.sleep(delay)
    meet("limits", rank, n, timeout_s=30, directory=directory)
    out.put((rank, time.monotonic()))


def test_ranks_leave_a_meeting_together_once_the_last_arrives(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_meet_and_stamp, args=(str(tmp_path), r, 3, 0.6 * r, out)) for r in range(3)]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    stamps = dict(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(30)
    assert stamps[0] - t0 >= 1.2  # rank 0 waited for rank 2's 1.2 s delay
    assert max(stamps.values()) - min(stamps.values()) < 0.2
    assert sorted(os.listdir(tmp_path)) == ["limits.0", "limits.1", "limits.2"]


def test_a_meeting_names_the_missing_ranks_after_its_timeout(tmp_path):
    with pytest.raises(TimeoutError, match=r"rank 0 waited 0 s at 'x' for ranks \[1, 2\] of 3"):
        meet("x", 0, 3, timeout_s=0.05, directory=str(tmp_path))


def test_a_meeting_needs_a_shared_folder_and_sane_ranks(tmp_path, monkeypatch):
    assert meet("solo", 0, 1) == 0.0  # one rank: nothing to wait for, no folder needed
    monkeypatch.delenv("NUMABENCH_SCRATCH_DIR", raising=False)
    with pytest.raises(RuntimeError, match="NUMABENCH_SCRATCH_DIR is None"):
        meet("x", 0, 2)
    with pytest.raises(ValueError, match="rank 2 of 2: allowed 0 <= rank < nprocess"):
        meet("x", 2, 2, directory=str(tmp_path))
    with pytest.raises(ValueError, match="meeting name 'a/b'"):
        meet("a/b", 0, 2, directory=str(tmp_path))
