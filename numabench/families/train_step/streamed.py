"""train_step's ``streamed`` mode: the optimizer streamed through the GPU.

The fp32 master weights and both AdamW moments of every parameter live in host memory
(``numabench.toolkit.hostmem``: placed by the case's NUMA policy, pinned by cudaHostRegister
on a GPU), flat, in parameter order. Each step streams them through the GPU in chunks: a
chunk's master/exp_avg/exp_avg_sq are copied in (H2D stream), updated by our fused AdamW
kernel against the gradient already on the GPU (compute stream; a bf16 gradient is widened
into an fp32 staging buffer first), the GPU's working copy of the weights is refreshed from
the updated master, and master/moments are copied back (D2H stream). The next chunk's copies
run under this chunk's kernel (``SLOTS`` staging slots). With ``overlap_backward`` a chunk
starts as soon as the gradients of all its parameters are accumulated (per-parameter
post-accumulate-grad hooks): the last layers' gradients are ready first, so their updates
run under the rest of the backward pass.

The same planner and scheduler run on the CPU (``CpuOps``: streams and events are no-ops,
copies are synchronous, the chunk update is a torch implementation), so CI checks the
chunking, the host state and the update against torch's AdamW without a GPU.
Imports torch lazily.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

SLOTS = 3  # staging slots on the GPU: chunk k+1 and k+2 copied in while chunk k is updated
DEFAULT_CHUNK_ELEMS = 1 << 21  # 8 MiB per fp32 tensor (adam_offload's auto_chunk for fp32)
HOST_NAMES = ("master", "exp_avg", "exp_avg_sq")  # what lives on the host, each step in and out
HOST_KINDS = {"master": "master", "exp_avg": "moments", "exp_avg_sq": "moments"}  # numabench.numa.place


@dataclasses.dataclass(frozen=True)
class Piece:
    """Elements [start, start + count) of parameter ``param`` (its index), at ``offset`` in the flat state."""
    param: int
    start: int
    count: int
    offset: int


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One streamed unit: contiguous flat range [offset, offset + count), made of ``pieces``."""
    offset: int
    count: int
    pieces: tuple[Piece, ...]

    @property
    def params(self) -> tuple[int, ...]:
        return tuple(sorted({p.param for p in self.pieces}))


def param_offsets(sizes: Sequence[int]) -> list[int]:
    """Offset of each parameter in the flat host state (parameter order)."""
    offs, at = [], 0
    for n in sizes:
        offs.append(at)
        at += n
    return offs


def plan_chunks(sizes: Sequence[int], chunk: int) -> list[Chunk]:
    """Chunks of at most ``chunk`` elements over parameters of ``sizes`` elements, in reverse
    parameter order (backward makes the last parameters' gradients first). A chunk is a
    contiguous range of the flat state: whole small parameters packed together, a large one
    split; every element is in exactly one chunk."""
    if chunk < 1:
        raise ValueError(f"chunk={chunk}: allowed a whole number of elements >= 1")
    if any(n < 0 for n in sizes):
        raise ValueError(f"parameter sizes {list(sizes)}: allowed sizes >= 0")
    offs = param_offsets(sizes)
    chunks: list[Chunk] = []
    pieces: list[Piece] = []
    filled = 0

    def close() -> None:
        nonlocal pieces, filled
        if pieces:
            lo = min(p.offset for p in pieces)
            chunks.append(Chunk(lo, filled, tuple(sorted(pieces, key=lambda p: p.offset))))
        pieces, filled = [], 0

    for i in reversed(range(len(sizes))):
        end = sizes[i]
        while end > 0:  # from the parameter's end down, so that the flat range stays contiguous
            take = min(chunk - filled, end)
            pieces.append(Piece(i, end - take, take, offs[i] + end - take))
            filled += take
            end -= take
            if filled == chunk:
                close()
    close()
    return chunks


@dataclasses.dataclass(frozen=True)
class Hyper:
    lr: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float


