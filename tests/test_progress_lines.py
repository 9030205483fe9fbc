"""The progress lines: only after a worker run is done (never for skipped cases or ones that
errored at set-up, never before the first run is done), each on a line of its own between
pytest's, with an ETA scaled by how the finished runs compared with their estimates, and none
once nothing is left."""
from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from fixtures import progress
from fixtures.progress import Progress
from numabench.plan import Plan, RunPlan

ROOT = Path(__file__).resolve().parents[1]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(progress.time, "monotonic", c)
    return c


def _progress(verbose: bool, runs: dict[str, tuple[float, list[str]]], ab_session: bool = False) -> Progress:
    """``runs``: key -> (estimated seconds, its items' node ids)."""
    plan = Plan(runs=[RunPlan(k, k.split("[")[0], len(items), est, "model") for k, (est, items) in runs.items()])
    owner = {n: k for k, (_, items) in runs.items() for n in items}
    return Progress(plan, owner, verbose, None, ab_session=ab_session)


def _report(p: Progress, nodeid: str, call: str | None, clock: Clock | None = None, takes: float = 0.0) -> str | None:
    """One item taking ``takes`` seconds: its call's outcome ('passed', 'failed', 'skipped'; None:
    no call, as for an error at set-up or a skip marker), then its teardown; the line Progress
    prints, if any."""
    p.pytest_runtest_logstart(nodeid, ("x", 0, "x"))
    if clock is not None:
        clock.now += takes
    if call is not None:
        p.pytest_runtest_logreport(types.SimpleNamespace(when="call", nodeid=nodeid, skipped=call == "skipped"))
    return p.finished(nodeid)


def test_an_ab_sessions_lines_leave_the_one_sided_estimate_out_and_scale_the_eta(clock):
    """A run of an A/B session takes pairs of both sides: its estimate (one side, once) is not
    shown; the ETA, scaled by the finished runs, still is."""
    p = _progress(True, {"a[1]": (10.0, ["a1"]), "b[1]": (20.0, ["b1"])}, ab_session=True)
    assert _report(p, "a1", "passed", clock, 60) == "numabench: run 1/2 a[1]: 60.0 s; elapsed 1:00, ETA 2:00"
    assert _report(p, "b1", "passed", clock, 100) == "numabench: run 2/2 b[1]: 100.0 s; elapsed 2:40, every run done"


def test_verbose_a_line_per_run_when_it_is_done_and_the_eta_scales(clock):
    p = _progress(True, {"a[1]": (10.0, ["a1", "a2"]), "b[1]": (20.0, ["b1"]), "c[1]": (30.0, ["c1"])})
    line = _report(p, "a1", "passed", clock, 5)  # the run takes half its estimate
    assert line == "numabench: run 1/3 a[1]: 5.0 s (estimated 10.0); elapsed 0:05, ETA 0:25"  # (20+30)/2
    assert _report(p, "a2", "passed") is None  # the run's other entries only look their numbers up
    assert _report(p, "b1", "failed", clock, 20).endswith("run 2/3 b[1]: 20.0 s (estimated 20.0); elapsed 0:25, ETA 0:25")
    assert _report(p, "c1", "passed", clock, 30).endswith("elapsed 0:55, every run done")  # no ETA: nothing is left


def test_skipped_and_set_up_errors_print_nothing_and_leave_the_plan(clock):
    p = _progress(True, {"a[1]": (10.0, ["a1", "a2", "a3"]), "b[1]": (100.0, ["b1", "b2"]),
                         "c[1]": (10.0, ["c1"])})
    assert _report(p, "a1", None, clock, 4) is None  # an error at set-up (a kernel that did not build)
    line = _report(p, "a2", "passed", clock, 6)  # the run happens in its first entry that runs
    assert line.startswith("numabench: run 1/3 a[1]: 10.0 s") and line.endswith("ETA 1:50"), line
    assert _report(p, "a3", None) is None
    assert _report(p, "b1", "skipped") is None and _report(p, "b2", None) is None  # b never ran: dropped
    assert p.total_runs == 2 and p.remaining == ["c[1]"] and p.eta_s() == pytest.approx(10.0)
    assert _report(p, "c1", "passed", clock, 10).startswith("numabench: run 2/2 c[1]")
    assert _report(p, "not-a-benchmark", "passed") is None


