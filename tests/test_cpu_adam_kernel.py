"""CI tests of our CPU Adam/AdamW kernel (csrc/cpu_adam.cpp) against float64 torch.optim.

CPU only.  The first run builds the extension (~30-60 s); later runs load the
cached build.  Every SIMD level this CPU supports (scalar always; avx2 and avx512
where present) is forced through NUMABENCH_CPU_ADAM_SIMD and checked.
"""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from numabench.kernels import cpu_adam  # noqa: E402

LEVELS_ORDER = ["scalar", "avx2", "avx512"]


@pytest.fixture(scope="session")
def ext():
    return cpu_adam.load()


@pytest.fixture(scope="session")
def levels(ext):
    best = cpu_adam.best_simd_level()
    return LEVELS_ORDER[: LEVELS_ORDER.index(best) + 1]


def _force(monkeypatch, level):
    monkeypatch.setenv("NUMABENCH_CPU_ADAM_SIMD", level)
    assert cpu_adam.simd_level() == level


DTYPES = ["float32", "float16", "bfloat16"]


# -------------------------------------------------------------- reference --
def _hand_adam(p, g, m, v, *, lr, b1, b2, eps, wd, step, adamw):
    """The textbook formula, float64, written out by hand."""
    p, g, m, v = (t.to(torch.float64).clone() for t in (p, g, m, v))
    if adamw:
        p = p * (1 - lr * wd)
    else:
        g = g + wd * p
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    bc1, bc2 = 1 - b1**step, 1 - b2**step
    denom = v.sqrt() / math.sqrt(bc2) + eps
    p = p - (lr / bc1) * m / denom
    return p, m, v


@pytest.mark.parametrize("adamw", [False, True])
@pytest.mark.parametrize("step", [1, 7])
def test_reference_matches_hand_formula(adamw, step):
    gen = torch.Generator().manual_seed(123)
    n = 257
    p, m = torch.randn(n, generator=gen), torch.randn(n, generator=gen) * 0.1
    v = torch.rand(n, generator=gen) * 0.1 + 0.01
    g1, g2 = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    kw = dict(lr=3e-3, b1=0.8, b2=0.95, eps=1e-6, wd=0.1, adamw=adamw)
    ref = cpu_adam.reference_adam_step(p, [g1, g2], m, v, lr=3e-3, beta1=0.8, beta2=0.95,
                                       eps=1e-6, weight_decay=0.1, step=step, adamw=adamw)
    hp, hm, hv = _hand_adam(p, g1, m, v, step=step, **kw)
    hp, hm, hv = _hand_adam(hp, g2, hm, hv, step=step + 1, **kw)
    for got, want in zip(ref, (hp, hm, hv)):
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
    # inputs untouched
    assert torch.equal(p, p.clone())


# ------------------------------------------------------------ correctness --
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("adamw", [False, True], ids=["adam", "adamw"])
@pytest.mark.parametrize("numel", [1, 17, 1000003])
@pytest.mark.parametrize("copy_out", [None, "bfloat16", "float16"], ids=["nocopy", "bf16copy", "fp16copy"])
@pytest.mark.parametrize("threads", [1, 2])
def test_matches_reference_default_level(ext, dtype, adamw, numel, copy_out, threads):
    err = cpu_adam.check_against_reference(dtype, numel, steps=3, adamw=adamw,
                                           with_copy_out=copy_out, num_threads=threads)
    assert err <= cpu_adam.ERROR_BOUNDS[dtype]


