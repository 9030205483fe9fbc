"""Family ``adam_offload``, per rank: host-resident Adam state, GPU math.

One step = H2D (param, grad, exp_avg, exp_avg_sq in) -> fused Adam on the GPU
-> D2H (param, exp_avg, exp_avg_sq out), each phase bracketed by CUDA events on
this rank's own stream; ``step`` is the first event to the last.

Variants share the placed memory: ``impl`` (ours: csrc/fused_adam.cu; torch:
aten::_fused_adam_, what torch.optim.Adam(fused=True) runs) and ``schedule``
(serial: the three phases one after another; overlap: chunks pipelined over
three streams so H2D of chunk i+1, compute of chunk i and D2H of chunk i-1 run
at once).
"""
from __future__ import annotations

from numabench.families.adam_offload import STATE_BUFFERS, TOUCHES
from numabench.families.adam_offload.reply import AdamOffloadReply
from numabench.families.adam_offload.schedule import OverlappedStep, Schedule
from numabench.families.base import Worker as BaseWorker
from numabench.families.base import WorkerSpec
from numabench.numa.kind_layout import StateBuffer
from numabench.numa.place import Place
from numabench.numa.placement import numa_maps_report, pages_report
from numabench.toolkit.hostmem import HostBuffer, allocate
from numabench.toolkit.placed_state import PlacedState

LR, BETA1, BETA2, EPS, WEIGHT_DECAY = 1e-3, 0.9, 0.999, 1e-8, 0.0
LIMIT_HOST_BYTES = 256 * 2**20
LIMIT_D2D_BYTES = 2**30


CHUNK_BYTES = 8 * 2**20
MIN_CHUNK_BYTES = 4 * 2**20


