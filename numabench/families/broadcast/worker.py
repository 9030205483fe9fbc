"""Family ``broadcast``: one process copies a policy-placed host tensor to every GPU.

Methods (the ``method`` variants, all on the same placed memory; see
numabench.families.broadcast for how they map onto the seed's three versions):
``pageable``, ``pinned``, ``pipelined``, ``relay``. Setup fills the source with
random data, runs every method once and checks each GPU's copy against the
source (blockwise int64 checksums of the raw words, exact) before any round is
timed. A round is wall clock from issue to the last GPU's completion.
"""
from __future__ import annotations

import time

from numabench.families.base import Worker as BaseWorker
from numabench.families.base import WorkerSpec
from numabench.families.broadcast.reply import BroadcastReply
from numabench.numa.placement import numa_maps_report, pages_report
from numabench.toolkit.hostmem import allocate

MAX_CHUNK_BYTES = 16 * 2**20
MIN_CHUNK_BYTES = 2**20
CHECK_BLOCK = 4096  # words per checksum block
CHECK_SLAB = 16 * 2**20  # words summed at a time on the CPU


def chunk_bytes(nbytes: int, forced: str | None = None) -> int:
    """Pipeline chunk: 16 MiB, but at least 8 chunks, never under 1 MiB; ``forced``: the
    chunk_nbytes knob's value (--numa-axis chunk_nbytes=N, in the case id)."""
    if forced:
        return max(1, int(forced))
    return max(MIN_CHUNK_BYTES, min(MAX_CHUNK_BYTES, -(-nbytes // 8)))


def block_checksums(t, block: int = CHECK_BLOCK):
    """Exact per-block sums (int64) of a tensor's raw 16- or 32-bit words, on its own device."""
    import torch

    words = t.view(torch.int32 if t.element_size() == 4 else torch.int16).reshape(-1)
    n = words.numel()
    out = []
    for off in range(0, n, CHECK_SLAB):
        part = words[off:off + CHECK_SLAB].to(torch.int64)
        pad = (-part.numel()) % block
        if pad:
            part = torch.cat([part, part.new_zeros(pad)])
        out.append(part.view(-1, block).sum(dim=1))
    return torch.cat(out)


class Worker(BaseWorker):
    def __init__(self, spec: WorkerSpec | dict) -> None:
        super().__init__(spec)
        spec = self.spec
        self.dtype = self.torch_dtype()
        methods = [v.get("method", "pageable") for v in spec.variants]
        self.methods = list(dict.fromkeys(methods))
        for m in self.methods:
            if m not in ("pageable", "pinned", "pipelined", "relay"):
                raise ValueError(f"unknown method {m!r}: allowed pageable, pinned, pipelined, relay")

    def setup(self) -> BroadcastReply:
        import torch

        self.ngpu = torch.cuda.device_count()
        if self.ngpu < 2:
            raise RuntimeError(f"broadcast needs >= 2 GPUs; this process sees {self.ngpu}")
        self.devs = [torch.device("cuda", i) for i in range(self.ngpu)]
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        self.nbytes = self.numel * itemsize
        self.chunk = max(1, chunk_bytes(self.nbytes, self.spec.knob("chunk_nbytes")) // itemsize)
        self.src = allocate(self.numel, self.dtype, "pageable")
        g = torch.Generator(device=self.devs[0]).manual_seed(2002)
        self.src.tensor.copy_(torch.empty(self.numel, dtype=self.dtype, device=self.devs[0])
                              .uniform_(-1.0, 1.0, generator=g))
        torch.cuda.synchronize(self.devs[0])
        host = [self.src]
        if {"pinned", "relay"} & set(self.methods):
            self.src_pinned = allocate(self.numel, self.dtype, "register")
            self.src_pinned.tensor.copy_(self.src.tensor)
            host.append(self.src_pinned)
        if "pipelined" in self.methods:
            self.staging = [allocate(min(self.chunk, self.numel), self.dtype, "register") for _ in range(2)]
            host += self.staging
        self.dst = [torch.empty(self.numel, dtype=self.dtype, device=d) for d in self.devs]
        self.streams = [torch.cuda.Stream(d) for d in self.devs]
        # relay: GPU 0's H2D stream and one GPU-0 stream per peer (torch runs a cross-device
        # copy on the source device's current stream)
        self.fwd = [torch.cuda.Stream(self.devs[0]) for _ in self.devs]
        peer = [torch.cuda.can_device_access_peer(0, i) for i in range(1, self.ngpu)]
        want = block_checksums(self.src.tensor)
        for m in self.methods:  # correct before timed: every GPU holds the source, word for word
            for t in self.dst:
                t.zero_()
            self._sync_all()
            getattr(self, f"_{m}")()
            self._sync_all()
            for i, t in enumerate(self.dst):
                got = block_checksums(t).cpu()
                if not torch.equal(got, want):
                    bad = int((got != want).nonzero()[0])
                    raise RuntimeError(f"broadcast method {m}: GPU {i}'s copy differs from the source "
                                       f"(first differing {CHECK_BLOCK}-word block {bad})")
        ranges = [(b.address, b.nbytes) for b in host]
        return BroadcastReply(placement=pages_report(ranges), numa_maps=numa_maps_report(ranges=ranges),
                              bytes=self.nbytes, ngpus=self.ngpu, chunk_bytes=self.chunk * itemsize,
                              peer_access=peer, checksum=int(want.sum()), methods=list(self.methods),
                              devices=[torch.cuda.get_device_name(d) for d in self.devs])

    def _sync_all(self) -> None:
        import torch

        for d in self.devs:
            torch.cuda.synchronize(d)

    # -- the methods -------------------------------------------------------------------
    def _pageable(self) -> None:
        """broadcast1: the pageable source to each GPU in turn (each copy blocks)."""
        for t in self.dst:
            t.copy_(self.src.tensor)

    def _pinned(self) -> None:
        """broadcast2: pinned source, non_blocking, a stream per GPU: all copies in flight at once."""
        import torch

        for t, s in zip(self.dst, self.streams):
            with torch.cuda.stream(s):
                t.copy_(self.src_pinned.tensor, non_blocking=True)

    def _pipelined(self) -> None:
        """broadcast3: chunks of the pageable source staged (CPU copy) into two pinned
        buffers in turn; each staged chunk goes to every GPU on its stream while the
        next one is staged. A buffer is restaged only once all GPUs have read it."""
        import torch

        n, c = self.numel, self.chunk
        done: list[list | None] = [None, None]
        for k, off in enumerate(range(0, n, c)):
            cnt = min(c, n - off)
            b = k % 2
            if done[b] is not None:
                for e in done[b]:
                    e.synchronize()
            stage = self.staging[b].tensor[:cnt]
            stage.copy_(self.src.tensor[off:off + cnt])
            evs = []
            for t, s in zip(self.dst, self.streams):
                with torch.cuda.stream(s):
                    t[off:off + cnt].copy_(stage, non_blocking=True)
                    e = torch.cuda.Event()
                    e.record(s)
                    evs.append(e)
            done[b] = evs

    def _relay(self) -> None:
        """Chunks of the pinned source to GPU 0; GPU 0 forwards each chunk to every peer
        (peer copies: NVLink where present) while the next chunk crosses PCIe."""
        import torch

        n, c = self.numel, self.chunk
        h2d = self.streams[0]
        first = self.dst[0]
        for off in range(0, n, c):
            cnt = min(c, n - off)
            with torch.cuda.stream(h2d):
                first[off:off + cnt].copy_(self.src_pinned.tensor[off:off + cnt], non_blocking=True)
                arrived = torch.cuda.Event()
                arrived.record(h2d)
            for i in range(1, self.ngpu):
                f = self.fwd[i]
                f.wait_event(arrived)
                with torch.cuda.stream(f):
                    self.dst[i][off:off + cnt].copy_(first[off:off + cnt], non_blocking=True)

    # -- one timed round -------------------------------------------------------------------
    def step(self, variant: dict | None = None) -> dict[str, float]:
        m = (variant or {}).get("method", self.methods[0])
        fn = getattr(self, f"_{m}")
        self._sync_all()
        t0 = time.perf_counter_ns()
        fn()
        self._sync_all()
        t1 = time.perf_counter_ns()
        return {"broadcast": (t1 - t0) * 1e-9}

    def close(self) -> None:
        for b in [getattr(self, "src", None), getattr(self, "src_pinned", None), *getattr(self, "staging", [])]:
            if b is not None:
                b.release()
