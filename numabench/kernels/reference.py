"""The float64 reference both Adam kernels are checked against: torch.optim's own Adam/AdamW.

It runs the function ``torch.optim.Adam``/``AdamW.step()`` calls for one parameter
(``torch.optim.adam.adam`` / ``torch.optim.adamw.adamw``, the single-tensor for-loop path),
not ``step()`` itself: ``step()`` imports ``torch._dynamo`` on its first call, about 5 s in
every fresh worker on the GPU VMs, for nothing this check needs. ``tests/test_adam_reference.py``
holds the two equal, bit for bit, to the optimizer classes.
"""
from __future__ import annotations

from typing import Sequence, Tuple


def torch_adam_reference(param, grads: Sequence, exp_avg, exp_avg_sq, *, lr: float,
                         beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                         weight_decay: float = 0.0, step: int, adamw: bool = False
                         ) -> Tuple["torch.Tensor", "torch.Tensor", "torch.Tensor"]:
    """Steps number ``step``, ``step + 1``, ... (one per gradient in ``grads``, 1-based as
    torch.optim counts) of torch.optim's Adam (``adamw=False``: L2 decay added to the gradient)
    or AdamW (decoupled decay), in float64 on the CPU.

    The inputs (any dtype or device) are copied to new float64 CPU tensors and not modified.
    Returns float64 ``(param, exp_avg, exp_avg_sq)`` after the last step.
    """
    import torch
    from torch.optim.adam import adam
    from torch.optim.adamw import adamw as adamw_fn

    def f64(t):
        return t.detach().to(device="cpu", dtype=torch.float64, copy=True).reshape(-1)

    if isinstance(grads, torch.Tensor):
        grads = [grads]
    p, m, v = f64(param), f64(exp_avg), f64(exp_avg_sq)
    # torch's step counter is incremented before the bias corrections use it, as in step().
    state_step = torch.tensor(float(step - 1), dtype=torch.float64)
    fn = adamw_fn if adamw else adam
    with torch.no_grad():
        for g in grads:
            fn([p], [f64(g)], [m], [v], [], [state_step], foreach=False, capturable=False,
               differentiable=False, fused=False, grad_scale=None, found_inf=None, has_complex=False,
               amsgrad=False, beta1=beta1, beta2=beta2, lr=lr, weight_decay=weight_decay, eps=eps,
               maximize=False)
    if float(state_step) != float(step + len(grads) - 1):  # pragma: no cover - guards a torch change
        raise AssertionError(f"reference ran to step {float(state_step)}, expected {step + len(grads) - 1}")
    return p, m, v
