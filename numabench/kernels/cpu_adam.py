"""Our CPU Adam/AdamW step (csrc/cpu_adam.cpp), its float64 reference and checks.

``adam_step_`` updates ``param``, ``exp_avg`` and ``exp_avg_sq`` in place in one
pass over memory and can write the updated param, converted to bf16/fp16, into
``param_copy_out`` in the same pass (ZeRO-Offload ships that to the GPU).

The SIMD level is chosen at run time (AVX-512, AVX2 or scalar);
``force_simd(level)`` forces one for this process (the kernel reads
``NUMABENCH_CPU_ADAM_SIMD=scalar|avx2|avx512|auto`` at each call; the cpu_adam
family sets it from its ``simd_level`` knob, and a benchmark run refuses it
inherited), and a level the CPU lacks raises ``RuntimeError``.  ``simd_level()``
says what the dispatch picks.
"""
from __future__ import annotations

import math
import os
from types import ModuleType
from typing import Optional, Sequence

from numabench.kernels.build import load_extension
from numabench.kernels.reference import torch_adam_reference

__all__ = [
    "load",
    "adam_step_",
    "simd_level",
    "reference_adam_step",
    "check_against_reference",
    "ERROR_BOUNDS",
]

EXT_NAME = "numabench_cpu_adam"
# -O3 and OpenMP only: no -march, so the SIMD code is enabled per function with
# __attribute__((target)) and the one binary runs on any x86-64 host.
CFLAGS = ["-O3", "-fopenmp", "-fno-math-errno"]
LDFLAGS = ["-fopenmp"]
# what load_extension builds (numabench.kernels.built reads it too)
BUILD = {"name": EXT_NAME, "sources": ["cpu_adam.cpp"], "extra_cflags": CFLAGS, "extra_ldflags": LDFLAGS}

_ext: Optional[ModuleType] = None

# Max relative error ||out - ref|| / max(||ref||, sqrt(n)*s) (per output tensor)
# after `steps` steps vs the float64 torch.optim reference; s is the typical
# magnitude of that tensor's random draw (DRAW_SCALE), a floor that only matters
# for tiny n where one element can cancel to ~0 (e.g. m = 0.9*m + 0.1*g), which
# would make a purely relative error meaningless.  u = unit roundoff of the
# storage dtype; every step rounds p, m, v once, and a rounding of m/v at step k
# decays by beta^(steps-k), so a single element's worst case is ~steps*u and the
# norm-wise error over many elements ~sqrt(steps)*u/sqrt(3) (measured below):
#  * float32  (u = 6.0e-8): measured ~1e-7 at 1M elements; bound 1e-6 (16u)
#    still catches any formula slip (a wrong bias correction or eps placement
#    gives >= 1e-4 here).
#  * float16  (u = 4.9e-4): measured ~4e-4 at 1M; single elements (n=1, 17) can
#    reach ~steps*u = 1.5e-3 -> bound 4e-3 (8u).
#  * bfloat16 (u = 3.9e-3): measured ~2.7e-3 at 1M; single elements ~1.2e-2 ->
#    bound 3e-2 (8u).
# Rounding (RNE vs truncation) is too small a difference for these norms; the
# tests check it bit-exactly (copy-out, halfway values, one-step state rounding).
# The ZeRO-Offload layouts (fp32 param/state, 16-bit grad) use the fp32 bound:
# the reference reads the same 16-bit grad values, so only fp32 rounding remains.
ERROR_BOUNDS = {"float32": 1e-6, "float16": 4e-3, "bfloat16": 3e-2}
# RMS of the random draws in check_against_reference (the error floor above).
DRAW_SCALE = {"param": 1.0, "exp_avg": 0.1, "exp_avg_sq": 0.05}


def load() -> ModuleType:
    """Build (once, cached on disk) and import the extension."""
    global _ext
    if _ext is None:
        _ext = load_extension(**BUILD)
    return _ext


SIMD_ENV = "NUMABENCH_CPU_ADAM_SIMD"  # read by csrc/cpu_adam.cpp at every call
SCHEDULE_ENV = "NUMABENCH_CPU_ADAM_SCHEDULE"  # likewise: the threads' schedule, static (default) or dynamic


def force_simd(level: str | None) -> None:
    """Run this process's kernel calls at ``level`` (scalar, avx2, avx512; None or auto: the best)."""
    if level and level != "auto":
        os.environ[SIMD_ENV] = level
    else:
        os.environ.pop(SIMD_ENV, None)


def simd_level() -> str:
    """The SIMD level ('avx512', 'avx2' or 'scalar') the run-time dispatch picks now
    (honouring NUMABENCH_CPU_ADAM_SIMD)."""
    return load().simd_level()


