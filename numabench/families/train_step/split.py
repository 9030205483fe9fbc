"""The split modes' share arithmetic: which parameters keep their fp32 master and moments on the GPU
and which on the host, for a chosen ``offload_ratio`` (the share on the host). Torch-free: the
family's plans, the workers and the report read it.

- ``streamed-split`` keeps the leading parameters (model order: embeddings and first blocks) on the
  GPU, as many whole parameters as the GPU share holds, and streams the rest
  (numabench.families.train_step.streamed). Backward makes the leading parameters' gradients last,
  so the streamed chunks, which start from the last parameters during backward, keep their overlap.
- ``deepspeed-zero3`` at ``offload_optimizer.ratio`` r: DeepSpeed cuts each rank's partition into
  sub-groups of ``sub_group_size`` elements (whole parameters, in order, a sub-group closed once it
  reaches the size) and steps sub-group i on the host where i >= int((1 - r) x the number of
  sub-groups), on the GPU otherwise (deepspeed/runtime/zero/stage3.py, ``_create_fp32_partitions``).
  With its default size, 1e9 elements, a model of a few billion parameters is a handful of
  sub-groups and most ratios round to all or nothing: the family sets the size to split every
  partition into ``SUB_GROUPS``.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SUB_GROUPS = 32  # sub-groups per ZeRO-3 partition the family asks for: ratios resolve to ~1/32


def _check_ratio(offload_ratio: float) -> None:
    if not 0 <= offload_ratio <= 1:
        raise ValueError(f"offload_ratio {offload_ratio}: allowed 0 to 1 (the share of the optimizer state on the host)")


def _check_sizes(sizes: Sequence[int]) -> None:
    if not sizes or any(n < 1 for n in sizes):
        raise ValueError(f"parameter sizes {list(sizes)[:8]}: allowed one or more sizes >= 1")


@dataclass(frozen=True)
class Split:
    """The first ``on_gpu`` parameters keep their optimizer state on the GPU, the rest on the host."""
    on_gpu: int  # parameters, from the first
    gpu_elements: int
    host_elements: int

    @property
    def offload_ratio(self) -> float:
        """The share of the elements whose state is on the host (what the chosen ratio became)."""
        return self.host_elements / (self.gpu_elements + self.host_elements)


def prefix_split(sizes: Sequence[int], offload_ratio: float) -> Split:
    """streamed-split: the longest run of leading parameters whose elements fit the GPU share,
    1 - ``offload_ratio`` of all (whole parameters: never more on the GPU than asked)."""
    _check_sizes(sizes)
    _check_ratio(offload_ratio)
    total = sum(sizes)
    room = (1 - offload_ratio) * total
    k, kept = 0, 0
    while k < len(sizes) and kept + sizes[k] <= room + 1e-9 * total:
        kept += sizes[k]
        k += 1
    return Split(k, kept, total - kept)


def sub_group_size(sizes: Sequence[int], groups: int = SUB_GROUPS) -> int:
    """The ``sub_group_size`` that cuts a partition of ``sizes`` into about ``groups`` sub-groups."""
    _check_sizes(sizes)
    if groups < 1:
        raise ValueError(f"groups {groups}: allowed >= 1")
    return -(-sum(sizes) // groups)


def zero3_sub_groups(sizes: Sequence[int], size: int) -> list[int]:
    """The elements of each sub-group DeepSpeed's ZeRO-3 makes of a partition of ``sizes``
    (``_create_fp16_sub_groups``): one for all where ``size`` covers them, else whole parameters
    in order, each sub-group closed once it holds ``size`` elements or more."""
    _check_sizes(sizes)
    if size < 1:
        raise ValueError(f"sub_group_size {size}: allowed >= 1")
    if size >= sum(sizes):
        return [sum(sizes)]
    groups, filled = [], 0
    for i, n in enumerate(sizes):
        filled += n
        if filled >= size or i == len(sizes) - 1:
            groups.append(filled)
            filled = 0
    return groups


def zero3_on_host(groups: int, offload_ratio: float) -> list[bool]:
    """Which of ``groups`` sub-groups DeepSpeed steps on the host at ``offload_ratio``: i >=
    int((1 - ratio) x groups), DeepSpeed's own expression (its float rounding included)."""
    _check_ratio(offload_ratio)
    if groups < 1:
        raise ValueError(f"groups {groups}: allowed >= 1")
    return [i >= int((1 - offload_ratio) * groups) for i in range(groups)]


def zero3_split(sizes: Sequence[int], offload_ratio: float, size: int) -> Split:
    """deepspeed-zero3 at ``offload_ratio`` with ``sub_group_size`` ``size``: the elements stepped on
    the GPU and on the host (``on_gpu`` counts sub-groups here, the leading ones)."""
    groups = zero3_sub_groups(sizes, size)
    host = zero3_on_host(len(groups), offload_ratio)
    return Split(host.count(False), sum(g for g, h in zip(groups, host) if not h),
                 sum(g for g, h in zip(groups, host) if h))
