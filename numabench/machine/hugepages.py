"""The kernel's transparent huge page settings: which a host buffer's pages may come in, recorded
with the machine because a buffer's share in 2 MiB pages moves its copy and step times."""
from __future__ import annotations

from pathlib import Path

THP_DIR = Path("/sys/kernel/mm/transparent_hugepage")


def selected(text: str) -> str | None:
    """The bracketed choice of a sysfs mode file ("always [madvise] never" -> "madvise"); None
    where none is bracketed."""
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return None


def thp_setting(root: Path = THP_DIR) -> str | None:
    """"enabled MODE, defrag MODE" as this kernel has them (None: no transparent huge pages here)."""
    try:
        enabled = selected((root / "enabled").read_text())
    except OSError:
        return None
    try:
        defrag = selected((root / "defrag").read_text())
    except OSError:
        defrag = None
    if enabled is None:
        return None
    return f"enabled {enabled}" + (f", defrag {defrag}" if defrag else "")
