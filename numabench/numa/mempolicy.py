"""The kernel's memory-policy system calls through ctypes (no libnuma needed).

set_mempolicy(2) applies to the calling thread and is inherited across fork and
kept across execve, which is what lets the built-in launcher set a policy and
then exec the worker. ``maxnode`` is the number of mask bits + 1: the kernel
drops the last bit (a historical off-by-one that numactl also works around).
"""
from __future__ import annotations

import array
import ctypes
import ctypes.util
import errno
import os
import platform
from typing import Iterable, Sequence

MPOL_DEFAULT = 0
MPOL_PREFERRED = 1
MPOL_BIND = 2
MPOL_INTERLEAVE = 3
MPOL_LOCAL = 4
MPOL_PREFERRED_MANY = 5
MPOL_WEIGHTED_INTERLEAVE = 6

MODE_NAMES = {
    MPOL_DEFAULT: "default",
    MPOL_PREFERRED: "preferred",
    MPOL_BIND: "bind",
    MPOL_INTERLEAVE: "interleave",
    MPOL_LOCAL: "local",
    MPOL_PREFERRED_MANY: "preferred-many",
    MPOL_WEIGHTED_INTERLEAVE: "weighted-interleave",
}

_SYSCALLS = {
    # machine: (set_mempolicy, get_mempolicy, move_pages)
    "x86_64": (238, 239, 279),
    "aarch64": (237, 236, 239),
}
_MBIND = {"x86_64": 237, "aarch64": 235}

MPOL_MF_STRICT = 1  # mbind: fail (EIO) where a page of the range is already elsewhere

MASK_BITS = 1024  # enough for any node id Linux allows by default (MAX_NUMNODES)


def _numbers() -> tuple[int, int, int]:
    machine = platform.machine()
    try:
        return _SYSCALLS[machine]
    except KeyError:
        raise OSError(f"memory-policy system calls are not wired for machine {machine!r}; "
                      f"supported: {sorted(_SYSCALLS)}") from None


# "libc.so.6" directly: find_library spawns ldconfig/gcc, seconds per import in a slow VM.
try:
    _libc = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:
    _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.syscall.restype = ctypes.c_long

_WORD_BITS = ctypes.sizeof(ctypes.c_ulong) * 8


def node_mask(nodes: Iterable[int]) -> ctypes.Array:
    mask = (ctypes.c_ulong * (MASK_BITS // _WORD_BITS))()
    for n in nodes:
        if not 0 <= n < MASK_BITS:
            raise ValueError(f"node id {n} out of range 0..{MASK_BITS - 1}")
        mask[n // _WORD_BITS] |= 1 << (n % _WORD_BITS)
    return mask


def set_mempolicy(mode: int, nodes: Sequence[int] = ()) -> None:
    """Set the calling thread's policy; raises OSError with the kernel's errno."""
    nr_set, _, _ = _numbers()
    if nodes:
        mask = node_mask(nodes)
        ret = _libc.syscall(nr_set, ctypes.c_int(mode), mask, ctypes.c_ulong(MASK_BITS + 1))
    else:
        ret = _libc.syscall(nr_set, ctypes.c_int(mode), None, ctypes.c_ulong(0))
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"set_mempolicy({MODE_NAMES.get(mode, mode)}, nodes={list(nodes)}): {os.strerror(err)}")


def mbind(address: int, length: int, mode: int, nodes: Sequence[int] = (), flags: int = 0) -> None:
    """Set the policy of the pages in [address, address+length) (page-aligned ``address``): pages
    touched after the call are placed by it, whatever the task's policy; raises OSError with the
    kernel's errno."""
    machine = platform.machine()
    if machine not in _MBIND:
        raise OSError(f"mbind is not wired for machine {machine!r}; supported: {sorted(_MBIND)}")
    mask = node_mask(nodes) if nodes else None
    maxnode = MASK_BITS + 1 if nodes else 0
    ret = _libc.syscall(_MBIND[machine], ctypes.c_void_p(address), ctypes.c_ulong(length), ctypes.c_int(mode), mask,
                        ctypes.c_ulong(maxnode), ctypes.c_uint(flags))
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mbind({address:#x}, {length} bytes, {MODE_NAMES.get(mode, mode)}, nodes={list(nodes)}): "
                           f"{os.strerror(err)}")


def get_mempolicy() -> tuple[int, tuple[int, ...]]:
    """The calling thread's (mode, nodes)."""
    _, nr_get, _ = _numbers()
    mode = ctypes.c_int()
    mask = node_mask(())
    ret = _libc.syscall(nr_get, ctypes.byref(mode), mask, ctypes.c_ulong(MASK_BITS + 1), None, ctypes.c_ulong(0))
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"get_mempolicy: {os.strerror(err)}")
    nodes = tuple(i for i in range(MASK_BITS) if mask[i // _WORD_BITS] >> (i % _WORD_BITS) & 1)
    # MPOL_F_* flags live in the high bits of mode.
    return mode.value & 0xFF, nodes


def page_nodes(address: int, length: int, pid: int = 0) -> Sequence[int]:
    """Node of each page in [address, address+length) via move_pages(nodes=NULL).

    Negative entries are -errno: -ENOENT for a page never touched. The page addresses and the
    answer are C arrays built and read without a Python object per page (a 545M-element fp32
    state is 2.1 million pages).
    """
    _, _, nr_move = _numbers()
    page = os.sysconf("SC_PAGE_SIZE")
    first = address - address % page
    count = (address + length - first + page - 1) // page
    if count <= 0:
        return array.array("i")
    pages = array.array("Q", range(first, first + count * page, page))
    status = array.array("i", bytes(4 * count))
    ret = _libc.syscall(nr_move, ctypes.c_int(pid), ctypes.c_ulong(count), ctypes.c_void_p(pages.buffer_info()[0]),
                        None, ctypes.c_void_p(status.buffer_info()[0]), ctypes.c_int(0))
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"move_pages(query {count} pages at {address:#x}): {os.strerror(err)}")
    return status


def sched_setaffinity_cpus(cpus: Sequence[int]) -> None:
    os.sched_setaffinity(0, set(cpus))


def probe_mode(mode: int, nodes: Sequence[int]) -> int:
    """Try a policy in this process and return 0 or the errno; resets to default after."""
    try:
        set_mempolicy(mode, nodes)
    except OSError as e:
        return e.errno or errno.EINVAL
    set_mempolicy(MPOL_DEFAULT)
    return 0
