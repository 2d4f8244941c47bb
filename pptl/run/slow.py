"""A deliberately slow rank (``pptl run --slow-rank R --slow-factor F``): each compute-lane op of
rank R keeps its lane busy ``F`` times as long as it takes, to measure how a plan copes with a
straggler (``pptl whatif --straggler rank=R,xF`` predicts it).

After each compute op the rank holds its compute lane for ``(F - 1)`` times the op's own time:
on CPU by spinning on the host for the time the op just took; on CUDA by a spin kernel
(``torch.cuda._sleep``) on the compute stream, as long as the median of the op's times measured so
far (timed steps and the warmup time every op; the first step runs unstretched, the warmup absorbs
it). The stretch comes after the op's end event, so the op's measured time stays its own and the
wait shows as a gap on the lane.

The spin kernel counts SM clock cycles, and the clock under a step's GEMMs is not the clock of an
idle probe: with cycles per ms taken once from a probe, three plans of one launch on 2 H200s held
1.19, 1.28 and 1.31 times their ops' time for a factor of 1.3 (2026-11-26). So every hold is timed
by a pair of events, and after each timed step the cycles per ms are re-measured from the holds
themselves (cycles asked over milliseconds held).
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
        self.seen: dict[int, list[float]] = {}
        """Op index -> its measured times (CUDA), timed steps in order."""
        self.base_ms: dict[int, float] = {}
        """Op index -> the median of ``seen``."""
        self.cycles_per_ms: float | None = None
        self.holds: dict[int, tuple[int, Any, Any]] = {}
        """Op index -> (cycles asked, start event, end event) of its last hold."""

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
            _, a, b = self.holds.get(i) or (0, torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            with torch.cuda.stream(stream):
                a.record(stream)
                torch.cuda._sleep(cycles)
                b.record(stream)
            self.holds[i] = (cycles, a, b)

    def measured(self, times: dict[int, float], device: Any) -> None:
        """After a timed step: each compute op's time (ms); the first call also times the spin,
        later ones re-measure it from the holds (all complete: the step has ended)."""
        import statistics

        for i, ms in times.items():
            self.seen.setdefault(i, []).append(ms)
            self.base_ms[i] = statistics.median(self.seen[i])
        if self.holds:
            asked = sum(c for c, _, _ in self.holds.values())
            held = sum(a.elapsed_time(b) for _, a, b in self.holds.values())
            if held > 0:
                self.cycles_per_ms = asked / held
        if self.cycles_per_ms is None:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            a.record()
            torch.cuda._sleep(_PROBE_CYCLES)
            b.record()
            b.synchronize()
            self.cycles_per_ms = _PROBE_CYCLES / max(a.elapsed_time(b), 1e-6)
