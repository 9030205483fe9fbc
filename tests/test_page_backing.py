"""numabench.tools.page_backing: three kinds of host buffer a copy is timed over, each the mapping
it claims to be (shared anonymous as numabench's own, private anonymous as torch's), every one
unmapped afterwards, the figures in range, and a bad size refused naming it."""
from __future__ import annotations

import re

import pytest

from numabench.tools import page_backing
from numabench.tools.page_backing import KINDS, _Buffer, measure


def _mapping(address: int) -> tuple[int, int, str] | None:
    """(start, end, permissions such as rw-s) of the mapping holding ``address``, None where none does."""
    for line in open("/proc/self/smaps"):
        m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) ", line)
        if m and int(m.group(1), 16) <= address < int(m.group(2), 16):
            return int(m.group(1), 16), int(m.group(2), 16), m.group(3)
    return None


@pytest.mark.parametrize("kind, flags", [("shared", "rw-s"), ("private", "rw-p"), ("private-huge", "rw-p")])
def test_each_kind_is_the_mapping_it_claims_and_is_unmapped_after(kind, flags):
    buf = _Buffer(kind, 4 << 20)
    address = buf.address
    try:
        held = _mapping(address)
        assert held is not None and held[2] == flags
        assert int(buf.tensor()[: 4096].sum()) == 4096  # every byte touched (set to 1)
    finally:
        buf.close()
    assert _mapping(address) != held  # unmapped (a later mapping there would differ)
    with pytest.raises(ValueError, match="buffer kind 'huge': allowed shared, private, private-huge"):
        _Buffer("huge", 4096)


def test_every_kind_is_measured_in_range_and_bad_sizes_are_refused(capsys):
    rows = measure(4 << 20, rounds=3, repeats=2)
    assert [r.kind for r in rows] == list(KINDS)
    assert all(0.0 <= r.huge_share <= 1.0 and r.gbps > 0 for r in rows)
    assert rows[0].huge_share == 0.0 or "shmem never" not in (page_backing.thp_setting() or "")
    with pytest.raises(ValueError, match="nbytes 0, rounds 3, repeats 2: allowed a page or more"):
        measure(0, 3, 2)
    assert page_backing.main(["--mib", "4", "--rounds", "2", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("transparent huge pages: ") and all(k in out for k in KINDS)
    assert page_backing.main(["--mib", "0"]) == 2
