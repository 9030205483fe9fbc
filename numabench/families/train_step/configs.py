"""The sizes of the ``train_step`` family's model (torch-free: the pytest process reads them
while it collects cases; numabench.families.train_step.model builds the model in the workers).

- ``tiny``: 2 layers, d=64, vocab 512, 64 tokens: CPU-sized (CI runs it with gloo).
- ``small``: 12 layers, d=768, vocab 32000, 1024 tokens (GPT-2 small shape, ~134M
  parameters with the untied head): a GPU size.
- ``1b``: 16 layers, d=2048, vocab 32000, 1024 tokens (~0.94B parameters): a GPU size, not in
  the default matrix (``--numa-axis model=1b``).
- ``5b``: 24 layers, d=4096, vocab 32000, 1024 tokens (~5.1B parameters): a model that needs
  offload on an 80 GB GPU (no-offload keeps 18-20 B per parameter there, ~100 GB), not in the
  default matrix (``--numa-axis model=5b``); built on the device it trains on.
- ``10b``: 48 layers, d=4096, vocab 32000, 1024 tokens (~9.9B parameters): on an H200 x1 only a
  GPU/host split holds it (``--numa-axis model=10b``); built on the device it trains on.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPTConfig:
    vocab: int
    d_model: int
    n_layers: int
    n_heads: int
    seq_len: int
    mlp_ratio: int = 4
    # AdamW learning rate at which the first steps (no warm-up) reliably lower the loss:
    # at 1e-3 the 134M model's loss rose again by the 4th step on an H100 (10.52, 10.36,
    # 10.33, 10.78 at batch 32), failing the train_step family's "the model learns" check.
    lr: float = 1e-3
    # built on the device it trains on (meta-constructed, initialised there): on the host its fp32
    # weights would take minutes of CPU random numbers and the host memory the offload modes need
    init_on_device: bool = False


MODELS = {
    "tiny": GPTConfig(vocab=512, d_model=64, n_layers=2, n_heads=2, seq_len=64),
    "small": GPTConfig(vocab=32000, d_model=768, n_layers=12, n_heads=12, seq_len=1024, lr=1e-4),
    # ~0.94B parameters: the size at which the streamed mode is judged against no-offload
    # (its optimizer state, 12 B per parameter, is 11 GiB on the host)
    "1b": GPTConfig(vocab=32000, d_model=2048, n_layers=16, n_heads=16, seq_len=1024, lr=1e-4),
    # ~5.1B parameters: a model that does not fit an 80 GB GPU without offload (the size the
    # long-context ZeRO-Offload workloads this family stands for offload at)
    "5b": GPTConfig(vocab=32000, d_model=4096, n_layers=24, n_heads=32, seq_len=1024, lr=1e-4,
                    init_on_device=True),
    # ~9.9B parameters: on an H200 x1 (141 GB GPU, 128 GiB host) the size only a GPU/host split holds:
    # no-offload-master's 18 B per parameter exceed the GPU, every full offload's >= 12 B the host's
    # usable share (numabench.results.offload_predict has the prediction per mode)
    # lr 3e-5: at 1e-4 (the 5b's) the 48 layers' loss on the fixed batch overshot by the 4th step on an
    # H200 (11.18, 8.77, 7.19, 11.32 at batch 1, every split share alike)
    "10b": GPTConfig(vocab=32000, d_model=4096, n_layers=48, n_heads=32, seq_len=1024, lr=3e-5,
                     init_on_device=True),
}


def param_count(cfg: GPTConfig) -> int:
    """The model's parameter count, from its shape (what count_params(build_model(...)) gives,
    without torch): embeddings, untied head, per block two LayerNorms, attention and MLP."""
    d, r = cfg.d_model, cfg.mlp_ratio
    block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (r * d * d + r * d) + (r * d * d + d)
    return 2 * cfg.vocab * d + cfg.seq_len * d + cfg.n_layers * block + 2 * d


def param_sizes(cfg: GPTConfig) -> list[int]:
    """Each parameter's element count in the model's parameter order (model.GPT's
    ``parameters()``: embeddings, per block its LayerNorms, attention and MLP, the final
    LayerNorm, the head), torch-free: the split modes' share arithmetic reads it."""
    d, r = cfg.d_model, cfg.mlp_ratio
    block = [d, d, 3 * d * d, 3 * d, d * d, d, d, d, r * d * d, r * d, r * d * d, d]
    return [cfg.vocab * d, cfg.seq_len * d, *block * cfg.n_layers, d, d, cfg.vocab * d]


def model_config(name: str) -> GPTConfig:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}: allowed {', '.join(MODELS)}") from None


