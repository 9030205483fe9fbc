"""Tests of the fused Adam/AdamW CUDA kernel (csrc/fused_adam.cu).

CI (no GPU): the kernel compiles standalone with the local nvcc (sm_90 and
compute_90 PTX), ptxas reports no spills, and the float64 reference and the
checker are themselves checked on the CPU.  Tests marked ``gpu`` run the kernel
and skip without a CUDA device.
"""
from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from numabench.kernels import cuda_adam  # noqa: E402

CSRC = Path(__file__).resolve().parents[1] / "csrc"
KERNEL_CU = CSRC / "fused_adam.cu"
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found on PATH: cannot compile-check the CUDA kernel")

HAS_CUDA = torch.cuda.is_available()
gpu = [pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")]

# The kernels the launcher can run: {vector, scalar} x {float, half, bf16}.
EXPECTED_KERNELS = 6

# Defines torch's cpp_extension passes to nvcc: the kernel must build under them.
TORCH_NVCC_DEFINES = [
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
]


def _nvcc(args, cwd):
    proc = subprocess.run([NVCC, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"nvcc {' '.join(args)} failed (exit {proc.returncode}):\n{out}"
    return out


@pytest.fixture(scope="module")
def sm90_build(tmp_path_factory):
    """One standalone compile for sm_90 with the ptxas resource report."""
    if NVCC is None:
        pytest.skip("nvcc not found on PATH: cannot compile-check the CUDA kernel")
    d = tmp_path_factory.mktemp("nvcc_sm90")
    obj = d / "fused_adam.o"
    out = _nvcc(["-c", "-arch=sm_90", "-O3", "-Xptxas", "-v", str(KERNEL_CU), "-o", str(obj)], d)
    return obj, out


def _no_warnings(out: str) -> None:
    bad = [ln for ln in out.splitlines() if re.search(r"warning|error", ln, re.I)]
    assert not bad, "nvcc printed warnings:\n" + "\n".join(bad)


def _ptxas_report(out: str) -> dict:
    """{entry function: {registers, stack, spill_stores, spill_loads}} from -Xptxas -v."""
    funcs: dict = {}
    current = None
    for line in out.splitlines():
        m = re.search(r"Compiling entry function '([^']+)' for 'sm_90'", line)
        if m:
            current = m.group(1)
            funcs[current] = {}
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            funcs[current].update(stack=int(m.group(1)), spill_stores=int(m.group(2)),
                                  spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            funcs[current]["registers"] = int(m.group(1))
    return funcs


# --------------------------------------------------------------------------- #
# compile checks (local nvcc, no GPU)                                          #
# --------------------------------------------------------------------------- #

@needs_nvcc
def test_kernel_compiles_for_sm90(sm90_build):
    obj, out = sm90_build
    assert obj.is_file() and obj.stat().st_size > 0, f"nvcc produced no object file:\n{out}"
    _no_warnings(out)


@needs_nvcc
def test_kernel_compiles_ptx_under_torch_flags(tmp_path):
    """compute_90 PTX target, with the half/bf16 defines torch's build adds."""
    obj = tmp_path / "fused_adam_ptx.o"
    out = _nvcc(["-c", "-gencode", "arch=compute_90,code=compute_90", "-O3", "-std=c++17",
                 *TORCH_NVCC_DEFINES, str(KERNEL_CU), "-o", str(obj)], tmp_path)
    assert obj.is_file() and obj.stat().st_size > 0, f"nvcc produced no object file:\n{out}"
    _no_warnings(out)


@needs_nvcc
def test_ptxas_reports_no_spills(sm90_build):
    _, out = sm90_build
    funcs = _ptxas_report(out)
    assert len(funcs) == EXPECTED_KERNELS, f"expected {EXPECTED_KERNELS} kernels in the ptxas report:\n{out}"
    for name, r in funcs.items():
        assert {"registers", "stack", "spill_stores", "spill_loads"} <= r.keys(), (name, r, out)
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, f"{name} spills: {r}"
        assert r["stack"] == 0, f"{name} uses a stack frame (local memory): {r}"
        # __launch_bounds__(256): ptxas may use up to 255; more than 128 would
        # halve the resident warps below what keeps enough loads in flight.
        assert r["registers"] <= 128, f"{name} uses {r['registers']} registers"


def test_sources_have_no_torch_includes():
    for name in ("fused_adam.cu", "fused_adam.cuh"):
        text = (CSRC / name).read_text()
        assert not re.search(r"#\s*include\s*[<\"](torch|ATen|c10)/", text), name
    binding = (CSRC / "fused_adam_binding.cpp").read_text()
    assert not re.search(r"#\s*include\s*[<\"]ATen/cuda/", binding), "binding must not include ATen/cuda headers"
    assert "c10/cuda/CUDAStream.h" in binding and "getCurrentCUDAStream" in binding


def test_build_flags():
    flags = " ".join(cuda_adam.EXTRA_CUDA_CFLAGS)
    assert "arch=compute_90,code=sm_90" in flags and "arch=compute_90,code=compute_90" in flags
    assert "-O3" in flags and "fast_math" not in flags and "fast-math" not in flags


# --------------------------------------------------------------------------- #
# the reference and the checker, on the CPU                                   #
# --------------------------------------------------------------------------- #

def _hand_adam(p, g, m, v, *, lr, beta1, beta2, eps, weight_decay, step, adamw):
    """Adam/AdamW written out in float64 from the formulas."""
    p, g, m, v = (t.double().clone() for t in (p, g, m, v))
    if weight_decay:
        if adamw:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    bc1 = 1 - beta1 ** step
    bc2 = 1 - beta2 ** step
    denom = v.sqrt() / math.sqrt(bc2) + eps
    p = p - lr / bc1 * m / denom
    return p, m, v


@pytest.mark.parametrize("adamw", [False, True], ids=["adam", "adamw"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
@pytest.mark.parametrize("step", [1, 2, 7, 1000])
def test_reference_matches_formula(adamw, weight_decay, step):
    gen = torch.Generator().manual_seed(1234 + step)
    n = 4099
    p = torch.randn(n, generator=gen, dtype=torch.float64)
    g = torch.randn(n, generator=gen, dtype=torch.float64)
    m = torch.randn(n, generator=gen, dtype=torch.float64) * 0.3
    v = torch.rand(n, generator=gen, dtype=torch.float64) * 0.5 + 1e-3
    hyper = dict(lr=3e-3, beta1=0.85, beta2=0.995, eps=1e-8, weight_decay=weight_decay, step=step, adamw=adamw)
    inputs = [t.clone() for t in (p, g, m, v)]
    got = cuda_adam.reference_adam_step(p, g, m, v, **hyper)
    want = _hand_adam(p, g, m, v, **hyper)
    for t, t0 in zip((p, g, m, v), inputs):
        assert torch.equal(t, t0), "reference_adam_step modified its inputs"
    for name, a, b in zip(("param", "exp_avg", "exp_avg_sq"), got, want):
        assert a.dtype == torch.float64 and a.device.type == "cpu"
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14, msg=lambda s: f"{name}: {s}")
    # The step really moved everything.
    assert not torch.equal(got[0], p) and not torch.equal(got[1], m) and not torch.equal(got[2], v)


def test_reference_accepts_low_precision_inputs():
    p = torch.randn(33, dtype=torch.bfloat16)
    out = cuda_adam.reference_adam_step(p, p.clone(), p.clone(), p.abs(), lr=1e-3, step=3)
    assert all(t.dtype == torch.float64 for t in out)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("adamw", [False, True], ids=["adam", "adamw"])
def test_checker_passes_kernel_arithmetic_emulation(dtype, adamw):
    """The kernel's arithmetic, emulated on the CPU, meets the error bounds."""
    for numel, offset, start in ((1, 0, 1), (1003, (0, 1, 2, 3), 1), (20011, 3, 50)):
        err = cuda_adam.check_against_reference(
            "cpu", dtype, numel, steps=3, adamw=adamw, step_fn=cuda_adam.emulated_adam_step_,
            offset=offset, start_step=start)
        assert 0.0 <= err <= cuda_adam.error_bound(getattr(torch, dtype), 3)


def _skip_last(step_fn):
    def fn(p, g, m, v, **kw):
        saved = [t[-1:].clone() for t in (p, m, v)]
        step_fn(p, g, m, v, **kw)
        for t, s in zip((p, m, v), saved):
            t[-1:] = s
    return fn


def _no_bias_correction(p, g, m, v, *, step, **kw):
    # Pretends every step is a late one: bias corrections ~1.
    cuda_adam.emulated_adam_step_(p, g, m, v, step=step + 10**6, **kw)


def _no_weight_decay(p, g, m, v, *, weight_decay, **kw):
    cuda_adam.emulated_adam_step_(p, g, m, v, weight_decay=0.0, **kw)


@pytest.mark.parametrize("bug", [_skip_last(cuda_adam.emulated_adam_step_), _no_bias_correction, _no_weight_decay],
                         ids=["unwritten-last-element", "no-bias-correction", "no-weight-decay"])
@pytest.mark.parametrize("adamw", [False, True], ids=["adam", "adamw"])
def test_checker_catches_bugs(bug, adamw):
    with pytest.raises(AssertionError, match="seed="):
        cuda_adam.check_against_reference("cpu", torch.float32, 1001, steps=2, adamw=adamw,
                                          weight_decay=0.1, step_fn=bug)


def test_checker_catches_unwritten_element_in_16bit():
    # One stale element in 100003 is far below the norm-wise bf16 bound: the
    # coverage step must catch it.
    with pytest.raises(AssertionError, match="unwritten"):
        cuda_adam.check_against_reference("cpu", torch.bfloat16, 100_003, steps=1,
                                          step_fn=_skip_last(cuda_adam.emulated_adam_step_))


def test_adam_step_rejects_bad_arguments_before_building():
    """Validation runs in Python before the extension is built (no GPU needed)."""
    p = torch.zeros(8)
    ok = dict(lr=1e-3, step=1)
    with pytest.raises(ValueError, match="CUDA"):
        cuda_adam.adam_step_(p, p.clone(), p.clone(), p.clone(), **ok)
    with pytest.raises(TypeError, match="float64.*allowed dtypes: float32, float16, bfloat16"):
        q = p.double()
        cuda_adam.adam_step_(q, q.clone(), q.clone(), q.clone(), **ok)
    for kw, pat in ((dict(lr=-1.0, step=1), "lr=-1.0"), (dict(lr=1e-3, step=0), "step=0"),
                    (dict(lr=1e-3, step=1, beta1=1.0), "beta1=1.0"),
                    (dict(lr=1e-3, step=1, beta2=-0.1), "beta2=-0.1"),
                    (dict(lr=1e-3, step=1, eps=float("nan")), "eps=nan"),
                    (dict(lr=1e-3, step=1, weight_decay=-1e-2), "weight_decay=-0.01")):
        with pytest.raises(ValueError, match=pat):
            cuda_adam.adam_step_(p, p.clone(), p.clone(), p.clone(), **kw)
    with pytest.raises(TypeError, match="step=1.5"):
        cuda_adam.adam_step_(p, p.clone(), p.clone(), p.clone(), lr=1e-3, step=1.5)


# --------------------------------------------------------------------------- #
# the kernel itself (GPU)                                                      #
# --------------------------------------------------------------------------- #

DTYPES = ["float32", "float16", "bfloat16"]


@pytest.mark.parametrize("numel", [1, 7, 8, 9, 4099, 1_000_003])
@pytest.mark.parametrize("adamw", [False, True], ids=["adam", "adamw"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_kernel_matches_reference(dtype, adamw, numel):
    err = cuda_adam.check_against_reference("cuda", dtype, numel, steps=3, adamw=adamw)
    assert err <= cuda_adam.error_bound(getattr(torch, dtype), 3)


# Misaligned views: one offset for all four (vector path with a scalar head),
# and different offsets (scalar path).
@pytest.mark.parametrize("offset", [1, 2, 3, 5, (0, 1, 0, 0), (1, 2, 3, 4)], ids=str)
@pytest.mark.parametrize("numel", [3, 33, 100_003])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_kernel_misaligned_views(dtype, numel, offset):
    cuda_adam.check_against_reference("cuda", dtype, numel, steps=2, adamw=True, offset=offset,
                                      start_step=10)


# An element's result must not depend on where its view starts: the overlapped
# offload step runs the kernel on chunks, and must equal the whole-tensor step
# bit for bit whatever the chunk boundaries (vector loop vs scalar head/tail vs
# scalar kernel: each was once free to contract a * b + c differently).
@pytest.mark.parametrize("adamw", [False, True], ids=["adam", "adamw"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_kernel_result_independent_of_view_alignment(dtype, adamw):
    n = 100_003
    dt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(11)
    base = [torch.randn(n + 8, device="cuda", generator=gen).to(dt) for _ in range(3)]
    base.append((torch.rand(n + 8, device="cuda", generator=gen) * 1e-3).to(dt))
    kw = dict(lr=1e-3, weight_decay=0.01, step=7, adamw=adamw)

    def step_at(offsets):
        """The same values placed so that view i starts ``offsets[i]`` elements in."""
        ts = [torch.empty_like(b) for b in base]
        for t, b, o in zip(ts, base, offsets):
            t[o:o + n] = b[:n]
        views = [t[o:o + n] for t, o in zip(ts, offsets)]
        cuda_adam.adam_step_(*views, **kw)
        torch.cuda.synchronize()
        return views

    whole = step_at((0, 0, 0, 0))
    for offsets in ((1, 1, 1, 1), (3, 3, 3, 3), (0, 1, 2, 3)):
        views = step_at(offsets)
        for name, got, want in zip(("param", "exp_avg", "exp_avg_sq"), (views[0], views[2], views[3]),
                                   (whole[0], whole[2], whole[3])):
            assert torch.equal(got, want), f"{dtype} offsets {offsets}: {name} differs from the aligned step " \
                f"in {(got != want).sum().item()} of {n} elements"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_kernel_large_and_late_steps(dtype):
    cuda_adam.check_against_reference("cuda", dtype, 16 * 2**20 + 5, steps=2, adamw=False,
                                      start_step=10_000, weight_decay=0.0)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_kernel_runs_on_side_stream():
    n = 1 << 20
    gen = torch.Generator().manual_seed(7)
    host = [torch.randn(n, generator=gen) for _ in range(4)]
    host[3] = host[3].abs()
    a = [t.cuda() for t in host]
    b = [t.cuda() for t in host]
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        cuda_adam.adam_step_(*a, lr=1e-3, step=3, weight_decay=0.01, adamw=True)
    side.synchronize()
    cuda_adam.adam_step_(*b, lr=1e-3, step=3, weight_decay=0.01, adamw=True)
    torch.cuda.synchronize()
    for x, y in zip(a, b):
        assert torch.equal(x, y)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_kernel_rejects_bad_tensors():
    ext = cuda_adam.load()
    n = 64
    t = [torch.rand(n, device="cuda") for _ in range(4)]
    hyper = dict(lr=1e-3, step=1)
    raw = (1e-3, 0.9, 0.999, 1e-8, 0.0, 1, False)
    # Non-contiguous.
    nc = torch.rand(2 * n, device="cuda")[::2]
    with pytest.raises(ValueError, match="exp_avg is not contiguous"):
        cuda_adam.adam_step_(t[0], t[1], nc, t[3], **hyper)
    with pytest.raises(RuntimeError, match="exp_avg is not contiguous"):
        ext.adam_step_(t[0], t[1], nc, t[3], *raw)
    # Mismatched dtype.
    h = t[1].half()
    with pytest.raises(TypeError, match="grad has dtype torch.float16 but param has dtype torch.float32"):
        cuda_adam.adam_step_(t[0], h, t[2], t[3], **hyper)
    with pytest.raises(RuntimeError, match="grad has dtype Half but param has dtype Float"):
        ext.adam_step_(t[0], h, t[2], t[3], *raw)
    # Unsupported dtype.
    d = [x.double() for x in t]
    with pytest.raises(TypeError, match="allowed dtypes"):
        cuda_adam.adam_step_(*d, **hyper)
    with pytest.raises(RuntimeError, match="allowed dtypes: float32, float16, bfloat16"):
        ext.adam_step_(*d, *raw)
    # CPU tensor among CUDA ones.
    with pytest.raises(ValueError, match="exp_avg_sq is on device cpu"):
        cuda_adam.adam_step_(t[0], t[1], t[2], t[3].cpu(), **hyper)
    with pytest.raises(RuntimeError, match="exp_avg_sq is on device cpu"):
        ext.adam_step_(t[0], t[1], t[2], t[3].cpu(), *raw)
    # Size mismatch, overlap, bad step (binding checks).
    with pytest.raises(RuntimeError, match="the sizes must match"):
        ext.adam_step_(t[0], t[1][:-1], t[2], t[3], *raw)
    with pytest.raises(RuntimeError, match="must not overlap"):
        ext.adam_step_(t[0], t[1], t[0], t[3], *raw)
    with pytest.raises(RuntimeError, match="step=0"):
        ext.adam_step_(*t, 1e-3, 0.9, 0.999, 1e-8, 0.0, 0, False)
    with pytest.raises(RuntimeError, match="lr=-1 is invalid"):
        ext.adam_step_(*t, -1.0, 0.9, 0.999, 1e-8, 0.0, 1, False)
    with pytest.raises(RuntimeError, match="beta2=1 is invalid"):
        ext.adam_step_(*t, 1e-3, 0.9, 1.0, 1e-8, 0.0, 1, False)
    # Nothing was modified by the rejected calls... and an empty step is a no-op.
    e = [torch.empty(0, device="cuda") for _ in range(4)]
    cuda_adam.adam_step_(*e, **hyper)
