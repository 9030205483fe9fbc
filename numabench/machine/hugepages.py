"""The kernel's transparent huge page settings: which a host buffer's pages may come in, recorded
with the machine because a buffer's share in 2 MiB pages moves its copy and step times."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

THP_DIR = Path("/sys/kernel/mm/transparent_hugepage")


def selected(text: str) -> str | None:
    """The bracketed choice of a sysfs mode file ("always [madvise] never" -> "madvise"); None
    where none is bracketed."""
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return None


def _mode(root: Path, name: str) -> str | None:
    """The chosen value of mode file ``name`` under ``root`` (None: no such file, or none chosen)."""
    try:
        return selected((root / name).read_text())
    except OSError:
        return None


def thp_setting(root: Path = THP_DIR) -> str | None:
    """"enabled MODE, defrag MODE, shmem MODE" as this kernel has them (None: no transparent huge
    pages here). The shmem mode is the one numabench's own host buffers follow: they are shared
    anonymous mappings (numabench.toolkit.hostmem), which the kernel backs with shmem."""
    enabled = _mode(root, "enabled")
    if enabled is None:
        return None
    return ", ".join(f"{label} {value}" for label, value in (("enabled", enabled), ("defrag", _mode(root, "defrag")),
                                                              ("shmem", _mode(root, "shmem_enabled"))) if value)


SMAPS = Path("/proc/self/smaps")
_VMA = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) ")
HUGE_FIELDS = ("AnonHugePages:", "ShmemPmdMapped:")  # private and shared anonymous memory in huge pages


def smaps_huge_bytes(ranges: Sequence[tuple[int, int]], smaps_text: str) -> int:
    """The bytes of ``ranges`` (address, length) in transparent huge pages, from a smaps text:
    each mapping's AnonHugePages and ShmemPmdMapped (a shared anonymous buffer is shmem) shared
    over it evenly (adjacent buffers of one policy may be one mapping, whose share they then all
    get)."""
    total = 0.0
    start = end = None
    for line in smaps_text.splitlines():
        vma = _VMA.match(line)
        if vma:
            start, end = int(vma.group(1), 16), int(vma.group(2), 16)
            continue
        if start is None or end is None or end <= start or not line.startswith(HUGE_FIELDS):
            continue
        huge = int(line.split()[1]) * 1024
        if not huge:
            continue
        for address, length in ranges:
            overlap = min(end, address + length) - max(start, address)
            if overlap > 0:
                total += huge * overlap / (end - start)
    return int(round(total))


def unasked_huge_pages(root: Path = THP_DIR) -> bool:
    """Whether this kernel may back memory nobody madvised with transparent huge pages: private
    anonymous memory under ``enabled always``, shmem (numabench's own buffers) under ``shmem
    always``, ``within_size`` or ``force``. numabench madvises none of its buffers."""
    return _mode(root, "enabled") == "always" or _mode(root, "shmem_enabled") in ("always", "within_size", "force")


def huge_page_bytes(ranges: Sequence[tuple[int, int]], smaps: Path = SMAPS, root: Path = THP_DIR) -> int | None:
    """This process's bytes of ``ranges`` in transparent huge pages (None: no smaps to read). 0
    without reading smaps where the kernel gives none unasked (``unasked_huge_pages``): smaps walks
    every mapping's page tables, tens of milliseconds in a worker and more with a GPU's mappings,
    and a worker counts its pages several times while it sets up."""
    if not unasked_huge_pages(root):
        return 0
    try:
        text = smaps.read_text()
    except OSError:
        return None
    return smaps_huge_bytes(ranges, text)
