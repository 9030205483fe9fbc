"""The overlapped optimizer step: one implementation for the worker's
``schedule=overlap`` (``Schedule(chunk)``, every other knob at its default) and for
the probe that varies the knobs (numabench.tools.overlap_probe).

A chunk's four H2D copies, the fused kernel on it and its three D2H copies go on
their own streams, so chunk k+1 is copied in while chunk k is computed and chunk
k-1 copied out. Knobs (``Schedule``):
- ``chunk``: elements per pipeline chunk (H2D and compute);
- ``d2h_group``: D2H copies cover this many chunks at once (fewer, larger copies);
- ``h2d_streams``: a chunk's four H2D copies split over 1 or 2 streams;
- ``priority``: the H2D stream(s) get the highest stream priority;
- ``h2d_engine`` / ``d2h_engine``: ``ce`` (cudaMemcpyAsync, the copy engines) or
  ``sm`` (an elementwise kernel reading or writing the pinned host pages through
  their unified address, so the SMs drive the transfer);
- ``huge``: the host state is allocated with MADV_HUGEPAGE (the probe's concern);
- ``align_d2h``: with several ranks, every H2D and compute is queued first, then each
  D2H group only once every rank has computed it (the host waits for the group's kernel
  and meets the other ranks, numabench.toolkit.rank_barrier): the ranks' D2H bursts run at
  the same time, so H2D runs at its one-way rate between them (the probe's concern: on
  H200 x2 a rank's H2D drops to ~40 GB/s while any rank's D2H runs).

Per-phase times are busy times: the sum over chunks (groups for D2H) of each
phase's span on its stream(s); ``step`` is the wall time from the first copy to the
last. Imports torch lazily: the family's package stays torch-free.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Mapping, Sequence

from numabench.toolkit.rank_barrier import meet

IN_NAMES = ("param", "grad", "exp_avg", "exp_avg_sq")  # copied in
OUT_NAMES = ("param", "exp_avg", "exp_avg_sq")  # copied back
ENGINES = ("ce", "sm")
_ALIGNED_STEPS = itertools.count(1)  # names the ranks' meetings of align_d2h steps


@dataclasses.dataclass(frozen=True)
class Schedule:
    chunk: int
    d2h_group: int = 1
    h2d_streams: int = 1
    priority: bool = False
    h2d_engine: str = "ce"
    d2h_engine: str = "ce"
    huge: bool = False
    align_d2h: bool = False

    def __post_init__(self) -> None:
        if self.chunk < 1 or self.d2h_group < 1 or self.h2d_streams not in (1, 2):
            raise ValueError(f"bad schedule {self}: chunk >= 1, d2h_group >= 1, h2d_streams 1 or 2")
        if self.h2d_engine not in ENGINES or self.d2h_engine not in ENGINES:
            raise ValueError(f"bad schedule {self}: engines allowed {', '.join(ENGINES)}")

    def label(self) -> str:
        parts = [f"chunk={self.chunk >> 20}M" if self.chunk >= 1 << 20 else f"chunk={self.chunk}"]
        if self.d2h_group > 1:
            parts.append(f"d2h_group={self.d2h_group}")
        if self.h2d_streams > 1:
            parts.append(f"h2d_streams={self.h2d_streams}")
        if self.priority:
            parts.append("priority")
        if self.h2d_engine != "ce":
            parts.append(f"h2d={self.h2d_engine}")
        if self.d2h_engine != "ce":
            parts.append(f"d2h={self.d2h_engine}")
        if self.huge:
            parts.append("hugepages")
        if self.align_d2h:
            parts.append("align_d2h")
        return " ".join(parts)


class _DeviceView:
    """``__cuda_array_interface__`` over pinned host memory: torch then sees a CUDA
    tensor whose pages are the host's (valid where the device can use the host
    pointer of registered memory, i.e. UVA on x86-64 Linux)."""

    def __init__(self, address: int, nbytes: int, itemsize: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes // itemsize,), "typestr": f"<i{itemsize}",
                                         "data": (address, False), "version": 3, "strides": None}


def int_view(t: Any) -> Any:
    """The same bytes as integers: an elementwise copy of them is bit-exact."""
    import torch

    return t.view({4: torch.int32, 2: torch.int16}[t.element_size()])


class OverlappedStep:
    """One overlapped step under ``schedule`` over host buffers (``HostBuffer`` per name)
    and device tensors. ``streams``: (h2d, compute, d2h) to use (the worker's own);
    made here otherwise."""

    def __init__(self, device: Any, schedule: Schedule, host: Mapping[str, Any], dev: Mapping[str, Any], *,
                 streams: Sequence[Any] | None = None, rank: int = 0, nprocess: int = 1) -> None:
        import torch

        self.device, self.s, self.host, self.dev = device, schedule, host, dev
        self.rank, self.nprocess = rank, nprocess
        self.pad: Any = None
        self.pad_key: tuple = ()
        if streams is not None and schedule.h2d_streams == 1 and not schedule.priority:
            self.h2d_streams, self.comp, self.d2h = [streams[0]], streams[1], streams[2]
        else:
            prio = torch.cuda.Stream.priority_range()[1] if schedule.priority else 0  # (low, high): high is smaller
            self.h2d_streams = [torch.cuda.Stream(device, priority=prio) for _ in range(schedule.h2d_streams)]
            self.comp, self.d2h = torch.cuda.Stream(device), torch.cuda.Stream(device)
        self.host_dev = {}
        if "sm" in (schedule.h2d_engine, schedule.d2h_engine):
            item = host["param"].tensor.element_size()
            self.host_dev = {n: int_view(torch.as_tensor(_DeviceView(b.address, b.nbytes, item), device=device))
                             for n, b in host.items()}

    def _pad(self, key: tuple, stream: Any, share: float) -> None:
        if self.pad is not None:
            self.pad.gpu(key, stream, share=share, overlapped=True)

    def _d2h(self, lo: int, hi: int, computed: Any, d2h_spans: list) -> None:
        """Queue the D2H copies of elements [lo, hi) once ``computed`` (an event) has happened."""
        import torch

        s, d, h, hd = self.s, self.dev, self.host, self.host_dev
        n = d["param"].numel()
        with torch.cuda.stream(self.d2h):
            self.d2h.wait_event(computed)
            b2, e2 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            b2.record(self.d2h)
            for name in OUT_NAMES:
                if s.d2h_engine == "ce":
                    h[name].tensor[lo:hi].copy_(d[name][lo:hi], non_blocking=True)
                else:
                    torch.bitwise_or(int_view(d[name])[lo:hi], 0, out=hd[name][lo:hi])
            self._pad((self.pad_key, "d2h"), self.d2h, (hi - lo) / n)
            e2.record(self.d2h)
            d2h_spans.append([(b2, e2)])

    def run(self, fn: Callable[..., Any], hyper: Mapping[str, Any], pad_key: tuple = (),
            pad: Any = None) -> dict[str, float]:
        """``fn(param, grad, exp_avg, exp_avg_sq, **hyper)`` chunk by chunk; seconds per phase.
        ``pad``: the injected-slowdown pad (numabench.toolkit.inject) this step pads with (the
        caller's current one: a test swaps the worker's pad between steps)."""
        import torch

        self.pad, self.pad_key = pad, pad_key
        s, d, h, hd = self.s, self.dev, self.host, self.host_dev
        n = d["param"].numel()
        chunks = [(i, min(s.chunk, n - i)) for i in range(0, n, s.chunk)]

        def timing_event() -> Any:
            return torch.cuda.Event(enable_timing=True)

        start, end = timing_event(), timing_event()
        cur = torch.cuda.current_stream(self.device)
        start.record(cur)
        for st in (*self.h2d_streams, self.comp, self.d2h):
            st.wait_event(start)
        spans: dict[str, list[list[tuple[Any, Any]]]] = {"h2d": [], "compute": [], "d2h": []}
        d2h_groups: list[tuple[int, int, Any]] = []  # (first element, end, computed event) per D2H group
        group_start = 0
        for k, (off, cnt) in enumerate(chunks):
            h2d_spans = []
            for j, st in enumerate(self.h2d_streams):
                with torch.cuda.stream(st):
                    b, e = timing_event(), timing_event()
                    b.record(st)
                    for name in IN_NAMES[j::len(self.h2d_streams)]:
                        if s.h2d_engine == "ce":
                            d[name][off:off + cnt].copy_(h[name].tensor[off:off + cnt], non_blocking=True)
                        else:  # SMs move the bytes, bit for bit
                            torch.bitwise_or(hd[name][off:off + cnt], 0, out=int_view(d[name])[off:off + cnt])
                    if j == 0:
                        self._pad((pad_key, "h2d"), st, cnt / n)
                    e.record(st)
                    h2d_spans.append((b, e))
            spans["h2d"].append(h2d_spans)
            with torch.cuda.stream(self.comp):
                for _, e in h2d_spans:
                    self.comp.wait_event(e)
                b, e = timing_event(), timing_event()
                b.record(self.comp)
                fn(d["param"][off:off + cnt], d["grad"][off:off + cnt], d["exp_avg"][off:off + cnt],
                   d["exp_avg_sq"][off:off + cnt], **hyper)
                self._pad((pad_key, "compute"), self.comp, cnt / n)
                e.record(self.comp)
                spans["compute"].append([(b, e)])
            if (k + 1 - group_start) == s.d2h_group or k == len(chunks) - 1:
                d2h_groups.append((chunks[group_start][0], off + cnt, e))  # e: the group's last chunk computed
                if not s.align_d2h:
                    self._d2h(*d2h_groups[-1], spans["d2h"])
                group_start = k + 1
        if s.align_d2h:
            step_id = next(_ALIGNED_STEPS)  # the same sequence in every rank
            for g, group in enumerate(d2h_groups):
                group[2].synchronize()  # this rank computed the group; then wait for the others
                meet(f"overlap-{step_id}-d2h-{g}", self.rank, self.nprocess)
                self._d2h(*group, spans["d2h"])
        cur.wait_stream(self.d2h)
        end.record(cur)
        end.synchronize()
        out = {phase: sum(max(b.elapsed_time(e) for b, e in group) for group in groups) / 1e3
               for phase, groups in spans.items()}
        out["step"] = start.elapsed_time(end) / 1e3
        return out
