"""numabench.numa.placement: numa_maps parsing, reports, and verdicts (no real memory placed)."""
from __future__ import annotations

import json

import pytest

from numabench.errors import PlacementError
from numabench.numa.placement import (
    Expectation,
    PlacementReport,
    compare,
    numa_maps_report,
    parse_numa_maps,
    parse_numa_maps_line,
    require,
)

MIB = 2**20

# line -> (address, policy, node pages, page kB, some attrs)
LINES = [
    pytest.param("7f2c3a000000 weighted interleave:0-2 anon=262144 dirty=262144 active=0 N0=65536 N1=65536 "
                 "N2=131072 kernelpagesize_kB=4",
                 (0x7f2c3a000000, "weighted interleave:0-2", {0: 65536, 1: 65536, 2: 131072}, 4,
                  {"anon": "262144", "dirty": "262144", "active": "0"}), id="weighted-interleave"),
    pytest.param("7f2c3a000000 prefer (many)=static:0,1 anon=1024 dirty=1024 N1=1024 kernelpagesize_kB=4",
                 (0x7f2c3a000000, "prefer (many)=static:0,1", {1: 1024}, 4, {"anon": "1024"}),
                 id="prefer-many-static"),
    pytest.param("7f5e00000000 interleave=static:0-1 anon=512 dirty=512 N0=256 N1=256 kernelpagesize_kB=4",
                 (0x7f5e00000000, "interleave=static:0-1", {0: 256, 1: 256}, 4, {"dirty": "512"}),
                 id="interleave-static"),
    pytest.param("7f5e00000000 bind:0 anon=100 dirty=100 N0=100 kernelpagesize_kB=4",
                 (0x7f5e00000000, "bind:0", {0: 100}, 4, {}), id="bind"),
    pytest.param("7f5e00000000 prefer:1 anon=7 dirty=7 N1=7 kernelpagesize_kB=4",
                 (0x7f5e00000000, "prefer:1", {1: 7}, 4, {}), id="prefer"),
    pytest.param(r"7f1b2c000000 default file=/dev/zero\040(deleted) dirty=262144 active=0 N0=262144 "
                 "kernelpagesize_kB=4",
                 (0x7f1b2c000000, "default", {0: 262144}, 4, {"file": r"/dev/zero\040(deleted)", "dirty": "262144"}),
                 id="deleted-file-escaped-space"),
    pytest.param(r"7f0000000000 bind:0 file=/anon_hugepage\040(deleted) huge dirty=512 N0=512 "
                 "kernelpagesize_kB=2048",
                 (0x7f0000000000, "bind:0", {0: 512}, 2048, {"huge": ""}), id="hugetlb-2M"),
    pytest.param("7f4000000000 default anon=262144 dirty=262144 active=0 N0=131072 N1=131072 "
                 "kernelpagesize_kB=1048576",
                 (0x7f4000000000, "default", {0: 131072, 1: 131072}, 1048576, {}), id="hugetlb-1G"),
    pytest.param("55d0c8a2b000 default heap anon=33 dirty=33 active=0 N0=33 kernelpagesize_kB=4",
                 (0x55d0c8a2b000, "default", {0: 33}, 4, {"heap": ""}), id="heap"),
    pytest.param("7ffd4c5e1000 default stack anon=5 dirty=5 N0=5 kernelpagesize_kB=4",
                 (0x7ffd4c5e1000, "default", {0: 5}, 4, {"stack": ""}), id="stack"),
    pytest.param("7f2c3a000000 weighted interleave:0,3",
                 (0x7f2c3a000000, "weighted interleave:0,3", {}, 4, {}), id="two-word-policy-alone"),
    pytest.param("7f8e1a3f6000 default file=/usr/lib/x86_64-linux-gnu/libc.so.6 mapped=40 mapmax=6 N0=40 "
                 "kernelpagesize_kB=4",
                 (0x7f8e1a3f6000, "default", {0: 40}, 4, {"mapmax": "6"}), id="shared-library"),
    pytest.param("7f8e1a000000 local anon=3 dirty=3 N0=3 kernelpagesize_kB=4",
                 (0x7f8e1a000000, "local", {0: 3}, 4, {}), id="local"),
]


