"""Our fused Adam/AdamW CUDA kernel (csrc/fused_adam.cu): loader, API, checks.

``adam_step_`` runs one in-place optimizer step on the caller's current CUDA
stream.  ``reference_adam_step`` is the float64 CPU reference built on
``torch.optim.Adam``/``AdamW``; ``check_against_reference`` compares the kernel
(or any other step function) with it on fresh random inputs.  torch is imported
lazily and nothing here needs a GPU except running the kernel itself.
"""
from __future__ import annotations

import functools
import math
import operator
import secrets
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Optional, Sequence, Tuple, Union

from numabench.kernels.build import load_extension
from numabench.kernels.reference import torch_adam_reference

if TYPE_CHECKING:  # pragma: no cover
    import torch

EXTENSION_NAME = "numabench_cuda_adam"
SOURCES = ("fused_adam.cu", "fused_adam_binding.cpp")

# sm_90 machine code for Hopper plus compute_90 PTX, so a newer GPU can JIT it.
# No --use_fast_math: the kernel is memory-bound (about 7 * sizeof(T) bytes per
# element against ~25 flops), so approximate sqrt/division would buy no time,
# while they would move results off torch's (IEEE sqrt and division) and flush
# denormals, and exp_avg_sq is often denormal in float32 (tiny gradients squared).
EXTRA_CUDA_CFLAGS = (
    "-O3",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
)
EXTRA_CFLAGS = ("-O3",)
# what load_extension builds (numabench.kernels.built reads it too)
BUILD = {"name": EXTENSION_NAME, "sources": list(SOURCES), "extra_cflags": list(EXTRA_CFLAGS),
         "extra_cuda_cflags": list(EXTRA_CUDA_CFLAGS)}

ALLOWED_DTYPE_NAMES = ("float32", "float16", "bfloat16")


@functools.lru_cache(maxsize=None)
def load() -> ModuleType:
    """Build (once, cached on disk) and import the extension."""
    return load_extension(**BUILD)


# --------------------------------------------------------------------------- #
# validation (also done by the binding; here so misuse fails before a build,  #
# and so it can be tested without a GPU)                                       #
# --------------------------------------------------------------------------- #

def _allowed_dtypes():
    import torch

    return (torch.float32, torch.float16, torch.bfloat16)


def _check_hyper(lr, beta1, beta2, eps, weight_decay, step) -> int:
    def finite_nonneg(name, x):
        if not isinstance(x, (int, float)) or isinstance(x, bool):
            raise TypeError(f"{name}={x!r} is invalid; allowed: a Python float")
        if not (math.isfinite(x) and x >= 0):
            raise ValueError(f"{name}={x!r} is invalid; allowed: a finite value >= 0")

    finite_nonneg("lr", lr)
    finite_nonneg("eps", eps)
    finite_nonneg("weight_decay", weight_decay)
    for name, b in (("beta1", beta1), ("beta2", beta2)):
        if not isinstance(b, (int, float)) or isinstance(b, bool):
            raise TypeError(f"{name}={b!r} is invalid; allowed: a Python float")
        if not (0.0 <= b < 1.0):
            raise ValueError(f"{name}={b!r} is invalid; allowed: 0 <= {name} < 1")
    if isinstance(step, bool):
        raise TypeError(f"step={step!r} is invalid; allowed: an int >= 1")
    try:
        step = operator.index(step)
    except TypeError:
        raise TypeError(f"step={step!r} is invalid; allowed: an int >= 1") from None
    if step < 1:
        raise ValueError(f"step={step} is invalid; allowed: an int >= 1 (this step's number, from 1)")
    return step


