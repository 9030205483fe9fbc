"""numabench.numa.weights.WeightSetting against a fake weights directory (never the real sysfs one)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import numabench.numa.weights as weights
from numabench.errors import UsageError
from numabench.machine.capabilities import probe
from numabench.machine.weights_sysfs import AUTO_NAMES, auto_mode_file, read_weights
from numabench.numa.weights import WeightSetting

MACHINES = Path(__file__).resolve().parent / "data" / "machines"
_real_write = weights._write


@pytest.fixture
def writes() -> list[tuple[str, str]]:
    """(file name, value) of every write the code under test made, in order."""
    return []


@pytest.fixture(params=AUTO_NAMES, ids=lambda n: f"auto-file-{n}")
def wdir(request, tmp_path, monkeypatch, writes):
    """A fake weighted_interleave dir: node0=1, node2=4, auto switch on. Writes behave like sysfs:
    a store replaces the whole value (regular files would keep a longer old tail), and writing a
    node weight turns auto-tuning off, as kernels >= 6.16 do."""
    d = tmp_path / "weighted_interleave"
    d.mkdir()
    (d / "node0").write_text("1\n")
    (d / "node2").write_text("4\n")
    (d / request.param).write_text("true\n")
    def sysfs_write(path, value):
        path = Path(path)
        path.write_text("")  # sysfs store semantics: the new value replaces the old one
        _real_write(path, value)
        writes.append((path.name, value))
        if path.name.startswith("node"):
            (d / request.param).write_text("false\n")

    monkeypatch.setattr(weights, "_write", sysfs_write)
    return d


def state(d: Path) -> tuple[dict[int, int], str]:
    return read_weights(d), auto_mode_file(d).read_text().strip()


def test_sets_and_restores(wdir):
    with WeightSetting({0: 1, 2: 3}, wdir) as ws:
        assert state(wdir) == ({0: 1, 2: 3}, "false")
        assert ws.weights == {0: 1, 2: 3}
    assert state(wdir) == ({0: 1, 2: 4}, "true")


def test_restores_when_block_raises(wdir):
    with pytest.raises(RuntimeError, match="boom"):
        with WeightSetting({0: 7, 2: 9}, wdir):
            assert read_weights(wdir) == {0: 7, 2: 9}
            raise RuntimeError("boom")
    assert state(wdir) == ({0: 1, 2: 4}, "true")


def test_only_touches_named_nodes(wdir, writes):
    with WeightSetting({2: 255}, wdir):
        assert read_weights(wdir) == {0: 1, 2: 255}
    assert state(wdir) == ({0: 1, 2: 4}, "true")
    assert [name for name, _ in writes if name.startswith("node")] == ["node2", "node2"]


def test_auto_left_alone_when_it_was_off(wdir, writes):
    auto = auto_mode_file(wdir)
    auto.write_text("false\n")
    with WeightSetting({0: 2}, wdir):
        pass
    assert state(wdir) == ({0: 1, 2: 4}, "false")
    assert all(name.startswith("node") for name, _ in writes)


def test_restore_is_idempotent(wdir, writes):
    ws = WeightSetting({0: 5}, wdir)
    ws.restore()  # never entered: nothing to do
    assert writes == []
    with ws:
        pass
    n = len(writes)
    ws.restore()
    ws.__exit__(None, None, None)
    assert len(writes) == n
    assert state(wdir) == ({0: 1, 2: 4}, "true")


def test_works_without_auto_file(tmp_path):
    d = tmp_path / "wi"
    d.mkdir()
    (d / "node0").write_text("2\n")
    with WeightSetting({0: 1}, d):
        assert read_weights(d) == {0: 1}
    assert read_weights(d) == {0: 2}
    assert auto_mode_file(d) is None


@pytest.mark.parametrize("bad", [0, 256, -1], ids=lambda w: f"weight-{w}")
def test_rejects_weight_out_of_range(wdir, writes, bad):
    with pytest.raises(UsageError, match=f"weight {bad} for node 2 is out of range: allowed 1..255"):
        WeightSetting({0: 1, 2: bad}, wdir)
    assert writes == []


def test_rejects_unknown_node(wdir, writes):
    with pytest.raises(UsageError, match=r"no weight file for node\(s\) \[1, 3\] .*nodes there: \[0, 2\]"):
        with WeightSetting({0: 2, 1: 1, 3: 1}, wdir):
            pass
    assert writes == []
    assert state(wdir) == ({0: 1, 2: 4}, "true")


def test_rejects_missing_dir(tmp_path):
    with pytest.raises(UsageError, match="weights directory .* is missing"):
        with WeightSetting({0: 1}, tmp_path / "absent"):
            pass


def test_write_failure_restores_and_says_root(wdir, monkeypatch):
    sysfs_write = weights._write
    failed = []

    def fail_once_on_node2(path, value):
        if Path(path).name == "node2" and not failed:
            failed.append(value)
            raise PermissionError(13, "Permission denied")
        sysfs_write(path, value)

    monkeypatch.setattr(weights, "_write", fail_once_on_node2)
    with pytest.raises(PermissionError, match="needs root"):
        with WeightSetting({0: 9, 2: 9}, wdir):
            pytest.fail("block must not run")
    assert read_weights(wdir) == {0: 1, 2: 4}


def test_real_write_is_one_write(tmp_path):
    p = tmp_path / "node0"
    p.write_text("")
    _real_write(p, "17")
    assert p.read_text() == "17"


@pytest.mark.parametrize("tree, name", [("vm-1node", "__auto_type"), ("h200x2-vm", "__auto_type"),
                                        ("cxl-3node", "auto"), ("dgx-2socket-8gpu", None)])
def test_recorded_weight_dirs(tree, name):
    d = MACHINES / tree / "sys/kernel/mm/mempolicy/weighted_interleave"
    f = auto_mode_file(d)
    assert (f.name if f else None) == name
    if name:
        assert f.read_text().strip() == "true"
        assert set(read_weights(d).values()) == {1}


# -- one machine-wide lock: two processes never interleave their settings ---------------

def _child_setting(wdir: Path, weights_map: dict, hold_s: float, timeout_s: str, conn) -> None:
    """In a forked child: hold a WeightSetting for hold_s, report what it saw."""
    import os as _os
    _os.environ["NUMABENCH_WEIGHTS_LOCK_TIMEOUT_S"] = timeout_s
    try:
        with WeightSetting(weights_map, wdir):
            conn.send(("entered", read_weights(wdir)))
            import time as _t
            _t.sleep(hold_s)
        conn.send(("left", read_weights(wdir)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        conn.send(("error", f"{type(e).__name__}: {e}"))


def _start(wdir, weights_map, hold_s, timeout_s="30"):
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_child_setting, args=(wdir, weights_map, hold_s, timeout_s, child))
    p.start()
    return p, parent


def test_second_process_waits_for_the_first_to_restore(wdir):
    a, a_conn = _start(wdir, {0: 3}, hold_s=1.0)
    assert a_conn.recv() == ("entered", {0: 3, 2: 4})
    b, b_conn = _start(wdir, {0: 5}, hold_s=0.0)
    # B saves only after A restored: it sees the original weight, never A's 3
    assert b_conn.recv() == ("entered", {0: 5, 2: 4})
    assert a_conn.recv() == ("left", {0: 1, 2: 4})
    assert b_conn.recv() == ("left", {0: 1, 2: 4})
    a.join(10)
    b.join(10)
    assert read_weights(wdir) == {0: 1, 2: 4}


def test_lock_wait_times_out_in_one_line_and_changes_nothing(wdir):
    a, a_conn = _start(wdir, {0: 3}, hold_s=2.0)
    assert a_conn.recv()[0] == "entered"
    b, b_conn = _start(wdir, {0: 5}, hold_s=0.0, timeout_s="0.3")
    kind, msg = b_conn.recv()
    assert kind == "error" and msg.startswith("UsageError: weighted interleave weights in ") \
        and "in use by another process" in msg and "NUMABENCH_WEIGHTS_LOCK_TIMEOUT_S" in msg, msg
    assert a_conn.recv() == ("left", {0: 1, 2: 4})
    a.join(10)
    b.join(10)


def test_nested_settings_in_one_process_share_the_lock(wdir):
    with WeightSetting({0: 2}, wdir):
        with WeightSetting({2: 9}, wdir):
            assert read_weights(wdir) == {0: 2, 2: 9}
        assert read_weights(wdir) == {0: 2, 2: 4}
        assert weights.lock_path(wdir) in weights._held
    assert weights.lock_path(wdir) not in weights._held
    assert read_weights(wdir) == {0: 1, 2: 4}


def test_bad_lock_timeout_is_a_usage_error(wdir, monkeypatch):
    monkeypatch.setenv("NUMABENCH_WEIGHTS_LOCK_TIMEOUT_S", "soon")
    with pytest.raises(UsageError, match="NUMABENCH_WEIGHTS_LOCK_TIMEOUT_S='soon': allowed a number"):
        with WeightSetting({0: 2}, wdir):
            pass
    assert read_weights(wdir) == {0: 1, 2: 4}


def _run_weighted_touch(wdir, *args):
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "NUMABENCH_WEIGHTS_DIR": str(wdir)}
    return subprocess.run([sys.executable, "-m", "pytest", "benchmarks/test_touch.py", "-p", "no:cacheprovider", "-q",
                           "-rs", "--numa-policies=weighted:0=5", "--param-sizes=1M", "--numa-rounds=2",
                           "--benchmark-json", str(wdir.parent / "run.json"), *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(not probe().weighted_interleave_kernel, reason="needs weighted interleave (Linux >= 6.9)")
def test_weighted_case_that_would_switch_auto_mode_off_is_skipped_unless_allowed(tmp_path):
    import json

    from helpers import fake_weights_dir

    wdir = fake_weights_dir(tmp_path)
    out = _run_weighted_touch(wdir)
    assert out.returncode == 0 and "1 skipped" in out.stdout, out.stdout + out.stderr
    assert "would switch the kernel's weighted-interleave auto mode off" in out.stdout
    assert "--numa-allow-weight-writes" in out.stdout and (wdir / "node0").read_text() == "1\n"
    out = _run_weighted_touch(wdir, "--numa-allow-weight-writes")
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout + out.stderr
    touched = json.loads((tmp_path / "run.json").read_text())["machine_info"]["numabench"]["settings_touched"]
    node0 = [t for t in touched if t["path"].endswith("node0")]
    assert node0 == [{"path": str(wdir / "node0"), "before": "1", "during": "5", "after": "1"}], touched
    assert (wdir / "node0").read_text().strip() == "1"
