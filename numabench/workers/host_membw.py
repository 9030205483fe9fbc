"""Family ``host_membw``, per rank: STREAM-style copy and triad with this
node's threads over memory placed by the policy (torch ops: multi-threaded,
one pass each; ``torch.add(b, c, alpha=s, out=a)`` is the triad)."""
from __future__ import annotations

import time

from ..placement import numa_maps_report, pages_report
from .hostmem import allocate

# bytes counted per element: copy reads a, writes b; triad reads b, c, writes a.
# Write-allocate reads (the cache line fetched before it is overwritten) are NOT counted.
BYTES_PER_ELEMENT = {"copy": 2, "triad": 3}


class Worker:
    def __init__(self, spec: dict) -> None:
        import torch

        self.spec = spec
        self.numel = int(spec["numel"])
        self.threads = len(spec["cpus"]) if spec.get("cpus") else torch.get_num_threads()

    def setup(self) -> dict:
        import torch

        torch.set_num_threads(self.threads)
        self.bufs = [allocate(self.numel, torch.float32, "pageable") for _ in range(3)]
        g = torch.Generator().manual_seed(99)
        for b in self.bufs:
            b.tensor.uniform_(0.5, 1.5, generator=g)
        ranges = [(b.address, b.nbytes) for b in self.bufs]
        return {"placement": pages_report(ranges).to_dict(), "numa_maps": numa_maps_report(ranges=ranges).to_dict(),
                "threads": self.threads, "bytes_per_array": self.bufs[0].nbytes}

    def step(self, variant: dict | None = None) -> dict[str, float]:
        import torch

        kernel = (variant or {}).get("kernel", "triad")
        a, b, c = (x.tensor for x in self.bufs)
        t0 = time.perf_counter_ns()
        if kernel == "copy":
            b.copy_(a)
        elif kernel == "triad":
            torch.add(b, c, alpha=3.0, out=a)
        else:
            raise ValueError(f"unknown kernel {kernel!r}: allowed copy, triad")
        return {"time": (time.perf_counter_ns() - t0) * 1e-9}
