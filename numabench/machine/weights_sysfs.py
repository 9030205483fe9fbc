"""The kernel's weighted-interleave weights as sysfs shows them (read only): where they are,
their auto mode, and whether firmware gave the kernel the bandwidths auto mode needs. Writing
them, restored afterwards, is numabench.numa.weights."""
from __future__ import annotations

import os
from pathlib import Path

# NUMABENCH_WEIGHTS_DIR points the suite at a fake tree (tests: the real one is never written)
WEIGHTS_DIR = Path(os.environ.get("NUMABENCH_WEIGHTS_DIR") or "/sys/kernel/mm/mempolicy/weighted_interleave")
AUTO_NAMES = ("auto", "__auto_type")
NODE_SYSFS = Path("/sys/devices/system/node")


def kernel_has_bandwidth_data(node_root: Path = NODE_SYSFS) -> bool:
    """Whether firmware gave the kernel memory bandwidths (what auto mode computes weights from)."""
    return any(node_root.glob("node[0-9]*/access[0-9]*/initiators/*_bandwidth"))


def auto_mode_file(weights_dir: Path = WEIGHTS_DIR) -> Path | None:
    for name in AUTO_NAMES:
        p = weights_dir / name
        if p.is_file():
            return p
    return None


def read_weights(weights_dir: Path = WEIGHTS_DIR) -> dict[int, int]:
    out = {}
    for p in sorted(weights_dir.glob("node[0-9]*")):
        out[int(p.name[4:])] = int(p.read_text().strip())
    return out


def auto_mode_reason(weights_dir: Path = WEIGHTS_DIR) -> str | None:
    """Why writing a weight here would leave the machine changed, or None: while the kernel's
    auto mode is on, the first weight written switches it off, and on kernels without
    firmware bandwidth data it cannot be switched back on (ENODEV)."""
    auto = auto_mode_file(weights_dir)
    if auto is None:
        return None
    try:
        value = auto.read_text().strip()
    except OSError:
        return None
    if value.lower() not in ("1", "true", "y", "yes"):
        return None
    return (f"would switch the kernel's weighted-interleave auto mode off ({auto} is {value!r}; after a weight "
            "is written it may not switch back on): pass --numa-allow-weight-writes to run it")
