"""Family ``cpu_adam``, per rank: Adam over host-resident state on this node's CPUs.

Variants (``impl``) share the placed memory:
- ``ours``: csrc/cpu_adam.cpp (OpenMP + AVX-512/AVX2), one pass.
- ``ours+copy``: the same pass also writes the bf16 copy of the updated params
  that ZeRO-Offload ships back to the GPU.
- ``torch-fused``: torch.optim.Adam(fused=True)'s CPU kernel (aten::_fused_adam_).
- ``torch-fused+copy``: that, then ``copy_`` into the bf16 buffer (a second pass).
- ``torch-foreach``: torch.optim.Adam(foreach=True)'s multi-tensor path.
- ``deepspeed``: DeepSpeedCPUAdam, when deepspeed is importable.
"""
from __future__ import annotations

import time

from numabench.families.base import Worker as BaseWorker
from numabench.families.base import WorkerSpec
from numabench.families.cpu_adam import IMPLS, STATE_BUFFERS, TOUCHES
from numabench.families.cpu_adam.reply import CpuAdamReply
from numabench.numa.kind_layout import StateBuffer
from numabench.numa.placement import numa_maps_report, pages_report
from numabench.toolkit.hostmem import allocate
from numabench.toolkit.placed_state import PlacedState
from numabench.toolkit.random_fill import fill_random_

LR, BETA1, BETA2, EPS, WEIGHT_DECAY = 1e-3, 0.9, 0.999, 1e-8, 0.0


def deepspeed_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("deepspeed") is not None


class Worker(BaseWorker):

    def __init__(self, spec: WorkerSpec | dict) -> None:
        super().__init__(spec)
        self.dtype = self.torch_dtype()
        self.threads = self.cpu_threads()
        self.step_no = 0

    def setup(self) -> CpuAdamReply:
        import torch

        from numabench.kernels import cpu_adam

        torch.set_num_threads(self.threads)
        cpu_adam.force_simd(self.spec.knob("simd_level"))  # the simd_level knob (auto: the best level)
        impls = {v.get("impl", "ours") for v in self.spec.variants}
        errors = {}
        if impls & {"ours", "ours+copy"}:
            # Checked in every run, not once per session (adam_offload's way): the check runs the
            # timed kernel on these CPUs and warms what the timed rounds then use (thread pool,
            # heap), so a run without it would time a different process than a run with it.
            with self.setup_part("check"):
                for a in ("adam", "adamw"):
                    errors[f"ours-{a}"] = cpu_adam.check_against_reference(
                        self.dtype, (1 << 18) + 7, steps=3, adamw=a == "adamw",
                        with_copy_out=torch.bfloat16 if self.dtype == torch.float32 else None,
                        num_threads=self.threads)
        names = ("param", "grad", "exp_avg", "exp_avg_sq")
        itemsize = {n: torch.empty((), dtype=torch.bfloat16 if n == "copy_out" else self.dtype).element_size()
                    for n in STATE_BUFFERS}
        state = PlacedState(self.spec.place, [StateBuffer(n, k, self.numel * itemsize[n])
                                              for n, k in STATE_BUFFERS.items()], TOUCHES)
        self.host = {n: allocate(self.numel, self.dtype, "pageable", state.segments_of(n)) for n in names}
        self.copy_out = allocate(self.numel, torch.bfloat16, "pageable", state.segments_of("copy_out"))
        t = self.host
        seed = 4321 + 8 * self.spec.rank  # a seed per rank and tensor; filled on the worker's threads
        for k, (name, distribution, a, b) in enumerate((("param", "normal", 0, 1), ("grad", "normal", 0, 1e-2),
                                                        ("exp_avg", "normal", 0, 1e-2),
                                                        ("exp_avg_sq", "uniform", 1e-6, 1e-4))):
            fill_random_(t[name].tensor, distribution, a, b, seed + k, self.threads)
        self.step_t = torch.zeros((), dtype=torch.float32)
        self.ds = None
        if "deepspeed" in impls:
            if not deepspeed_available():
                raise RuntimeError("impl deepspeed requested but deepspeed is not importable")
            from deepspeed.ops.adam import DeepSpeedCPUAdam

            p = torch.nn.Parameter(t["param"].tensor)
            p.grad = t["grad"].tensor
            self.ds = DeepSpeedCPUAdam([p], lr=LR, betas=(BETA1, BETA2), eps=EPS, weight_decay=WEIGHT_DECAY,
                                       adamw_mode=False)
            self.ds.state[p] = {"step": 0, "exp_avg": t["exp_avg"].tensor, "exp_avg_sq": t["exp_avg_sq"].tensor}
        ranges = [(b.address, b.nbytes) for b in self.host.values()]
        kinds = state.report({**{n: b.address for n, b in self.host.items()}, "copy_out": self.copy_out.address})
        return CpuAdamReply(placement=pages_report(ranges), kinds=kinds, numa_maps=numa_maps_report(ranges=ranges),
                            threads=self.threads, max_rel_error=errors,
                            # our kernel's SIMD level, where it is loaded (torch's and DeepSpeed's impls never need it)
                            simd=cpu_adam.simd_level() if impls & {"ours", "ours+copy"} else None,
                            bytes_per_element={"plain": 7 * self.host["param"].tensor.element_size()})

    def step(self, variant: dict | None = None) -> dict[str, float]:
        import torch

        from numabench.kernels import cpu_adam

        impl = (variant or {}).get("impl", "ours")
        self.step_no += 1
        t = {n: b.tensor for n, b in self.host.items()}
        hyper = dict(lr=LR, beta1=BETA1, beta2=BETA2, eps=EPS, weight_decay=WEIGHT_DECAY)
        t0 = time.perf_counter_ns()
        if impl in ("ours", "ours+copy"):
            cpu_adam.adam_step_(t["param"], t["grad"], t["exp_avg"], t["exp_avg_sq"], step=self.step_no,
                                param_copy_out=self.copy_out.tensor if impl == "ours+copy" else None,
                                num_threads=self.threads, **hyper)
        elif impl in ("torch-fused", "torch-fused+copy"):
            self.step_t.fill_(float(self.step_no))
            torch._fused_adam_([t["param"]], [t["grad"]], [t["exp_avg"]], [t["exp_avg_sq"]], [], [self.step_t],
                               lr=LR, beta1=BETA1, beta2=BETA2, weight_decay=WEIGHT_DECAY, eps=EPS,
                               amsgrad=False, maximize=False)
            if impl == "torch-fused+copy":
                self.copy_out.tensor.copy_(t["param"])
        elif impl == "torch-foreach":
            self.step_t.fill_(float(self.step_no - 1))
            torch.optim._functional.adam([t["param"]], [t["grad"]], [t["exp_avg"]], [t["exp_avg_sq"]], [],
                                         [self.step_t], foreach=True, amsgrad=False, beta1=BETA1, beta2=BETA2,
                                         lr=LR, weight_decay=WEIGHT_DECAY, eps=EPS, maximize=False)
        elif impl == "deepspeed":
            self.ds.step()
        else:
            raise ValueError(f"unknown impl {impl!r}: allowed {', '.join(IMPLS)}")
        self.pad.cpu(t0)
        return {"step": (time.perf_counter_ns() - t0) * 1e-9}
