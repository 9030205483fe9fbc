"""The main job never loses the last results: a usage error or an interrupted run leaves
results/last-run.json as it was; a finished run replaces it whole. Children run in their own
process group with defined signal dispositions and are ended with it (tests/helpers.py)."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil
import pytest
from helpers import finish, scratch_left, start_child, wait_for_workers

ROOT = Path(__file__).resolve().parents[1]


def child_env(tmp_path: Path) -> dict[str, str]:
    """The test's environment with TMPDIR in tmp_path (the workers' scratch folders go there)."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmpdir)}


def bench(tmp_path: Path, *args: str, ignored: Sequence[signal.Signals] = ()) -> subprocess.Popen:
    env = {**child_env(tmp_path), "NUMABENCH_RESULTS_DIR": str(tmp_path)}
    return start_child(["bash", str(ROOT / ".ci/bench"), "-k", "test_touch", "-p", "no:cacheprovider",
                        "-q", f"--benchmark-storage=file://{tmp_path}/store", *args], ignored=ignored,
                       cwd=ROOT, env=env)


INTERRUPT_WAIT_S = 60  # signal to exit; the run's per-request timeout is 600 s


def interrupted_while_a_case_runs(start: Callable[[], subprocess.Popen], tmp_path: Path) -> None:
    """Ctrl-C while a case runs: its worker hangs at its first step; SIGINT to the whole job,
    which stops without waiting for its timeout and leaves no scratch folder."""
    os.environ["NUMABENCH_FAULT"] = "hang@step1"
    try:
        p = start()
    finally:
        os.environ.pop("NUMABENCH_FAULT")
    try:
        wait_for_workers(p)
        time.sleep(1.0)  # the worker reaches its first step and hangs there
        os.killpg(p.pid, signal.SIGINT)
    finally:
        out = finish(p, INTERRUPT_WAIT_S)
    assert p.returncode != 0, out
    assert not scratch_left(tmp_path / "tmp"), out


def test_usage_error_and_interrupt_keep_the_last_results_and_a_run_replaces_them(tmp_path):
    last = tmp_path / "last-run.json"
    last.write_text('{"previous": true}')
    p = bench(tmp_path, "--numa-policies=nonsense")
    out = finish(p, 300)
    assert p.returncode == 4, out
    assert json.loads(last.read_text()) == {"previous": True}
    interrupted_while_a_case_runs(lambda: bench(tmp_path, "--numa-policies=default", "--param-sizes=1M"), tmp_path)
    assert json.loads(last.read_text()) == {"previous": True}
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".last-run")]
    p = bench(tmp_path, "--numa-policies=default", "--param-sizes=1M", "--numa-rounds=2")
    out = finish(p, 300)
    assert p.returncode == 0, out
    assert json.loads(last.read_text())["benchmarks"][0]["name"].startswith("test_touch[")


def test_an_interrupt_stops_a_run_whose_caller_ignores_sigint(tmp_path):
    """`.ci/bench` started with SIGINT ignored (a background job of a non-interactive shell,
    `trap '' INT`, some CI wrappers): SIGINT to the job still stops it at once, the last
    results are kept and no worker or scratch folder is left."""
    last = tmp_path / "last-run.json"
    last.write_text('{"previous": true}')
    interrupted_while_a_case_runs(lambda: bench(tmp_path, "--numa-policies=default", "--param-sizes=1M",
                                                ignored=(signal.SIGINT,)), tmp_path)
    assert json.loads(last.read_text()) == {"previous": True}
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".last-run")]


def test_benchmark_json_is_replaced_whole_or_left_as_it_was(tmp_path):
    """pytest-benchmark's --benchmark-json (argparse FileType) would empty PATH while parsing;
    fixtures.json_target makes it a file written at the end and renamed over PATH."""
    target = tmp_path / "run.json"
    target.write_text('{"previous": true}')

    def pytest_run(*args: str) -> subprocess.Popen:
        return start_child([sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "-p", "no:cacheprovider",
                            "-q", f"--benchmark-json={target}", f"--benchmark-storage=file://{tmp_path}/store", *args],
                           cwd=ROOT, env=child_env(tmp_path))

    p = pytest_run("--numa-policies=nonsense")
    out = finish(p, 300)
    assert p.returncode == 4, out
    assert json.loads(target.read_text()) == {"previous": True}
    interrupted_while_a_case_runs(lambda: pytest_run("--numa-policies=default", "--param-sizes=1M"), tmp_path)
    assert json.loads(target.read_text()) == {"previous": True}
    assert not [f.name for f in tmp_path.iterdir() if f.name.startswith(".run.json")]
    p = pytest_run("--numa-policies=default", "--param-sizes=1M", "--numa-rounds=2")
    out = finish(p, 300)
    assert p.returncode == 0, out
    assert json.loads(target.read_text())["benchmarks"][0]["name"].startswith("test_touch[")
    # what FileType refused at parse time is still refused there, naming the path
    out = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "-p", "no:cacheprovider",
                          f"--benchmark-json={tmp_path}/missing/run.json"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 4 and "its folder" in out.stderr and "missing" in out.stderr, out.stderr


