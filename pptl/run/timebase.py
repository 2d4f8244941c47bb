"""One time base for the ranks of a measured run (pure, no torch).

Every rank stamps each step's anchor on its host's monotonic clock (``time.perf_counter``; on
CUDA the anchor event is placed on that clock by an event synchronized at the step's start). The
time base is rank 0's host clock. Each rank's clock is mapped onto it by an offset measured at
the plan's start and again at its end (:mod:`pptl.run.clocksync`: the best of 16 round trips to
rank 0, known within half its round trip), the drift between the two taken as linear. When every
rank runs on one host, their monotonic clocks are one clock: the offset is 0 by construction, and
the measured one is kept only as a check (``PPTL_RUN_CLOCK=offsets`` applies it anyway).

A step's time zero is its earliest anchor on the base; a rank's event at ``t`` ms after its own
anchor sits at ``base(anchor_r + t) - min_q base(anchor_q)``. The old per-rank anchor (each rank's own zero, which a host
that wakes one rank late shifts by as much) was why a RECV could seem to end before its SEND began.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

__all__ = ["ClockSample", "RankClock", "TOLERANCE_FLOOR_MS", "fit_clock", "tolerance_ms"]

#: What the rule on measured timelines allows beyond the clocks' stated uncertainty (ms): the
#: timers' resolution and float rounding, far below any op's length.
TOLERANCE_FLOOR_MS = 0.002


@dataclass(frozen=True, slots=True)
class ClockSample:
    """One offset measurement of a rank's clock against rank 0's."""

    at_ms: float
    """Rank 0's clock when it was taken (ms)."""
    offset_ms: float
    """The rank's clock minus rank 0's (ms)."""
    rtt_ms: float
    """Round trip of the exchange kept: the offset is known within half of it."""

    @staticmethod
    def from_list(raw: Sequence[Any]) -> "ClockSample":
        return ClockSample(float(raw[0]), float(raw[1]), float(raw[2]))


@dataclass(frozen=True, slots=True)
class RankClock:
    """The map from one rank's host clock to the time base: ``t - (offset + drift * (t - at))``."""

    offset_ms: float = 0.0
    drift: float = 0.0
    """ms of offset gained per ms (1e-6 is 1 ppm)."""
    at_ms: float = 0.0
    uncertainty_ms: float = 0.0
    """How far the mapped times may be off against rank 0's (half the round trip)."""

    def to_base(self, t_ms: float) -> float:
        # The drift term is evaluated at the rank's own time rather than the base time: they differ
        # by the offset, which changes the correction by offset * drift (ns for ms and ppm).
        return t_ms - (self.offset_ms + self.drift * (t_ms - self.at_ms))


def fit_clock(samples: Sequence[ClockSample], *, apply: bool) -> RankClock:
    """The linear map through the first and the last sample (one sample: a constant offset).

    With ``apply`` False (the ranks share one clock) the map is the identity and nothing is
    uncertain. Samples at the same instant give no drift.
    """
    if not apply or not samples:
        return RankClock()
    first, last = samples[0], samples[-1]
    span = last.at_ms - first.at_ms
    drift = (last.offset_ms - first.offset_ms) / span if span > 0 else 0.0
    return RankClock(first.offset_ms, drift, first.at_ms, max(first.rtt_ms, last.rtt_ms) / 2)


def tolerance_ms(clocks: Mapping[int, RankClock], anchor_err_ms: Mapping[int, float]) -> float:
    """How early a RECV may seem to end before its SEND starts on this time base (ms): the floor,
    plus the two worst ranks' uncertainty (offset and anchor placement) added, since a pair of
    ranks can be off in opposite directions."""
    worst = sorted((c.uncertainty_ms + anchor_err_ms.get(r, 0.0) for r, c in clocks.items()), reverse=True)
    return TOLERANCE_FLOOR_MS + sum(worst[:2])