@pytest.mark.parametrize("level", LEVELS_ORDER)
@pytest.mark.parametrize("dtype,grad_dtype", [
    ("float32", "float32"), ("float16", "float16"), ("bfloat16", "bfloat16"),
    ("float32", "bfloat16"), ("float32", "float16"),
])
@pytest.mark.parametrize("numel", [1, 17, 1000003])
def test_every_simd_level(ext, levels, monkeypatch, level, dtype, grad_dtype, numel):
    if level not in levels:
        pytest.skip(f"this CPU lacks {level} (has {levels})")
    _force(monkeypatch, level)
    for adamw, copy_out, threads in ((False, "bfloat16", 2), (True, "float16", 1)):
        cpu_adam.check_against_reference(dtype, numel, steps=3, adamw=adamw,
                                         with_copy_out=copy_out, grad_dtype=grad_dtype,
                                         num_threads=threads)


@pytest.mark.parametrize("grad_dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("threads", [1, 2])
def test_zero_offload_layout(ext, grad_dtype, threads):
    """fp32 master param + fp32 moments, 16-bit grad, bf16 copy-out."""
    cpu_adam.check_against_reference("float32", 100003, steps=3, adamw=True,
                                      grad_dtype=grad_dtype, with_copy_out="bfloat16",
                                      num_threads=threads)


def test_levels_agree_bitwise_on_fp32(ext, levels, monkeypatch):
    """SIMD paths must compute the same formula (they may differ by FMA rounding only)."""
    gen = torch.Generator().manual_seed(7)
    n = 4099
    base = [torch.randn(n, generator=gen), torch.randn(n, generator=gen),
            torch.randn(n, generator=gen) * 0.1, torch.rand(n, generator=gen) + 0.01]
    outs = {}
    for level in levels:
        _force(monkeypatch, level)
        p, g, m, v = (t.clone() for t in base)
        c = torch.empty(n, dtype=torch.bfloat16)
        cpu_adam.adam_step_(p, g, m, v, lr=1e-2, step=3, weight_decay=0.1, param_copy_out=c)
        assert torch.equal(c, p.to(torch.bfloat16))
        outs[level] = (p, m, v)
    for level, out in outs.items():
        for a, b in zip(out, outs["scalar"]):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_bf16_round_to_nearest_even(ext, levels, monkeypatch):
    """Copy-out of values exactly halfway between two bf16 numbers must round to even
    (not truncate), NaN must stay NaN, fp16 overflow must give inf as torch does,
    on every level (SIMD body and scalar tail)."""
    # lr=0, wd=0: the param is unchanged, so the copy-out is a pure conversion.
    halfway = [1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), 1.0 + 2**-8 + 2**-20,
               float("nan"), 3.0e38, -6.5e4, 65520.0, 1e-40, 0.0, -0.0]
    # (no inf: with the L2 term, 0*inf is NaN, as in torch with weight_decay != 0)
    vals = torch.tensor(halfway * 3, dtype=torch.float32)  # 33 elements: SIMD + tail
    want = vals.to(torch.bfloat16)
    assert want[0].item() == 1.0 and want[1].item() == 1.0 + 4 * 2**-8  # ties to even
    for level in levels:
        _force(monkeypatch, level)
        for cdt in (torch.bfloat16, torch.float16):
            p = vals.clone()
            n = p.numel()
            g, m, v = torch.zeros(n), torch.zeros(n), torch.zeros(n)
            c = torch.empty(n, dtype=cdt)
            cpu_adam.adam_step_(p, g, m, v, lr=0.0, step=1, param_copy_out=c, num_threads=1)
            w = vals.to(cdt)
            same = (c.view(torch.int16) == w.view(torch.int16)) | (c.isnan() & w.isnan())
            assert bool(same.all()), f"{level} {cdt}: got {c.tolist()} want {w.tolist()}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_state_rounding_is_nearest_even(ext, levels, monkeypatch, dtype):
    """One step in 16-bit storage must equal the float64 result rounded to the dtype
    (RNE) bit for bit, except where fp32 math lands within ~1e-7 of a rounding
    boundary; truncation would mismatch about half of the elements."""
    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(11)
    n = 20011
    p0 = torch.randn(n, generator=gen).to(dt)
    g0 = torch.randn(n, generator=gen).to(dt)
    m0 = (torch.randn(n, generator=gen) * 0.1).to(dt)
    v0 = (torch.rand(n, generator=gen) * 0.1 + 0.01).to(dt)
    ref = cpu_adam.reference_adam_step(p0, g0, m0, v0, lr=1e-2, step=2, weight_decay=0.01)
    for level in levels:
        _force(monkeypatch, level)
        p, m, v = p0.clone(), m0.clone(), v0.clone()
        cpu_adam.adam_step_(p, g0, m, v, lr=1e-2, step=2, weight_decay=0.01)
        for name, got, want in zip(("param", "exp_avg", "exp_avg_sq"), (p, m, v), ref):
            w = want.to(dt)
            bad = (got.view(torch.int16) != w.view(torch.int16)).sum().item()
            assert bad <= n * 2e-3, f"{level} {dtype} {name}: {bad}/{n} differ from RNE"


