"""Touching a new buffer's pages on several threads: only where every CPU the thread may run on
is on one node (there a thread touches where the caller would), every byte written whatever the
split, and the page count that judges placement counting every page of a range."""
from __future__ import annotations

import ctypes
import mmap
import os

import pytest

from numabench.numa.placement import pages_report
from numabench.toolkit.hostmem import TOUCH_BYTE, allocate
from numabench.toolkit.touch_pages import MOST_THREADS, PARALLEL_FROM_BYTES, cpu_nodes, touch_pages, touch_threads

BIG = PARALLEL_FROM_BYTES
TWO_NODES = {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}


MANY = {c: 0 for c in range(64)}


@pytest.mark.parametrize("nbytes, cpus, cpu_node, want", [
    (BIG, {0, 1, 2, 3}, TWO_NODES, 4),  # one node: a thread per CPU
    (BIG, {5}, TWO_NODES, 1),  # one CPU
    (BIG, {2, 5}, TWO_NODES, 1),  # CPUs on two nodes: the local policy would place by whichever touched
    (BIG, {0, 9}, TWO_NODES, 1),  # a CPU of no known node
    (BIG - 1, {0, 1, 2, 3}, TWO_NODES, 1),  # small: a thread's start costs more than it saves
    (BIG, set(range(64)), MANY, MOST_THREADS),
])
def test_threads_touch_only_where_every_cpu_is_on_one_node(nbytes, cpus, cpu_node, want):
    assert touch_threads(nbytes, cpus, cpu_node) == want


def test_this_machine_s_cpus_have_nodes():
    nodes = cpu_nodes()
    assert set(os.sched_getaffinity(0)) <= set(nodes), nodes
    assert touch_threads(BIG) == min(len(os.sched_getaffinity(0)), MOST_THREADS)  # one node here


@pytest.mark.parametrize("threads", [1, 2, 3, 7])
def test_every_byte_is_written_whatever_the_split(threads):
    page = os.sysconf("SC_PAGE_SIZE")
    nbytes = 37 * page + 123  # shares of whole pages and a ragged end
    buf = mmap.mmap(-1, nbytes + page)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    try:
        touch_pages(addr, nbytes, 0x5A, threads=threads)
        data = bytes(buf)
        assert data[:nbytes] == b"\x5a" * nbytes and data[nbytes:] == b"\0" * page  # not a byte beyond
    finally:
        del addr
        buf.close()


def test_nothing_to_touch_is_no_error():
    touch_pages(0, 0, 0x5A, threads=4)  # no page, no thread, no write (address 0 is never written)


def test_a_buffer_touched_on_threads_is_placed_and_counted_page_by_page():
    """allocate() of a buffer large enough for threads: every byte its touch byte, every page
    counted on this machine's node (move_pages), none untouched; an untouched range counted as such."""
    import torch

    page = os.sysconf("SC_PAGE_SIZE")
    buf = allocate(BIG // 4 + 5, torch.float32, "pageable")
    try:
        assert set(ctypes.string_at(buf.address, 1 << 20)) == {TOUCH_BYTE}
        assert buf.tensor.view(torch.uint8)[-1].item() == TOUCH_BYTE
        report = pages_report([(buf.address, buf.nbytes)])
        assert report.untouched_bytes == 0
        assert sum(report.bytes_by_node.values()) == -(-buf.nbytes // page) * page
    finally:
        buf.release()
    fresh = mmap.mmap(-1, 16 * page)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(fresh))
    try:
        ctypes.memset(addr, 1, 4 * page)
        report = pages_report([(addr, 16 * page)])
        assert sum(report.bytes_by_node.values()) == 4 * page and report.untouched_bytes == 12 * page
    finally:
        del addr
        fresh.close()
