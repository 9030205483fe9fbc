"""Family ``transfer``, per rank: copy-engine copies between policy-placed host
memory and this rank's GPU.

Setup allocates, for each ``memory`` kind the variants ask for, a host source
and a host destination (hostmem ``register`` for pinned, ``pageable`` for
pageable: both placed by first touch under the task policy), fills the sources
with random data (never zeros), checks one H2D and one D2H bit for bit, and
reports where the pages landed. A step times, on side streams with CUDA
events: ``h2d`` (host source -> GPU), ``d2h`` (GPU -> host destination) and
``bidir`` (both at once on two streams, from a common start event to the later
of the two ends).
"""
from __future__ import annotations

import threading

from numabench.families.base import Worker as BaseWorker
from numabench.families.base import WorkerSpec
from numabench.families.transfer.reply import TransferReply
from numabench.numa.placement import numa_maps_report, pages_report
from numabench.toolkit.hostmem import allocate

ALLOC_OF = {"pinned": "register", "pageable": "pageable"}


class Worker(BaseWorker):

    def __init__(self, spec: WorkerSpec | dict) -> None:
        super().__init__(spec)
        spec = self.spec
        self.dtype = self.torch_dtype()
        self.device = self.cuda_device()
        kinds = [v.get("memory", "pinned") for v in spec.variants]
        self.kinds = list(dict.fromkeys(kinds)) or ["pinned"]
        for k in self.kinds:
            if k not in ALLOC_OF:
                raise ValueError(f"unknown memory {k!r}: allowed {', '.join(ALLOC_OF)}")
        self.host: dict[str, dict] = {}

    def setup(self) -> TransferReply:
        import torch

        with self.setup_part("cuda_init"):
            torch.cuda.set_device(self.device)
            torch.cuda.synchronize(self.device)
        g = torch.Generator(device=self.device).manual_seed(4321 + self.spec.rank)
        self.dev_src = torch.empty(self.numel, dtype=self.dtype, device=self.device).uniform_(0.5, 1.5, generator=g)
        self.dev_dst = torch.empty_like(self.dev_src)
        with self.setup_part("alloc"):
            for kind in self.kinds:
                src = allocate(self.numel, self.dtype, ALLOC_OF[kind])
                dst = allocate(self.numel, self.dtype, ALLOC_OF[kind])
                self.host[kind] = {"src": src, "dst": dst}
                src.tensor.copy_(self.host_source_values(kind))
            torch.cuda.synchronize(self.device)
        self.streams = [torch.cuda.Stream(self.device) for _ in range(2)]
        with self.setup_part("check"):
            self.check()
        ranges = [(b.address, b.nbytes) for bufs in self.host.values() for b in bufs.values()]
        with self.setup_part("placement"):
            placement = pages_report(ranges)
            maps = numa_maps_report(ranges=ranges)
        return TransferReply(placement=placement, numa_maps=maps, memory=self.kinds,
                             bytes=self.numel * self.dev_src.element_size(),
                             device_name=torch.cuda.get_device_name(self.device), checked=True)

    def host_source_values(self, kind: str):
        """What ``kind``'s host source holds, drawn on the GPU from a seed of its own: the fill,
        and the check's reference (drawn again, so no copy of it is kept on the GPU)."""
        import torch

        seed = 8642 + 97 * self.spec.rank + self.kinds.index(kind)
        g = torch.Generator(device=self.device).manual_seed(seed)
        return torch.empty_like(self.dev_src).uniform_(-2.0, 2.0, generator=g)

    def check(self) -> None:
        """One H2D and one D2H per memory kind, compared bit for bit (never time a broken copy).
        Compared on the GPU: copying 1 GiB back into fresh pageable memory and comparing it on
        the CPU took 5.5-6.6 s a worker at 268M elements on the H200 VMs (first touch of guest
        memory). The D2H is read back through the H2D path, which was checked first."""
        import torch

        for kind, bufs in self.host.items():
            self.dev_dst.zero_()
            self.dev_dst.copy_(bufs["src"].tensor, non_blocking=True)
            expected = self.host_source_values(kind)
            torch.cuda.synchronize(self.device)
            same = torch.equal(self.dev_dst, expected)
            del expected
            if not same:
                raise RuntimeError(f"{kind} H2D copy to GPU {self.device.index} does not match its source")
            bufs["dst"].tensor.zero_()
            bufs["dst"].tensor.copy_(self.dev_src, non_blocking=True)
            torch.cuda.synchronize(self.device)
            self.dev_dst.copy_(bufs["dst"].tensor, non_blocking=True)
            torch.cuda.synchronize(self.device)
            if not torch.equal(self.dev_dst, self.dev_src):
                raise RuntimeError(f"{kind} D2H copy from GPU {self.device.index} does not match its source")

    def step(self, variant: dict | None = None) -> dict[str, float]:
        import torch

        kind = (variant or {}).get("memory", self.kinds[0])
        bufs = self.host[kind]
        src, dst = bufs["src"].tensor, bufs["dst"].tensor
        s0, s1 = self.streams
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(8)]
        out = {}
        torch.cuda.synchronize(self.device)
        with torch.cuda.stream(s0):
            ev[0].record(s0)
            self.dev_dst.copy_(src, non_blocking=True)
            self.pad.gpu((kind, "h2d"), s0)
            ev[1].record(s0)
        s0.synchronize()
        out["h2d"] = ev[0].elapsed_time(ev[1]) / 1e3
        with torch.cuda.stream(s0):
            ev[2].record(s0)
            dst.copy_(self.dev_src, non_blocking=True)
            self.pad.gpu((kind, "d2h"), s0)
            ev[3].record(s0)
        s0.synchronize()
        out["d2h"] = ev[2].elapsed_time(ev[3]) / 1e3
        # Both directions at once: both streams wait on one start event; the end is
        # recorded on s0 after it has waited for s1's last copy. A pageable copy
        # blocks the thread that issues it, so pageable issues each direction from
        # its own thread (torch releases the GIL inside copy_).
        with torch.cuda.stream(s0):
            ev[4].record(s0)
        s1.wait_event(ev[4])

        def down() -> None:
            torch.cuda.set_device(self.device)  # a new thread starts on device 0
            with torch.cuda.stream(s1):
                dst.copy_(self.dev_src, non_blocking=True)
                ev[5].record(s1)

        def up() -> None:
            with torch.cuda.stream(s0):
                self.dev_dst.copy_(src, non_blocking=True)

        if bufs["src"].kind == "pageable":
            t = threading.Thread(target=down)
            t.start()
            up()
            t.join()
        else:
            down()
            up()
        with torch.cuda.stream(s0):
            s0.wait_event(ev[5])
            self.pad.gpu((kind, "bidir"), s0)
            ev[6].record(s0)
        s0.synchronize()
        s1.synchronize()
        out["bidir"] = ev[4].elapsed_time(ev[6]) / 1e3
        for phase, t in out.items():
            self.pad.observe((kind, phase), t)
        return out

    def close(self) -> None:
        for bufs in self.host.values():
            for b in bufs.values():
                b.release()
        self.host.clear()
