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
}


def param_count(cfg: GPTConfig) -> int:
    """The model's parameter count, from its shape (what count_params(build_model(...)) gives,
    without torch): embeddings, untied head, per block two LayerNorms, attention and MLP."""
    d, r = cfg.d_model, cfg.mlp_ratio
    block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (r * d * d + r * d) + (r * d * d + d)
    return 2 * cfg.vocab * d + cfg.seq_len * d + cfg.n_layers * block + 2 * d


def model_config(name: str) -> GPTConfig:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}: allowed {', '.join(MODELS)}") from None


# The optimizer every mode trains with: AdamW, these betas and weight decay (eps 1e-8).
BETAS = (0.9, 0.95)
WEIGHT_DECAY = 0.01
EPS = 1e-8


def deepspeed_config(stage: int, micro_batch: int, dtype: str, lr: float, *, pin_memory: bool = True) -> dict:
    """DeepSpeed's configuration for ZeRO-Offload: ZeRO stage ``stage`` (2 or 3) with the optimizer
    state and its step on the host (DeepSpeedCPUAdam, which DeepSpeed picks for an offloaded
    AdamW), pinned unless ``pin_memory`` is false (a CPU-only run: nothing to pin for),
    ``micro_batch`` sequences per rank, bf16 mixed precision or fp32, and DeepSpeed's own
    per-phase timers (wall_clock_breakdown) to compare ours against."""
    if stage not in (2, 3):
        raise ValueError(f"ZeRO stage {stage}: allowed 2 or 3 (the stages with optimizer offload)")
    if dtype not in ("fp32", "bf16"):
        raise ValueError(f"dtype {dtype!r}: allowed fp32 or bf16")
    return {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": lr, "betas": list(BETAS), "eps": EPS,
                                                  "weight_decay": WEIGHT_DECAY}},
        "zero_optimization": {"stage": stage, "offload_optimizer": {"device": "cpu", "pin_memory": pin_memory}},
        "bf16": {"enabled": dtype == "bf16"},
        "wall_clock_breakdown": True,
        "steps_per_print": 2**31 - 1,  # no progress lines in the workers' output
    }
