"""A small decoder-only transformer in plain torch (no downloads, no extra packages).

Token + learned position embedding, N pre-norm blocks (causal self-attention
through ``scaled_dot_product_attention``, GELU MLP), final LayerNorm, untied LM
head. The sizes are in numabench.families.train_step.configs (``MODELS``).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from numabench.families.train_step.configs import GPTConfig, model_config


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, cfg.mlp_ratio * d)
        self.out = nn.Linear(cfg.mlp_ratio * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self.apply(self._init)

    def init_weights(self) -> None:
        """Every parameter's initial value (as construction gives it): LayerNorms at weight 1 and
        bias 0, the rest from ``_init``; for a model made on the meta device and moved with
        ``to_empty``."""
        for m in self.modules():
            if isinstance(m, nn.LayerNorm):
                m.reset_parameters()
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def build_model(name: str, seed: int = 0, device: "torch.device | str" = "cpu") -> GPT:
    """The same initial weights for a given (name, seed) on every rank and machine: made on the
    host and moved to ``device``; on the meta device, shapes only; a model whose config says
    ``init_on_device`` is initialised on ``device`` itself (the same weights for a given name, seed
    and device kind)."""
    cfg = model_config(name)
    device = torch.device(device)
    if device.type == "meta" or cfg.init_on_device:
        with torch.device("meta"):
            model = GPT(cfg)
        if device.type == "meta":
            return model
        model = model.to_empty(device=device)
        with torch.random.fork_rng(devices=[device] if device.type != "cpu" else [], device_type=device.type):
            torch.manual_seed(seed)
            model.init_weights()
        return model
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT(cfg)
    return model.to(device)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