# The optimizer every mode trains with: AdamW, these betas and weight decay (eps 1e-8).
BETAS = (0.9, 0.95)
WEIGHT_DECAY = 0.01
EPS = 1e-8


# ZenFlow's block as DeepSpeed's ZenFlow tutorial (deepspeed.ai/tutorials/zenflow) writes it: the top
# 5% of gradient columns updated on the GPU every step, the rest by the CPU every 4 steps, that CPU
# step overlapped with the next steps (a process of its own). topk_ratio and update_interval are the
# family's knobs zenflow_topk and zenflow_update_interval.
ZENFLOW_DEFAULTS = {"topk_ratio": 0.05, "select_strategy": "auto", "select_interval": "auto", "update_interval": 4,
                    "full_warm_up_rounds": 0, "overlap_step": True}


def zenflow_block(topk_ratio: float | None = None, update_interval: int | None = None) -> dict:
    """The ``zero_optimization.zenflow`` block: the tutorial's, with ``topk_ratio`` (0 < r < 1) and
    ``update_interval`` (steps >= 1) where given."""
    block = dict(ZENFLOW_DEFAULTS)
    if topk_ratio is not None:
        if not 0 < topk_ratio < 1:
            raise ValueError(f"ZenFlow topk_ratio {topk_ratio}: allowed greater than 0 and less than 1")
        block["topk_ratio"] = topk_ratio
    if update_interval is not None:
        if isinstance(update_interval, bool) or not isinstance(update_interval, int) or update_interval < 1:
            raise ValueError(f"ZenFlow update_interval {update_interval!r}: allowed a whole number of steps >= 1")
        block["update_interval"] = update_interval
    return block


def deepspeed_config(stage: int, micro_batch: int, dtype: str, lr: float, *, pin_memory: bool = True,
                     offload_ratio: float = 1.0, sub_group_size: int | None = None,
                     zenflow: dict | None = None) -> dict:
    """DeepSpeed's configuration for ZeRO-Offload: ZeRO stage ``stage`` (2 or 3) with the optimizer
    state and its step on the host (DeepSpeedCPUAdam, which DeepSpeed picks for an offloaded
    AdamW), pinned unless ``pin_memory`` is false (a CPU-only run: nothing to pin for),
    ``micro_batch`` sequences per rank, bf16 mixed precision or fp32, and DeepSpeed's own
    per-phase timers (wall_clock_breakdown) to compare ours against.

    ``offload_ratio`` (ZeRO-3 only, 0 < r <= 1): the share of the optimizer's sub-groups on the host
    (``offload_optimizer.ratio``; the rest stepped on the GPU by torch's AdamW) with ``sub_group_size``
    elements per sub-group (DeepSpeed's default, 1e9, would make one sub-group of a model this size,
    which no ratio under 1 splits: numabench.families.train_step.split). ``zenflow`` (ZeRO-2 only):
    the ``zenflow`` block (zenflow_block())."""
    if stage not in (2, 3):
        raise ValueError(f"ZeRO stage {stage}: allowed 2 or 3 (the stages with optimizer offload)")
    if dtype not in ("fp32", "bf16"):
        raise ValueError(f"dtype {dtype!r}: allowed fp32 or bf16")
    if not 0 < offload_ratio <= 1:
        raise ValueError(f"offload_ratio {offload_ratio}: allowed greater than 0 and at most 1")
    if offload_ratio != 1 and stage != 3:
        raise ValueError(f"offload_ratio {offload_ratio} with ZeRO stage {stage}: DeepSpeed splits the optimizer "
                         "between GPU and host under stage 3 only")
    if sub_group_size is not None and (stage != 3 or sub_group_size < 1):
        raise ValueError(f"sub_group_size {sub_group_size} with ZeRO stage {stage}: allowed a whole number >= 1, "
                         "stage 3")
    if zenflow is not None and stage != 2:
        raise ValueError(f"zenflow with ZeRO stage {stage}: the family runs ZenFlow on ZeRO-2 (its tutorial's)")
    zero: dict = {"stage": stage, "offload_optimizer": {"device": "cpu", "pin_memory": pin_memory}}
    if offload_ratio != 1:
        zero["offload_optimizer"]["ratio"] = offload_ratio
    if sub_group_size is not None:
        zero["sub_group_size"] = sub_group_size
    if zenflow is not None:
        zero["zenflow"] = dict(zenflow)
    return {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": lr, "betas": list(BETAS), "eps": EPS,
                                                  "weight_decay": WEIGHT_DECAY}},
        "zero_optimization": zero,
        "bf16": {"enabled": dtype == "bf16"},
        "wall_clock_breakdown": True,
        "steps_per_print": 2**31 - 1,  # no progress lines in the workers' output
    }
