"""Host state a library allocated itself, moved into placed buffers of ours (the ``place`` axis for
DeepSpeed's ZeRO-Offload, whose buffers exist before a case can place them).

Each storage that holds a kind's tensors is copied into a buffer numabench.toolkit.hostmem
allocates with the kind's segments (bound before its first touch, pinned where the original was),
and every tensor viewing that storage (the kind's own, and the ``views`` the caller found elsewhere
in the library's objects) is pointed at the copy, in place (``Tensor.set_``): the library's own
references see the placed memory from then on. ``Rehomed.stray`` names the kinds' tensors that
later live outside the copies (a library that allocated a kind anew), which the caller must refuse.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

from numabench.numa.kind_layout import StateBuffer
from numabench.numa.place import Place
from numabench.toolkit.hostmem import HostBuffer, allocate
from numabench.toolkit.placed_state import PlacedState


def tensors_under(obj: Any, depth: int = 3) -> Iterator[Any]:
    """The CPU tensors reachable from ``obj`` through dicts, lists and tuples, ``depth`` levels down."""
    import torch

    if isinstance(obj, torch.Tensor):
        if obj.device.type == "cpu":
            yield obj
        return
    if depth <= 0:
        return
    if isinstance(obj, dict):
        for v in list(obj.values()):
            yield from tensors_under(v, depth - 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from tensors_under(v, depth - 1)


def _is_pinned(t: Any) -> bool:
    try:
        return bool(t.is_pinned())
    except RuntimeError:  # a torch without CUDA cannot say: nothing there is pinned
        return False


@dataclass
class Rehomed:
    state: PlacedState
    buffers: dict[str, HostBuffer] = field(default_factory=dict)

    def addresses(self) -> dict[str, int]:
        return {n: b.address for n, b in self.buffers.items()}

    def stray(self, tensors_by_kind: Mapping[str, Sequence[Any]]) -> list[str]:
        """Kinds' tensors whose bytes lie outside every copy (as 'kind: N bytes at 0x...')."""
        spans = [(b.address, b.address + b.nbytes) for b in self.buffers.values()]
        out = []
        for kind, tensors in tensors_by_kind.items():
            for t in tensors:
                lo = t.data_ptr()
                hi = lo + t.numel() * t.element_size()
                if t.numel() and not any(a <= lo and hi <= b for a, b in spans):
                    out.append(f"{kind}: {hi - lo} bytes at {lo:#x}")
        return out

    def release(self) -> None:
        for b in self.buffers.values():
            b.release()


def rehome(tensors_by_kind: Mapping[str, Sequence[Any]], place: Place, touches: Mapping[str, float],
           views: Iterable[Any] = ()) -> Rehomed:
    """Copy every storage of the kinds' tensors into a placed buffer and point all its tensors there."""
    import torch

    storages: dict[int, tuple[str, Any, bool]] = {}  # storage address -> (kind, storage, pinned)
    for kind, tensors in tensors_by_kind.items():
        for t in tensors:
            s = t.untyped_storage()
            held = storages.get(s.data_ptr())
            if held is not None and held[0] != kind:
                raise ValueError(f"one storage holds tensors of kinds {held[0]} and {kind}: they cannot be placed apart")
            storages.setdefault(s.data_ptr(), (kind, s, _is_pinned(t)))
    named = {ptr: f"{kind}.{i}" for i, (ptr, (kind, _, _)) in enumerate(storages.items())}
    state = PlacedState(place, [StateBuffer(named[p], k, s.nbytes()) for p, (k, s, _) in storages.items()], touches)
    out = Rehomed(state)
    new_storage = {}
    for ptr, (kind, storage, pinned) in storages.items():
        name = named[ptr]
        buf = allocate(storage.nbytes(), torch.uint8, "register" if pinned else "pageable", state.segments_of(name))
        buf.tensor.copy_(torch.empty(0, dtype=torch.uint8).set_(storage))
        out.buffers[name] = buf
        new_storage[ptr] = buf.tensor.untyped_storage()
    every = [t for ts in tensors_by_kind.values() for t in ts] + list(views)
    with torch.no_grad():
        for t in every:
            target = new_storage.get(t.untyped_storage().data_ptr())
            if target is not None:
                t.set_(target, t.storage_offset(), t.size(), t.stride())
    return out
