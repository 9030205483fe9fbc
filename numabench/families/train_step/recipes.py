"""The precision recipe each train_step mode trains with, and the no-offload mode that trains the
same recipe (its fair reference). Torch-free: the family's metrics and the report read it.

A recipe says which weights the GPU computes with, where the fp32 master weights and the AdamW
moments live, and the gradients' dtype. Under ``dtype=bf16`` the modes train two recipes:

- ``fp32 + autocast`` (torch's AMP): fp32 weights on the device under ``torch.autocast(bf16)``
  (bf16 casts of the weights in every forward), fp32 gradients; the master is the weights
  themselves. ``no-offload``, ``ddp`` and ``torchao-offload`` (whose host copy is fp32 because the
  device weights are: its ``CPUOffloadOptimizer`` allocates the host copy like the device
  weights, so with bf16 weights its master and moments would be bf16 too, a third recipe
  without an fp32 master, which no mode here is a reference of).
- ``bf16 + fp32 master``: bf16 weights on the device, an fp32 master copy and fp32 moments
  (on the device, or offloaded to the host), bf16 gradients (widened to fp32 where the master
  is updated). ``no-offload-master`` (the reference), ``streamed``, the DeepSpeed modes (bf16
  enabled), FSDP2 with its bf16 parameter policy (``fsdp``, ``fsdp-offload``).

Under ``dtype=fp32`` every mode trains fp32 weights and gradients; ``no-offload`` is the reference.

``deepspeed-zenflow`` trains that recipe's state but not its optimizer: each step AdamW updates only
the top-k gradient columns (on the GPU); the other columns' gradients are summed and applied by the
CPU once per update_interval steps, after the steps that followed have run on weights that lack
them. Its recipe names the trade (``trade``), and the report says it beside every ratio.
The split modes (``streamed-split``, ``deepspeed-zero3`` at an offload_ratio under 1) keep the
master and moments of a share of the parameters on the device and of the rest on the host.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

AMP = "fp32 + autocast"
MASTER = "bf16 + fp32 master"
FP32 = "fp32"
# the no-offload mode that trains each recipe: every mode of the recipe is judged against it
REFERENCES = {AMP: "no-offload", MASTER: "no-offload-master", FP32: "no-offload"}

# where a mode keeps its fp32 master weights and moments: on the device, or on the host
HOST_STATE_MODES = ("streamed", "deepspeed-zero2", "deepspeed-zero3", "torchao-offload", "fsdp-offload",
                    "deepspeed-zenflow", "streamed-split")
SPLIT_MODES = ("streamed-split", "deepspeed-zero3")  # at an offload_ratio under 1: state on both sides
# what a mode gives up against its recipe's optimizer (one line; the table and the winner sentence say it)
TRADES = {"deepspeed-zenflow": ("not the same optimizer: AdamW steps the top-k gradient columns every step, "
                                "the rest once per update_interval steps from gradients summed since (stale)")}
AMP_MODES = ("no-offload", "ddp", "torchao-offload")
# modes whose master is a copy separate from the weights (the others update the weights in place)
MASTER_COPY_MODES = ("no-offload-master", "streamed", "deepspeed-zero2", "deepspeed-zero3", "torchao-offload",
                     "fsdp", "fsdp-offload", "deepspeed-zenflow", "streamed-split")
# modes whose optimizer reads the gradients on the host (the streamed mode brings the state to them)
HOST_GRAD_MODES = ("torchao-offload", "deepspeed-zero2", "deepspeed-zero3", "fsdp-offload", "deepspeed-zenflow")
# where the gradient the optimizer reads comes from, under bf16 (the master's dtype is fp32)
BF16_GRADS = {
    "no-offload": "fp32 on device", "ddp": "fp32 on device",
    "torchao-offload": "fp32 on device, copied to the host",
    "no-offload-master": "bf16 on device, widened to fp32 on device",
    "streamed": "bf16 on device (widened in the update)",
    "deepspeed-zero2": "bf16 on device, widened to fp32 and copied to the host",
    "deepspeed-zero3": "bf16 on device, widened to fp32 and copied to the host",
    "fsdp": "bf16, reduced to fp32 on device",
    "fsdp-offload": "bf16, reduced to fp32, copied to the host",
    "deepspeed-zenflow": "bf16 on device; top-k columns stepped there, the rest widened to fp32 and copied to the host",
    "streamed-split": "bf16 on device (widened in the update)",
}


@dataclass(frozen=True)
class Recipe:
    name: str  # AMP, MASTER or FP32
    weights: str  # what the device computes with
    master: str  # the fp32 master weights: where, and whether they are the weights themselves
    moments: str  # AdamW's two moments
    grads: str  # the gradients the optimizer reads
    reference: str  # the no-offload mode of the same recipe
    trade: str | None = None  # what the mode gives up against the recipe's optimizer (TRADES)

    def label(self) -> str:
        """The whole recipe in one line."""
        return (f"{self.weights}; master {self.master}; moments {self.moments}; grads {self.grads}"
                + (f"; {self.trade}" if self.trade else ""))

    def short(self) -> str:
        """The recipe's name and where its master lives, for a table cell; a trade marked."""
        where = next(w for p, w in (("fp32 on host and device", "split"), ("fp32 on host", "host"), ("", "device"))
                     if self.master.startswith(p))
        return f"{self.name} ({where}{', stale updates' if self.trade else ''})"

    def to_dict(self) -> dict[str, str]:
        return {**asdict(self), "label": self.label(), "short": self.short()}


def _place(mode: str, offload_ratio: float | None) -> str:
    if mode in SPLIT_MODES and (offload_ratio is None and mode == "streamed-split"
                                or offload_ratio is not None and offload_ratio < 1):
        return "host and device (split)"
    return "host" if mode in HOST_STATE_MODES else "device"


def recipe(mode: str, dtype: str, offload_ratio: float | None = None) -> Recipe:
    """The recipe ``mode`` trains with at ``dtype`` (fp32 or bf16); a split mode's at
    ``offload_ratio`` (None: streamed-split split, deepspeed-zero3 all on the host)."""
    if mode not in BF16_GRADS:
        raise ValueError(f"unknown mode {mode!r}: allowed {', '.join(BF16_GRADS)}")
    if dtype not in ("fp32", "bf16"):
        raise ValueError(f"dtype {dtype!r}: allowed fp32 or bf16 (train_step's dtypes)")
    where = _place(mode, offload_ratio)
    master = f"fp32 on {where}" + (" (a copy)" if mode in MASTER_COPY_MODES else " (the weights)")
    if dtype == "fp32":
        grads = "fp32 on device" + (", copied to the host" if mode in HOST_GRAD_MODES else "")
        return Recipe(FP32, "fp32 weights", master, f"fp32 on {where}", grads, REFERENCES[FP32], TRADES.get(mode))
    name = AMP if mode in AMP_MODES else MASTER
    weights = "fp32 weights + bf16 autocast" if name == AMP else "bf16 weights"
    return Recipe(name, weights, master, f"fp32 on {where}", BF16_GRADS[mode], REFERENCES[name], TRADES.get(mode))


def reference_mode(mode: str, dtype: str) -> str:
    """The no-offload mode that trains the same recipe as ``mode`` at ``dtype``."""
    return recipe(mode, dtype).reference
