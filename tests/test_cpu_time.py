"""numabench.machine.cpu_time and its tool: /proc/stat's aggregate line read, the shares between two
readings (steal among them), and the watcher that stops on SIGTERM or when its parent goes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from numabench.machine.cpu_time import FIELDS, CpuTimes, interval_shares, parse_stat, shares
from numabench.tools import cpu_time

STAT = """cpu  100 5 20 800 10 1 4 60 0 0
cpu0 50 2 10 400 5 0 2 30 0 0
intr 12345
"""


def test_the_aggregate_line_is_read_in_procs_order():
    r = parse_stat(STAT, 1.5)
    assert r.t == 1.5 and r.ticks == (100, 5, 20, 800, 10, 1, 4, 60)
    assert dict(zip(FIELDS, r.ticks))["steal"] == 60


def test_an_old_kernel_without_steal_reads_zero_and_a_text_without_the_line_is_refused():
    assert parse_stat("cpu 1 2 3 4 5\n", 0).ticks == (1, 2, 3, 4, 5, 0, 0, 0)
    with pytest.raises(ValueError, match="no aggregate 'cpu' line"):
        parse_stat("cpu0 1 2 3 4\n", 0)
    with pytest.raises(ValueError, match="at least user nice system idle"):
        parse_stat("cpu 1 2 3\n", 0)


def test_shares_sum_to_one_and_busy_leaves_out_idle_iowait_and_steal():
    a = CpuTimes(0.0, (0,) * 8)
    b = CpuTimes(1.0, (30, 0, 10, 40, 0, 0, 0, 20))
    s = shares(a, b)
    assert s["steal"] == pytest.approx(0.2) and s["idle"] == pytest.approx(0.4)
    assert s["busy"] == pytest.approx(0.4)
    assert sum(s[k] for k in FIELDS) == pytest.approx(1.0)


def test_readings_that_go_backwards_or_share_a_tick_are_refused():
    a = CpuTimes(0.0, (10,) * 8)
    with pytest.raises(ValueError, match="go backwards"):
        shares(a, CpuTimes(1.0, (9,) + (10,) * 7))
    with pytest.raises(ValueError, match="no ticks"):
        shares(a, a)
    with pytest.raises(ValueError, match="8 counts"):
        CpuTimes(0.0, (1, 2))
    # intervals without ticks are left out, not refused
    assert len(interval_shares([a, a, CpuTimes(2.0, (11,) * 8)])) == 1


def test_the_summary_gives_the_whole_and_the_intervals_steal(tmp_path):
    f = tmp_path / "cpu.txt"
    for t, steal in ((0, 0), (1, 0), (2, 50), (3, 50)):
        cpu_time.write_line(f, CpuTimes(float(t), (100 * t, 0, 0, 100 * t, 0, 0, 0, steal)))
    lines = cpu_time.summary(cpu_time.read_lines(f))
    assert lines[0].startswith("3 s, 3 intervals:") and "steal 7.7%" in lines[0]
    assert lines[1] == "  steal per interval: median 0.0%, max 20.0%, intervals above 1%: 1 of 3"
    with pytest.raises(ValueError, match="allowed 2 or more"):
        cpu_time.summary(cpu_time.read_lines(f)[:1])
    f.write_text("1.0 2 3\n")
    assert cpu_time.main(["summary", str(f)]) == 2


def test_the_watcher_stops_on_sigterm_with_a_last_reading(tmp_path):
    f = tmp_path / "cpu.txt"
    proc = subprocess.Popen([sys.executable, "-m", "numabench.tools.cpu_time", "watch", str(f), "--interval", "0.1"])
    deadline = time.monotonic() + 30
    while not (f.exists() and len(f.read_text().splitlines()) >= 3):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    readings = cpu_time.read_lines(f)
    assert len(readings) >= 3 and all(b.t > a.t for a, b in zip(readings, readings[1:]))
    assert cpu_time.main(["summary", str(f)]) == 0


def test_the_watcher_goes_when_its_parent_is_killed(tmp_path):
    """A caller SIGKILLed (no trap runs) leaves no watcher behind."""
    f = tmp_path / "cpu.txt"
    pidfile = tmp_path / "pid"
    parent = subprocess.Popen(["bash", "-c", f"{sys.executable} -m numabench.tools.cpu_time watch {f} "
                                             f"--interval 0.1 & echo $! > {pidfile}; wait"])
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip() and f.exists()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child = int(pidfile.read_text())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(child):
        assert time.monotonic() < deadline, f"watcher {child} outlived its parent"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as s:
            return s.read().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
    except OSError:
        return os.path.exists(f"/proc/{pid}")


def test_a_bad_interval_is_refused(tmp_path, capsys):
    assert cpu_time.main(["watch", str(tmp_path / "x"), "--interval", "0"]) == 2
    assert "--interval 0.0: allowed > 0" in capsys.readouterr().err