def test_json_target_publishes_nothing_when_the_write_fails(tmp_path):
    from fixtures.json_target import JsonTarget

    path = tmp_path / "out.json"
    path.write_bytes(b"old")
    target = JsonTarget(str(path))
    try:
        with target as fh:
            fh.write(b"half")
            raise RuntimeError("serialisation failed")
    except RuntimeError:
        pass
    assert path.read_bytes() == b"old"
    with target as fh:
        fh.write(b"new")
    assert path.read_bytes() == b"new"
    assert [f.name for f in tmp_path.iterdir()] == ["out.json"]


def test_a_run_that_measured_nothing_says_so_and_fails_unless_allowed(tmp_path):
    """Every case skipped (a node this machine lacks): one line saying so, exit 3, and the empty
    results replace the previous ones (they must not look current); nothing selected: exit 5,
    the previous results kept; NUMABENCH_ALLOW_EMPTY=1 accepts both."""
    last = tmp_path / "last-run.json"
    last.write_text('{"previous": true}')
    p = bench(tmp_path, "--numa-policies=bind:99")
    out = finish(p, 300)
    assert p.returncode == 3, out
    assert "[bench] nothing was measured: every selected case skipped" in out
    assert json.loads(last.read_text())["benchmarks"] == [] and "(0 entries)" in out
    last.write_text('{"previous": true}')
    p = bench(tmp_path, "-k", "no_such_benchmark")
    out = finish(p, 300)
    assert p.returncode == 5 and "[bench] nothing was selected by the arguments" in out, out
    assert json.loads(last.read_text()) == {"previous": True}
    os.environ["NUMABENCH_ALLOW_EMPTY"] = "1"
    try:
        p = bench(tmp_path, "--numa-policies=bind:99")
        out = finish(p, 300)
    finally:
        os.environ.pop("NUMABENCH_ALLOW_EMPTY")
    assert p.returncode == 0, out


def left_beside(last: Path) -> list[str]:
    """Files in the results folder other than last-run.json (temporary files of the job)."""
    return sorted(f.name for f in last.parent.iterdir() if f.name not in (last.name, "store", "tmp"))