@pytest.mark.parametrize("line, expected", LINES)
def test_parse_numa_maps_line(line, expected):
    address, policy, pages, page_kb, attrs = expected
    e = parse_numa_maps_line(line)
    assert (e.address, e.policy, e.node_pages, e.page_kb) == (address, policy, pages, page_kb)
    for k, v in attrs.items():
        assert e.attrs[k] == v
    assert not any(k.startswith("N") and k[1:].isdigit() for k in e.attrs)
    assert e.node_bytes == {n: c * page_kb * 1024 for n, c in pages.items()}


def test_huge_page_bytes():
    e = parse_numa_maps_line(r"7f0000000000 bind:0 file=/anon_hugepage\040(deleted) huge dirty=512 N0=512 "
                             "kernelpagesize_kB=2048")
    assert e.node_bytes == {0: 1024 * MIB}


NUMA_MAPS = r"""
55d0c8a2b000 default heap anon=33 dirty=33 active=0 N0=33 kernelpagesize_kB=4
7f0000000000 interleave:0-1 anon=512 dirty=512 N0=256 N1=256 kernelpagesize_kB=4

7f0000200000 bind:1 anon=256 dirty=256 N1=256 kernelpagesize_kB=4
7f4000000000 bind:0 file=/anon_hugepage\040(deleted) huge dirty=2 N0=2 kernelpagesize_kB=2048
7ffd4c5e1000 default stack anon=5 dirty=5 N0=5 kernelpagesize_kB=4
"""


def test_parse_numa_maps_skips_blank_lines():
    entries = parse_numa_maps(NUMA_MAPS)
    assert [e.policy for e in entries] == ["default", "interleave:0-1", "bind:1", "bind:0", "default"]


def test_numa_maps_report_ranges():
    entries = parse_numa_maps(NUMA_MAPS)
    whole = numa_maps_report(entries=entries)
    assert whole.bytes_by_node == {0: (33 + 256 + 5) * 4096 + 2 * 2 * MIB, 1: (256 + 256) * 4096}
    # only the mappings that start inside [0x7f0000000000, +4 MiB): the interleaved and the bound one
    part = numa_maps_report(entries=entries, ranges=[(0x7f0000000000, 4 * MIB)])
    assert part.bytes_by_node == {0: 256 * 4096, 1: 512 * 4096}
    assert part.source == "/proc/self/numa_maps"


def test_numa_maps_of_this_process_parses():
    from pathlib import Path
    if not Path("/proc/self/numa_maps").exists():
        pytest.skip("kernel without /proc/<pid>/numa_maps (CONFIG_NUMA off)")
    entries = parse_numa_maps(Path("/proc/self/numa_maps").read_text())
    assert entries and all(e.address > 0 and e.policy for e in entries)


def report(**pct: float) -> PlacementReport:
    """report(N0=51, N1=49): pages (4 KiB) in those proportions, 100 * 4 KiB per percent point."""
    return PlacementReport({int(k[1:]): int(round(v * 100)) * 4096 for k, v in pct.items()})


@pytest.mark.parametrize("rep, exp, ok, dev", [
    pytest.param(report(N0=51, N1=49), Expectation(shares={0: 0.5, 1: 0.5}), True, 1.0, id="interleave-1pp-ok"),
    pytest.param(report(N0=50, N1=50), Expectation(shares={0: 0.5, 1: 0.5}), True, 0.0, id="interleave-exact"),
    pytest.param(report(N0=53, N1=47), Expectation(shares={0: 0.5, 1: 0.5}), False, 3.0, id="interleave-3pp-fails"),
    pytest.param(report(N0=26, N3=74), Expectation(shares={0: 0.25, 3: 0.75}), True, 1.0, id="weighted-1pp-ok"),
    pytest.param(report(N0=50, N3=50), Expectation(shares={0: 0.25, 3: 0.75}), False, 25.0,
                 id="weighted-ignored-fails"),
    pytest.param(report(N0=100), Expectation(shares={0: 0.5, 1: 0.5}), False, 50.0, id="missing-node-counts"),
    pytest.param(report(N0=60, N1=40), Expectation(within=(0, 1)), True, 0.0, id="within-set-any-split"),
    pytest.param(report(N0=99, N2=1), Expectation(within=(0,)), True, 1.0, id="within-1pp-outside-ok"),
    pytest.param(report(N0=97, N2=3), Expectation(within=(0, 1)), False, 3.0, id="within-3pp-outside-fails"),
])
def test_compare(rep, exp, ok, dev):
    v = compare(rep, exp)
    assert v.ok is ok
    assert v.deviation_pp == pytest.approx(dev, abs=1e-9)
    assert f"off by {dev:.2f} percentage points (tolerance 2)" in v.message


