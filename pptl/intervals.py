"""Interval arithmetic on (start, end) spans, for metrics that ask "how much of X hides behind Y"."""
from __future__ import annotations

from typing import Iterable

__all__ = ["Span", "union", "overlap_length"]

Span = tuple[float, float]


def union(spans: Iterable[Span]) -> list[Span]:
    """Sorted, disjoint spans covering the same time; empty spans are dropped. O(n log n)."""
    out: list[Span] = []
    for a, b in sorted(spans):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def overlap_length(xs: list[Span], ys: list[Span]) -> float:
    """Total length of the intersection of two sorted lists of disjoint spans. O(len(xs) + len(ys))."""
    i = j = 0
    total = 0.0
    while i < len(xs) and j < len(ys):
        lo, hi = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if hi > lo:
            total += hi - lo
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return total