def test_status_lines_only_after_a_finished_run_with_runs_left(clock):
    p = _progress(False, {"a[1]": (10.0, ["a1", "a2"]), "b[1]": (10.0, ["b1"]), "c[1]": (10.0, ["c1"])})
    clock.now += 100  # long past STATUS_EVERY_S, and no run done: nothing to say yet
    assert _report(p, "x", "passed") is None
    line = _report(p, "a1", "passed", clock, 100)  # ten times its estimate
    assert line == "numabench: 1/3 worker runs done, elapsed 3:20, ETA 3:20", line
    clock.now += 1
    assert _report(p, "a2", "passed") is None  # not a finished run
    assert _report(p, "b1", "passed") is None  # a finished run, but within STATUS_EVERY_S of the last line
    clock.now += progress.STATUS_EVERY_S
    assert _report(p, "c1", "passed") is None  # nothing left


class FakeTerminal:
    """What write_own_line uses of pytest's TerminalReporter, and how pytest ends an open line."""

    def __init__(self) -> None:
        self.text = "tests/x.py ."
        self.currentfspath: object = "tests/x.py"

    def ensure_newline(self) -> None:
        if self.currentfspath:
            self.text += "\n"
            self.currentfspath = None

    def write(self, content: str, flush: bool = False) -> None:
        self.text += content


def test_a_line_of_its_own_that_pytest_ends():
    t = FakeTerminal()
    progress.write_own_line(t, "numabench: run 1/2")
    t.ensure_newline()  # what pytest's next line or its summary does first
    assert t.text == "tests/x.py .\nnumabench: run 1/2\n"


def _plugin(tmp_path: Path) -> Path:
    """A plugin that makes the status line due at every finished run."""
    (tmp_path / "status_every_run.py").write_text(
        "def pytest_configure(config):\n    import fixtures.progress as p\n    p.STATUS_EVERY_S = 0\n")
    return tmp_path


@pytest.mark.parametrize("verbosity", ["-v", "", "-q"], ids=["verbose", "default", "quiet"])
def test_the_lines_in_a_real_run(tmp_path, verbosity):
    env = {**os.environ, "PYTHONPATH": f"{_plugin(tmp_path)}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "-p", "no:cacheprovider",
                          "-p", "status_every_run", *([verbosity] if verbosity else []), "--benchmark-disable",
                          "--param-sizes=1M,2M", "--numa-policies=default;bind:99", "--numa-rounds=2",
                          "--numa-warmup=0", f"--benchmark-storage=file://{tmp_path}/store"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    ours = [i for i, ln in enumerate(lines) if "numabench: " in ln and not ln.startswith("numabench plan:")]
    assert all(lines[i].startswith("numabench: ") for i in ours), lines  # each on a line of its own
    summary = next(i for i, ln in enumerate(lines) if ln.startswith("=") and ("passed" in ln or "summary" in ln))
    assert all(i < summary for i in ours)
    for i in ours:
        assert lines[i + 1].strip(), "a blank line after a progress line"
        assert "SKIPPED" not in lines[i - 1]
    if verbosity == "-q":  # none: pytest's line of result letters stays whole
        assert ours == [], lines
    elif verbosity == "-v":  # a line per run, after its PASSED line; the last says every run is done
        assert len(ours) == 2 and all(lines[i - 1].endswith("%]") and "PASSED" in lines[i - 1] for i in ours)
        assert "run 1/2 touch[np1-1M-default-fp32]" in lines[ours[0]] and " ETA " in lines[ours[0]]
        assert "run 2/2 touch[np1-2M-default-fp32]" in lines[ours[1]] and lines[ours[1]].endswith("every run done")
    else:  # one status line: after the first run, not after the last (nothing is left then)
        assert len(ours) == 1 and lines[ours[0]].startswith("numabench: 1/2 worker runs done, elapsed "), lines
        assert " ETA " in lines[ours[0]]