class CpuOps:
    """Streams, events and copies on the CPU: every operation runs at once, in order."""
    cuda = False

    def __init__(self, device: Any) -> None:
        self.device = device

    def stream(self) -> Any:
        return None

    def use(self, stream: Any) -> Any:
        import contextlib

        return contextlib.nullcontext()

    def record(self, stream: Any = None) -> Any:
        return None

    def wait(self, stream: Any, event: Any) -> None:
        return None

    def join(self, stream: Any) -> None:
        return None


class CudaOps:
    """CUDA streams and events on ``device``."""
    cuda = True

    def __init__(self, device: Any) -> None:
        import torch

        self.device = device
        self.torch = torch

    def stream(self) -> Any:
        return self.torch.cuda.Stream(self.device)

    def use(self, stream: Any) -> Any:
        return self.torch.cuda.stream(stream)

    def record(self, stream: Any = None) -> Any:
        ev = self.torch.cuda.Event()
        ev.record(stream if stream is not None else self.torch.cuda.current_stream(self.device))
        return ev

    def wait(self, stream: Any, event: Any) -> None:
        if event is not None:
            stream.wait_event(event)

    def join(self, stream: Any) -> None:
        """The current stream waits for ``stream``'s work so far."""
        self.torch.cuda.current_stream(self.device).wait_stream(stream)


