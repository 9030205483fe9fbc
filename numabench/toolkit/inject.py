"""An injected slowdown that is real work, for testing the regression gate.

``NUMABENCH_INJECT_SLOWDOWN=F`` (F > 1, e.g. 1.05) makes every timed phase of
a family that supports it take about F times as long, by waiting inside the
timed region itself, so the clock that measures the phase sees the wait:

- CPU phases (perf_counter): after the work, wait until the phase has taken F
  times what the work took in this very round (a sleep, then a spin of its last
  0.3 ms);
- GPU phases (CUDA events): before the phase's end event, a spin kernel on the
  phase's stream (``torch.cuda._sleep``) of (F - 1) times the phase's least
  un-padded time seen, converted to GPU clock cycles with a rate measured once
  on this GPU (the SM clock moves, so the pad's real length varies: docs/GATE.md).

Recorded numbers are never scaled: the gate must catch what the worker did.
"""
from __future__ import annotations

import os
import time
from typing import Any, Mapping

SLOWDOWN_ENV = "NUMABENCH_INJECT_SLOWDOWN"
CPU_SPIN_NS = 300_000  # a CPU pad's last part, spun: time.sleep overshoots by ~0.1 ms


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
    if not factor >= 1.0 or factor > 100:
        raise ValueError(f"{SLOWDOWN_ENV}={text!r}: allowed a number from 1 to 100, e.g. 1.05 for 5% slower")
    return factor


class SlowdownPad:
    """Pads timed phases by the injected factor; a no-op when the factor is 1."""

    def __init__(self, factor: float | None = None) -> None:
        self.factor = slowdown_factor() if factor is None else factor
        self.active = self.factor != 1.0
        self._base_s: dict[Any, float] = {}  # phase key -> least un-padded seconds seen
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
    def gpu(self, key: Any, stream: Any, share: float = 1.0) -> None:
        """Enqueue ``share`` of phase ``key``'s pad on ``stream`` (before its end event); a phase
        timed as the sum of several pieces (chunks) pads each piece with its share."""
        if not self.active:
            return
        base = self._base_s.get(key)
        if base is None:  # first round: nothing to scale yet (warm-up rounds come first)
            return
        import torch

        pad = (self.factor - 1) * base * share
        self._pad_s[key] = self._pad_s.get(key, 0.0) + pad
        cycles = int(pad * self._rate(stream.device))
        if cycles > 0:
            with torch.cuda.stream(stream):
                torch.cuda._sleep(cycles)

    def observe(self, key: Any, measured_s: float) -> None:
        """The phase's measured time this round (pad included): remembers the un-padded part,
        the least seen. A pad can slow what runs beside it (overlapped copies share the link):
        measured less pad then overstates the phase, and a pad sized from that would grow round
        after round; the least seen does not."""
        if self.active:
            base = max(measured_s - self._pad_s.pop(key, 0.0), 0.0)
            self._base_s[key] = min(base, self._base_s.get(key, base))

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
