"""Family ``host_membw``, per rank: STREAM-style kernels (csrc/stream.cpp, OpenMP)
with this node's threads over four fp32 arrays placed by the policy.

Kernels: copy (b = a), triad (a = b + s*c), and adam_pattern (Adam's 4 reads
and 3 writes without its arithmetic): a core's bandwidth grows with the streams
it keeps in flight, so adam_pattern is the ceiling an Adam step is judged by.
"""
from __future__ import annotations

import time

from numabench.families.base import Worker as BaseWorker
from numabench.families.base import WorkerSpec
from numabench.families.host_membw.reply import HostMembwReply
from numabench.kernels import stream
from numabench.numa.placement import numa_maps_report, pages_report
from numabench.toolkit.hostmem import allocate
from numabench.toolkit.random_fill import fill_random_


class Worker(BaseWorker):

    def __init__(self, spec: WorkerSpec | dict) -> None:
        super().__init__(spec)
        self.threads = self.cpu_threads()

    def setup(self) -> HostMembwReply:
        import torch

        torch.set_num_threads(self.threads)
        stream.load()
        self.bufs = [allocate(self.numel, torch.float32, "pageable") for _ in range(4)]
        for k, b in enumerate(self.bufs):  # filled on the worker's threads, a seed per buffer
            fill_random_(b.tensor, "uniform", 0.5, 1.5, 99 + k, self.threads)
        # Correct before timed: one pass of each kernel against torch on a small slice.
        a, b, c, d = (x.tensor[:4099].clone() for x in self.bufs)
        stream.run("triad", a, b, c, d, threads=self.threads)
        if not torch.allclose(a, b + 3.0 * c):
            raise AssertionError("stream triad disagrees with torch")
        ranges = [(x.address, x.nbytes) for x in self.bufs]
        return HostMembwReply(placement=pages_report(ranges), numa_maps=numa_maps_report(ranges=ranges),
                              threads=self.threads, bytes_per_array=self.bufs[0].nbytes)

    def step(self, variant: dict | None = None) -> dict[str, float]:
        kernel = (variant or {}).get("kernel", "triad")
        a, b, c, d = (x.tensor for x in self.bufs)
        t0 = time.perf_counter_ns()
        stream.run(kernel, a, b, c, d, threads=self.threads)
        self.pad.cpu(t0)
        return {"time": (time.perf_counter_ns() - t0) * 1e-9}
