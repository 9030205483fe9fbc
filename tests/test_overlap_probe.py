"""The overlap probe's command-line schedule parser (the probe itself needs a GPU:
it runs through .ci/gpu's sibling commands on the device, see docs/RESULTS.md)."""
from __future__ import annotations

import pytest

from numabench.tools.overlap_probe import Schedule, parse_schedules


def test_schedules_parse_with_the_default_chunk():
    got = parse_schedules("chunk=8388608;d2h_group=4,priority;h2d_engine=sm,huge=1", 2097152)
    assert got == [Schedule(chunk=8388608), Schedule(chunk=2097152, d2h_group=4, priority=True),
                   Schedule(chunk=2097152, h2d_engine="sm", huge=True)]
    assert [s.label() for s in got] == ["chunk=8M", "chunk=2M d2h_group=4 priority", "chunk=2M h2d=sm hugepages"]


@pytest.mark.parametrize("text, message", [("chunks=4", "unknown schedule key 'chunks'"),
                                           ("d2h_engine=dma", "d2h_engine='dma': allowed ce, sm")])
def test_bad_schedules_name_the_value_and_what_is_allowed(text, message):
    with pytest.raises(ValueError, match=message):
        parse_schedules(text, 1 << 20)