def still_running(tmp_path: Path) -> list[str]:
    """Processes of the job (bash, pytest, workers) still there: their command line or TMPDIR names tmp_path."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        with contextlib.suppress(psutil.Error):
            if p.info["status"] != psutil.STATUS_ZOMBIE and p.info["pid"] != os.getpid() and (
                    any(str(tmp_path) in a for a in p.info["cmdline"] or ())
                    or str(tmp_path) in p.environ().get("TMPDIR", "")):
                found.append(" ".join(p.info["cmdline"] or ()))
    return found


def one_line(out: str, start: str) -> str:
    """The one line of ``out`` that starts with ``start`` (AssertionError where not exactly one, or
    where there is a traceback)."""
    assert "Traceback" not in out, out
    lines = [ln for ln in out.splitlines() if ln.startswith(start)]
    assert len(lines) == 1, out
    return lines[0]


@pytest.fixture
def immutable(tmp_path):
    """Makes a file immutable (chattr +i: not even root may replace it), always undone."""
    made = []

    def make(path: Path) -> None:
        out = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
        if out.returncode != 0:
            pytest.skip(f"chattr +i is not available here: {out.stderr.strip() or out.returncode}")
        made.append(path)

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_results_that_cannot_replace_the_last_ones_are_kept_and_named(tmp_path, immutable):
    last = tmp_path / "last-run.json"
    last.write_text('{"previous": true}')
    immutable(last)
    p = bench(tmp_path, "--numa-policies=default", "--param-sizes=1M", "--numa-rounds=2")
    out = finish(p, 300)
    assert p.returncode == 6, out
    kept = tmp_path / "last-run.new.json"
    line = one_line(out, "[bench] ")
    assert line == f"[bench] cannot replace {last}: Operation not permitted; it is unchanged, the new results are " \
                   f"kept in {kept}", out
    assert json.loads(last.read_text()) == {"previous": True}
    assert json.loads(kept.read_text())["benchmarks"][0]["name"].startswith("test_touch[")
    assert left_beside(last) == [kept.name]
    assert not scratch_left(tmp_path / "tmp") and not still_running(tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_to_the_job_alone_stops_pytest_too(sig, tmp_path):
    """The signal reaches `.ci/bench` only (not its process group, as `kill PID` or a CI that
    signals its step's shell sends it): the job passes it on, waits for pytest to end its
    workers, removes its temporary file, keeps the last results, exits 128+signal."""
    last = tmp_path / "last-run.json"
    last.write_text('{"previous": true}')
    os.environ["NUMABENCH_FAULT"] = "hang@step1"
    try:
        p = bench(tmp_path, "--numa-policies=default", "--param-sizes=1M")
    finally:
        os.environ.pop("NUMABENCH_FAULT")
    try:
        wait_for_workers(p)
        time.sleep(1.0)  # the worker reaches its first step and hangs there
        os.kill(p.pid, sig)
    finally:
        out = finish(p, INTERRUPT_WAIT_S)
    assert p.returncode == 128 + sig, out
    assert one_line(out, "[bench] ") == f"[bench] stopped by {sig.name}: {last} is unchanged"
    assert json.loads(last.read_text()) == {"previous": True}
    assert not left_beside(last) and not scratch_left(tmp_path / "tmp")
    assert not still_running(tmp_path)


def test_a_file_size_limit_ends_the_job_in_one_line_and_keeps_the_last_results(tmp_path):
    """RLIMIT_FSIZE below the size of the results, SIGXFSZ ignored (so a write fails with EFBIG
    instead of killing the writer): one line naming the file, exit 6, nothing half-written."""
    last = tmp_path / "last-run.json"
    last.write_text('{"previous": true}')
    env = {**child_env(tmp_path), "NUMABENCH_RESULTS_DIR": str(tmp_path)}
    p = start_child(["bash", "-c", "trap '' XFSZ; ulimit -f 2; exec bash .ci/bench \"$@\"", "bench", "-k", "test_touch",
                     "-p", "no:cacheprovider", "-q", f"--benchmark-storage=file://{tmp_path}/store",
                     "--numa-policies=default", "--param-sizes=1M", "--numa-rounds=2"], cwd=ROOT, env=env)
    out = finish(p, 300)
    assert p.returncode == 6, out
    line = one_line(out, "ERROR: ")
    assert line.startswith(f"ERROR: --benchmark-json: cannot write {tmp_path}/.last-run.json.") \
        and "File too large" in line, out
    assert json.loads(last.read_text()) == {"previous": True}
    assert not left_beside(last) and not scratch_left(tmp_path / "tmp")


def test_a_malformed_fault_ends_the_job_before_any_case_and_keeps_the_last_results(tmp_path):
    last = tmp_path / "last-run.json"
    last.write_text('{"previous": true}')
    os.environ["NUMABENCH_FAULT"] = "explode@now"
    try:
        p = bench(tmp_path, "--numa-policies=default", "--param-sizes=1M", "--numa-rounds=2")
    finally:
        os.environ.pop("NUMABENCH_FAULT")
    out = finish(p, 300)
    assert p.returncode == 4, out
    assert one_line(out, "ERROR: ").startswith("ERROR: NUMABENCH_FAULT: bad fault 'explode@now'"), out
    assert json.loads(last.read_text()) == {"previous": True}
    assert not left_beside(last) and not scratch_left(tmp_path / "tmp")


def test_a_folder_where_last_run_json_belongs_ends_the_job_at_once_with_exit_6(tmp_path):
    """It exited 0 and wrote the results inside the folder ("(? entries)")."""
    (tmp_path / "last-run.json").mkdir()
    p = bench(tmp_path)
    out = finish(p, 120)
    assert p.returncode == 6, out
    assert f"[bench] {tmp_path}/last-run.json is a folder: the results cannot replace it" in out
    assert list((tmp_path / "last-run.json").iterdir()) == []


def test_sigkill_of_the_job_script_alone_ends_pytest_and_its_workers_and_the_next_run_clears_its_file(tmp_path):
    """No trap runs on SIGKILL: pytest (and its worker) ran on, and .last-run.json.PID stayed for good."""
    os.environ["NUMABENCH_FAULT"] = "hang@step1"
    try:
        p = bench(tmp_path)
    finally:
        os.environ.pop("NUMABENCH_FAULT")
    try:
        wait_for_workers(p)
        tree = psutil.Process(p.pid).children(recursive=True)
        p.kill()  # the script alone
        p.wait(timeout=10)
        deadline = time.monotonic() + INTERRUPT_WAIT_S
        while time.monotonic() < deadline and any(q.is_running() and q.status() != psutil.STATUS_ZOMBIE for q in tree):
            time.sleep(0.2)
        left = [q.pid for q in tree if q.is_running() and q.status() != psutil.STATUS_ZOMBIE]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    assert left == [], left
    (tmp_path / f".last-run.json.{p.pid}").write_text("{}")  # what a killed run can leave, whatever pytest did
    again = bench(tmp_path, "--numa-tier=bogus")  # the clearing comes before pytest
    finish(again, 120)
    assert not list(tmp_path.glob(".last-run.json.*"))