def auto_chunk(numel: int, itemsize: int) -> int:
    """Pipeline chunk in elements: about 8 MiB per tensor (docs/RESULTS.md, "Chunk size
    and overlap schedules": 256K-element chunks are launch-bound, 1M-4M-element chunks
    within a few percent of each other), but at least 8 chunks so fill and drain stay short,
    and never under 4 MiB per tensor: Python issues 8 operations per chunk, and
    below that the pipeline is launch-bound (1.84M elements in 8 chunks ran at
    0.44x of serial on H100)."""
    return max(MIN_CHUNK_BYTES // itemsize, min(CHUNK_BYTES // itemsize, -(-numel // 8)))
_STEP_TENSORS: dict = {}


def host_state(numel: int, dtype, alloc: str, place: Place | None) -> tuple[dict[str, HostBuffer], PlacedState]:
    """One rank's host state (param, grad, exp_avg, exp_avg_sq: what a step copies in and out),
    every page touched, each buffer placed by ``place`` where given (else by the process
    policy); with the PlacedState that counts each kind's pages. Needs no GPU with alloc pageable."""
    import torch

    itemsize = torch.empty((), dtype=dtype).element_size()
    state = PlacedState(place, [StateBuffer(n, k, numel * itemsize) for n, k in STATE_BUFFERS.items()], TOUCHES)
    return {n: allocate(numel, dtype, alloc, state.segments_of(n)) for n in STATE_BUFFERS}, state


def torch_fused_step_(param, grad, exp_avg, exp_avg_sq, *, lr, beta1=0.9, beta2=0.999, eps=1e-8,
                      weight_decay=0.0, step, adamw=False) -> None:
    """torch's fused Adam kernel (what Adam(fused=True) launches), same signature as ours."""
    import torch

    # torch.optim increments state_steps in Python before the op; the op reads it.
    step_t = _STEP_TENSORS.get(param.device)
    if step_t is None:
        step_t = _STEP_TENSORS[param.device] = torch.zeros((), device=param.device, dtype=torch.float32)
    step_t.fill_(float(step))  # a kernel on the current stream, no host sync
    op = torch._fused_adamw_ if adamw else torch._fused_adam_
    op([param], [grad], [exp_avg], [exp_avg_sq], [], [step_t], lr=lr, beta1=beta1, beta2=beta2,
       weight_decay=weight_decay, eps=eps, amsgrad=False, maximize=False)


def bidir_copy_seconds(dev_in, host_in, host_out, dev_out, streams, repeats: int = 8,
                       trailing: int = 0) -> tuple[float, float]:
    """Fastest H2D (host_in -> dev_in) and D2H (dev_out -> host_out) times, in
    seconds, over ``repeats`` rounds (after 2 warm-ups) in which both copies run
    at once on the two given streams: what each direction gets while the other
    is busy. ``trailing`` untimed rounds follow (ranks measuring together: a rank
    that started a little early still has company in its last timed round)."""
    import torch

    s_h2d, s_d2h = streams
    device = dev_in.device
    evs = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    h2d, d2h = [], []
    for i in range(repeats + 2 + trailing):
        torch.cuda.synchronize(device)
        with torch.cuda.stream(s_h2d):
            evs[0].record(s_h2d)
            dev_in.copy_(host_in, non_blocking=True)
            evs[1].record(s_h2d)
        with torch.cuda.stream(s_d2h):
            evs[2].record(s_d2h)
            host_out.copy_(dev_out, non_blocking=True)
            evs[3].record(s_d2h)
        torch.cuda.synchronize(device)
        if 2 <= i < repeats + 2:
            h2d.append(evs[0].elapsed_time(evs[1]) / 1e3)
            d2h.append(evs[2].elapsed_time(evs[3]) / 1e3)
    return min(h2d), min(d2h)


class Worker(BaseWorker):

    def __init__(self, spec: WorkerSpec | dict) -> None:
        super().__init__(spec)
        spec = self.spec
        import torch

        self.dtype = self.torch_dtype()
        self.device = self.cuda_device()
        # alloc is a case axis, not a worker axis: every variant of one worker run carries the same value
        allocs = {v["alloc"] for v in spec.variants if "alloc" in v}
        if len(allocs) > 1:
            raise ValueError(f"one worker run got variants with different alloc values {sorted(allocs)}")
        self.alloc = allocs.pop() if allocs else "register"
        # the chunk_numel knob (--numa-axis chunk_numel=N, in the case id), else auto_chunk
        chunk = spec.knob("chunk_numel")
        self.chunk = int(chunk) if chunk else auto_chunk(self.numel, torch.empty((), dtype=self.dtype).element_size())
        self.overlap_chunks = -(-self.numel // self.chunk)
        self.step_no = 0

    # -- setup -------------------------------------------------------------------
    def setup(self) -> AdamOffloadReply:
        import torch

        from numabench.kernels import cuda_adam

        with self.setup_part("cuda_init"):
            torch.cuda.set_device(self.device)
            torch.cuda.synchronize(self.device)
        impls = {v.get("impl", "ours") for v in self.spec.variants}
        self.impls = {}
        # Correct before timed: each impl against float64 torch.optim.Adam on fresh random data.
        errors = {}
        if "ours" in impls:
            with self.setup_part("kernel_load"):
                cuda_adam.load()
        for impl in sorted(impls):
            fn = cuda_adam.adam_step_ if impl == "ours" else torch_fused_step_
            def check(fn=fn) -> dict[str, float]:
                return {a: cuda_adam.check_against_reference(self.device, self.dtype, 1 << 20 | 12345, steps=3,
                                                             adamw=a == "adamw", step_fn=fn)
                        for a in ("adam", "adamw")}

            with self.setup_part("check"):
                errors[impl] = self.verified_once(f"adam_offload:gpu{self.spec.gpu}:{self.spec.dtype}:{impl}", check)
            self.impls[impl] = fn
        names = tuple(STATE_BUFFERS)
        with self.setup_part("alloc"):
            self.host, state = host_state(self.numel, self.dtype, self.alloc, self.spec.place)
            self.dev = {n: torch.empty(self.numel, dtype=self.dtype, device=self.device) for n in names}
        # Random, never zero: draw on the GPU (fast), copy into the placed host pages.
        g = torch.Generator(device=self.device).manual_seed(1234 + self.spec.rank)
        self.dev["param"].normal_(0, 1, generator=g)
        self.dev["grad"].normal_(0, 1e-2, generator=g)
        self.dev["exp_avg"].normal_(0, 1e-2, generator=g)
        self.dev["exp_avg_sq"].uniform_(1e-6, 1e-4, generator=g)
        with self.setup_part("fill"):
            for n in names:
                self.host[n].tensor.copy_(self.dev[n])
            torch.cuda.synchronize()
        ranges = [(b.address, b.nbytes) for b in self.host.values()]
        with self.setup_part("placement"):
            placement = pages_report(ranges)
            maps = numa_maps_report(ranges=ranges)
            kinds = state.report({n: b.address for n, b in self.host.items()})
        self.streams = [torch.cuda.Stream(self.device) for _ in range(3)]
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        self.overlapped = OverlappedStep(self.device, Schedule(self.chunk), self.host, self.dev,
                                         streams=self.streams)
        with self.setup_part("limits"):
            limits = self._copy_limits()
        return AdamOffloadReply(placement=placement, kinds=kinds, numa_maps=maps,
                                bytes_h2d=4 * self.numel * self.host["param"].tensor.element_size(),
                                bytes_d2h=3 * self.numel * self.host["param"].tensor.element_size(),
                                max_rel_error=errors, alloc=self.alloc, chunk_elems=self.chunk,
                                overlap_chunks=self.overlap_chunks,
                                device_name=torch.cuda.get_device_name(self.device), **limits)

    def _copy_limits(self) -> dict:
        """The ceilings each phase is judged against, measured in this run: pinned
        H2D and D2H one way and both at once (a 256 MiB buffer placed like the state),
        and the device-to-device copy (1 GiB, many times the L2). Each is the
        fastest of 8 timed copies after 2 warm-ups: a ceiling is the best seen.
        With several ranks, every rank measures each host copy at the same time as
        the others (they meet first; 2 untimed copies follow the timed ones): the
        ranks' steps share the host's memory and root complex, and so do their
        ceilings (H200 x2: H2D while D2H runs 52 GB/s for one rank, 40 for each of two)."""
        import torch

        from numabench.toolkit.rank_barrier import meet

        nbytes = LIMIT_HOST_BYTES
        host_a = allocate(nbytes // 4, torch.float32, self.alloc)
        host_b = allocate(nbytes // 4, torch.float32, self.alloc)
        dev_a = torch.empty(nbytes // 4, dtype=torch.float32, device=self.device).uniform_(0.5, 1.5)
        dev_b = torch.empty_like(dev_a)
        big_a = torch.empty(LIMIT_D2D_BYTES // 4, dtype=torch.float32, device=self.device).uniform_(0.5, 1.5)
        big_b = torch.empty_like(big_a)
        s0, s1 = self.streams[0], self.streams[1]
        rank, nprocess = self.spec.rank, self.spec.nprocess
        trailing = 2 if nprocess > 1 else 0

        def best(fn, stream, together: str = "") -> float:
            if together:
                meet(f"adam_offload-limit-{together}", rank, nprocess)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            times = []
            for i in range(10 + (trailing if together else 0)):
                with torch.cuda.stream(stream):
                    e0.record(stream)
                    fn()
                    e1.record(stream)
                stream.synchronize()
                if 2 <= i < 10:
                    times.append(e0.elapsed_time(e1) / 1e3)
            return min(times)

        try:
            out = {
                "limit_h2d_GBps": nbytes / best(lambda: dev_a.copy_(host_a.tensor, non_blocking=True), s0, "h2d") / 1e9,
                "limit_d2h_GBps": nbytes / best(lambda: host_a.tensor.copy_(dev_a, non_blocking=True), s0, "d2h") / 1e9,
                "limit_d2d_GBps": 2 * LIMIT_D2D_BYTES / best(lambda: big_b.copy_(big_a), s0) / 1e9,  # read+write
            }
            meet("adam_offload-limit-bidir", rank, nprocess)
            t_h2d, t_d2h = bidir_copy_seconds(dev_b, host_a.tensor, host_b.tensor, dev_a, (s0, s1), trailing=trailing)
            out["limit_bidir_h2d_GBps"] = nbytes / t_h2d / 1e9
            out["limit_bidir_d2h_GBps"] = nbytes / t_d2h / 1e9
        finally:
            del big_a, big_b, dev_a, dev_b
            host_a.release()
            host_b.release()
            torch.cuda.empty_cache()
        return out

    # -- one timed step ------------------------------------------------------------
    def step(self, variant: dict | None = None) -> dict[str, float]:
        variant = variant or {}
        impl, schedule = variant.get("impl", "ours"), variant.get("schedule", "serial")
        fn = self.impls[impl]
        self.step_no += 1
        pad_key = (impl, schedule)
        # One chunk leaves the pipeline nothing to overlap (three streams and their events
        # only add to the serial step): the overlap schedule then runs the serial step
        # (extra_info: overlap_chunks 1, schedule_ran serial).
        times = (self.overlapped.run(fn, self._hyper(), pad_key, pad=self.pad)
                 if schedule == "overlap" and self.overlap_chunks > 1 else self._step_serial(fn, pad_key))
        for phase in ("h2d", "compute", "d2h"):
            self.pad.observe((pad_key, phase), times[phase])
        return times

    def _hyper(self) -> dict:
        return dict(lr=LR, beta1=BETA1, beta2=BETA2, eps=EPS, weight_decay=WEIGHT_DECAY, step=self.step_no)

    def _step_serial(self, fn, pad_key: tuple = ()) -> dict[str, float]:
        import torch

        s = self.streams[0]
        e = self.events
        h, d = self.host, self.dev
        with torch.cuda.stream(s):
            e[0].record(s)
            for n in ("param", "grad", "exp_avg", "exp_avg_sq"):
                d[n].copy_(h[n].tensor, non_blocking=True)
            self.pad.gpu((pad_key, "h2d"), s)
            e[1].record(s)
            fn(d["param"], d["grad"], d["exp_avg"], d["exp_avg_sq"], **self._hyper())
            self.pad.gpu((pad_key, "compute"), s)
            e[2].record(s)
            for n in ("param", "exp_avg", "exp_avg_sq"):
                h[n].tensor.copy_(d[n], non_blocking=True)
            self.pad.gpu((pad_key, "d2h"), s)
            e[3].record(s)
        s.synchronize()
        return {"h2d": e[0].elapsed_time(e[1]) / 1e3, "compute": e[1].elapsed_time(e[2]) / 1e3,
                "d2h": e[2].elapsed_time(e[3]) / 1e3, "step": e[0].elapsed_time(e[3]) / 1e3}

    def close(self) -> None:
        for b in getattr(self, "host", {}).values():
            b.release()
