"""DeepSpeed's ZeRO-Offload host state by tensor kind, and its placement under the ``place`` axis.

DeepSpeed allocates its host buffers itself (the moments only in the first step), so a case
places them after that step: each kind's storages are copied into buffers bound kind by kind
and every tensor viewing them is pointed there (numabench.toolkit.rehome), the views DeepSpeed
keeps of them elsewhere included (ZeRO-2's ``offload_gradient_dict``, ZeRO-3's gradient
partitions per parameter), found by walking the ZeRO optimizer's attributes.
"""
from __future__ import annotations

from typing import Any

from numabench.families.train_step import PLACED_TOUCHES
from numabench.numa.place import Place
from numabench.toolkit.rehome import Rehomed, rehome, tensors_under

MASTER_LISTS = (
    "single_partition_of_fp32_groups",  # ZeRO-1/2: fp32 master partition per group (.grad: its gradient)
    "fp32_partitioned_groups_flat",  # ZeRO-3: fp32 master partition per sub-group (.grad likewise)
)
GRAD_BUFFERS = ("grad_partitions_flat_buffer",)  # ZeRO-3 with offload: the flat fp32 gradient buffer
WEIGHT_LISTS = ("param_buffer_of_bit16_for_cpu_offload_groups",)  # ZeRO-2: the compute weights on the host
MOMENT_KEYS = ("exp_avg", "exp_avg_sq")


def _cpu(tensors: list) -> list:
    return [t for t in tensors if hasattr(t, "data_ptr") and t.device.type == "cpu" and t.numel() > 0]


def kind_tensors(zero_optimizer: Any, inner_optimizers: list) -> dict[str, list]:
    """The host tensors of each kind DeepSpeed's ZeRO optimizer keeps (master, grads, moments,
    weights), the kinds it keeps none of left out."""
    out: dict[str, list] = {"master": [], "grads": [], "moments": [], "weights": []}
    for name in MASTER_LISTS:
        for t in getattr(zero_optimizer, name, None) or ():
            out["master"].append(t)
            if getattr(t, "grad", None) is not None:
                out["grads"].append(t.grad)
    for name in GRAD_BUFFERS:
        t = getattr(zero_optimizer, name, None)
        if hasattr(t, "data_ptr"):
            out["grads"].append(t)
    for name in WEIGHT_LISTS:
        out["weights"] += list(getattr(zero_optimizer, name, None) or ())
    for opt in inner_optimizers:
        for st in opt.state.values():
            out["moments"] += [st[k] for k in MOMENT_KEYS if k in st]
    return {k: _cpu(v) for k, v in out.items() if _cpu(v)}


def place_state(zero_optimizer: Any, inner_optimizers: list, mode: str, place: Place) -> Rehomed:
    """Move the ZeRO optimizer's host state into buffers placed by ``place`` (after the step that
    made its moments); every view of it DeepSpeed keeps follows."""
    kinds = kind_tensors(zero_optimizer, inner_optimizers)
    if "moments" not in kinds:
        raise RuntimeError("DeepSpeed's optimizer holds no moments yet: place its state after its first step")
    touches = PLACED_TOUCHES[mode]
    unknown = sorted(set(kinds) - set(touches))
    if unknown:
        raise RuntimeError(f"DeepSpeed ({mode}) keeps host kind(s) {', '.join(unknown)} the family does not declare "
                           f"(numabench.families.train_step.PLACED_TOUCHES: {', '.join(touches)})")
    views = list(tensors_under(vars(zero_optimizer)))
    for opt in inner_optimizers:
        views += list(tensors_under(opt.state))
    return rehome(kinds, place, touches, views)
