"""What a train_step mode moves per step per parameter: over PCIe in each direction, and through
host memory in its CPU-side optimizer step. A model of each mode's copies and passes at the
family's settings, not a measurement (torch-free; the family's metrics and the report's bounds
read it).

PCIe (host -> device, device -> host), bytes per parameter:
- streamed: fp32 master and both moments in and out (12, 12); gradients stay on the GPU.
- deepspeed-zero2/3: the gradient out as fp32 (DeepSpeed widens it on the GPU before the copy into
  its fp32 host buffer), the updated weights back in the training dtype (2 in bf16, 4 in fp32).
- torchao-offload: each fp32 gradient out, each fp32 parameter back (4, 4).
- fsdp-offload: the fp32 parameters in for forward and again for backward (resharded after
  forward), the fp32 gradients out (8, 4).
- ddp, fsdp, no-offload, no-offload-master: none (all state on the device).

Host memory, bytes per parameter of the optimizer pass on the CPU (None where the optimizer runs
on the GPU): AdamW reads the fp32 master, gradient and both moments and writes master and moments
back, 7 x 4 = 28 bytes (host_membw's ``adam_pattern``), DeepSpeed also writes the bf16 copy of the
result it sends back (+2 under bf16). torch's optimizers on the host (torchao's fused AdamW per
parameter, FSDP2's AdamW) move at least the same 28 bytes.
"""
from __future__ import annotations

MODES_ON_DEVICE = ("ddp", "fsdp", "no-offload", "no-offload-master")
ADAM_PATTERN_BYTES = 7 * 4  # fp32: read p, g, m, v; write p, m, v


def _narrow(dtype: str) -> int:
    if dtype not in ("fp32", "bf16"):
        raise ValueError(f"dtype {dtype!r}: allowed fp32 or bf16 (train_step's dtypes)")
    return 2 if dtype == "bf16" else 4


def pcie_bytes_by_direction(mode: str, dtype: str) -> tuple[float, float]:
    """(host -> device, device -> host) bytes per step per parameter under ``mode``."""
    narrow = _narrow(dtype)
    table = {"streamed": (12, 12), "deepspeed-zero2": (narrow, 4), "deepspeed-zero3": (narrow, 4),
             "torchao-offload": (4, 4), "fsdp-offload": (8, 4), **{m: (0, 0) for m in MODES_ON_DEVICE}}
    if mode not in table:
        raise ValueError(f"unknown mode {mode!r}: allowed {', '.join(table)}")
    h2d, d2h = table[mode]
    return float(h2d), float(d2h)


def host_optimizer_bytes(mode: str, dtype: str) -> float | None:
    """Host-memory bytes per parameter of the mode's CPU-side optimizer step; None where the
    optimizer runs on the GPU."""
    narrow = _narrow(dtype)
    pcie_bytes_by_direction(mode, dtype)  # the mode is checked there
    if mode in ("deepspeed-zero2", "deepspeed-zero3"):
        return float(ADAM_PATTERN_BYTES + (narrow if dtype == "bf16" else 0))
    if mode in ("torchao-offload", "fsdp-offload"):
        return float(ADAM_PATTERN_BYTES)
    return None
