"""What this machine pays to touch memory it has not used yet, GiB by GiB.

On a VM whose memory grows as it is used (the lent GPU VMs start with a MemTotal of a few GiB),
a page the guest has never used may cost the host a fault of its own, or the guest memory added
to it, on its first touch; a page used and freed before costs neither. Host-side entries that
allocate fresh memory in every round (pinned_alloc, pageable copies) then depend on how much
memory the VM had used before them. This measures it: fresh anonymous memory touched a chunk at
a time, MemTotal and MemAvailable read after each chunk, unmapped at the end of the pass, and
then again (the second pass takes pages the first one freed).

The passes stop early, saying why, when MemAvailable would fall below a floor and does not grow
within a short wait: memory that will not grow is never pushed towards the OOM killer.
"""
from __future__ import annotations

import ctypes
import mmap
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

GIB = 1 << 30
DEFAULT_FLOOR_GIB = 2.0  # MemAvailable kept free: the workers, the page cache and the rest of the machine
DEFAULT_WAIT_S = 3.0  # how long to wait for a growing VM to add memory before a chunk that would cross the floor
_libc = ctypes.CDLL(None, use_errno=True)
_libc.memset.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
_libc.memset.restype = ctypes.c_void_p


def read_meminfo(path: str = "/proc/meminfo") -> dict[str, int]:
    """/proc/meminfo's fields in bytes (those given in kB)."""
    out = {}
    for line in Path(path).read_text().splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[name] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return out


def memory_devices(root: str = "/") -> list[str]:
    """The virtio drivers bound to a device that can change a VM's memory (virtio_balloon,
    virtio_mem); empty on bare metal or where none is bound."""
    found = []
    for name in ("virtio_balloon", "virtio_mem"):
        folder = Path(root) / "sys/bus/virtio/drivers" / name
        if folder.is_dir() and any(p.name.startswith("virtio") for p in folder.iterdir()):
            found.append(name)
    return found


@dataclass(frozen=True)
class Chunk:
    """One chunk of one pass: how long its first touch took, and the memory after it."""

    pass_no: int  # 1: memory this run has not touched; 2: pages pass 1 freed
    index: int
    bytes: int
    seconds: float
    mem_total_bytes: int
    mem_available_bytes: int

    @property
    def gib_per_s(self) -> float:
        return self.bytes / GIB / self.seconds if self.seconds > 0 else float("inf")


@dataclass
class FirstTouch:
    requested_bytes: int
    chunk_bytes: int
    floor_bytes: int
    mem_total_before: int
    memory_devices: list[str]
    chunks: list[Chunk] = field(default_factory=list)
    stopped: str | None = None  # why a pass ended before requested_bytes; None: none did

    def pass_chunks(self, pass_no: int) -> list[Chunk]:
        return [c for c in self.chunks if c.pass_no == pass_no]

    def to_dict(self) -> dict:
        d = asdict(self)
        for c, chunk in zip(d["chunks"], self.chunks):
            c["gib_per_s"] = round(chunk.gib_per_s, 3)
        return d


def first_touch(nbytes: int, *, passes: int = 2, chunk_bytes: int = GIB, floor_bytes: int = int(DEFAULT_FLOOR_GIB * GIB),
                wait_s: float = DEFAULT_WAIT_S, meminfo: Callable[[], dict[str, int]] = read_meminfo,
                devices_root: str = "/") -> FirstTouch:
    """Touch ``nbytes`` of fresh anonymous memory ``chunk_bytes`` at a time, ``passes`` times
    (each pass its own mapping, unmapped before the next), timing each chunk (module docstring)."""
    if nbytes <= 0:
        raise ValueError(f"size {nbytes} bytes: allowed more than 0")
    if passes < 1:
        raise ValueError(f"passes {passes}: allowed 1 or more")
    if chunk_bytes < mmap.PAGESIZE or chunk_bytes % mmap.PAGESIZE:
        raise ValueError(f"chunk {chunk_bytes} bytes: allowed a multiple of the page size ({mmap.PAGESIZE})")
    info = meminfo()
    out = FirstTouch(nbytes, chunk_bytes, floor_bytes, info.get("MemTotal", 0), memory_devices(devices_root))
    for pass_no in range(1, passes + 1):
        size = -(-nbytes // chunk_bytes) * chunk_bytes
        # MAP_NORESERVE: the pages exist only as touched, so a pass that stops early used only those
        region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0))
        try:
            # the address only: the temporary view that gave it is gone, so the mapping can close
            base = ctypes.addressof(ctypes.c_char.from_buffer(region))
            done = index = 0
            while done < nbytes:
                n = min(chunk_bytes, nbytes - done)
                reason = _wait_for_room(n, floor_bytes, wait_s, meminfo)
                if reason is not None:
                    out.stopped = f"pass {pass_no} after {done / GIB:.2f} GiB: {reason}"
                    break
                t0 = time.perf_counter()
                _libc.memset(base + done, pass_no, n)
                seconds = time.perf_counter() - t0
                info = meminfo()
                out.chunks.append(Chunk(pass_no, index, n, seconds, info.get("MemTotal", 0),
                                        info.get("MemAvailable", 0)))
                done += n
                index += 1
        finally:
            region.close()
        if out.stopped:
            break
    return out


def _wait_for_room(n: int, floor_bytes: int, wait_s: float, meminfo: Callable[[], dict[str, int]]) -> str | None:
    """None once MemAvailable holds ``n`` bytes above the floor (waiting up to ``wait_s`` for a
    growing VM to add memory); else why not."""
    deadline = time.monotonic() + wait_s
    while True:
        info = meminfo()
        available = info.get("MemAvailable", 0)
        if available - n >= floor_bytes:
            return None
        if time.monotonic() >= deadline:
            return (f"MemAvailable {available / GIB:.2f} GiB (MemTotal {info.get('MemTotal', 0) / GIB:.2f} GiB) "
                    f"would fall below the floor of {floor_bytes / GIB:.2f} GiB and did not grow in {wait_s:g} s")
        time.sleep(0.1)


def render_first_touch(result: FirstTouch) -> str:
    """A line per pass (what it touched, how fast, MemTotal after it) and why it stopped, if it did."""
    devices = ", ".join(result.memory_devices) or "none"
    lines = [f"first touch of {result.requested_bytes / GIB:.2f} GiB in chunks of {result.chunk_bytes / GIB:.2f} GiB "
             f"(MemTotal {result.mem_total_before / GIB:.2f} GiB before; memory devices: {devices})"]
    for pass_no in sorted({c.pass_no for c in result.chunks}):
        chunks = result.pass_chunks(pass_no)
        rates = sorted(c.gib_per_s for c in chunks)
        total = sum(c.bytes for c in chunks) / GIB
        seconds = sum(c.seconds for c in chunks)
        what = "memory not used by this run before" if pass_no == 1 else "pages the pass before freed"
        rate = total / seconds if seconds > 0 else float("inf")
        lines.append(f"pass {pass_no} ({what}): {total:.2f} GiB in {seconds:.2f} s, {rate:.2f} GiB/s; "
                     f"chunks {rates[0]:.2f}-{rates[-1]:.2f} GiB/s; MemTotal after {chunks[-1].mem_total_bytes / GIB:.2f} GiB")
    if result.stopped:
        lines.append(f"stopped early: {result.stopped}")
    return "\n".join(lines)
