"""Family ``pinned_alloc``, per rank: allocate, touch and free pinned host memory.

Each step times one allocator (the ``allocator`` variant): ``alloc`` from the
call until every page of the buffer has been written (a non-zero byte that
changes each round), ``free`` until the memory is given back (for torch: the
tensor dropped and the caching host allocator's cache emptied, so the next
round really allocates again). Setup makes one buffer per allocator first and
records what it takes (reserved and resident bytes, pages per node, whether
the policy was honoured); the ``register`` buffer's placement is the one the
runner checks (see numabench.families.pinned_alloc for why).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import time

from numabench.families.base import Worker as BaseWorker
from numabench.families.base import WorkerSpec
from numabench.families.pinned_alloc.reply import AllocatorReport, PinnedAllocReply
from numabench.numa.placement import Expectation, compare, pages_report
from numabench.numa.policy import Policy

PROT_READ, PROT_WRITE = 1, 2
MAP_PRIVATE, MAP_ANONYMOUS = 0x02, 0x20
MAP_FAILED = ctypes.c_void_p(-1).value

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.memset.restype = ctypes.c_void_p
_libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]


def libcudart() -> ctypes.CDLL:
    """The CUDA runtime torch uses: the libcudart already mapped into this process
    (dlopen of the same file returns the same instance), else one found next to
    torch or in the nvidia wheels, else the system's."""
    candidates = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if "libcudart.so" in os.path.basename(path):
                    candidates.append(path)
    except OSError:
        pass
    import torch

    base = os.path.dirname(torch.__file__)
    candidates += sorted(glob.glob(os.path.join(base, "lib", "libcudart.so*")))
    candidates += sorted(glob.glob(os.path.join(os.path.dirname(base), "nvidia", "cu*", "lib", "libcudart.so*")))
    candidates += sorted(glob.glob(os.path.join(os.path.dirname(base), "nvidia", "cuda_runtime", "lib",
                                                "libcudart.so*")))
    found = ctypes.util.find_library("cudart")
    if found:
        candidates.append(found)
    errors = []
    for path in dict.fromkeys(candidates):
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
            continue
        if hasattr(lib, "cudaHostAlloc"):
            lib.cudaHostAlloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint]
            lib.cudaHostAlloc.restype = ctypes.c_int
            lib.cudaFreeHost.argtypes = [ctypes.c_void_p]
            lib.cudaFreeHost.restype = ctypes.c_int
            return lib
    raise RuntimeError("cannot find libcudart with cudaHostAlloc (looked in this process's mappings, torch's lib "
                       f"dir, the nvidia wheels and the system): {'; '.join(errors) or 'none found'}")


def empty_host_cache_fn():
    """torch's call that returns cached pinned blocks to CUDA (its name moved between releases)."""
    import torch

    acc = getattr(torch, "accelerator", None)
    for fn in (getattr(acc, "empty_host_cache", None),
               getattr(getattr(acc, "memory", None), "empty_host_cache", None),
               getattr(torch._C, "_accelerator_emptyHostCache", None),
               getattr(torch._C, "_host_emptyCache", None)):
        if callable(fn):
            return fn
    raise RuntimeError(f"torch {torch.__version__} has no call to empty the pinned host cache: torch pin_memory "
                       "rounds after the first would be cache hits, not allocations")


def mapping_of(address: int) -> tuple[int, int] | None:
    """(start, length) of the /proc/self/maps entry holding ``address``."""
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split(None, 1)[0].split("-"))
            if lo <= address < hi:
                return lo, hi - lo
    return None


def torch_host_allocated_bytes() -> int | None:
    import torch

    fn = getattr(torch.cuda, "host_memory_stats", None)
    if fn is None:
        return None
    try:
        return int(fn().get("allocated_bytes.current", 0))
    except Exception:  # stats API present but not usable in this build
        return None


