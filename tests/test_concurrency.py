"""Concurrency: two suites saving into one baselines/ at once keep every run, numbered
uniquely, each file whole; under pytest-xdist the benchmark cases skip, saying why,
instead of passing without numbers."""
from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from numabench.results.storage import LockedFileStorage, publish

ROOT = Path(__file__).resolve().parents[1]
MACHINE = "Linux-CPython-test-64bit"


class QuietLogger:
    def info(self, *a, **k) -> None:
        pass

    warning = info


def _saver(path: str, name: str, count: int, barrier) -> None:
    storage = LockedFileStorage(path, QuietLogger(), MACHINE)
    barrier.wait()
    for i in range(count):
        storage.save({"benchmarks": [], "machine_info": {}, "who": name, "i": i, "pad": "x" * 200_000}, name)


def test_two_processes_saving_at_once_keep_every_run(tmp_path):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(2)
    n = 15
    procs = [ctx.Process(target=_saver, args=(str(tmp_path), name, n, barrier)) for name in ("alpha", "beta")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    files = sorted((tmp_path / MACHINE).glob("*.json"))
    nums = [f.name.split("_")[0] for f in files]
    assert nums == [f"{i:04}" for i in range(1, 2 * n + 1)], nums  # unique, no gap
    seen = {(d["who"], d["i"]) for d in (json.loads(f.read_text()) for f in files)}  # each file whole
    assert seen == {(w, i) for w in ("alpha", "beta") for i in range(n)}
    leftovers = [f.name for f in (tmp_path / MACHINE).iterdir() if f.suffix != ".json"]
    assert not leftovers


def test_publish_never_replaces_an_existing_run(tmp_path):
    target = tmp_path / "0001_a.json"
    assert publish(target, b"first")
    assert not publish(target, b"second")
    assert target.read_bytes() == b"first"
    assert [f.name for f in tmp_path.iterdir()] == ["0001_a.json"]


def test_save_skips_a_number_taken_meanwhile(tmp_path, monkeypatch):
    """The number picked by listing can be taken before the file is linked (a suite on a
    file system without flock): the next number is used, nothing is overwritten."""
    storage = LockedFileStorage(str(tmp_path), QuietLogger(), MACHINE)
    real = publish.__globals__["publish"]
    calls = []

    def racing(path, data):
        if not calls:
            (Path(path)).write_bytes(b'{"benchmarks": [], "other": true}')  # someone else got there first
        calls.append(path)
        return real(path, data)

    monkeypatch.setattr("numabench.results.storage.publish", racing)
    out = storage.save({"benchmarks": [], "mine": True}, "run")
    assert out.name == "0002_run.json"
    assert json.loads((tmp_path / MACHINE / "0001_run.json").read_text())["other"] is True
    assert json.loads(out.read_text())["mine"] is True


def _suite(storage: Path, save: str, env: dict) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "benchmarks/test_touch.py"), f"--rootdir={ROOT}",
           "-c", str(ROOT / "pytest.ini"), "-p", "no:cacheprovider", "-q", "--numa-policies=default",
           "--param-sizes=1M", "--numa-rounds=3", "--numa-warmup=0", f"--benchmark-storage=file://{storage}",
           f"--benchmark-save={save}"]
    return subprocess.Popen(cmd, cwd=storage.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def test_two_suites_started_at_once_save_two_runs(tmp_path):
    """Real pytest-benchmark sessions through the plugin. They run with a stale
    PYTEST_XDIST_WORKER inherited (as when this test itself runs under -n): the plugin
    drops it, so benchmarks stay enabled in these plain sessions."""
    storage = tmp_path / "baselines"
    env = dict(os.environ, PYTEST_XDIST_WORKER="gw9", PYTEST_XDIST_WORKER_COUNT="2")
    procs = [_suite(storage, name, env) for name in ("one", "two")]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
    files = sorted(storage.rglob("[0-9][0-9][0-9][0-9]_*.json"))
    assert sorted(f.name.split("_")[0] for f in files) == ["0001", "0002"]
    assert {f.stem.split("_", 1)[1] for f in files} == {"one", "two"}
    for f in files:
        data = json.loads(f.read_text())
        assert len(data["benchmarks"]) == 1 and data["benchmarks"][0]["stats"]["rounds"] == 3


def test_under_xdist_benchmarks_skip_saying_why(tmp_path):
    pytest.importorskip("xdist")
    out_json = tmp_path / "run.json"
    cmd = [sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "-p", "no:cacheprovider", "-n", "2", "-rs",
           "--numa-policies=default;bind:0", "--param-sizes=1M", f"--benchmark-json={out_json}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    notice = [ln for ln in text.splitlines() if ln.startswith("numabench: pytest-benchmark is disabled under xdist")]
    assert len(notice) == 1, text
    assert "2 skipped" in text and "passed" not in text, text
    assert text.count("pytest-benchmark is disabled under xdist (-n); run benchmarks without -n") >= 2
