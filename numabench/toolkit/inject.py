"""An injected slowdown that is real work, for testing the regression gate.

``NUMABENCH_INJECT_SLOWDOWN=F`` (F > 1, e.g. 1.05) makes every timed phase of
a family that supports it take about F times as long, by waiting inside the
timed region itself, so the clock that measures the phase sees the wait:

- CPU phases (perf_counter): after the work, wait until the phase has taken F
  times what the work took in this very round (a sleep, then a spin of its last
  0.3 ms);
- GPU phases (CUDA events): before the phase's end event, a spin kernel on the
  phase's stream (``torch.cuda._sleep``) of (F - 1) times the phase's typical
  un-padded time (the median of the last rounds; the least seen for pieces of an
  overlapped schedule, see SlowdownPad.gpu), converted to GPU clock cycles with a
  rate measured once on this GPU (the SM clock moves, so the pad's real length
  varies: docs/GATE.md).

Recorded numbers are never scaled: the gate must catch what the worker did.
"""
from __future__ import annotations

import collections
import os
import statistics
import time
from typing import Any, Mapping

from numabench import bounds

SLOWDOWN_ENV = "NUMABENCH_INJECT_SLOWDOWN"
CPU_SPIN_NS = 300_000  # a CPU pad's last part, spun: time.sleep overshoots by ~0.1 ms
TYPICAL_OF_LAST = 15  # a serial GPU phase's pad: (F - 1) times the median of its last this many rounds


def slowdown_factor(env: Mapping[str, str] | None = None) -> float:
    """F from the environment (``env``, else this process's; 1.0 when unset); a value that is not
    a number >= 1 is an error."""
    text = (os.environ if env is None else env).get(SLOWDOWN_ENV, "").strip()
    if not text:
        return 1.0
    try:
        factor = float(text)
    except ValueError:
        factor = 0.0
    if not bounds.BOUNDS["slowdown"].holds(factor):
        raise ValueError(f"{SLOWDOWN_ENV}={text!r}: allowed {bounds.BOUNDS['slowdown'].allowed()}")
    return factor


class SlowdownPad:
    """Pads timed phases by the injected factor; a no-op when the factor is 1."""

    def __init__(self, factor: float | None = None) -> None:
        self.factor = slowdown_factor() if factor is None else factor
        self.active = self.factor != 1.0
        self._unpadded_s: dict[Any, collections.deque] = {}  # phase key -> its last un-padded seconds
        self._least_s: dict[Any, float] = {}  # phase key -> least un-padded seconds seen
        self._pad_s: dict[Any, float] = {}  # phase key -> pad asked for in the current round
        self._cycles_per_s: float | None = None

    # -- CPU phases ------------------------------------------------------------------
    def cpu(self, t0_ns: int) -> None:
        """Call right before the phase's end timestamp; ``t0_ns`` is its perf_counter_ns start."""
        if not self.active:
            return
        work = time.perf_counter_ns() - t0_ns
        until = t0_ns + int(work * self.factor)
        # Sleep most of it: a spin would hold the GIL, starving this process's other threads (a
        # DataLoader's pin-memory thread) past the phase; the last bit spins, which a sleep overshoots.
        sleep_ns = until - time.perf_counter_ns() - CPU_SPIN_NS
        if sleep_ns > 0:
            time.sleep(sleep_ns * 1e-9)
        while time.perf_counter_ns() < until:
            pass

    # -- GPU phases ------------------------------------------------------------------
    def pad_seconds(self, key: Any, share: float = 1.0, overlapped: bool = False) -> float | None:
        """The pad for ``share`` of phase ``key`` this round: (F - 1) times its typical un-padded
        time, the median of its last TYPICAL_OF_LAST rounds (a phase that varies round to round,
        a training step, gets F times its usual time, not F times its fastest); for a piece of an
        ``overlapped`` schedule the least seen (see observe). None before the phase was observed."""
        if overlapped:
            base = self._least_s.get(key)
        else:
            last = self._unpadded_s.get(key)
            base = statistics.median(last) if last else None
        return None if base is None else (self.factor - 1) * base * share

    def gpu(self, key: Any, stream: Any, share: float = 1.0, overlapped: bool = False) -> None:
        """Enqueue ``share`` of phase ``key``'s pad on ``stream`` (before its end event); a phase
        timed as the sum of several pieces (chunks) pads each piece with its share;
        ``overlapped``: the phase runs beside others that its pad slows (pad_seconds)."""
        if not self.active:
            return
        pad = self.pad_seconds(key, share, overlapped)
        if pad is None:  # first round: nothing to scale yet (warm-up rounds come first)
            return
        import torch

        self._pad_s[key] = self._pad_s.get(key, 0.0) + pad
        cycles = int(pad * self._rate(stream.device))
        if cycles > 0:
            with torch.cuda.stream(stream):
                torch.cuda._sleep(cycles)

    def observe(self, key: Any, measured_s: float) -> None:
        """The phase's measured time this round (pad included): remembers the un-padded part.
        A pad can slow what runs beside it (overlapped copies share the link): measured less pad
        then overstates the phase, and a pad sized from that would grow round after round; the
        least seen does not, so pieces of an overlapped schedule are sized from it."""
        if self.active:
            base = max(measured_s - self._pad_s.pop(key, 0.0), 0.0)
            self._least_s[key] = min(base, self._least_s.get(key, base))
            self._unpadded_s.setdefault(key, collections.deque(maxlen=TYPICAL_OF_LAST)).append(base)

    def _rate(self, device: Any) -> float:
        """GPU clock cycles per second of ``torch.cuda._sleep``, measured once."""
        if self._cycles_per_s is None:
            import torch

            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            cycles = 20_000_000
            with torch.cuda.device(device):
                torch.cuda._sleep(cycles // 10)  # wake the clocks
                rates = []
                for _ in range(3):
                    start.record()
                    torch.cuda._sleep(cycles)
                    end.record()
                    end.synchronize()
                    rates.append(cycles / (start.elapsed_time(end) / 1e3))
            self._cycles_per_s = sorted(rates)[1]
        return self._cycles_per_s