class Worker(BaseWorker):
    def __init__(self, spec: WorkerSpec | dict) -> None:
        super().__init__(spec)
        spec = self.spec

        self.dtype = self.torch_dtype()
        self.nbytes = self.numel * spec.itemsize
        self.device = self.cuda_device()
        names = [v.get("allocator", "register") for v in spec.variants]
        self.allocators = list(dict.fromkeys(["register", *names]))
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.round = 0
        self.live: dict | None = None

    # -- the three allocators: make (allocate + touch), drop ------------------------
    def _make(self, kind: str, byte: int) -> dict:
        import torch

        n = self.nbytes
        if kind == "register":
            addr = _libc.mmap(None, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
            if addr in (None, MAP_FAILED):
                raise OSError(ctypes.get_errno(), f"mmap of {n} bytes failed")
            _libc.memset(addr, byte, n)  # first touch under the task policy places every page
            err = int(self.cudart_torch.cudaHostRegister(addr, n, 0))
            if err:
                _libc.munmap(addr, n)
                raise RuntimeError(f"cudaHostRegister({n} bytes) failed with CUDA error {err}")
            return {"addr": addr}
        if kind == "torch":
            t = torch.empty(self.numel, dtype=self.dtype, pin_memory=True)
            _libc.memset(t.data_ptr(), byte, n)
            return {"addr": t.data_ptr(), "tensor": t}
        if kind == "cudahostalloc":
            p = ctypes.c_void_p()
            err = self.cudart.cudaHostAlloc(ctypes.byref(p), n, 0)
            if err or not p.value:
                raise RuntimeError(f"cudaHostAlloc({n} bytes) failed with CUDA error {err}")
            _libc.memset(p.value, byte, n)
            return {"addr": p.value}
        raise ValueError(f"unknown allocator {kind!r}: allowed register, torch, cudahostalloc")

    def _drop(self, kind: str, buf: dict) -> None:
        if kind == "register":
            err = int(self.cudart_torch.cudaHostUnregister(buf["addr"]))
            _libc.munmap(buf["addr"], self.nbytes)
            if err:
                raise RuntimeError(f"cudaHostUnregister failed with CUDA error {err}")
        elif kind == "torch":
            buf.pop("tensor")  # the last reference: the block goes back to the cache
            self.empty_host_cache()
        else:
            err = self.cudart.cudaFreeHost(buf["addr"])
            if err:
                raise RuntimeError(f"cudaFreeHost failed with CUDA error {err}")

    # -- setup: one of each, measured ---------------------------------------------------
    def setup(self) -> PinnedAllocReply:
        import torch

        torch.cuda.set_device(self.device)
        torch.empty(1, device=self.device)  # the primary context exists before any host allocation
        self.cudart_torch = torch.cuda.cudart()
        self.cudart = libcudart() if "cudahostalloc" in self.allocators else None
        self.empty_host_cache = empty_host_cache_fn() if "torch" in self.allocators else None
        if self.empty_host_cache:
            self.empty_host_cache()
        policy = self.spec.policy or Policy.parse("default")
        expected: Expectation | None = policy.expectation(cpu_node=self.spec.cpu_node)
        report = {}
        placement = None
        for kind in self.allocators:
            stats0 = torch_host_allocated_bytes() if kind == "torch" else None
            buf = self._make(kind, 0x5A)
            addr = buf["addr"]
            stats1 = torch_host_allocated_bytes() if kind == "torch" else None
            if kind == "register":
                reserved = -(-self.nbytes // self.page) * self.page  # our own mmap: exactly this
                how = "mmap + first touch + cudaHostRegister (torch.cuda.cudart)"
            else:
                m = mapping_of(addr)
                reserved = m[1] - (addr - m[0]) if m else self.nbytes  # from the buffer to the mapping's end
                how = ("torch.empty(pin_memory=True), cache emptied after each free" if kind == "torch" else
                       f"cudaHostAlloc/cudaFreeHost via ctypes ({getattr(self.cudart, '_name', '?')})")
            req = pages_report([(addr, self.nbytes)])
            whole = pages_report([(addr, reserved)])
            verdict = compare(req, expected) if expected else None
            report[kind] = AllocatorReport(
                requested_bytes=self.nbytes, reserved_bytes=reserved, resident_bytes=whole.total_bytes,
                torch_host_stats_bytes=(stats1 - stats0) if stats0 is not None and stats1 is not None else None,
                placement=req, honours_policy=verdict.ok if verdict else None,
                message=verdict.message if verdict else "the policy promises no node", how=how,
            )
            if kind == "register":
                placement = req
            self._drop(kind, buf)
        assert placement is not None
        return PinnedAllocReply(placement=placement, allocators=report, bytes=self.nbytes,
                                device_name=torch.cuda.get_device_name(self.device))

    # -- one timed round -----------------------------------------------------------------
    def step(self, variant: dict | None = None) -> dict[str, float]:
        kind = (variant or {}).get("allocator", "register")
        self.round += 1
        byte = self.round % 255 + 1  # never zero
        t0 = time.perf_counter_ns()
        buf = self._make(kind, byte)
        self.pad.cpu(t0)  # an injected slowdown, inside each timed phase
        t1 = time.perf_counter_ns()
        self.live = (kind, buf)
        first, last = ctypes.c_ubyte.from_address(buf["addr"]).value, \
            ctypes.c_ubyte.from_address(buf["addr"] + self.nbytes - 1).value
        if first != byte or last != byte:
            raise RuntimeError(f"{kind} buffer does not hold what was written ({first}, {last} != {byte})")
        t2 = time.perf_counter_ns()
        self._drop(kind, buf)
        self.pad.cpu(t2)
        t3 = time.perf_counter_ns()
        self.live = None
        return {"alloc": (t1 - t0) * 1e-9, "free": (t3 - t2) * 1e-9}

    def close(self) -> None:
        if self.live is not None:
            kind, buf = self.live
            self.live = None
            self._drop(kind, buf)