def torch_adamw_chunk_(master, grad, exp_avg, exp_avg_sq, *, lr, beta1, beta2, eps, weight_decay, step,
                       adamw=True) -> None:
    """The CPU chunk update: torch.optim.AdamW's arithmetic (decoupled decay, bias correction) in
    the tensors' own dtype, in place; the stand-in for the fused kernel where there is no GPU."""
    import math

    if not adamw:
        raise ValueError("adamw=False: the streamed mode trains with AdamW only")
    bc1, bc2 = 1.0 - beta1 ** step, 1.0 - beta2 ** step
    master.mul_(1.0 - lr * weight_decay)
    exp_avg.lerp_(grad, 1.0 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
    denom = (exp_avg_sq.sqrt() / math.sqrt(bc2)).add_(eps)
    master.addcdiv_(exp_avg, denom, value=-lr / bc1)


ChunkFn = Callable[..., None]


def on_one_device(params: Sequence[Any], who: str) -> tuple[list[Any], Any]:
    """``params`` as a list, and the one device they are all on (an optimizer's argument check)."""
    params = list(params)
    if not params:
        raise ValueError(f"{who} got no parameters")
    devices = {p.device for p in params}
    if len(devices) != 1:
        raise ValueError(f"parameters on devices {sorted(map(str, devices))}: allowed one device")
    return params, devices.pop()


class StreamedAdamW:
    """AdamW over ``params`` (on ``device``) whose fp32 master weights and moments live on the host.

    ``alloc``: the hostmem allocator of the host state (register: pinned in place; pageable on a
    CPU); ``chunk``: elements per streamed chunk; ``fn``: the chunk update (our fused kernel on a
    GPU, ``torch_adamw_chunk_`` on a CPU); ``overlap_backward``: start chunks from the
    post-accumulate-grad hooks during backward; ``place``: each host buffer placed by its kind's
    policy (numabench.numa.place; None: the process policy places them). Use: ``loss.backward();
    opt.step(); opt.zero_grad()``."""

    def __init__(self, params: Sequence[Any], hyper: Hyper, *, chunk: int = DEFAULT_CHUNK_ELEMS,
                 alloc: str = "register", fn: ChunkFn | None = None, overlap_backward: bool = True,
                 master_dtype: Any = None, place: Any = None) -> None:
        import torch

        from numabench.families.train_step import PLACED_TOUCHES
        from numabench.numa.kind_layout import StateBuffer
        from numabench.toolkit.hostmem import allocate
        from numabench.toolkit.placed_state import PlacedState

        self.params, self.device = on_one_device(params, "StreamedAdamW")
        self.ops = CudaOps(self.device) if self.device.type == "cuda" else CpuOps(self.device)
        self.hyper = hyper
        self.master_dtype = master_dtype or torch.float32
        if fn is None:
            if self.ops.cuda:
                from numabench.kernels import cuda_adam

                cuda_adam.load()  # built and imported now, not inside the first backward's hooks
                fn = cuda_adam.adam_step_
            else:
                fn = torch_adamw_chunk_
        self.fn = fn
        self.overlap_backward = overlap_backward
        sizes = [p.numel() for p in self.params]
        self.numel = sum(sizes)
        self.offsets = param_offsets(sizes)
        self.chunk = min(chunk, self.numel)
        self.chunks = plan_chunks(sizes, self.chunk)
        # host state: placed on first touch (allocate touches every page) by its kind's policy, else by
        # this process's policy
        itemsize = torch.empty((), dtype=self.master_dtype).element_size()
        self.placed = PlacedState(place, [StateBuffer(n, HOST_KINDS[n], self.numel * itemsize) for n in HOST_NAMES],
                                  PLACED_TOUCHES["streamed"])
        self.host = {n: allocate(self.numel, self.master_dtype, alloc, self.placed.segments_of(n)) for n in HOST_NAMES}
        with torch.no_grad():
            for p, off in zip(self.params, self.offsets):
                self.host["master"].tensor[off:off + p.numel()].copy_(p.detach().reshape(-1))
            self.host["exp_avg"].tensor.zero_()
            self.host["exp_avg_sq"].tensor.zero_()
        # staging on the device: SLOTS x (master, exp_avg, exp_avg_sq, grad) of one chunk each
        self.slots = [{n: torch.empty(self.chunk, dtype=self.master_dtype, device=self.device)
                       for n in (*HOST_NAMES, "grad")} for _ in range(SLOTS)]
        self.h2d, self.comp, self.d2h = self.ops.stream(), self.ops.stream(), self.ops.stream()
        self.step_no = 0
        self._pending: list[int] = []
        self._started: list[bool] = []
        self._slot_free: list[Any] = [None] * SLOTS  # D2H event after which a slot may be refilled
        # D2H event of each chunk's last copy back: its next copy in must not read the host state
        # before that (with fewer chunks than slots the slot's event can be from an older step)
        self._chunk_written: list[Any] = [None] * len(self.chunks)
        self._next_slot = 0
        self._chunks_of_param: list[list[int]] = [[] for _ in self.params]
        for k, c in enumerate(self.chunks):
            for i in c.params:
                self._chunks_of_param[i].append(k)
        self._hooks = []
        if overlap_backward:
            for i, p in enumerate(self.params):
                self._hooks.append(p.register_post_accumulate_grad_hook(self._grad_ready(i)))
        self._reset_pending()

    # -- host state ------------------------------------------------------------------
    def host_ranges(self) -> list[tuple[int, int]]:
        """(address, bytes) of the host state (master weights and both moments)."""
        return [(b.address, b.nbytes) for b in self.host.values()]

    def kind_report(self) -> list | None:
        """The host state's pages per kind and policy (numabench.numa.kind_check.KindPlacement); None without ``place``."""
        return self.placed.report({n: b.address for n, b in self.host.items()})

    def host_bytes(self) -> int:
        return sum(b.nbytes for b in self.host.values())

    def pcie_bytes_per_step(self) -> int:
        """Bytes crossing PCIe per step: the three host tensors in and out (gradients stay on the GPU)."""
        return 2 * self.host_bytes()

    def release(self) -> None:
        for h in self._hooks:
            h.remove()
        for b in self.host.values():
            b.release()

    # -- the step ----------------------------------------------------------------------
    def _reset_pending(self) -> None:
        self._pending = [len(c.params) for c in self.chunks]
        self._started = [False] * len(self.chunks)

    def _grad_ready(self, i: int) -> Callable[[Any], None]:
        def hook(p: Any) -> None:
            if self.step_no_for_hooks is None:
                return
            for k in self._chunks_of_param[i]:
                self._pending[k] -= 1
                if self._pending[k] == 0:
                    self._launch(k)
        return hook

    step_no_for_hooks: int | None = None

    def begin_backward(self) -> None:
        """Call before ``loss.backward()``: chunks launched from the hooks use the coming step's number."""
        self._reset_pending()
        self.step_no_for_hooks = self.step_no + 1

    def step(self) -> None:
        """Finish the step: launch every chunk not launched during backward, then make the current
        stream wait for the copies back (the next forward reads the refreshed weights)."""
        if self.step_no_for_hooks is None:  # no begin_backward(): every chunk starts now
            self._reset_pending()
            self.step_no_for_hooks = self.step_no + 1
        for k in range(len(self.chunks)):
            if not self._started[k]:
                self._launch(k)
        self.ops.join(self.d2h)
        self.ops.join(self.comp)
        self.step_no = self.step_no_for_hooks
        self.step_no_for_hooks = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the gradients (after ``step``: the current stream has waited for their last reader)."""
        for p in self.params:
            p.grad = None

    def _launch(self, k: int) -> None:
        """Chunk k: copy in, update, refresh the GPU weights, copy out, each on its stream."""
        import torch

        c = self.chunks[k]
        missing = [self.params[i] for i in c.params if self.params[i].grad is None]
        if missing:
            raise RuntimeError(f"chunk {k} (params {list(c.params)}) has parameters without a gradient")
        self._started[k] = True
        ops, n = self.ops, c.count
        slot_no = self._next_slot
        self._next_slot = (slot_no + 1) % SLOTS
        slot = {name: t[:n] for name, t in self.slots[slot_no].items()}
        grads_ready = ops.record()  # on the current stream: backward (or the caller) made the grads there
        h = {name: self.host[name].tensor[c.offset:c.offset + n] for name in HOST_NAMES}
        with ops.use(self.h2d):
            ops.wait(self.h2d, self._slot_free[slot_no])
            ops.wait(self.h2d, self._chunk_written[k])
            for name in HOST_NAMES:
                slot[name].copy_(h[name], non_blocking=True)
            copied_in = ops.record(self.h2d)
        with ops.use(self.comp):
            ops.wait(self.comp, copied_in)
            ops.wait(self.comp, grads_ready)
            with torch.no_grad():
                grads = [self.params[pc.param].grad.reshape(-1)[pc.start:pc.start + pc.count] for pc in c.pieces]
                if len(grads) == 1 and grads[0].dtype == self.master_dtype and grads[0].is_contiguous():
                    grad = grads[0]  # one piece, already the master's dtype: the kernel reads it in place
                else:
                    grad = slot["grad"]
                    for pc, g in zip(c.pieces, grads):  # gather (and widen) into the staging slot
                        grad[pc.offset - c.offset:pc.offset - c.offset + pc.count].copy_(g)
                hp = self.hyper
                self.fn(slot["master"], grad, slot["exp_avg"], slot["exp_avg_sq"], lr=hp.lr,
                        beta1=hp.betas[0], beta2=hp.betas[1], eps=hp.eps, weight_decay=hp.weight_decay,
                        step=self.step_no_for_hooks, adamw=True)
                for pc in c.pieces:  # the GPU's working weights from the updated master (narrowed to bf16)
                    w = self.params[pc.param].data.reshape(-1)[pc.start:pc.start + pc.count]
                    w.copy_(slot["master"][pc.offset - c.offset:pc.offset - c.offset + pc.count])
            updated = ops.record(self.comp)
        with ops.use(self.d2h):
            ops.wait(self.d2h, updated)
            for name in HOST_NAMES:
                h[name].copy_(slot[name], non_blocking=True)
            self._slot_free[slot_no] = self._chunk_written[k] = ops.record(self.d2h)
