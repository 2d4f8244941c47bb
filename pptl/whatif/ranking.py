"""Ranking plans by a measured quantity, up to ties the measurement cannot resolve.

A measured straggler sensitivity (mean step with the straggler over the mean step without) comes
from two launches, and a launch moves the whole step by a fraction of a percent (the same plan,
measured in two launches of one call, 0.06-0.8% apart on 2 H200s). Two plans whose measured values
lie closer than that have no order a prediction could be held to; demanding one turns the check
into a coin toss. So the comparison is pairwise: every pair the measurement resolves must be
ordered alike by the prediction, and a pair it does not resolve asks nothing.

Pure functions; no numpy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

__all__ = ["RankAgreement", "launch_spread", "rank_agreement"]


def launch_spread(first_mean: float, second_mean: float) -> float:
    """How far one plan's mean step moved between two launches: ``|second / first - 1|``.

    Raises:
        ValueError: a mean that is not positive.

    Example: 50.0 then 50.25 ms: 0.005.
    """
    if first_mean <= 0 or second_mean <= 0:
        raise ValueError(f"mean steps must be positive, got {first_mean} and {second_mean}")
    return abs(second_mean / first_mean - 1.0)


@dataclass(frozen=True)
class RankAgreement:
    """The pairwise comparison of a predicted ranking with a measured one."""

    resolved: tuple[tuple[str, str], ...]
    """Pairs (lower, higher) the measurement orders: their values differ by more than the tolerance."""
    ties: tuple[tuple[str, str], ...]
    """Pairs the measurement does not order (within the tolerance), each as (first, second) by name order."""
    disagree: tuple[tuple[str, str], ...]
    """Resolved pairs (lower, higher) the prediction does not put in that order (equal counts as not)."""

    @property
    def alike(self) -> bool:
        """Every resolved pair ordered alike (true also when no pair is resolved: then there is no
        order to check, which :attr:`resolved` being empty says)."""
        return not self.disagree


def rank_agreement(measured: Mapping[str, float], predicted: Mapping[str, float], tolerance: float) -> RankAgreement:
    """Compare two rankings pair by pair, up to the measurement's ties.

    Two measured values tie when the larger over the smaller is at most ``1 + tolerance`` (at
    exactly the tolerance: a tie; the same whichever of the two comes first); otherwise the pair
    is resolved and the prediction must order it the same way, strictly.

    Raises:
        ValueError: the two mappings name different plans, a measured value is not positive, or the
            tolerance is negative.

    Example: measured {g: 1.114, f: 1.102, i: 1.114}, tolerance 0.005: g and i tie (0.0%); f is
    under both (1.1% apart), so a prediction {g: 1.156, f: 1.131, i: 1.110} agrees on (f, g) and
    disagrees on (f, i).

    Notes:
        O(plans ** 2).
    """
    if set(measured) != set(predicted):
        raise ValueError(f"the rankings name different plans: {sorted(measured)} and {sorted(predicted)}")
    if tolerance < 0:
        raise ValueError(f"tolerance must be 0 or more, got {tolerance}")
    if any(v <= 0 for v in measured.values()):
        raise ValueError("measured values must be positive")
    names = sorted(measured)
    resolved, ties, disagree = [], [], []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if max(measured[a], measured[b]) / min(measured[a], measured[b]) - 1.0 <= tolerance:
                ties.append((a, b))
                continue
            lo, hi = (a, b) if measured[a] < measured[b] else (b, a)
            resolved.append((lo, hi))
            if not predicted[lo] < predicted[hi]:
                disagree.append((lo, hi))
    return RankAgreement(tuple(resolved), tuple(ties), tuple(disagree))
