"""The step's opening: a GPU computes faster in the first part of a step than in the rest of it.

Why: under a power cap a GPU's clock falls once its power reaches the cap and recovers in the
idle gap between steps, so within one step its ops run fast at first and slow down (on 2 H200s,
call 6's calibrating 1F1B run: rank 0's B from 5.90 to 6.44 ms over its 95 ms step). The op costs
the plans take from a calibrating run are its means over the whole step, so a plan whose step
ends early (GPipe m=4 after 1F1B m=8: half the work a rank) never reaches the slow part its costs
average in, and is predicted long.

What is learnt, from the calibrating run alone: per rank, its compute ops in the order it ran
them, each at its *work before*, how long the rank's compute lane had been busy since the step
opened when the op started (idle waits left out: a GPU that waits cools). The rank's work in a
step ``W`` splits at ``W / 2``: the *early* factor is the time the ops started before it took
over what their (stage, kind) means say, the *late* factor the same for those started from it
on (each rank's first op of a step left out: ``Spread.first`` holds what it pays). A plan's op on
that rank is scaled by the early factor while the rank's work before it is under ``W / 2``, by
the late one up to ``W``; past ``W`` the run saw nothing, and the op keeps its mean (the duty
model, ``Spread.duty_exponent``, moves that level with the plan's busy share; taken as the late
factor instead, a long step's ops paid the duty model's slowdown and the late factor's for one
cause: call 6's interleaved median left its band). The work before an op is counted with the
factors, so it is the time the rank has computed as predicted; a straggler's hold (a spin that
draws little power) is no work, as in the duty model.

Vocabulary: *work* busy time of a rank's compute lane since the step opened, in the run's unit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["Opening", "fit_opening", "opening_factors"]


@dataclass(frozen=True, slots=True)
class Opening:
    """How fast one rank computed in the first and the second half of its work in a step of the run."""

    work: float
    """The rank's work in a step of the run (sum of its compute ops' times)."""
    early: float
    """Factor of an op started before the rank had worked ``work / 2``."""
    late: float
    """Factor of an op started from ``work / 2`` up to (not including) ``work``."""

    def factor(self, before: float) -> float:
        """The factor of an op that starts after ``before`` of work (1 past the run's ``work``)."""
        if before < self.work / 2:
            return self.early
        return self.late if before < self.work else 1.0


def fit_opening(ran: Sequence[tuple[float, float, bool]]) -> Opening | None:
    """The opening of one rank from its compute ops in the order it ran them.

    Args:
        ran: per op ``(time, mean, lead)``: its measured time, the mean of its (stage, kind) (the
            cost a plan takes), and whether it is the rank's first op of a step (counted as work,
            not fitted).

    Returns:
        The :class:`Opening`, or None where either half holds no fitted op of positive mean.

    Example: times 1.0 (lead), 0.9, 2.2, with means 1.0, 1.0, 2.0: work 4.1, the second op starts
    at 1.0 (under 2.05: early 0.9 / 1.0), the third at 1.9 (early too), so no op is late: None. With
    times 1.0 (lead), 1.05, 0.9, 2.2 and means 1.0, 1.0, 1.0, 2.0: work 5.15, half 2.575; the ops
    start at 1.0, 2.05 (early: 1.05 + 0.9 over 2.0, 0.975) and 2.95 (late: 2.2 / 2.0, 1.1).

    Notes:
        O(ops).
    """
    work = sum(t for t, _, _ in ran)
    half = work / 2
    sums = [[0.0, 0.0], [0.0, 0.0]]  # early, late: (time, mean)
    before = 0.0
    for t, m, lead in ran:
        if not lead and m > 0:
            side = sums[0] if before < half else sums[1]
            side[0] += t
            side[1] += m
        before += t
    if sums[0][1] <= 0 or sums[1][1] <= 0:
        return None
    return Opening(work, sums[0][0] / sums[0][1], sums[1][0] / sums[1][1])


def opening_factors(times: Sequence[float], opening: Opening, *, lead_extra: float = 0.0) -> list[float]:
    """Factors of a plan rank's compute ops in lane order, from their mean ``times``.

    The first op is the rank's lead of the step (factor 1; its time plus ``lead_extra``, what
    ``Spread.first`` adds, counts as work); every other op is scaled by :meth:`Opening.factor` at
    the work before it, counted with the factors of the ops before.

    Example: times 1.0, 1.0, 1.0, 2.0 on Opening(work 4.0, early 0.9, late 1.1): the ops start
    after 0, 1.0, 1.9 (under 2.0: early) and 2.8 (late): 1, 0.9, 0.9, 1.1.

    Notes:
        O(ops).
    """
    out: list[float] = []
    before = 0.0
    for k, t in enumerate(times):
        f = 1.0 if k == 0 else opening.factor(before)
        out.append(f)
        before += t * f + (lead_extra if k == 0 else 0.0)
    return out