def best_simd_level() -> str:
    """The best SIMD level this CPU supports, ignoring NUMABENCH_CPU_ADAM_SIMD."""
    return load().simd_best()


def _dtype_name(dt) -> str:
    return str(dt).replace("torch.", "")


def _validate(param, grad, exp_avg, exp_avg_sq, param_copy_out, lr, beta1, beta2, eps,
              weight_decay, step, num_threads) -> None:
    import torch

    allowed = (torch.float32, torch.float16, torch.bfloat16)
    named = [("param", param), ("grad", grad), ("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq)]
    if param_copy_out is not None:
        named.append(("param_copy_out", param_copy_out))
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cpu":
            raise ValueError(f"{name} is on device {t.device}; only CPU tensors are allowed")
        if t.dtype not in allowed:
            raise TypeError(
                f"{name} has dtype {_dtype_name(t.dtype)}; allowed: float32, float16, bfloat16")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (got strides {tuple(t.stride())}); "
                             "call .contiguous() first")
        if t.numel() != param.numel():
            raise ValueError(f"{name} has {t.numel()} elements but param has {param.numel()}; "
                             "all tensors must have the same numel")
    if exp_avg.dtype != exp_avg_sq.dtype:
        raise TypeError(f"exp_avg ({_dtype_name(exp_avg.dtype)}) and exp_avg_sq "
                        f"({_dtype_name(exp_avg_sq.dtype)}) must have the same dtype")
    same = param.dtype == grad.dtype == exp_avg.dtype
    zero = param.dtype == torch.float32 and exp_avg.dtype == torch.float32
    if not (same or zero):
        raise TypeError(
            f"unsupported dtype combination param={_dtype_name(param.dtype)} "
            f"grad={_dtype_name(grad.dtype)} exp_avg={_dtype_name(exp_avg.dtype)}; allowed: all "
            "one dtype (float32/float16/bfloat16), or float32 param/exp_avg/exp_avg_sq with a "
            "float32/bfloat16/float16 grad")
    if param_copy_out is not None and param_copy_out.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"param_copy_out has dtype {_dtype_name(param_copy_out.dtype)}; "
                        "allowed: bfloat16, float16")
    ptrs = {name: t.data_ptr() for name, t in named}
    if len(set(ptrs.values())) != len(ptrs) and param.numel() > 0:
        raise ValueError(f"tensors must not alias each other (data pointers {ptrs})")
    if not (isinstance(step, int) and not isinstance(step, bool)) or step < 1:
        raise ValueError(f"step must be an int >= 1 (the step number, as torch counts), got {step!r}")
    for name, val, lo, hi in (("beta1", beta1, 0.0, 1.0), ("beta2", beta2, 0.0, 1.0)):
        if not (lo <= val < hi):
            raise ValueError(f"{name}={val!r} is out of range; allowed: 0 <= {name} < 1")
    for name, val in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay)):
        if not (math.isfinite(val) and val >= 0):
            raise ValueError(f"{name}={val!r}; allowed: a finite number >= 0")
    if not isinstance(num_threads, int) or isinstance(num_threads, bool):
        raise TypeError(f"num_threads must be an int (<= 0: torch.get_num_threads()), "
                        f"got {num_threads!r}")


def adam_step_(param, grad, exp_avg, exp_avg_sq, *, lr: float, beta1: float = 0.9,
               beta2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.0, step: int,
               adamw: bool = False, param_copy_out=None, num_threads: int = 0) -> None:
    """One Adam (``adamw=False``: L2 decay added to the grad) or AdamW (decoupled:
    ``p *= 1 - lr*weight_decay``) step, in place, with bias correction for step
    number ``step`` (1-based, as torch.optim counts).  Same formula as torch:

        m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
        p -= lr/(1-b1^step) * m / (sqrt(v)/sqrt(1-b2^step) + eps)

    Math is fp32.  ``param_copy_out`` (bf16/fp16, same numel) receives the updated
    param (its stored value) converted with round-to-nearest-even in the same pass.
    ``num_threads <= 0`` uses ``torch.get_num_threads()``.
    """
    _validate(param, grad, exp_avg, exp_avg_sq, param_copy_out, lr, beta1, beta2, eps,
              weight_decay, step, num_threads)
    load().adam_step(param, grad, exp_avg, exp_avg_sq, float(lr), float(beta1), float(beta2),
                     float(eps), float(weight_decay), int(step), bool(adamw), param_copy_out,
                     int(num_threads))