def _check_tensors(param, grad, exp_avg, exp_avg_sq, *, need_cuda: bool) -> None:
    import torch

    named = (("param", param), ("grad", grad), ("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq))
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} is a {type(t).__name__}; expected a torch.Tensor")
    if param.dtype not in _allowed_dtypes():
        raise TypeError(
            f"param has dtype {param.dtype}; allowed dtypes: {', '.join(ALLOWED_DTYPE_NAMES)}"
        )
    for name, t in named:
        if need_cuda and t.device.type != "cuda":
            raise ValueError(f"{name} is on device {t.device}; all four tensors must be CUDA tensors")
        if t.device != param.device:
            raise ValueError(
                f"{name} is on {t.device} but param is on {param.device}; "
                "all four tensors must be on one device"
            )
        if t.dtype != param.dtype:
            raise TypeError(
                f"{name} has dtype {t.dtype} but param has dtype {param.dtype}; all four "
                f"tensors must have one dtype (one of {', '.join(ALLOWED_DTYPE_NAMES)})"
            )
        if t.layout != torch.strided:
            raise ValueError(f"{name} has layout {t.layout}; only dense (strided) tensors are allowed")
        if not t.is_contiguous():
            raise ValueError(
                f"{name} is not contiguous (shape {tuple(t.shape)}, stride {t.stride()}); "
                "pass a contiguous tensor or view"
            )
        if t.numel() != param.numel():
            raise ValueError(
                f"{name} has {t.numel()} elements (shape {tuple(t.shape)}) but param has "
                f"{param.numel()} (shape {tuple(param.shape)}); the sizes must match"
            )


# --------------------------------------------------------------------------- #
# public API                                                                   #
# --------------------------------------------------------------------------- #

def adam_step_(
    param: "torch.Tensor",
    grad: "torch.Tensor",
    exp_avg: "torch.Tensor",
    exp_avg_sq: "torch.Tensor",
    *,
    lr: float,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    step: int,
    adamw: bool = False,
) -> None:
    """One in-place Adam (``adamw=False``, L2 decay) or AdamW step, number ``step`` (>= 1).

    Same update as ``torch.optim.Adam``/``AdamW``.  All four tensors: CUDA, one
    device, one dtype (float32/float16/bfloat16), contiguous (any element
    offset, e.g. slices of bigger buffers), same number of elements, no overlap.
    ``grad`` is read only.  Runs on the current CUDA stream; asynchronous.
    Raises TypeError/ValueError on bad arguments, RuntimeError on CUDA errors.
    """
    step = _check_hyper(lr, beta1, beta2, eps, weight_decay, step)
    _check_tensors(param, grad, exp_avg, exp_avg_sq, need_cuda=True)
    load().adam_step_(
        param, grad, exp_avg, exp_avg_sq,
        float(lr), float(beta1), float(beta2), float(eps), float(weight_decay), int(step), bool(adamw),
    )


def emulated_adam_step_(
    param, grad, exp_avg, exp_avg_sq, *, lr, beta1=0.9, beta2=0.999, eps=1e-8,
    weight_decay=0.0, step, adamw=False,
) -> None:
    """The kernel's arithmetic in torch ops (any device): float32 math, result
    rounded to the storage dtype, hyper-parameters prepared in double then
    rounded to float32 as the launcher does.  A CPU stand-in for ``adam_step_``
    used to test the checker and its error bounds without a GPU."""
    import torch

    step = _check_hyper(lr, beta1, beta2, eps, weight_decay, step)
    _check_tensors(param, grad, exp_avg, exp_avg_sq, need_cuda=False)

    def f32(x: float) -> torch.Tensor:
        return torch.tensor(x, dtype=torch.float32, device=param.device)

    bc1 = 1.0 - beta1 ** step
    bc2 = 1.0 - beta2 ** step
    p, g = param.float(), grad.float()
    m, v = exp_avg.float(), exp_avg_sq.float()
    if weight_decay != 0.0:
        if adamw:
            p = p * f32(1.0 - lr * weight_decay)
        else:
            g = g + f32(weight_decay) * p
    m = f32(beta1) * m + f32(1.0 - beta1) * g
    v = f32(beta2) * v + f32(1.0 - beta2) * g * g
    denom = torch.sqrt(v) / f32(math.sqrt(bc2)) + f32(eps)
    p = p - f32(lr / bc1) * m / denom
    param.copy_(p)
    exp_avg.copy_(m)
    exp_avg_sq.copy_(v)


def reference_adam_step(
    param, grad, exp_avg, exp_avg_sq, *, lr, beta1=0.9, beta2=0.999, eps=1e-8,
    weight_decay=0.0, step, adamw=False,
) -> Tuple["torch.Tensor", "torch.Tensor", "torch.Tensor"]:
    """Step number ``step`` by torch.optim's Adam/AdamW in float64 on the CPU
    (numabench.kernels.reference).

    The inputs (any dtype/device) are copied to new float64 CPU tensors and are
    not modified.  Returns ``(param, exp_avg, exp_avg_sq)`` after the step.
    """
    step = _check_hyper(lr, beta1, beta2, eps, weight_decay, step)
    return torch_adam_reference(param, [grad], exp_avg, exp_avg_sq, lr=lr, beta1=beta1, beta2=beta2,
                                eps=eps, weight_decay=weight_decay, step=step, adamw=adamw)


# --------------------------------------------------------------------------- #
# correctness check                                                            #
# --------------------------------------------------------------------------- #

# Unit roundoff of each storage dtype.
_UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}

