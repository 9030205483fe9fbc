"""The hardware key that baselines are stored and compared under.

pytest-benchmark keys storage by Python platform only, so an H200 run would be
compared with an H100 baseline. Ours names GPU model x count, CPU model, NUMA
layout and the CUDA driver's major version.
"""
from __future__ import annotations

import ctypes
import re

from numabench.errors import UsageError
from numabench.machine.topology import Topology


def _slug(text: str) -> str:
    text = re.sub(r"\((R|TM)\)|\bCPU\b|\bProcessor\b|NVIDIA\b|@.*$", "", text, flags=re.I)
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-") or "unknown"


def cuda_driver_major() -> int | None:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    v = ctypes.c_int()
    if cuda.cuDriverGetVersion(ctypes.byref(v)) != 0:
        return None
    return v.value // 1000


def hardware_info(topology: Topology) -> dict:
    names = sorted({g.name for g in topology.gpus})
    return {
        "gpus": [g.name for g in topology.gpus],
        "gpu_count": len(topology.gpus),
        "cpu_model": topology.cpu_model,
        "numa_nodes": len(topology.nodes),
        "cpuless_nodes": len(topology.cpuless_node_ids),
        "cuda_driver_major": cuda_driver_major() if topology.gpus else None,
        "gpu_models": names,
    }


def hardware_key(topology: Topology, info: dict | None = None) -> str:
    info = info or hardware_info(topology)
    if info["gpu_count"]:
        gpu = "+".join(_slug(n) for n in info["gpu_models"]) + f"x{info['gpu_count']}"
    else:
        gpu = "nogpu"
    numa = f"{info['numa_nodes']}node" + (f"-{info['cpuless_nodes']}cpuless" if info["cpuless_nodes"] else "")
    parts = [gpu, _slug(info["cpu_model"]), numa]
    if info["cuda_driver_major"]:
        parts.append(f"cuda{info['cuda_driver_major']}")
    return "_".join(parts)


KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def check_key(key: str, what: str = "hardware key") -> str:
    """``key`` where it is a plain name (it becomes a folder under baselines/: no '/', no '..');
    UsageError naming it otherwise."""
    if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key) or ".." in key:
        raise UsageError(f"{what} {key!r}: allowed a plain name of letters, digits, '.', '_' and '-' (it names a "
                         "folder under baselines/), e.g. H100-80GB-HBM3x1_Intel-Xeon_1node_cuda13")
    return key


def run_hardware_key(run: dict) -> str | None:
    """The hardware key a saved run was measured under (None for runs from before keys)."""
    return (run.get("machine_info") or {}).get("numabench", {}).get("hardware_key")
