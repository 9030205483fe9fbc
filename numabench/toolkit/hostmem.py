"""Host buffers for workers: placed by the task's NUMA policy, touched, optionally pinned.

Allocators (the ``alloc`` axis):
- ``register``: mmap + first touch by this process (the task policy places
  every page) + cudaHostRegister. Exact size; placement is what the policy says.
- ``torch``: ``torch.empty(..., pin_memory=True)`` (CUDA's caching host
  allocator: rounds sizes up to a power of two).
- ``pageable``: mmap + first touch, not pinned (CPU families, pageable copies).

The first touch of a large buffer runs on several threads where that cannot move a page
(numabench.toolkit.touch_pages): a 545M-element fp32 Adam state is 8.7 GB, 2.1 million page
faults, seconds on one thread, and every worker of every pair pays it.

``segments`` (numabench.numa.kind_layout: the ``place`` axis) place a buffer range by range:
``register`` and ``pageable`` mbind each range before the first touch; ``torch`` (whose pages
the driver allocates and pins at once) allocates under a set_mempolicy switch to the one
policy of its buffer, and cannot split a buffer between policies.
"""
from __future__ import annotations

import contextlib
import ctypes
import mmap
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from numabench.numa import mempolicy
from numabench.numa.kind_layout import Segment
from numabench.numa.policy import Policy
from numabench.toolkit.touch_pages import touch_pages

ALLOCATORS = ("register", "torch", "pageable")
TOUCH_BYTE = 0x3C  # what a touched page holds: never zeros


def torch_dtype(name: str) -> "object":
    """The torch dtype of a case's dtype name (fp32, fp16, bf16)."""
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


@dataclass
class HostBuffer:
    tensor: "object"  # torch.Tensor
    address: int
    nbytes: int
    kind: str
    _keep: list = field(default_factory=list)

    def release(self) -> None:
        import torch

        if self.kind == "register":
            torch.cuda.cudart().cudaHostUnregister(self.address)
        for obj in self._keep:
            if isinstance(obj, mmap.mmap):
                try:
                    obj.close()
                except BufferError:  # a tensor still views it; the process is ending anyway
                    pass
        self._keep.clear()


@contextlib.contextmanager
def thread_policy(policy: Policy | None) -> Iterator[None]:
    """The calling thread allocates under ``policy`` inside the block (None: unchanged); its own
    policy is back afterwards, also on an error."""
    if policy is None:
        yield
        return
    mode, nodes = mempolicy.get_mempolicy()
    mempolicy.set_mempolicy(policy.mode, policy.nodes)
    try:
        yield
    finally:
        mempolicy.set_mempolicy(mode, nodes)


def bind_ranges(address: int, segments: Sequence[Segment]) -> None:
    """Each segment's range of the mapping at ``address`` under its policy, before any page is touched."""
    for seg in segments:
        if seg.policy is not None and seg.nbytes:
            mempolicy.mbind(address + seg.offset, seg.nbytes, seg.policy.mode, seg.policy.nodes)


def allocate(numel: int, dtype: "object", kind: str, segments: Sequence[Segment] | None = None) -> HostBuffer:
    """A host tensor of ``numel`` elements, every page touched (non-zero bytes), its ranges placed
    by ``segments`` where given (else by the process policy)."""
    import torch

    if kind not in ALLOCATORS:
        raise ValueError(f"unknown allocator {kind!r}: allowed {', '.join(ALLOCATORS)}")
    itemsize = torch.empty((), dtype=dtype).element_size()
    nbytes = numel * itemsize
    segments = tuple(segments or ())
    if kind == "torch":
        policies = {s.policy for s in segments}
        if len(policies) > 1:
            raise ValueError(f"allocator torch places a buffer under one policy; got {len(segments)} ranges under "
                             f"{sorted(map(str, policies))}: allowed a split buffer with register or pageable")
        with thread_policy(policies.pop() if policies else None):
            t = torch.empty(numel, dtype=dtype, pin_memory=True)
            touch_pages(t.data_ptr(), nbytes, TOUCH_BYTE)  # touch every page
        return HostBuffer(t, t.data_ptr(), nbytes, kind)
    buf = mmap.mmap(-1, nbytes)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    bind_ranges(addr, segments)
    touch_pages(addr, nbytes, TOUCH_BYTE)  # the policy places each page now
    t = torch.frombuffer(buf, dtype=dtype, count=numel)
    hb = HostBuffer(t, addr, nbytes, kind, [buf])
    if kind == "register":
        err = torch.cuda.cudart().cudaHostRegister(addr, nbytes, 0)
        if int(err) != 0:
            raise RuntimeError(f"cudaHostRegister({nbytes} bytes) failed with CUDA error {int(err)}")
        if not t.is_pinned():
            raise RuntimeError("cudaHostRegister succeeded but torch does not see the buffer as pinned")
    return hb


def address_is_pinned(address: int) -> bool:
    """Whether CUDA sees the host byte at ``address`` as pinned (cudaHostAlloc'd or registered);
    False without CUDA. Asks the driver about the address (cudaPointerGetAttributes, through
    torch's ``is_pinned``); the memory there is not read."""
    import torch

    if not torch.cuda.is_available():
        return False
    view = torch.frombuffer((ctypes.c_char * 1).from_address(address), dtype=torch.uint8)
    return bool(view.is_pinned())
