"""The id map: entry ids that were renamed, and the id each old one has now.

An entry's id (pytest-benchmark's ``fullname``) is the family's test and its case's axis
values. Two commits gave ids a new axis value without measuring anything again:

- 5165871 (alloc axis): adam_offload ids gained the allocator they were measured with,
  ``...-ours-serial]`` -> ``...-ours-serial-register]`` (``extra_info["alloc"]``; every entry
  before the axis used ``register``);
- 73682e9 (cpu_bind axis): train_step ids gained the CPU binding, ``...-ddp-small]`` ->
  ``...-ddp-small-node]`` (every entry before the axis ran ``node``).

``current_id`` maps an id of either age to today's, so a history (numabench.results.history)
follows an entry across the relabelling instead of splitting it into two series.
"""
from __future__ import annotations

from typing import Any

# (family, the ids' last axis value before the rename, the extra_info field added, its value before it existed)
RENAMES: tuple[tuple[str, frozenset[str], str, str], ...] = (
    ("adam_offload", frozenset({"serial", "overlap"}), "alloc", "register"),
    ("train_step", frozenset(), "cpu_bind", "node"),
)
CPU_BINDS = frozenset({"node", "rank-cores", "none"})


def current_id(fullname: str, extra_info: dict[str, Any] | None = None) -> str:
    """``fullname`` as it is named today (unchanged when it was never renamed)."""
    extra = extra_info or {}
    family = extra.get("family") or ("adam_offload" if "test_adam_offload" in fullname
                                     else "train_step" if "test_train_step" in fullname else "")
    if not fullname.endswith("]") or "[" not in fullname:
        return fullname
    params = fullname[fullname.index("[") + 1:-1]
    for fam, last_before, field, default in RENAMES:
        if fam != family:
            continue
        value = str(extra.get(field) or default)
        if fam == "train_step":
            if any(params.endswith("-" + b) for b in CPU_BINDS):
                return fullname
        elif params.rsplit("-", 1)[-1] not in last_before:
            return fullname
        return f"{fullname[:-1]}-{value}]"
    return fullname