# Bounds on ||out - ref|| / ||ref|| (ref: float64 from the same starting values)
# after `steps` steps at the check's hyper-parameters.  u = unit roundoff.
# - float32: each step adds a few roundings of u ~ 6e-8 (fp32 math and
#   storage); the float32-math emulation measures 4.5e-8 (1 step), 9e-8 (3),
#   2e-7 (10).  1e-5 leaves a wide margin yet catches formula slips (a missing
#   weight-decay or bias-correction term moves results by >= 1e-4 here).
# - float16 / bfloat16: outputs are rounded to storage every step, and a value
#   stalls when its update is below half an ulp (the float64 reference never
#   does), so the error grows with the step count.  The emulation measures
#   0.43 u (1 step), 0.76 u (3), 1.8 u (10), i.e. fp16 3.6e-4 / bf16 3.0e-3 at
#   3 steps.  Bound: 1.5 u (1 + steps / 2), ~5x that: at 3 steps fp16 1.8e-3,
#   bf16 1.5e-2; at 10 steps fp16 4.4e-3, bf16 3.5e-2.  Formula errors are
#   caught by the float32 check (same arithmetic code for every dtype).
_FP32_BOUND = 1e-5


def error_bound(dtype, steps: int) -> float:
    """Allowed max relative error for ``steps`` consecutive steps in ``dtype``."""
    name = str(dtype).replace("torch.", "")
    if name == "float32":
        return _FP32_BOUND
    return 1.5 * _UNIT_ROUNDOFF[name] * (1 + steps / 2)


StepFn = Callable[..., None]
Offsets = Union[int, Sequence[int]]


def _dtype_from(dtype):
    import torch

    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.replace("torch.", ""))
    if dtype not in _allowed_dtypes():
        raise TypeError(f"dtype {dtype} is not supported; allowed: {', '.join(ALLOWED_DTYPE_NAMES)}")
    return dtype


