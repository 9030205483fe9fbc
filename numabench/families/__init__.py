"""The benchmark families: what each measures, its axes and its requirements.

Adding a family is adding a module here with ``FAMILY`` (a cases.Family),
``metrics(result, phase) -> dict`` for extra_info, and a worker module in
numabench/workers; then one line in FAMILIES.
"""
from __future__ import annotations

import importlib
from types import ModuleType

FAMILIES = {
    "touch": "numabench.families.touch",
    "adam_offload": "numabench.families.adam_offload",
    "cpu_adam": "numabench.families.cpu_adam",
    "host_membw": "numabench.families.host_membw",
    "dataloader": "numabench.families.dataloader",
    "train_step": "numabench.families.train_step",
    "transfer": "numabench.families.transfer",
    "pinned_alloc": "numabench.families.pinned_alloc",
    "broadcast": "numabench.families.broadcast",
}


def family_module(key: str) -> ModuleType:
    try:
        return importlib.import_module(FAMILIES[key])
    except KeyError:
        raise KeyError(f"unknown family {key!r}: allowed {', '.join(FAMILIES)}") from None
