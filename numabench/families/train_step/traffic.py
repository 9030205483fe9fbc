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
- streamed-split at offload_ratio r: the streamed mode's copies for the host share, (12r, 12r).
- deepspeed-zero3 at offload_ratio r: every gradient out to its flat fp32 host buffer (4), the GPU
  sub-groups' back in as fp32 (4(1 - r)), the host sub-groups' updated weights back (2 or 4, x r).
- deepspeed-zenflow: ZeRO-2's copies once per update_interval u steps, (2 or 4, 4) / u per step (the
  top-k columns stay on the GPU): a lower bound; its accumulation of the gradients between updates
  may add copies, which the measured step shows.

Host memory, bytes per parameter of the optimizer pass on the CPU (None where the optimizer runs
on the GPU): AdamW reads the fp32 master, gradient and both moments and writes master and moments
back, 7 x 4 = 28 bytes (host_membw's ``adam_pattern``), DeepSpeed also writes the bf16 copy of the
result it sends back (+2 under bf16). torch's optimizers on the host (torchao's fused AdamW per
parameter, FSDP2's AdamW) move at least the same 28 bytes. deepspeed-zero3 at offload_ratio r: r x
its 30; deepspeed-zenflow: ZeRO-2's 30 once per update_interval steps, 30 / u per step (its CPU
step runs in a process of its own, overlapped with the next steps).
"""
from __future__ import annotations

MODES_ON_DEVICE = ("ddp", "fsdp", "no-offload", "no-offload-master")
ADAM_PATTERN_BYTES = 7 * 4  # fp32: read p, g, m, v; write p, m, v


DTYPES = ("fp32", "bf16")  # train_step's: how GPUs train, and the CPU ranks' fp32


def _narrow(dtype: str) -> int:
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: allowed fp32 or bf16 (train_step's dtypes)")
    return 2 if dtype == "bf16" else 4


SPLIT_MODES = ("streamed-split", "deepspeed-zero3")  # the modes an offload_ratio under 1 splits
ZENFLOW_UPDATE_INTERVAL = 4  # configs.ZENFLOW_DEFAULTS' update_interval


def _settings(mode: str, offload_ratio: float, update_interval: int | None) -> int:
    if not 0 <= offload_ratio <= 1:
        raise ValueError(f"offload_ratio {offload_ratio}: allowed 0 to 1 (the share of the optimizer state on the host)")
    if offload_ratio != 1 and mode not in SPLIT_MODES:
        raise ValueError(f"offload_ratio {offload_ratio} with mode {mode}: allowed with {', '.join(SPLIT_MODES)} only")
    u = ZENFLOW_UPDATE_INTERVAL if update_interval is None else update_interval
    if u < 1:
        raise ValueError(f"update_interval {update_interval}: allowed a whole number of steps >= 1")
    return u


def pcie_bytes_by_direction(mode: str, dtype: str, offload_ratio: float = 1.0,
                            update_interval: int | None = None) -> tuple[float, float]:
    """(host -> device, device -> host) bytes per step per parameter under ``mode`` (a split mode at
    ``offload_ratio``; ZenFlow at ``update_interval``, None: its default)."""
    narrow = _narrow(dtype)
    r = offload_ratio
    u = _settings(mode, r, update_interval)
    table = {"streamed": (12, 12), "deepspeed-zero2": (narrow, 4), "deepspeed-zero3": (narrow * r + 4 * (1 - r), 4),
             "torchao-offload": (4, 4), "fsdp-offload": (8, 4), "streamed-split": (12 * r, 12 * r),
             "deepspeed-zenflow": (narrow / u, 4 / u), **{m: (0, 0) for m in MODES_ON_DEVICE}}
    if mode not in table:
        raise ValueError(f"unknown mode {mode!r}: allowed {', '.join(table)}")
    h2d, d2h = table[mode]
    return float(h2d), float(d2h)


def host_optimizer_bytes(mode: str, dtype: str, offload_ratio: float = 1.0,
                         update_interval: int | None = None) -> float | None:
    """Host-memory bytes per parameter (per step) of the mode's CPU-side optimizer step; None where
    the optimizer runs on the GPU."""
    narrow = _narrow(dtype)
    pcie_bytes_by_direction(mode, dtype, offload_ratio, update_interval)  # the mode and settings are checked there
    deepspeed = float(ADAM_PATTERN_BYTES + (narrow if dtype == "bf16" else 0))
    if mode == "deepspeed-zero2":
        return deepspeed
    if mode == "deepspeed-zero3":
        return deepspeed * offload_ratio or None
    if mode == "deepspeed-zenflow":
        return deepspeed / _settings(mode, offload_ratio, update_interval)
    if mode in ("torchao-offload", "fsdp-offload"):
        return float(ADAM_PATTERN_BYTES)
    return None
