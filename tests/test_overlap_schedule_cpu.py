"""The overlapped step's bookkeeping (chunks, D2H groups, aligned D2H) on the CPU: torch.cuda's
streams and events replaced by stand-ins that run everything in program order, so the
step must still read every element in, update it once and write it back, whatever the
schedule. The GPU timing itself is tests/test_gpu_offload.py's."""
from __future__ import annotations

import contextlib
import os
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from numabench.families.adam_offload.schedule import IN_NAMES, OverlappedStep, Schedule  # noqa: E402


class FakeEvent:
    def __init__(self, enable_timing: bool = False) -> None:
        self.recorded = False

    def record(self, stream=None) -> None:
        self.recorded = True

    def synchronize(self) -> None:
        assert self.recorded, "waited for an event never recorded"

    def elapsed_time(self, other: "FakeEvent") -> float:
        return 1.0


class FakeStream:
    def __init__(self, device=None, priority: int = 0) -> None:
        pass

    def wait_event(self, event: FakeEvent) -> None:
        assert event.recorded, "a stream waits for an event not yet recorded"

    def wait_stream(self, stream: "FakeStream") -> None:
        pass

    @staticmethod
    def priority_range():
        return (0, -1)


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: FakeStream())


def step_fn(param, grad, exp_avg, exp_avg_sq, *, lr, step):
    # Adam's shape in single-rounding operations only (no alpha=/value=: a vectorised body may
    # fuse those into an FMA and its scalar tail not, and a chunk boundary moves that tail)
    exp_avg.mul_(0.5)
    exp_avg.add_(grad)
    exp_avg_sq.mul_(0.5)
    exp_avg_sq.add_(grad * grad)
    param.sub_(exp_avg / (exp_avg_sq.sqrt() + 1.0) * lr)


def state(n: int):
    g = torch.Generator().manual_seed(7)
    t = {name: torch.randn(n, generator=g, dtype=torch.float64) for name in IN_NAMES}
    t["exp_avg_sq"].abs_()
    return t


@pytest.mark.parametrize("schedule", [Schedule(1000), Schedule(1000, d2h_group=3), Schedule(4096),
                                      Schedule(1000, d2h_group=2, align_d2h=True), Schedule(999, h2d_streams=2),
                                      Schedule(1000, priority=True, align_d2h=True)], ids=lambda s: s.label())
def test_every_element_is_read_updated_once_and_written_back(fake_cuda, schedule):
    n = 5 * 1000 + 37  # a ragged last chunk
    start = state(n)
    want = {k: v.clone() for k, v in start.items()}
    step_fn(want["param"], want["grad"], want["exp_avg"], want["exp_avg_sq"], lr=1e-3, step=1)
    host = {k: SimpleNamespace(tensor=v.clone()) for k, v in start.items()}
    dev = {k: torch.full((n,), float("nan"), dtype=torch.float64) for k in IN_NAMES}  # never read unwritten
    times = OverlappedStep("cpu", schedule, host, dev, streams=[FakeStream()] * 3).run(step_fn, {"lr": 1e-3, "step": 1})
    for name in ("param", "exp_avg", "exp_avg_sq"):
        assert torch.equal(host[name].tensor, want[name]), name
    assert torch.equal(host["grad"].tensor, start["grad"])  # gradients are not copied back
    assert set(times) == {"h2d", "compute", "d2h", "step"}


def _aligned_rank(scratch: str, rank: int, queue) -> None:
    """A spawned rank: two aligned steps on the stand-ins (its own process: no restore needed)."""
    import os

    os.environ["NUMABENCH_SCRATCH_DIR"] = scratch
    torch.cuda.Event, torch.cuda.Stream = FakeEvent, FakeStream
    torch.cuda.stream = lambda s: contextlib.nullcontext()
    torch.cuda.current_stream = lambda device=None: FakeStream()
    n = 3 * 1000 + 5
    start = state(n)
    host = {k: SimpleNamespace(tensor=v.clone()) for k, v in start.items()}
    dev = {k: torch.empty(n, dtype=torch.float64) for k in IN_NAMES}
    pipe = OverlappedStep("cpu", Schedule(1000, d2h_group=2, align_d2h=True), host, dev, streams=[FakeStream()] * 3,
                          rank=rank, nprocess=2)
    for step in (1, 2):
        pipe.run(step_fn, {"lr": 1e-3, "step": step})
    queue.put((rank, sorted(os.listdir(scratch))))


def test_aligned_ranks_meet_before_each_d2h_group_of_each_step(tmp_path):
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_aligned_rank, args=(str(tmp_path), r, queue)) for r in range(2)]
    for p in procs:
        p.start()
    got = dict(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    # two steps of two D2H groups each (chunks 0-1 and 2-3), both ranks at every meeting
    want = sorted(f"overlap-{s}-d2h-{g}.{r}" for s in (1, 2) for g in (0, 1) for r in (0, 1))
    assert sorted(os.listdir(tmp_path)) == want
    assert all(p.exitcode == 0 for p in procs)
