"""Family ``train_step``, per rank: one training step of a small decoder-only transformer
(numabench.families.train_step.model) in a torch.distributed process group of all the case's ranks.

Modes (``mode`` axis, each its own worker run):
- ``ddp``: DistributedDataParallel; NCCL on GPUs, gloo on a CPU-only machine.
- ``fsdp``: FSDP2 ``fully_shard`` per block and at the root (FSDP1 with a
  block wrap policy where torch lacks fully_shard).
- ``fsdp-offload``: the same with torch's CPU offload of parameters, gradients
  and optimizer state (``CPUOffloadPolicy``; FSDP1 ``CPUOffload(offload_params=True)``):
  the ZeRO-Offload analogue, its host state placed by the case's NUMA policy.
  Needs CUDA.
- ``deepspeed-zero2`` / ``deepspeed-zero3``: DeepSpeed's ZeRO-Offload itself
  (``deepspeed.initialize`` with configs.deepspeed_config: the optimizer state and
  step on the host, pinned, DeepSpeedCPUAdam). Needs deepspeed; without CUDA it runs
  on DeepSpeed's CPU accelerator over gloo (the same partitioning and CPU Adam, no copies).
- ``streamed``: our streamed AdamW (numabench.families.train_step.streamed): fp32 master
  weights and moments on the host (placed by the policy, pinned), streamed through the GPU
  in chunks and updated by our fused kernel, overlapped with backward (one rank) or after
  DDP's backward (more ranks). On a CPU the same scheduler runs with torch's arithmetic.
- ``no-offload``: DDP with torch's fused AdamW, all state on the device, fp32 weights under
  bf16 autocast: the reference of that recipe.
- ``no-offload-master``: bf16 weights with an fp32 master, gradient and moments on the device
  (numabench.families.train_step.master): the reference of the streamed and DeepSpeed modes'
  recipe; DDP only with more ranks.
- ``torchao-offload``: torchao's ``CPUOffloadOptimizer`` (AdamW on the host, each
  gradient copied out as backward makes it); one rank. Needs CUDA and torchao.
- ``deepspeed-zenflow``: ZeRO-2 + CPU offload + ZenFlow (configs.zenflow_block: the top-k gradient
  columns stepped on the GPU every step, the rest by the CPU every update_interval steps in a process
  of its own, overlapped). Needs deepspeed; runs on its CPU accelerator too.
- ``streamed-split``: SplitAdamW (numabench.families.train_step.split_adamw): the leading parameters'
  master and moments on the device, the rest streamed as in ``streamed``, split at the
  ``offload_ratio`` knob (auto: the largest GPU share that fits the GPU's free memory, measured
  before the model is made). ``deepspeed-zero3`` reads the same knob (DeepSpeed's
  offload_optimizer.ratio, sub-groups of split.sub_group_size).

``Trainer`` is the model + wrapper + optimizer + step, shared with the
torchrun entry point ``python -m numabench.tools.train_step_cli``.

The process group: rank = spec.rank, world = spec.nprocess, rendezvous on a store that
rank 0 binds on a port the kernel picks and keeps (numabench.toolkit.rendezvous: no port
is picked and released, so no other process can take it first).

Setup runs ``SETUP_STEPS`` untimed steps on one fixed batch and checks that the
loss falls (the model learns), and in DDP that all ranks hold bit-identical
parameters afterwards (an all_gather of a parameter digest); peak GPU memory
(torch.cuda.max_memory_allocated, max_memory_reserved) and the process's host memory per node
(/proc/self/numa_maps: anonymous, the whole process, its pinned mappings) are taken after them. Placement is judged on the
CPU-resident parameters and optimizer state (offload, or the CPU run), else on
the process's anonymous memory.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import time
from typing import ClassVar

from numabench.families.base import Worker as BaseWorker
from numabench.families.base import WorkerSpec
from numabench.families.train_step import MODES, POOL
from numabench.families.train_step.applied import mismatch, running_policy
from numabench.families.train_step.configs import BETAS, EPS, WEIGHT_DECAY
from numabench.families.train_step.reply import GpuIdle, TrainStepReply
from numabench.toolkit import rendezvous

SETUP_STEPS = 4


def fsdp2_available() -> bool:
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard  # noqa: F401
    except ImportError:
        return False
    return True


def _local(t):
    """The local shard of a DTensor, the tensor itself otherwise."""
    return t.to_local() if hasattr(t, "to_local") else t


class DeepSpeedTimers:
    """DeepSpeed's own per-step timers (``wall_clock_breakdown``), taken instead of printed.

    The engine and its ZeRO optimizer share one timer group and, every step, "log" (print and
    reset) the engine's timers and the optimizer's timers; here the group's ``log`` keeps
    the values: ``step`` (engine.step), ``optimizer_step`` (the CPU Adam over this rank's
    partition), ``fwd``/``bwd`` and the rest, in seconds. Like DeepSpeed's own ``log`` it resets
    every timer it is asked to log, kept or not: a timer left unreset keeps one CUDA event pair
    per step, and the engine's post-step bookkeeping (``_update_wall_clock_timers``: every
    timer's ``elapsed``, which synchronizes on each pair) then grows with the step count.

    What DeepSpeed's ``step`` timer does not cover: engine.step() stops it before that
    bookkeeping (``_update_wall_clock_timers`` and the timers' ``log``, each synchronizing the
    device). ``mark`` (a callable returning a point in time on our clock) is called as that
    bookkeeping starts, so our clock can be split at the same place (``bookkeeping_mark``)."""

    KEEP: ClassVar[dict[str, str]] = {
        "step": "ds_step", "optimizer_step": "ds_optimizer_step", "optimizer_gradients": "ds_optimizer_gradients",
        "optimizer_allgather": "ds_optimizer_allgather", "fwd": "ds_forward", "bwd": "ds_backward",
        "bwd_allreduce": "ds_backward_allreduce"}

    def __init__(self, group, engine=None, mark=None) -> None:
        self.group = group
        self.taken: dict[str, float] = {}
        self.bookkeeping_mark = None
        self._mark = mark
        group.log = self._log
        if engine is not None and mark is not None and hasattr(engine, "_update_wall_clock_timers"):
            inner = engine._update_wall_clock_timers

            def update_wall_clock_timers(*args, **kwargs):
                if self.bookkeeping_mark is None:
                    self.bookkeeping_mark = self._mark()
                return inner(*args, **kwargs)

            engine._update_wall_clock_timers = update_wall_clock_timers

    def begin_step(self) -> None:
        """Call right before engine.step()."""
        self.bookkeeping_mark = None

    def _log(self, names, normalizer=1.0, reset=True, memory_breakdown=False, ranks=None) -> None:
        for name in names:
            timer = self.group.timers.get(name)
            if timer is None:
                continue
            elapsed = timer.elapsed(reset=reset) / normalizer / 1e3
            if name in self.KEEP:
                self.taken[self.KEEP[name]] = elapsed

    def take(self) -> dict[str, float]:
        """The timers logged since the last take."""
        taken, self.taken = self.taken, {}
        return taken


class Trainer:
    def __init__(self, mode: str, model: str, dtype: str, batch: int, device, *, seed: int = 0,
                 lr: float | None = None, data_seed: int = 0, place=None, offload_ratio: float = 1.0,
                 zenflow: dict | None = None) -> None:
        import torch
        import torch.distributed as dist

        from numabench.families.train_step.configs import model_config
        from numabench.families.train_step.model import build_model, count_params

        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}: allowed {', '.join(MODES)}")
        if dtype not in ("fp32", "bf16"):
            raise ValueError(f"dtype {dtype!r}: train_step runs fp32 or bf16 (mixed precision)")
        self.mode, self.model_name, self.dtype, self.batch = mode, model, dtype, batch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if mode in ("fsdp-offload", "torchao-offload") and not self.cuda:
            raise RuntimeError(f"{mode} needs a CUDA GPU (it offloads from a device to the host)")
        self.cfg = model_config(model)
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        if mode == "torchao-offload" and self.world > 1:
            raise RuntimeError("torchao-offload runs one rank: CPUOffloadOptimizer copies each gradient to the host "
                               "as backward makes it, before DDP would average it")
        # a model too big to make on the host (configs: init_on_device) is made on the device
        net = build_model(model, seed=seed, device=self.device if self.cfg.init_on_device else "cpu")
        self.n_params = count_params(net)
        self.autocast = None
        self.engine = None  # DeepSpeed's engine (deepspeed-* modes): it runs backward and the step
        self.opt = None
        lr = self.cfg.lr if lr is None else lr
        bf16 = dtype == "bf16"
        self.ds_timers: DeepSpeedTimers | None = None
        self.streamed = None  # StreamedAdamW (mode streamed)
        self.kernel_error = None  # streamed on a GPU: our kernel's max relative error against AdamW
        self._marks = None  # the last step's points: start, forward done, backward done, optimizer done
        # the split modes: the share of the optimizer state's elements on the host, as split (1: all)
        self.offload_ratio: float | None = None
        self.zenflow = None  # deepspeed-zenflow: the zenflow block DeepSpeed was given
        if mode != "deepspeed-zenflow" and zenflow is not None:
            raise ValueError(f"a zenflow block for mode {mode}: allowed with deepspeed-zenflow only")
        if mode.startswith("deepspeed-"):
            if not self.cuda:  # DeepSpeed's CPU accelerator (gloo); read when deepspeed is first imported
                os.environ.setdefault("DS_ACCELERATOR", "cpu")
            import deepspeed

            from numabench.families.train_step.configs import deepspeed_config, param_sizes, zenflow_block

            stage = 2 if mode == "deepspeed-zenflow" else int(mode.removeprefix("deepspeed-zero"))
            extra: dict = {}
            if mode == "deepspeed-zenflow":
                self.zenflow = extra["zenflow"] = zenflow if zenflow is not None else zenflow_block()
            elif offload_ratio != 1:  # sub-groups small enough for the ratio to split the partition
                from numabench.families.train_step import split

                sizes = [-(-n // self.world) for n in param_sizes(self.cfg)]  # this rank's partition
                size = split.sub_group_size(sizes)
                extra = {"offload_ratio": offload_ratio, "sub_group_size": size}
                self.offload_ratio = split.zero3_split(sizes, offload_ratio, size).offload_ratio
            elif stage == 3:
                self.offload_ratio = 1.0
            self.engine, self.opt, _, _ = deepspeed.initialize(
                model=net, model_parameters=net.parameters(),
                config=deepspeed_config(stage, batch, dtype, lr, pin_memory=self.cuda, **extra),
                dist_init_required=False)
            self.model = self.engine
            self.ds_timers = DeepSpeedTimers(self.engine.timers, self.engine, self._mark)
            where = "offloaded to the host (pinned)" if self.cuda else "on the host (DeepSpeed's CPU accelerator)"
            self.impl = f"DeepSpeed {deepspeed.__version__} ZeRO-{stage}, optimizer {where}"
            if self.zenflow is not None:
                self.impl += (f", ZenFlow (top {self.zenflow['topk_ratio']:g} of gradient columns on the GPU, the rest "
                              f"every {self.zenflow['update_interval']} steps on the CPU)")
            elif self.offload_ratio is not None and self.offload_ratio < 1:
                self.impl += f", offload_optimizer.ratio {offload_ratio:g} ({self.offload_ratio:.3f} of the elements)"
        elif mode == "streamed-split":
            from numabench.families.train_step.split_adamw import SplitAdamW
            from numabench.families.train_step.streamed import Hyper

            net = self._working_weights(net, bf16)
            self.opt = SplitAdamW(list(net.parameters()), Hyper(lr, BETAS, EPS, WEIGHT_DECAY), offload_ratio,
                                  one_rank=self.world == 1, alloc="register" if self.cuda else "pageable", place=place)
            self.streamed = self.opt.streamed  # None where nothing is streamed (offload_ratio 0)
            self.offload_ratio = self.opt.offload_ratio
            if self.cuda and self.streamed is not None:  # correct before timed, as the streamed mode's
                from numabench.kernels import cuda_adam

                self.kernel_error = cuda_adam.check_against_reference(self.device, torch.float32, 1 << 20 | 12345,
                                                                      steps=3, adamw=True)
            sp = self.opt.split
            self.impl = (f"split AdamW: {sp.on_gpu} leading parameters ({1 - self.offload_ratio:.3f} of the elements) "
                         "on the device as no-offload-master, the rest streamed"
                         + (f" ({len(self.streamed.chunks)} chunks of <= {self.streamed.chunk} elements)"
                            if self.streamed is not None else " (none)"))
        elif mode == "streamed":
            from numabench.families.train_step.streamed import Hyper, StreamedAdamW

            # bf16: the GPU holds bf16 working weights, the host the fp32 master (mixed precision as
            # DeepSpeed's); fp32: fp32 weights on both sides
            net = self._working_weights(net, bf16)
            # one rank: chunks start from the post-accumulate-grad hooks during backward (under DDP
            # the hooks would fire before the gradients are averaged)
            self.streamed = StreamedAdamW(list(net.parameters()), Hyper(lr, BETAS, EPS, WEIGHT_DECAY),
                                          alloc="register" if self.cuda else "pageable",
                                          overlap_backward=self.world == 1, place=place)
            self.opt = self.streamed
            if self.cuda:  # correct before timed: our kernel against float64 torch.optim.AdamW
                from numabench.kernels import cuda_adam

                self.kernel_error = cuda_adam.check_against_reference(self.device, torch.float32, 1 << 20 | 12345,
                                                                      steps=3, adamw=True)
            self.impl = (f"streamed AdamW ({'our fused kernel' if self.cuda else 'torch on the CPU'}, "
                         f"{len(self.streamed.chunks)} chunks of <= {self.streamed.chunk} elements, "
                         f"{'overlapped with backward' if self.world == 1 else 'after backward (DDP)'})")
        elif mode == "no-offload-master":
            from numabench.families.train_step.master import MasterAdamW
            from numabench.families.train_step.streamed import Hyper

            # the streamed mode's recipe with all its state on the device: bf16 working weights, an fp32
            # master copy, fp32 moments and gradient (fp32: an fp32 master copy of fp32 weights)
            net = self._working_weights(net, bf16)
            self.opt = MasterAdamW(list(net.parameters()), Hyper(lr, BETAS, EPS, WEIGHT_DECAY),
                                   widen_in_backward=self.world == 1)
            self.impl = (f"{'bf16' if bf16 else 'fp32'} weights, fp32 master, gradient and moments on the device, "
                         "fused AdamW on the master" + (" (DDP)" if self.world > 1 else ""))
        elif mode == "torchao-offload":
            import torchao
            from torchao.optim import CPUOffloadOptimizer

            self.model = net.to(self.device)
            if bf16:
                self.autocast = torch.bfloat16
            self.opt = CPUOffloadOptimizer(self.model.parameters(), torch.optim.AdamW, lr=lr, betas=BETAS,
                                           eps=EPS, weight_decay=WEIGHT_DECAY)
            self.impl = f"torchao {torchao.__version__} CPUOffloadOptimizer(AdamW)"
        elif mode in ("ddp", "no-offload"):
            from torch.nn.parallel import DistributedDataParallel as DDP

            net = net.to(self.device)
            self.model = DDP(net, device_ids=[self.device.index] if self.cuda else None) if dist.is_initialized() \
                else net
            if bf16:
                self.autocast = torch.bfloat16
            self.impl = "DDP"
            if mode == "no-offload":
                # the reference: all state on the GPU, torch's fused AdamW (one kernel launch per step)
                self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, betas=BETAS, eps=EPS,
                                             weight_decay=WEIGHT_DECAY, fused=True)
                self.impl = "DDP + fused AdamW, all state on the device"
        elif fsdp2_available():
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

            mesh = init_device_mesh(self.device.type, (self.world,))
            kw = {"mesh": mesh,
                  "mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                  if bf16 else MixedPrecisionPolicy()}
            if mode == "fsdp-offload":
                kw["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
            else:
                net = net.to(self.device)
            for blk in net.blocks:
                fully_shard(blk, **kw)
            fully_shard(net, **kw)
            self.model = net
            self.impl = "FSDP2 fully_shard" + (" + CPUOffloadPolicy" if mode == "fsdp-offload" else "")
        else:  # FSDP1
            from torch.distributed.fsdp import CPUOffload, MixedPrecision
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
            from torch.distributed.fsdp.wrap import ModuleWrapPolicy

            from numabench.families.train_step.model import Block

            mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else None
            self.model = FSDP(net, auto_wrap_policy=ModuleWrapPolicy({Block}), mixed_precision=mp,
                              cpu_offload=CPUOffload(offload_params=mode == "fsdp-offload"),
                              device_id=self.device if self.cuda else None)
            self.impl = "FSDP1" + (" + CPUOffload(offload_params=True)" if mode == "fsdp-offload" else "")
        if self.opt is None:
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY)
        g = torch.Generator().manual_seed(10_007 * (data_seed + 1))
        self.pool = [torch.randint(0, self.cfg.vocab, (batch, self.cfg.seq_len + 1), generator=g).to(self.device)
                     for _ in range(POOL)]
        self.k = 0

    def _working_weights(self, net, bf16: bool):
        """``net`` on the device in the working dtype (bf16 or fp32), as self.model: under DDP where
        there are several ranks (it averages the gradients before the step: no updates during
        backward, a widening only after it)."""
        import torch

        net = net.to(self.device, dtype=torch.bfloat16 if bf16 else torch.float32)
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            self.model = DDP(net, device_ids=[self.device.index] if self.cuda else None)
        else:
            self.model = net
        return net

    @property
    def tokens_per_step(self) -> int:
        """Tokens of one step over all ranks."""
        return self.batch * self.cfg.seq_len * self.world

    def step(self, batch=None):
        """One optimizer step; returns the loss tensor (not synchronized). Marks the ends of
        forward, backward and the optimizer (CUDA events on the current stream, or wall time)
        for ``step_parts``."""
        import torch

        from numabench.families.train_step.model import lm_loss

        if batch is None:
            batch = self.pool[self.k % len(self.pool)]
            self.k += 1
        x, y = batch[:, :-1], batch[:, 1:]
        marks = self._marks = [self._mark()]
        if self.engine is not None:  # DeepSpeed: its engine casts, reduces, steps and zeroes the grads
            loss = lm_loss(self.engine(x), y)
            marks.append(self._mark())
            self.engine.backward(loss)
            marks.append(self._mark())
            # engine.step() (the reduced gradients' copy to the host, CPU Adam, the parameters'
            # copy back) timed by us, to set beside DeepSpeed's own timers of the same call
            self.ds_timers.begin_step()
            self.engine.step()
            marks.append(self._mark())
            return loss.detach()
        if self.autocast is not None:
            with torch.autocast(self.device.type, dtype=self.autocast):
                loss = lm_loss(self.model(x), y)
        else:
            loss = lm_loss(self.model(x), y)
        marks.append(self._mark())
        if self.streamed is not None:
            self.streamed.begin_backward()  # chunks start from the gradient hooks during backward
        loss.backward()
        marks.append(self._mark())
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        marks.append(self._mark())
        return loss.detach()

    def _mark(self):
        """A point in the step: an event on the current stream (CUDA), else the wall time."""
        import torch

        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(torch.cuda.current_stream(self.device))
            return ev
        return time.perf_counter_ns()

    def _between(self, a, b) -> float:
        if self.cuda:
            b.synchronize()
            return a.elapsed_time(b) / 1e3
        return (b - a) * 1e-9

    def step_parts(self) -> dict[str, float]:
        """The last step's parts, seconds, read after the step is synchronized: ``forward``,
        ``backward``, ``optimizer`` (what is left after backward returns: under ``streamed`` the
        chunks not yet done during backward; under DeepSpeed our clock of engine.step()), and for
        DeepSpeed its own timers of the same step (``ds_step``, ``ds_optimizer_step``: its CPU Adam,
        ...) and ``ds_in_timer`` (our clock from engine.step()'s call to the start of DeepSpeed's
        post-step timer bookkeeping: the span its ``step`` timer covers)."""
        marks = getattr(self, "_marks", None)
        if not marks or len(marks) != 4:
            return {}
        parts = {name: self._between(a, b) for name, a, b in
                 zip(("forward", "backward", "optimizer"), marks, marks[1:])}
        if self.ds_timers is not None:
            parts.update(self.ds_timers.take())
            bookkeeping = self.ds_timers.bookkeeping_mark
            if bookkeeping is not None:
                parts["ds_in_timer"] = self._between(marks[2], bookkeeping)
        self._marks = None
        return parts

    @contextlib.contextmanager
    def _clock(self, pad=None):
        """Times the block: CUDA events on the current stream, or wall time; yields a callable
        that gives the seconds once the block is done (synchronizing the end event). ``pad``
        (numabench.toolkit.inject.SlowdownPad): the injected slowdown, inside the timed span."""
        import torch

        if self.cuda:
            s = torch.cuda.current_stream(self.device)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(s)
            yield lambda: (e1.synchronize(), e0.elapsed_time(e1) / 1e3)[1]
            if pad is not None:
                pad.gpu("step", s)
            e1.record(s)
        else:
            t = [time.perf_counter_ns(), None]
            yield lambda: (t[1] - t[0]) * 1e-9
            if pad is not None:
                pad.cpu(t[0])
            t[1] = time.perf_counter_ns()

    def timed_step(self, pad=None) -> float:
        """Seconds of one step: CUDA events on the current stream (synchronized), or wall time;
        ``pad``: an injected slowdown of the step (the worker's SlowdownPad)."""
        with self._clock(pad) as seconds:
            self.step()
        took = seconds()
        if pad is not None:
            pad.observe("step", took)
        return took

    def param_digest(self) -> str:
        """sha256 over this rank's parameters (its shards under FSDP)."""
        h = hashlib.sha256()
        for p in self.model.parameters():
            h.update(_local(p.detach()).float().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()

    def host_optimizers(self) -> list:
        """The optimizers whose parameters and state live on the host: DeepSpeed's inner
        optimizer (DeepSpeedCPUAdam over the fp32 partitions), torchao's per-parameter CPU
        optimizers, else the optimizer itself."""
        if self.engine is not None:
            return [getattr(self.opt, "optimizer", self.opt)]
        if hasattr(self.opt, "optim_dict"):
            return list(self.opt.optim_dict.values())
        if hasattr(self.opt, "inner"):  # MasterAdamW: the AdamW over its flat master
            return [self.opt.inner]
        return [self.opt]

    def host_state_ranges(self) -> list[tuple[int, int]]:
        """(address, bytes) of the CPU-resident parameters, their gradients (where the host
        keeps its own) and optimizer state, each once."""
        if self.streamed is not None:  # its flat host state: master weights and both moments
            return sorted(self.streamed.host_ranges())
        if self.mode == "streamed-split":  # offload_ratio 0: nothing on the host
            return []
        tensors = [_local(p.detach()) for p in self.model.parameters()]
        if self.engine is not None:
            tensors += deepspeed_host_tensors(self.opt)
        for opt in self.host_optimizers():
            for group in opt.param_groups:
                for p in group["params"]:
                    tensors.append(_local(p.detach()))
                    if p.grad is not None:
                        tensors.append(_local(p.grad))
            for st in opt.state.values():
                tensors += [_local(v) for v in st.values() if hasattr(v, "data_ptr")]
        ranges = {}
        for t in tensors:
            if t.device.type == "cpu" and t.numel() > 1:
                ranges[t.data_ptr()] = max(ranges.get(t.data_ptr(), 0), t.numel() * t.element_size())
        return sorted(ranges.items())


# The ZeRO optimizers' own host buffers. ZeRO-3 hands its inner optimizer (DeepSpeedCPUAdam) the
# fp32 partition of a sub-group only for the length of that sub-group's step
# (``param_groups[g]['params'] = [fp32_param]``, stepped, then ``= []``), so between steps the
# inner optimizer's param_groups list no master weights and only its state (the moments) is
# found through it: the fp32 master weights and their gradients must be read from the wrapper.
DEEPSPEED_HOST_LISTS = (
    "single_partition_of_fp32_groups",  # ZeRO-1/2: fp32 master partition per group (.grad: its gradient)
    "fp32_partitioned_groups_flat",  # ZeRO-3: fp32 master partition per sub-group (.grad likewise)
)
DEEPSPEED_HOST_BUFFERS = (
    "grad_partitions_flat_buffer",  # ZeRO-3 with offload: the (pinned) flat fp32 gradient buffer
)


def deepspeed_host_tensors(zero_optimizer) -> list:
    """The host tensors a DeepSpeed ZeRO optimizer keeps outside its inner optimizer's
    param_groups: fp32 master partitions, their gradients, ZeRO-3's flat gradient buffer."""
    out = []
    for name in DEEPSPEED_HOST_LISTS:
        for t in getattr(zero_optimizer, name, None) or ():
            if hasattr(t, "data_ptr"):
                out.append(t.detach())
                if t.grad is not None:
                    out.append(t.grad)
    for name in DEEPSPEED_HOST_BUFFERS:
        t = getattr(zero_optimizer, name, None)
        if hasattr(t, "data_ptr"):
            out.append(t.detach())
    return out


def anon_report(pid: int | str = "self"):
    """Pages per node of the process's anonymous mappings (heap, malloc, pinned, mmap'd)."""
    from numabench.numa.placement import PlacementReport, read_numa_maps

    totals: dict[int, int] = {}
    for e in read_numa_maps(pid):
        if "anon" in e.attrs and "file" not in e.attrs:
            for n, b in e.node_bytes.items():
                totals[n] = totals.get(n, 0) + b
    return PlacementReport(totals, source=f"/proc/{pid}/numa_maps anon")


def host_memory(device=None) -> dict:
    """The process's host memory per node as numastat -p totals it (every mapping's pages in
    /proc/self/numa_maps), the pinned share of it (mappings CUDA sees as pinned; none without a
    GPU), the pinned bytes torch's caching host allocator owns (None where torch cannot say) and
    its helper processes' private pages (numastat.helper_memory)."""
    import torch

    from numabench.numa.numastat import helper_memory
    from numabench.numa.placement import PlacementReport, numa_maps_report, pinned_report, read_numa_maps
    from numabench.toolkit.hostmem import address_is_pinned

    maps = read_numa_maps()
    allocator = None
    if device is not None:
        try:  # a torch that reports its pinned pool (host_memory_stats); the key is its own
            stats = torch.cuda.memory.host_memory_stats()
            allocator = int(stats["allocated_bytes.current"]) if "allocated_bytes.current" in stats else None
        except (AttributeError, RuntimeError):
            allocator = None
    pinned = pinned_report(maps, address_is_pinned if device is not None else (lambda address: False))
    helpers = PlacementReport(helper_memory(), source="helper processes' private anon pages (numa_maps)")
    return {"numa_maps": numa_maps_report(entries=maps), "pinned": pinned, "pinned_allocator_bytes": allocator,
            "helpers": helpers}


def rank_threads(spec: WorkerSpec) -> int | None:
    """torch's intra-op threads for this rank: its CPUs shared among the ranks
    bound to the same node (``cpu_share``), so that ranks side by side do not
    run more threads than there are cores (GPU ranks too: FSDP's CPU offload
    runs the optimizer on the host). The knob ``rank_threads`` (--numa-axis
    rank_threads=N, in the case id) sets N, ``0`` leaves torch's default (one
    thread per CPU the process may run on). None: leave torch's default (no CPUs known)."""
    forced = (spec.knob("rank_threads") or "").strip()
    if forced:
        if not forced.isdigit():
            raise ValueError(f"rank_threads={forced!r}: allowed a whole number (0: torch's default)")
        return int(forced) or None
    cpus = spec.cpus
    if not cpus:
        return None
    share = spec.cpu_share or 1
    return max(1, len(cpus) // share)


class Worker(BaseWorker):
    def __init__(self, spec: WorkerSpec | dict) -> None:
        super().__init__(spec)
        spec = self.spec
        v = spec.variants[0]
        self.mode, self.model_name = v.get("mode", "ddp"), v.get("model", "tiny")
        self.trainer = None
        self.rehomed = None  # DeepSpeed's host state moved into placed buffers (the place axis)

    def setup(self) -> TrainStepReply:
        import torch
        import torch.distributed as dist

        from numabench.numa.placement import pages_report

        spec = self.spec
        rank, world = spec.rank, spec.nprocess
        cuda = spec.gpu is not None
        device = torch.device("cuda", spec.gpu) if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(device)
        threads = rank_threads(spec)
        if threads:
            torch.set_num_threads(threads)
        # the policy this rank really runs under (a launcher's own numactl, a cpuset), before any
        # host state is allocated: a rank without the case's policy fails the case, named
        running = running_policy()
        why = mismatch(spec.policy, running)
        if why:
            raise RuntimeError(f"rank {rank} did not get the case's memory policy: {why}")
        with self.setup_part("dist_init"):
            addr, port = rendezvous.init_process_group("nccl" if cuda else "gloo", rank, world, timeout_s=300,
                                                       **({"device_id": device} if cuda else {}))
        # torchrun's variables, as a library that assumes torchrun reads them (DeepSpeed takes its
        # device from LOCAL_RANK and looks for the rest before it reuses the process group)
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(spec.gpu if cuda else 0),
                          MASTER_ADDR=addr, MASTER_PORT=str(port))
        with self.setup_part("model"):
            self.trainer = tr = Trainer(self.mode, self.model_name, spec.dtype, spec.batch, device,
                                        data_seed=rank, place=spec.place, **self._split_and_zenflow(device))
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        # Correct before timed: the loss on one fixed batch falls over the setup steps.
        fixed = tr.pool[0]
        with self.setup_part("check"):
            losses = [float(tr.step(fixed))]
            if spec.place is not None and tr.engine is not None:  # DeepSpeed made its moments in that step
                from numabench.families.train_step.deepspeed_kinds import place_state

                self.rehomed = place_state(tr.opt, tr.host_optimizers(), self.mode, spec.place)
            losses += [float(tr.step(fixed)) for _ in range(SETUP_STEPS - 1)]
        if not all(map(lambda v: v == v and abs(v) != float("inf"), losses)) or not losses[-1] < losses[0]:
            raise RuntimeError(f"loss does not fall over {SETUP_STEPS} steps on a fixed batch: {losses}")
        digest = tr.param_digest()
        digests = [None] * world
        dist.all_gather_object(digests, digest)
        if self.mode == "ddp" and len(set(digests)) != 1:
            raise RuntimeError(f"DDP ranks hold different parameters after {SETUP_STEPS} steps: {digests}")
        idle = None
        if cuda and os.environ.get("NUMABENCH_PROFILE_IDLE", "0") == "1":
            # opt-in (.ci/gpu-offload sets it): CUPTI, once subscribed, can add launch latency to
            # the timed steps after it, and the gated ci entries are measured without it. Every
            # rank profiles the same steps (DDP's and DeepSpeed's collectives stay matched).
            from numabench.families.train_step.idle import profile_idle

            with self.setup_part("profile_idle"):
                try:
                    idle = GpuIdle(**profile_idle(tr.step, device))
                except (RuntimeError, ValueError, AttributeError) as e:  # a profiler without CUPTI
                    idle = GpuIdle(error=f"{type(e).__name__}: {e}")
        if cuda:
            torch.cuda.synchronize(device)
        ranges = tr.host_state_ranges()
        placement = pages_report(ranges) if ranges else anon_report()
        memory = host_memory(device if cuda else None)
        kinds = self._kind_report(tr) if spec.place is not None else None
        after = running_policy()  # the libraries set up: still the case's policy
        why = mismatch(spec.policy, after)
        if why:
            raise RuntimeError(f"rank {rank} left the case's memory policy while its trainer was set up: {why}")
        return TrainStepReply(
            placement=placement, kinds=kinds, placed="host state" if ranges else "process anon memory",
            mempolicy=running, case_policy=str(spec.policy) if spec.policy is not None else None,
            gpu_idle=idle, kernel_max_rel_error=tr.kernel_error,
            numa_maps=memory["numa_maps"], host_bytes_by_node=anon_report(),
            host_pinned_by_node=memory["pinned"], pinned_allocator_bytes=memory["pinned_allocator_bytes"],
            helper_host_by_node=memory["helpers"],
            peak_gpu_reserved_bytes=torch.cuda.max_memory_reserved(device) if cuda else None,
            gpu_memory_bytes=torch.cuda.mem_get_info(device)[1] if cuda else None,
            host_state_bytes=sum(n for _, n in ranges),
            peak_gpu_bytes=torch.cuda.max_memory_allocated(device) if cuda else None,
            setup_losses=losses, param_digest=digest, param_digests_all_ranks=digests,
            n_params=tr.n_params, tokens_per_step=tr.tokens_per_step, seq_len=tr.cfg.seq_len,
            batch_per_rank=tr.batch, impl=tr.impl, backend=dist.get_backend(),
            device_name=torch.cuda.get_device_name(device) if cuda else "cpu",
            threads=torch.get_num_threads(), torch=torch.__version__, offload_ratio=tr.offload_ratio,
            zenflow=tr.zenflow)

    def _split_and_zenflow(self, device) -> dict:
        """The Trainer's offload_ratio (the knob; auto resolved from the GPU's free memory now, before
        the model is made) and zenflow block (the knobs over the tutorial's), for the modes that read them."""
        from numabench.families.train_step import memory

        spec, out = self.spec, {}
        if self.mode in memory.SPLIT_MODES:
            free = None
            if device.type == "cuda":
                import torch

                free = torch.cuda.mem_get_info(device)[0]
            out["offload_ratio"] = memory.offload_ratio_of(self.mode, spec.knob("offload_ratio"), self.model_name,
                                                           spec.batch, spec.dtype, free)
        if self.mode == "deepspeed-zenflow":
            from numabench.families.train_step.configs import zenflow_block

            topk, interval = spec.knob("zenflow_topk"), spec.knob("zenflow_update_interval")
            out["zenflow"] = zenflow_block(float(topk) if topk not in (None, "auto") else None,
                                           int(interval) if interval not in (None, "auto") else None)
        return out

    def _kind_report(self, tr: Trainer) -> list:
        """Each kind's pages under ``place`` after the set-up steps; DeepSpeed's kinds must still be
        where they were placed (a kind it allocated anew would run unplaced)."""
        if tr.streamed is not None:
            return tr.streamed.kind_report()
        if self.rehomed is None:
            raise RuntimeError(f"mode {self.mode} keeps no host state the place axis places")
        from numabench.families.train_step.deepspeed_kinds import kind_tensors

        stray = self.rehomed.stray(kind_tensors(tr.opt, tr.host_optimizers()))
        if stray:
            raise RuntimeError(f"DeepSpeed allocated host state anew after it was placed by place={self.spec.place}, "
                               f"outside the placed buffers: {'; '.join(stray[:4])}")
        return self.rehomed.state.report(self.rehomed.addresses())

    def step(self, variant: dict | None = None) -> dict[str, float]:
        # DeepSpeed modes add parts (ours and DeepSpeed's timers of engine.step); not entries
        return {"step": self.trainer.timed_step(self.pad), **self.trainer.step_parts()}

    def close(self) -> None:
        import torch.distributed as dist

        if self.trainer is not None and self.trainer.streamed is not None:
            self.trainer.streamed.release()
        if self.trainer is not None and self.trainer.mode == "streamed-split":
            self.trainer.opt.release()  # its device part's hooks (the streamed part's released again: a no-op)
        if self.rehomed is not None:
            self.rehomed.release()
        if dist.is_initialized():
            dist.destroy_process_group()