def test_default_threads_and_large_step(ext):
    cpu_adam.check_against_reference("float32", 70001, steps=2, num_threads=0, first_step=1000)


# ------------------------------------------------------------- dispatcher --
def test_simd_level_reported(ext):
    assert cpu_adam.simd_level() in LEVELS_ORDER
    assert cpu_adam.best_simd_level() in LEVELS_ORDER


def test_simd_env_rejects_unknown(ext, monkeypatch):
    monkeypatch.setenv("NUMABENCH_CPU_ADAM_SIMD", "sse9")
    with pytest.raises(RuntimeError, match=r"sse9.*allowed: auto, scalar, avx2, avx512"):
        cpu_adam.simd_level()


def test_simd_env_rejects_missing_level(ext, levels, monkeypatch):
    missing = [lvl for lvl in LEVELS_ORDER if lvl not in levels]
    if not missing:
        pytest.skip("this CPU has every level")
    monkeypatch.setenv("NUMABENCH_CPU_ADAM_SIMD", missing[-1])
    with pytest.raises(RuntimeError, match="lacks it"):
        cpu_adam.simd_level()


# ------------------------------------------------------------- bad inputs --
def _ok(n=8, dtype=torch.float32):
    return [torch.randn(n).to(dtype) for _ in range(3)] + [torch.rand(n).to(dtype)]


@pytest.mark.parametrize("case,exc,pattern", [
    ("int_dtype", TypeError, r"param has dtype int32; allowed: float32, float16, bfloat16"),
    ("mixed", TypeError, r"unsupported dtype combination param=float16 grad=float32"),
    ("moments_differ", TypeError, r"exp_avg \(float32\) and exp_avg_sq \(bfloat16\)"),
    ("numel", ValueError, r"grad has 7 elements but param has 8"),
    ("noncontig", ValueError, r"exp_avg must be contiguous"),
    ("copy_fp32", TypeError, r"param_copy_out has dtype float32; allowed: bfloat16, float16"),
    ("copy_numel", ValueError, r"param_copy_out has 4 elements but param has 8"),
    ("step0", ValueError, r"step must be an int >= 1.*got 0"),
    ("beta", ValueError, r"beta2=1.0 is out of range"),
    ("lr", ValueError, r"lr=nan"),
    ("alias", ValueError, r"must not alias"),
    ("meta", ValueError, r"grad is on device meta; only CPU tensors are allowed"),
])
def test_bad_inputs(ext, case, exc, pattern):
    p, g, m, v = _ok()
    kw = dict(lr=1e-3, step=1)
    if case == "int_dtype":
        p = p.to(torch.int32)
    elif case == "mixed":
        p, m, v = p.half(), m.half(), v.half()
    elif case == "moments_differ":
        v = v.bfloat16()
    elif case == "numel":
        g = g[:7]
    elif case == "noncontig":
        m = torch.randn(16)[::2]
    elif case == "copy_fp32":
        kw["param_copy_out"] = torch.empty(8)
    elif case == "copy_numel":
        kw["param_copy_out"] = torch.empty(4, dtype=torch.bfloat16)
    elif case == "step0":
        kw["step"] = 0
    elif case == "beta":
        kw["beta2"] = 1.0
    elif case == "lr":
        kw["lr"] = float("nan")
    elif case == "alias":
        g = p
    elif case == "meta":
        g = torch.empty(8, device="meta")
    before = p.clone()
    with pytest.raises(exc, match=pattern):
        cpu_adam.adam_step_(p, g, m, v, **kw)
    if p.dtype == before.dtype:
        assert torch.equal(p, before), "a rejected call must not modify param"


