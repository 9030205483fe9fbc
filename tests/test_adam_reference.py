"""The float64 reference (numabench.kernels.reference) is torch.optim's Adam/AdamW, bit for bit,
and leaves torch._dynamo unimported (what it exists for: 5 s a fresh worker on the GPU VMs)."""
import subprocess
import sys

import pytest
import torch

from numabench.kernels.reference import torch_adam_reference


def by_optimizer_class(param, grads, exp_avg, exp_avg_sq, *, step, adamw, **hyper):
    p = torch.nn.Parameter(param.to(torch.float64).clone())
    cls = torch.optim.AdamW if adamw else torch.optim.Adam
    opt = cls([p], lr=hyper["lr"], betas=(hyper["beta1"], hyper["beta2"]), eps=hyper["eps"],
              weight_decay=hyper["weight_decay"], foreach=False, fused=False)
    opt.state[p] = {"step": torch.tensor(float(step - 1), dtype=torch.float64),
                    "exp_avg": exp_avg.to(torch.float64).clone(),
                    "exp_avg_sq": exp_avg_sq.to(torch.float64).clone()}
    for g in grads:
        p.grad = g.to(torch.float64).clone()
        opt.step()
    return p.detach(), opt.state[p]["exp_avg"], opt.state[p]["exp_avg_sq"]


@pytest.mark.parametrize("adamw", [False, True], ids=["adam", "adamw"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_equals_torch_optim_class_bit_for_bit(adamw, dtype):
    gen = torch.Generator().manual_seed(7)
    n = 4099
    param = torch.randn(n, generator=gen).to(dtype)
    exp_avg = (torch.randn(n, generator=gen) * 0.1).to(dtype)
    exp_avg_sq = (torch.rand(n, generator=gen) * 0.1 + 0.01).to(dtype)
    grads = [(torch.randn(n, generator=gen) * 0.3).to(dtype) for _ in range(3)]
    hyper = dict(lr=3e-3, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.05)
    got = torch_adam_reference(param, grads, exp_avg, exp_avg_sq, step=5, adamw=adamw, **hyper)
    want = by_optimizer_class(param, grads, exp_avg, exp_avg_sq, step=5, adamw=adamw, **hyper)
    for name, g, w in zip(("param", "exp_avg", "exp_avg_sq"), got, want):
        assert g.dtype == torch.float64
        assert torch.equal(g, w), f"{name}: reference differs from torch.optim.{'AdamW' if adamw else 'Adam'}"
    assert not torch.equal(got[0], param.to(torch.float64)), "the reference did not step"


def test_reference_leaves_its_inputs_and_dynamo_alone():
    code = ("import sys, torch\n"
            "from numabench.kernels.reference import torch_adam_reference\n"
            "p = torch.ones(8); g = torch.full((8,), 0.5); m = torch.zeros(8); v = torch.ones(8)\n"
            "torch_adam_reference(p, g, m, v, lr=1e-2, step=1, adamw=True, weight_decay=0.1)\n"
            "assert torch.equal(p, torch.ones(8)) and torch.equal(m, torch.zeros(8)), 'inputs modified'\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", "the reference imported torch._dynamo (seconds in every worker)"