def check_against_reference(
    device,
    dtype,
    numel: int,
    steps: int = 3,
    adamw: bool = False,
    seed: Optional[int] = None,
    *,
    lr: float = 1e-2,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 1e-2,
    start_step: int = 1,
    offset: Offsets = 0,
    step_fn: Optional[StepFn] = None,
) -> float:
    """Run ``steps`` consecutive steps of ``step_fn`` (default: our CUDA kernel)
    and of the float64 torch.optim reference on fresh random inputs; return the
    max relative error ||out - ref|| / ||ref|| over param/exp_avg/exp_avg_sq
    and over the steps (||ref||: the tensor's largest norm so far in the run).

    ``offset``: element offset of each tensor into its buffer (one int for all
    four, or four ints), to exercise misaligned views.  Raises AssertionError
    (message with the seed to reproduce) if the error is above
    ``error_bound(dtype, steps)``, if any output is not finite, or if the
    coverage step (inputs and hyper-parameters under which every element must
    change) leaves an element unwritten or wrong.
    """
    import torch

    dtype = _dtype_from(dtype)
    device = torch.device(device)
    if step_fn is None:
        step_fn = adam_step_
    if seed is None:
        seed = secrets.randbits(63)
    offsets = [offset] * 4 if isinstance(offset, int) else list(offset)
    if len(offsets) != 4 or any(o < 0 for o in offsets):
        raise ValueError(f"offset={offset!r} is invalid; allowed: an int >= 0 or four of them")
    if numel < 1 or steps < 1 or start_step < 1:
        raise ValueError(f"numel={numel}, steps={steps}, start_step={start_step}: all must be >= 1")
    dname = str(dtype).replace("torch.", "")
    what = (f"device={device} dtype={dname} numel={numel} offsets={offsets} "
            f"{'adamw' if adamw else 'adam'} seed={seed}")
    gen = torch.Generator().manual_seed(seed)

    def randn(scale=1.0):
        return torch.randn(numel, generator=gen, dtype=torch.float64) * scale

    def uniform(lo, hi):
        return torch.rand(numel, generator=gen, dtype=torch.float64) * (hi - lo) + lo

    # Views at the requested element offsets into fresh buffers, filled with garbage first.
    views = []
    for off in offsets:
        buf = torch.full((numel + off,), float("nan"), dtype=dtype, device=device)
        views.append(buf[off:])
    p, g, m, v = views

    def fill(t, values):
        t.copy_(values.to(dtype))  # rounds to the storage dtype on the CPU, then moves

    # --- several consecutive steps on random data ---------------------------------
    fill(p, randn())
    fill(m, randn(0.3))
    fill(v, randn(0.3) ** 2 + 1e-3)  # non-negative, never zero
    ref = [t.detach().to("cpu", torch.float64) for t in (p, m, v)]
    # Error of each tensor relative to its largest norm so far in the run: for
    # many elements that is ||out - ref|| / ||ref||; for a handful it keeps a
    # value that cancels towards zero (m = b1 m + (1 - b1) g) from blowing up
    # the ratio of an error inherited from earlier, larger values.
    scale = [float(torch.linalg.vector_norm(r)) for r in ref]
    hyper = dict(lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, adamw=adamw)
    worst = 0.0
    names = ("param", "exp_avg", "exp_avg_sq")
    for k in range(steps):
        step = start_step + k
        fill(g, randn())
        g_used = g.detach().to("cpu", torch.float64)
        step_fn(p, g, m, v, step=step, **hyper)
        ref = list(reference_adam_step(ref[0], g_used, ref[1], ref[2], step=step, **hyper))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        for j, (name, out, r) in enumerate(zip(names, (p, m, v), ref)):
            o = out.detach().to("cpu", torch.float64)
            scale[j] = max(scale[j], float(torch.linalg.vector_norm(r)))
            bad = ~torch.isfinite(o)
            if bad.any():
                i = int(bad.nonzero()[0])
                raise AssertionError(
                    f"{what}: step {step}: {name} has {int(bad.sum())} non-finite outputs "
                    f"(first at index {i}: {float(o[i])}, reference {float(r[i])})"
                )
            err = float(torch.linalg.vector_norm(o - r)) / scale[j] if scale[j] > 0 else 0.0
            worst = max(worst, err)
        if not torch.equal(g.detach().to("cpu", torch.float64), g_used):
            raise AssertionError(f"{what}: step {step}: grad was modified")
    bound = error_bound(dtype, steps)
    if not worst <= bound:
        raise AssertionError(
            f"{what}: max relative error {worst:.3e} over {steps} steps is above the "
            f"{dname} bound {bound:.1e}"
        )

    # --- coverage: every element must change, by far more than rounding -----------
    # beta1 = beta2 = 0.5, lr = 0.5, |g| in [1, 2], |m| <= 0.25, v <= 0.25, |p| <= 1:
    # each of m, v, p moves by >= 0.15 while the allowed error is <= 0.05 (bf16).
    cov = dict(lr=0.5, beta1=0.5, beta2=0.5, eps=1e-8, weight_decay=min(weight_decay, 0.1), adamw=adamw)
    sign = torch.where(torch.rand(numel, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
    fill(p, uniform(-1.0, 1.0))
    fill(g, sign * uniform(1.0, 2.0))
    fill(m, uniform(-0.25, 0.25))
    fill(v, uniform(0.01, 0.25))
    before = [t.detach().to("cpu", torch.float64) for t in (p, g, m, v)]
    step_fn(p, g, m, v, step=1, **cov)
    ref = reference_adam_step(*before, step=1, **cov)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    rel = max(4 * _UNIT_ROUNDOFF[dname], 2e-6)
    for name, out, r, b in zip(names, (p, m, v), ref, (before[0], before[2], before[3])):
        o = out.detach().to("cpu", torch.float64)
        unchanged = o == b
        wrong = ~((o - r).abs() <= rel * (r.abs() + b.abs()))  # also catches NaN
        for label, mask in (("unwritten (unchanged)", unchanged), ("wrong", wrong)):
            if mask.any():
                i = int(mask.nonzero()[0])
                raise AssertionError(
                    f"{what}: coverage step: {int(mask.sum())} {name} elements {label}; "
                    f"first at index {i}: in {float(b[i])}, out {float(o[i])}, reference {float(r[i])}"
                )
    return worst
