"""Which GPUs this process sees, in CUDA index order, with their PCI bus ids.

CUDA numbers devices after ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER``;
NVML numbers all of them in PCI order. The CUDA driver API
(``cuDeviceGetPCIBusId``) applies both variables exactly as CUDA does, so it is
the source for the index -> bus id map; NVML adds names and memory. No torch,
and no parsing of nvidia-smi text.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuInfo:
    cuda_index: int
    pci_bus_id: str  # sysfs form, lower case: "0000:06:00.0"
    name: str = ""
    memory_bytes: int = 0
    uuid: str = ""


def normalize_bus_id(bus_id: str) -> str:
    """NVML's "00000000:06:00.0" or CUDA's "0000:06:00.0" -> sysfs "0000:06:00.0"."""
    bus_id = bus_id.strip().lower()
    if bus_id.count(":") == 1:  # "06:00.0": no domain given, PCI domain 0
        bus_id = "0000:" + bus_id
    domain, _, rest = bus_id.partition(":")
    if not rest or "." not in rest:
        raise ValueError(f"bad PCI bus id {bus_id!r}: expected DOMAIN:BUS:DEVICE.FUNCTION")
    return f"{int(domain, 16):04x}:{rest}"


def _cuda_bus_ids() -> list[str] | None:
    """Bus ids in CUDA order through libcuda, or None when no driver is there."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    if cuda.cuInit(0) != 0:
        return None
    count = ctypes.c_int()
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return None
    ids: list[str] = []
    for i in range(count.value):
        dev = ctypes.c_int()
        buf = ctypes.create_string_buffer(64)
        if cuda.cuDeviceGet(ctypes.byref(dev), i) != 0 or cuda.cuDeviceGetPCIBusId(buf, 64, dev) != 0:
            return None
        ids.append(normalize_bus_id(buf.value.decode()))
    return ids


def _nvml_devices() -> dict[str, tuple[str, int, str]] | None:
    """bus id -> (name, memory bytes, uuid) for every GPU NVML sees."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver: NVMLError_LibraryNotFound and friends
        return None
    try:
        out = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            bus = pynvml.nvmlDeviceGetPciInfo(h).busId
            bus = bus.decode() if isinstance(bus, bytes) else bus
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else name
            uuid = pynvml.nvmlDeviceGetUUID(h)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            out[normalize_bus_id(bus)] = (name, int(pynvml.nvmlDeviceGetMemoryInfo(h).total), uuid)
        return out
    finally:
        pynvml.nvmlShutdown()


def _visible_from_nvml(nvml: dict[str, tuple[str, int, str]], visible: str | None) -> list[str]:
    """Fallback without libcuda: apply CUDA_VISIBLE_DEVICES (indices or UUID prefixes) to NVML's PCI order."""
    ordered = sorted(nvml)
    if visible is None:
        return ordered
    picked: list[str] = []
    for entry in (e.strip() for e in visible.split(",")):
        if not entry:
            break
        if entry.isdigit():
            idx = int(entry)
            if idx >= len(ordered):
                break  # CUDA stops at the first invalid entry
            picked.append(ordered[idx])
        else:
            match = [b for b in ordered if nvml[b][2].startswith(entry) or nvml[b][2] == "GPU-" + entry]
            if len(match) != 1:
                break
            picked.append(match[0])
    return picked


def visible_gpus() -> list[GpuInfo]:
    """GPUs this process would see through CUDA, in CUDA index order; [] without a driver."""
    nvml = _nvml_devices() or {}
    bus_ids = _cuda_bus_ids()
    if bus_ids is None:
        if not nvml:
            return []
        bus_ids = _visible_from_nvml(nvml, os.environ.get("CUDA_VISIBLE_DEVICES"))
    gpus = []
    for i, bus in enumerate(bus_ids):
        name, mem, uuid = nvml.get(bus, ("", 0, ""))
        gpus.append(GpuInfo(cuda_index=i, pci_bus_id=bus, name=name, memory_bytes=mem, uuid=uuid))
    return gpus
