"""train_step's ``streamed-split`` optimizer: AdamW with the leading parameters' fp32 master and
moments on the GPU (numabench.families.train_step.master's MasterAdamW) and the rest's on the host,
streamed through the GPU (numabench.families.train_step.streamed's StreamedAdamW); which
parameters go where: numabench.families.train_step.split.prefix_split. Either part may be empty
(offload_ratio 0: all on the GPU; 1: the streamed mode). Imports torch lazily.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from numabench.families.train_step.split import Split, prefix_split
from numabench.families.train_step.streamed import Hyper


class SplitAdamW:
    """AdamW over ``params`` split at ``offload_ratio`` (the share of elements on the host).
    ``widen_in_backward`` / ``overlap_backward``: one rank (each part's hooks run during
    backward); ``stream_kwargs``: StreamedAdamW's (alloc, place, chunk, fn). Use as StreamedAdamW:
    ``begin_backward(); loss.backward(); step(); zero_grad()``."""

    def __init__(self, params: Sequence[Any], hyper: Hyper, offload_ratio: float, *, one_rank: bool = True,
                 **stream_kwargs: Any) -> None:
        from numabench.families.train_step.master import MasterAdamW
        from numabench.families.train_step.streamed import StreamedAdamW

        params = list(params)
        self.split: Split = prefix_split([p.numel() for p in params], offload_ratio)
        kept, streamed = params[:self.split.on_gpu], params[self.split.on_gpu:]
        self.on_gpu = MasterAdamW(kept, hyper, widen_in_backward=one_rank) if kept else None
        self.streamed = StreamedAdamW(streamed, hyper, overlap_backward=one_rank, **stream_kwargs) if streamed else None

    @property
    def offload_ratio(self) -> float:
        return self.split.offload_ratio

    def begin_backward(self) -> None:
        if self.streamed is not None:
            self.streamed.begin_backward()

    def step(self) -> None:
        if self.on_gpu is not None:
            self.on_gpu.step()
        if self.streamed is not None:
            self.streamed.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in (self.on_gpu, self.streamed):
            if part is not None:
                part.zero_grad(set_to_none)

    def release(self) -> None:
        for part in (self.on_gpu, self.streamed):
            if part is not None:
                part.release()