def test_native_checks_back_up_python_validation(ext):
    """The C++ entry point checks on its own too (it is reachable without the wrapper)."""
    p, g, m, v = _ok()
    with pytest.raises(RuntimeError, match="grad has 7 elements, param has 8"):
        ext.adam_step(p, g[:7], m, v, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1, False, None, 0)
    with pytest.raises(RuntimeError, match="unsupported dtype combination"):
        ext.adam_step(p.half(), g, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1, False, None, 0)


def test_check_against_reference_reports_failure(ext, monkeypatch):
    monkeypatch.setitem(cpu_adam.ERROR_BOUNDS, "bfloat16", 1e-9)
    with pytest.raises(AssertionError, match=r"dtype=bfloat16.*numel=33.*error .* > bound 1.0e-09"):
        cpu_adam.check_against_reference("bfloat16", 33, seed=1)


def test_empty_tensors_are_a_no_op(ext):
    p, g, m, v = (torch.empty(0) for _ in range(4))
    cpu_adam.adam_step_(p, g, m, v, lr=1e-3, step=1)


# ------------------------------------------------------ threads' schedule --
@pytest.mark.parametrize("numel,threads", [((1 << 18) + 7, 2), (3 * (1 << 16) + 33, 3), ((1 << 20) + 1, 2)])
@pytest.mark.parametrize("copy_out", [False, True])
def test_the_dynamic_schedule_gives_the_static_ones_bits(ext, monkeypatch, numel, threads, copy_out):
    """NUMABENCH_CPU_ADAM_SCHEDULE=dynamic only changes which thread updates which chunk: every
    element's arithmetic is its own, so the result is the static schedule's to the bit (chunks of
    at most 65536 elements, at least 8 a thread, the last one short)."""
    gen = torch.Generator().manual_seed(7)
    base = [torch.randn(numel, generator=gen), torch.randn(numel, generator=gen) * 1e-2,
            torch.randn(numel, generator=gen) * 1e-2, torch.rand(numel, generator=gen) * 1e-4]
    out = {}
    for schedule in ("static", "dynamic"):
        monkeypatch.setenv("NUMABENCH_CPU_ADAM_SCHEDULE", schedule)
        p, g, m, v = (t.clone() for t in base)
        copy = torch.empty(numel, dtype=torch.bfloat16) if copy_out else None
        for step in (1, 2):
            cpu_adam.adam_step_(p, g, m, v, lr=1e-3, weight_decay=0.01, step=step, param_copy_out=copy,
                                num_threads=threads)
        out[schedule] = (p, m, v, copy)
    for a, b in zip(out["static"], out["dynamic"]):
        if a is not None:
            assert torch.equal(a, b)
    assert not torch.equal(out["dynamic"][0], base[0])  # it did update


def test_a_schedule_not_known_is_refused(ext, monkeypatch):
    monkeypatch.setenv("NUMABENCH_CPU_ADAM_SCHEDULE", "guided")
    t = [torch.zeros(1 << 10) for _ in range(4)]  # one thread: refused all the same
    with pytest.raises(RuntimeError, match="'guided' is not a schedule; allowed: static, dynamic"):
        cpu_adam.adam_step_(*t, lr=1e-3, step=1, num_threads=2)
