"""A deliberately slow rank (``pptl run --slow-rank R --slow-factor F``): each compute-lane op of
rank R keeps its lane busy ``F`` times as long as it takes, to measure how a plan copes with a
straggler (``pptl whatif --straggler rank=R,xF`` predicts it).

After each compute op the rank holds its compute lane for ``(F - 1)`` times the op's own time:
on CPU by spinning on the host for the time the op just took; on CUDA by a spin kernel
(``torch.cuda._sleep``) on the compute stream, as long as the op's shortest time measured so far
(timed steps and the warmup time every op; the first step runs unstretched, the warmup absorbs
it). The stretch comes after the op's end event, so the op's measured time stays its own and the
wait shows as a gap on the lane.
"""
from __future__ import annotations

import time
from typing import Any

import torch

__all__ = ["Stretch"]

#: Cycles of the spin kernel timed once to learn the GPU's cycles per millisecond.
_PROBE_CYCLES = 20_000_000


class Stretch:
    """The slow rank's extra hold per compute op."""

    def __init__(self, factor: float) -> None:
        self.factor = factor
        self.base_ms: dict[int, float] = {}
        """Op index -> its shortest measured time (CUDA)."""
        self.cycles_per_ms: float | None = None

    def cpu(self, took_ms: float) -> None:
        """Spin on the host for ``(factor - 1) * took_ms`` (a sleep overshoots by tens of µs)."""
        until = time.perf_counter() + (self.factor - 1.0) * took_ms / 1e3
        while time.perf_counter() < until:
            pass

    def cuda(self, i: int, stream: Any) -> None:
        """Enqueue the hold after op ``i`` on ``stream`` (nothing until the op has been timed)."""
        ms = self.base_ms.get(i)
        if ms is None or self.cycles_per_ms is None:
            return
        cycles = int((self.factor - 1.0) * ms * self.cycles_per_ms)
        if cycles > 0:
            with torch.cuda.stream(stream):
                torch.cuda._sleep(cycles)

    def measured(self, times: dict[int, float], device: Any) -> None:
        """After a timed step: each compute op's time (ms); the first call also times the spin."""
        for i, ms in times.items():
            self.base_ms[i] = min(ms, self.base_ms.get(i, ms))
        if self.cycles_per_ms is None:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            a.record()
            torch.cuda._sleep(_PROBE_CYCLES)
            b.record()
            b.synchronize()
            self.cycles_per_ms = _PROBE_CYCLES / max(a.elapsed_time(b), 1e-6)
