"""A time-out leaves a verdict: numabench ab stopped by a signal (what a CI time-out sends)
judges the pairs finished so far, says it was cut short after how many passes, and exits 1 where
those pairs judge an entry slower, else 128 + the signal; `.ci/gate-job ab` passes the signal on
and still writes verdicts.json, session.json and summary.md."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from numabench.ab.formats import from_json, render_markdown, render_text, to_json
from numabench.ab.passes import invoke_in_passes
from numabench.ab.run import ABResult, Side, StoppedWithMeasurements, judge_pairs, run_ab
from test_ab import repo  # noqa: F401  (the scratch repository fixture)
from test_ab_gate import pairs_of
from test_ab_gate_job import SELECTION, gate_job, worktrees
from test_ab_passes import FakeSessions, noisy

ROOT = Path(__file__).resolve().parents[1]


def stopped_result(*ratios: list[float], passes_done: int | None = 2) -> ABResult:
    res = ABResult(Side("main", "a" * 40, Path("/base"), {}), Side("HEAD", "b" * 40, Path("/head"), {}), 3, 1.0,
                   0.95, interleave="rounds", passes=True, stopped_by=int(signal.SIGTERM), passes_done=passes_done)
    res.rows = [judge_pairs(f"test_x[{i}]", *pairs_of(r), 1.0, 0.95) for i, r in enumerate(ratios)]
    return res


def test_a_stopped_run_exits_1_where_its_finished_pairs_judge_a_slower_entry_else_128_plus_the_signal():
    assert stopped_result([1.05, 1.06]).exit_code == 128 + signal.SIGTERM  # 2 pairs of 1.05-1.06: unresolved
    slower = stopped_result([1.05, 1.06, 1.055], [1.0, 1.001, 0.999])
    assert slower.regressions and slower.exit_code == 1
    text = render_text(slower)
    assert text.startswith("numabench A/B: STOPPED (SIGTERM) before the session's end, cut short after 2 passes: ")
    assert "exit 1" in text.splitlines()[0]
    assert "cut short after 2 passes" in render_markdown(slower)
    back = from_json(json.loads(json.dumps(to_json(slower))))
    assert (back.passes_done, back.stopped_by, back.exit_code) == (2, int(signal.SIGTERM), 1)
    whole = stopped_result([1.0, 1.001, 0.999], passes_done=None)  # back to back: no passes to count
    assert "cut short" not in render_text(whole) and "STOPPED (SIGTERM)" in render_text(whole)


def test_the_passes_that_finished_are_counted(tmp_path):
    with pytest.raises(StoppedWithMeasurements) as stopped:
        invoke_in_passes(FakeSessions(noisy(), stop_in_pass=3), None, None, ["benchmarks"], 4, tmp_path)
    assert stopped.value.measured["passes_done"] == 2  # the third's finished runs are there, not counted
    (tmp_path / "x").mkdir()
    done = invoke_in_passes(FakeSessions(noisy()), None, None, ["benchmarks"], 3, tmp_path / "x")
    assert done["passes_done"] == 3


def test_run_ab_records_how_many_passes_ran_before_the_stop(tmp_path, repo):  # noqa: F811
    sessions = FakeSessions(noisy(changed={"x.py::t[a]": 1.05}), stop_in_pass=3)
    res = run_ab("HEAD~1", "HEAD", ["benchmarks"], pairs=4, cwd=repo, build_side=lambda s: "",
                 invoke_both=sessions, passes=True, confirm_pairs=0)
    assert res.stopped_by and res.passes_done == 2
    assert res.exit_code == (1 if res.regressions else 128 + res.stopped_by)


def _children_of(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


# serial: alone, as the other end-to-end A/B of the gate job (its git worktrees, the two cores)
@pytest.mark.serial
@pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None, reason="needs a git checkout")
def test_sigterm_to_the_gate_job_mid_pass_leaves_a_judged_marked_verdict(tmp_path):
    """SIGTERM to the job script alone (it passes it on) while its third pass runs: the first two
    passes are judged, every file written, marked, and the exit code is what they judged."""
    before = worktrees()
    env = {**os.environ, "NUMABENCH_TIER": "smoke", "NUMABENCH_RESULTS": str(tmp_path / "results"),
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"), "NUMABENCH_AB_BASE": "HEAD",
           "NUMABENCH_AB_ARGS": "--pairs 4 --confirm-pairs 0", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(["bash", str(ROOT / ".ci" / "gate-job"), "ab", *SELECTION], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 600
        while not any("pass 3/4" in ln for ln in lines):
            line = proc.stdout.readline()
            assert line and time.monotonic() < deadline, "".join(lines)[-4000:]
            lines.append(line)
        tree = _children_of(proc.pid)
        proc.send_signal(signal.SIGTERM)  # the script alone: it passes the signal on
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = "".join(lines) + out
    results = tmp_path / "results"
    verdicts = json.loads((results / "verdicts.json").read_text())
    assert verdicts["stopped_by"] == "SIGTERM" and verdicts["passes_done"] == 2, text[-3000:]
    assert all(e["pairs"] == 2 for e in verdicts["entries"]) and verdicts["entries"]
    slower = verdicts["counts"]["slower"]
    assert proc.returncode == verdicts["exit_code"] == (1 if slower else 128 + signal.SIGTERM), text[-3000:]
    summary = (results / "summary.md").read_text()
    assert "cut short after 2 passes" in summary and summary == (tmp_path / "summary").read_text()
    assert (results / "session.json").is_file() and "cut short after 2 passes" in (results / "ab.log").read_text()
    assert "::error title=numabench A/B stopped::" in out
    assert worktrees() == before
    time.sleep(1)
    assert not [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.serial
@pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None, reason="needs a git checkout")
def test_a_time_out_around_the_gpu_script_still_packs_the_ab_it_stopped(tmp_path):
    """`timeout -s TERM N bash .ci/gpu` (the signal to the whole process group) while its A/B step's
    third pass runs: the A/B judges its two passes, and .ci/gpu waits for it, packs its session and
    its noise split (with where the CPUs' time went) under $OUT, skips the steps after it and exits 128 + SIGTERM."""
    out_dir = tmp_path / "out"
    env = {**os.environ, "OUT": str(out_dir), "NUMABENCH_GPU_TESTS": "0", "NUMABENCH_GPU_GATE_JOB": "0",
           "NUMABENCH_GPU_AB": "1", "NUMABENCH_GPU_AB_TIER": "smoke", "NUMABENCH_GPU_AB_K": "test_touch",
           "NUMABENCH_GPU_CPU_ADAM": "1", "NUMABENCH_AB_ARGS": "--pairs 4 --confirm-pairs 0",
           # the kernels as the other tests build them (a build of its own would cost a minute here)
           "NUMABENCH_BUILD_DIR": os.environ.get("NUMABENCH_BUILD_DIR",
                                                 str(Path.home() / ".cache" / "numabench" / "build"))}
    before = worktrees()
    proc = subprocess.Popen(["bash", str(ROOT / ".ci" / "gpu")], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    log = out_dir / "ab-job.log"
    try:
        deadline = time.monotonic() + 600
        while not (log.is_file() and "pass 3/4" in log.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, (log.read_text() if log.is_file() else "")
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGTERM)  # as timeout(1) sends it: to the whole group
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert "ab job rc=" in out and "stopped by a signal" in out, out[-3000:]
    assert "cut short after 2 passes" in log.read_text()
    assert (out_dir / "ab-job.tar.gz").stat().st_size > 0
    noise = (out_dir / "ab-noise.txt").read_text()
    assert "entries with both sides' rounds" in noise
    assert "CPU time during the A/B step" in noise and "steal per interval" in noise, noise[-2000:]
    assert not (out_dir / "cpu-adam-scaling.txt").exists()  # the step after it skipped
    assert worktrees() == before
