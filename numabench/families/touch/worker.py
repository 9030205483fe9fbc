"""Family ``touch``: write every byte of a policy-placed buffer (torch-free).

The first touch places the pages (that is when the policy acts); each timed
step then rewrites the whole buffer with a non-zero byte, a memset bandwidth
into memory on the policy's nodes.
"""
from __future__ import annotations

import ctypes
import mmap
import time

from numabench.families.base import Worker as BaseWorker
from numabench.families.base import WorkerSpec
from numabench.families.touch.reply import TouchReply
from numabench.numa.placement import numa_maps_report, pages_report


class Worker(BaseWorker):

    def __init__(self, spec: WorkerSpec | dict) -> None:
        super().__init__(spec)
        spec = self.spec
        self.nbytes = spec.numel * spec.itemsize
        self.round = 0
        self.buf: mmap.mmap | None = None

    def setup(self) -> TouchReply:
        self.buf = mmap.mmap(-1, self.nbytes)
        self.addr = ctypes.addressof(ctypes.c_char.from_buffer(self.buf))
        ctypes.memset(self.addr, 0x5A, self.nbytes)  # first touch places every page
        ranges = [(self.addr, self.nbytes)]
        return TouchReply(placement=pages_report(ranges), numa_maps=numa_maps_report(ranges=ranges),
                          bytes=self.nbytes)

    def step(self, variant: dict | None = None) -> dict[str, float]:
        self.round += 1
        value = (self.round % 255) + 1  # never zero
        t0 = time.perf_counter_ns()
        ctypes.memset(self.addr, value, self.nbytes)
        self.pad.cpu(t0)
        t1 = time.perf_counter_ns()
        return {"write": (t1 - t0) * 1e-9}

    def close(self) -> None:
        if self.buf is not None:
            self.buf.close()