def test_compare_failure_message_says_what_and_by_how_much():
    v = compare(report(N0=53, N1=47), Expectation(shares={0: 0.5, 1: 0.5}))
    assert v.message.startswith("placement N0=53.0% N1=47.0% of ")
    assert "expected N0=50.0% N1=50.0%" in v.message
    assert "off by 3.00 percentage points (tolerance 2)" in v.message
    with pytest.raises(PlacementError, match="off by 3.00 percentage points"):
        require(report(N0=53, N1=47), Expectation(shares={0: 0.5, 1: 0.5}))


def test_compare_within_message():
    v = compare(report(N0=97, N2=3), Expectation(within=(0, 1)))
    assert "expected 100% on nodes 0,1" in v.message
    assert "expected 100% on node 0;" in compare(report(N0=100), Expectation(within=(0,))).message


def test_compare_custom_tolerance():
    assert compare(report(N0=53, N1=47), Expectation(shares={0: 0.5, 1: 0.5}), tolerance_pp=5).ok
    assert require(report(N0=100), Expectation(within=(0,))).ok


def test_compare_empty_report():
    v = compare(PlacementReport({}), Expectation(within=(0,)))
    assert not v.ok and v.message == "no touched pages found to check"


def test_compare_exactly_at_tolerance_is_ok():
    assert compare(report(N0=52, N1=48), Expectation(shares={0: 0.5, 1: 0.5})).ok


def test_report_describe_and_fractions():
    r = PlacementReport({1: 3 * MIB, 0: 1 * MIB}, untouched_bytes=MIB, source="move_pages")
    assert r.total_bytes == 4 * MIB
    assert r.fractions() == {0: 0.25, 1: 0.75}
    assert r.describe() == "N0=25.0% N1=75.0% of 4.0 MiB (1.0 MiB untouched)"
    assert PlacementReport({0: 2 * MIB}).describe() == "N0=100.0% of 2.0 MiB"
    assert PlacementReport({}).fractions() == {}


def test_report_to_dict_from_dict_round_trip():
    r = PlacementReport({1: 3 * MIB, 0: 1 * MIB}, untouched_bytes=4096, source="move_pages")
    d = json.loads(json.dumps(r.to_dict()))
    assert d == {"bytes_by_node": {"0": MIB, "1": 3 * MIB}, "untouched_bytes": 4096, "source": "move_pages",
                 "percent_by_node": {"0": 25.0, "1": 75.0}}
    assert PlacementReport.from_dict(d) == r
    assert PlacementReport.from_dict({"bytes_by_node": {"2": "8"}}) == PlacementReport({2: 8})


def test_report_merge():
    a = PlacementReport({0: 10}, 1, source="a")
    b = PlacementReport({0: 5, 1: 7}, 2, source="b")
    assert a.merge(b) == PlacementReport({0: 15, 1: 7}, 3, "a")
    assert PlacementReport({}).merge(b).source == "b"


@pytest.mark.parametrize("exp, text", [
    (Expectation(shares={3: 0.75, 0: 0.25}), "N0=25.0% N3=75.0%"),
    (Expectation(within=(1,)), "100% on node 1"),
    (Expectation(within=(0, 1)), "100% on nodes 0,1"),
])
def test_expectation_describe(exp, text):
    assert exp.describe() == text
