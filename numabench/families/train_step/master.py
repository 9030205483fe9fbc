"""train_step's ``no-offload-master`` mode: the reference of the bf16 + fp32 master recipe.

The device holds the working weights in the training dtype (bf16), one flat fp32 master copy of
them, one flat fp32 gradient (Megatron's ``main_grad``) and AdamW's two moments, all on the same
device. On one rank each parameter's gradient is widened into the flat fp32 gradient as soon as
backward has accumulated it, and the low-precision gradient is dropped at once (a
post-accumulate-grad hook), so no bf16 gradient outlives its layer; under DDP (more ranks) the
gradients are widened after backward, once they are averaged. ``step`` runs torch's fused AdamW
on the flat master (one tensor) and copies the master back into the working weights (narrowed to
their dtype). Per parameter on the device: 2 (bf16 weights) + 4 (fp32 gradient) + 4 (master) +
8 (moments) = 18 bytes. This is the recipe the streamed and the DeepSpeed modes train with, kept
on the GPU, so their step is judged against a step that does the same arithmetic.
Imports torch lazily.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from numabench.families.train_step.streamed import Hyper, on_one_device


class MasterAdamW:
    """AdamW over ``params`` through a flat master copy in ``master_dtype`` (fp32) on their device.

    ``widen_in_backward``: take each gradient into the flat master gradient from a
    post-accumulate-grad hook and drop it (one rank); else in ``step`` (DDP, which averages the
    gradients after its own hooks). ``fused``: torch's fused AdamW (None: where torch has it for
    the device). Use: ``loss.backward(); opt.step(); opt.zero_grad()``."""

    def __init__(self, params: Sequence[Any], hyper: Hyper, *, master_dtype: Any = None,
                 widen_in_backward: bool = True, fused: bool | None = True) -> None:
        import torch

        self.params, self.device = on_one_device(params, "MasterAdamW")
        self.master_dtype = master_dtype or torch.float32
        sizes = [p.numel() for p in self.params]
        self.numel = sum(sizes)
        self.offsets = [sum(sizes[:i]) for i in range(len(sizes))]
        # filled parameter by parameter: no second copy of the model in flight while it is made
        self.master = torch.empty(self.numel, dtype=self.master_dtype, device=self.device)
        with torch.no_grad():
            for i, p in enumerate(self.params):
                self._slice(self.master, i).copy_(p.detach().reshape(-1))
        self.master.grad = torch.zeros_like(self.master)
        self.inner = torch.optim.AdamW([self.master], lr=hyper.lr, betas=hyper.betas, eps=hyper.eps,
                                       weight_decay=hyper.weight_decay, fused=fused)
        self.widen_in_backward = widen_in_backward
        self._taken = [False] * len(self.params)
        self._hooks = [p.register_post_accumulate_grad_hook(self._take(i)) for i, p in enumerate(self.params)] \
            if widen_in_backward else []

    def _slice(self, t: Any, i: int) -> Any:
        off = self.offsets[i]
        return t[off:off + self.params[i].numel()]

    def _take(self, i: int) -> Callable[[Any], None]:
        def hook(p: Any) -> None:
            import torch

            with torch.no_grad():
                self._slice(self.master.grad, i).copy_(p.grad.reshape(-1))
            p.grad = None  # widened: the low-precision gradient is freed as backward goes
            self._taken[i] = True
        return hook

    def step(self) -> None:
        """AdamW on the master, then the master narrowed into the working weights."""
        import torch

        with torch.no_grad():
            if not self.widen_in_backward:
                for i, p in enumerate(self.params):
                    if p.grad is not None:
                        self._slice(self.master.grad, i).copy_(p.grad.reshape(-1))
                        self._taken[i] = True
            missing = [i for i, taken in enumerate(self._taken) if not taken]
            if missing:
                raise RuntimeError(f"parameters {missing[:8]}{' ...' if len(missing) > 8 else ''} have no gradient "
                                   "this step: the master would be updated with a stale one")
            self.inner.step()
            torch._foreach_copy_([p.data.view(-1) for p in self.params],
                                 [self._slice(self.master, i) for i in range(len(self.params))])
        self._taken = [False] * len(self.params)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the working weights' gradients (the flat fp32 gradient is overwritten each step)."""
        for p in self.params:
            p.grad = None

    @property
    def param_groups(self) -> list[dict]:
        return self.inner.param_groups

    @property
    def state(self) -> Any:
        return self.inner.state

    def release(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []
