"""The sizes of the ``train_step`` family's model (torch-free: the pytest process reads them
while it collects cases; numabench.families.train_step.model builds the model in the workers).

- ``tiny``: 2 layers, d=64, vocab 512, 64 tokens: CPU-sized (CI runs it with gloo).
- ``small``: 12 layers, d=768, vocab 32000, 1024 tokens (GPT-2 small shape, ~134M
  parameters with the untied head): a GPU size.
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


MODELS = {
    "tiny": GPTConfig(vocab=512, d_model=64, n_layers=2, n_heads=2, seq_len=64),
    "small": GPTConfig(vocab=32000, d_model=768, n_layers=12, n_heads=12, seq_len=1024, lr=1e-4),
}


def model_config(name: str) -> GPTConfig:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}: allowed {', '.join(MODELS)}") from None
