"""numabench first-touch: fresh memory touched chunk by chunk, twice, then given back; a pass
stops before MemAvailable would cross the floor unless the machine grows in time."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from numabench.machine.first_touch import GIB, first_touch, memory_devices, read_meminfo, render_first_touch

MIB = 1 << 20
ROOT = Path(__file__).resolve().parents[1]


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_two_passes_touch_every_chunk_and_give_the_memory_back():
    before = rss_bytes()
    result = first_touch(64 * MIB, passes=2, chunk_bytes=16 * MIB)
    assert result.stopped is None
    assert [(c.pass_no, c.index) for c in result.chunks] == [(p, i) for p in (1, 2) for i in range(4)]
    assert all(c.bytes == 16 * MIB and c.seconds > 0 and c.mem_total_bytes > 0 for c in result.chunks)
    assert rss_bytes() - before < 16 * MIB  # both mappings are gone
    text = render_first_touch(result)
    assert "pass 1 (memory not used by this run before): 0.06 GiB" in text
    assert "pass 2 (pages the pass before freed): 0.06 GiB" in text
    assert "stopped early" not in text


def test_a_last_chunk_smaller_than_the_others():
    result = first_touch(40 * MIB, passes=1, chunk_bytes=16 * MIB)
    assert [c.bytes for c in result.chunks] == [16 * MIB, 16 * MIB, 8 * MIB]


def test_it_stops_at_the_floor_and_says_why():
    def meminfo():
        return {"MemTotal": 6 * GIB, "MemAvailable": 5 * GIB // 2}

    result = first_touch(8 * GIB, chunk_bytes=GIB, floor_bytes=2 * GIB, wait_s=0.2, meminfo=meminfo)
    assert result.chunks == []
    assert result.stopped == ("pass 1 after 0.00 GiB: MemAvailable 2.50 GiB (MemTotal 6.00 GiB) would fall below "
                              "the floor of 2.00 GiB and did not grow in 0.2 s")
    assert "stopped early: pass 1 after 0.00 GiB" in render_first_touch(result)


def test_it_waits_for_a_machine_that_grows():
    reads = []

    def growing():  # room for a chunk only from the third reading on
        reads.append(1)
        return {"MemTotal": 8 * GIB, "MemAvailable": (1 if len(reads) < 3 else 8) * GIB}

    result = first_touch(4 * MIB, passes=1, chunk_bytes=4 * MIB, floor_bytes=GIB, wait_s=5.0, meminfo=growing)
    assert result.stopped is None and len(result.chunks) == 1
    assert result.chunks[0].mem_available_bytes == 8 * GIB


@pytest.mark.parametrize("kwargs, message", [
    ({"nbytes": 0}, "size 0 bytes: allowed more than 0"),
    ({"nbytes": MIB, "passes": 0}, "passes 0: allowed 1 or more"),
    ({"nbytes": MIB, "chunk_bytes": 1000}, "chunk 1000 bytes: allowed a multiple of the page size"),
])
def test_bad_arguments_name_the_value(kwargs, message):
    nbytes = kwargs.pop("nbytes")
    with pytest.raises(ValueError, match=message):
        first_touch(nbytes, **kwargs)


def test_memory_devices_are_the_bound_virtio_memory_drivers(tmp_path):
    drivers = tmp_path / "sys/bus/virtio/drivers"
    (drivers / "virtio_mem" / "virtio3").mkdir(parents=True)
    (drivers / "virtio_balloon").mkdir(parents=True)  # loaded, bound to nothing
    (drivers / "virtio_net" / "virtio0").mkdir(parents=True)
    assert memory_devices(str(tmp_path)) == ["virtio_mem"]
    assert memory_devices(str(tmp_path / "nothing")) == []


def test_read_meminfo_in_bytes(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       24576000 kB\nMemAvailable:   1024 kB\nHugePages_Total:       0\n")
    assert read_meminfo(str(f)) == {"MemTotal": 24576000 * 1024, "MemAvailable": 1024 * 1024, "HugePages_Total": 0}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "numabench", "first-touch", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_the_command_writes_json():
    proc = cli("--gib", "0.0625", "--chunk-gib", "0.03125", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["requested_bytes"] == 64 * MIB and out["stopped"] is None
    assert [c["pass_no"] for c in out["chunks"]] == [1, 1, 2, 2]
    assert all(c["gib_per_s"] > 0 for c in out["chunks"])


@pytest.mark.parametrize("args, message", [
    (["--gib", "0"], "--gib 0: allowed a number > 0"),
    (["--chunk-gib", "-1"], "--chunk-gib -1: allowed a number > 0"),
    (["--floor-gib", "-1"], "--floor-gib -1: allowed a number >= 0"),
    (["--passes", "0"], "--passes 0: allowed 1 or more"),
])
def test_bad_options_are_usage_errors(args, message):
    proc = cli(*args)
    assert proc.returncode == 2
    assert message in proc.stderr