def reference_adam_step(param, grads: Sequence, exp_avg, exp_avg_sq, *, lr: float,
                        beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                        weight_decay: float = 0.0, step: int, adamw: bool = False):
    """The same step(s) in float64 by torch.optim's Adam/AdamW (its for-loop implementation,
    no fused/foreach shortcuts; numabench.kernels.reference).

    ``grads`` is one gradient tensor or a sequence of them: the k-th is applied as
    step number ``step + k``.  Inputs are not modified.  Returns float64
    ``(param, exp_avg, exp_avg_sq)`` after the last step.
    """
    return torch_adam_reference(param, grads, exp_avg, exp_avg_sq, lr=lr, beta1=beta1, beta2=beta2,
                                eps=eps, weight_decay=weight_decay, step=step, adamw=adamw)


def _rel_err(out, ref, scale: float) -> float:
    import torch

    num = torch.linalg.vector_norm(out.to(torch.float64) - ref).item()
    den = max(torch.linalg.vector_norm(ref).item(), math.sqrt(ref.numel()) * scale)
    return num / den


def check_against_reference(dtype, numel: int, steps: int = 3, adamw: bool = False,
                            with_copy_out=None, seed: Optional[int] = None,
                            num_threads: int = 0, grad_dtype=None, lr: float = 1e-2,
                            weight_decay: float = 0.05, first_step: int = 1) -> float:
    """Draw fresh random inputs, run ``steps`` consecutive steps of ours and of the
    float64 reference, and return the max relative error over param, exp_avg and
    exp_avg_sq (||out - ref|| / max(||ref||, sqrt(numel) * DRAW_SCALE[name])).

    ``dtype``: storage dtype of param and state (torch dtype or its name);
    ``grad_dtype`` (default ``dtype``): e.g. bfloat16 with float32 ``dtype`` is the
    ZeRO-Offload layout.  ``with_copy_out``: None or bf16/fp16; it must equal the
    updated param rounded to that dtype, exactly.  Raises AssertionError (naming
    dtype, size, error and bound) when the error exceeds ``ERROR_BOUNDS``.
    """
    import torch

    def as_dtype(d):
        return getattr(torch, d) if isinstance(d, str) else d

    dtype = as_dtype(dtype)
    grad_dtype = as_dtype(grad_dtype) if grad_dtype is not None else dtype
    with_copy_out = as_dtype(with_copy_out) if with_copy_out is not None else None
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
    gen = torch.Generator().manual_seed(seed)

    def randn(dt, scale=1.0, offset=0.0):
        x = torch.randn(numel, generator=gen, dtype=torch.float32) * scale + offset
        return x.to(dt)

    # Never zeros; exp_avg_sq > 0 and on the scale of g*g so the update is O(lr).
    param = randn(dtype)
    exp_avg = randn(dtype, 0.1)
    exp_avg_sq = (torch.rand(numel, generator=gen) * 0.1 + 0.01).to(dtype)  # mean 0.06
    grads = [randn(grad_dtype, 0.3) for _ in range(steps)]
    ref = reference_adam_step(param, grads, exp_avg, exp_avg_sq, lr=lr, weight_decay=weight_decay,
                              step=first_step, adamw=adamw)

    copy = torch.empty(numel, dtype=with_copy_out) if with_copy_out is not None else None
    p, m, v = param.clone(), exp_avg.clone(), exp_avg_sq.clone()
    for k, g in enumerate(grads):
        adam_step_(p, g, m, v, lr=lr, weight_decay=weight_decay, step=first_step + k,
                   adamw=adamw, param_copy_out=copy, num_threads=num_threads)
        if copy is not None:
            want = p.to(with_copy_out)
            # Compare bit patterns (NaN-safe and exact).
            bad = (copy.view(torch.int16) != want.view(torch.int16)).nonzero()
            if bad.numel():
                i = int(bad[0, 0])
                raise AssertionError(
                    f"param_copy_out ({_dtype_name(with_copy_out)}) != updated param "
                    f"({_dtype_name(dtype)}) rounded to {_dtype_name(with_copy_out)} at "
                    f"{bad.shape[0]} of {numel} elements, first at index {i}: got "
                    f"{copy[i].item()!r}, want {want[i].item()!r} (step {first_step + k})")
    errs = {name: _rel_err(out, r, DRAW_SCALE[name]) for name, out, r in
            (("param", p, ref[0]), ("exp_avg", m, ref[1]), ("exp_avg_sq", v, ref[2]))}
    worst = max(errs.values())
    bound = ERROR_BOUNDS[_dtype_name(dtype)]
    if not worst <= bound:  # also catches NaN
        raise AssertionError(
            f"cpu_adam {'AdamW' if adamw else 'Adam'} dtype={_dtype_name(dtype)} "
            f"grad={_dtype_name(grad_dtype)} numel={numel} steps={steps} "
            f"simd={simd_level()} threads={num_threads} seed={seed}: max relative error "
            f"{worst:.3e} > bound {bound:.1e} (per output: "
            + ", ".join(f"{k}={e:.2e}" for k, e in errs.items()) + ")")
    return worst
