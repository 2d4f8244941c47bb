"""How sure a predicted step is: the calibrating run's per-op variation carried through each plan.

The run measures every op, not one value per kind: the ops of one (stage, kind) scatter around
their mean (clocks, the allocator, NCCL kernels beside a GEMM), and whole steps scatter too. Both
are measured once (:func:`fit_jitter`) and carried through every candidate's DAG by sampling
(:func:`step_spread`): each sample draws every compute op's duration as ``d * (1 + cv_kind * z)``
and every step's speed as ``1 + step_cv * z0`` (z standard normal, clipped to +-3), then takes the
longest path. The 5th and 95th percentiles of the samples are the candidate's spread.

What the spread is not: the model's own error (the cost model's shape of I and W, the duty model);
it says how much the plan's step moves with the noise the run showed. Plans with little slack
(every op on a critical path) spread more than plans whose ops wait anyway, which is why the pick
prefers the lower 95th percentile among candidates within each other's spread
(:func:`pptl.tune.rank.tune`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pptl.op import COMPUTE_KINDS

__all__ = ["Jitter", "Spread", "fit_jitter", "step_spread", "SAMPLES"]

#: Samples per candidate (the 5th and 95th percentiles of 64 are within a few tenths of a percent
#: of the step for the runs seen; more costs time on every candidate).
SAMPLES = 64


@dataclass(frozen=True)
class Jitter:
    """Variation measured in one run."""

    cv: Mapping[str, float]
    """Per compute kind (F, B, I, W, FB): relative standard deviation of one op around the mean of
    its (stage, kind)."""
    step_cv: float = 0.0
    """Relative standard deviation of the run's step time over its timed steps."""


@dataclass(frozen=True)
class Spread:
    """Percentiles of a candidate's step under the run's variation."""

    p05: float
    p50: float
    p95: float


def fit_jitter(events: Sequence[Any], step_ms: Sequence[float] | None) -> Jitter | None:
    """Per kind, the pooled relative deviation of compute ops from their (stage, kind) mean; the
    step's from ``step_ms``. None when no (stage, kind) has two ops."""
    groups: dict[tuple[str, int], list[float]] = {}
    for e in events:
        if e.lane == "compute" and e.kind in COMPUTE_KINDS and e.end > e.start:
            groups.setdefault((e.kind, e.stage), []).append(e.end - e.start)
    sq: dict[str, list[float]] = {}
    for (kind, _), xs in groups.items():
        if len(xs) < 2:
            continue
        mean = sum(xs) / len(xs)
        # n - 1: each group's mean is estimated from the same ops
        sq.setdefault(kind, []).extend([((x / mean - 1) ** 2) * len(xs) / (len(xs) - 1) for x in xs])
    if not sq:
        return None
    cv = {k: math.sqrt(sum(v) / len(v)) for k, v in sq.items()}
    step_cv = 0.0
    steps = [float(x) for x in (step_ms or []) if isinstance(x, (int, float)) and x > 0]
    if len(steps) >= 2:
        m = sum(steps) / len(steps)
        step_cv = math.sqrt(sum((x - m) ** 2 for x in steps) / (len(steps) - 1)) / m
    return Jitter(cv, step_cv)


def _kind_cv(jitter: Jitter, kind: str) -> float:
    cv = jitter.cv
    if kind in cv:
        return cv[kind]
    # A kind the run did not have: a split backward's I and W from a run of full backwards take
    # B's variation; FB, the larger of F's and B's.
    if kind in ("I", "W") and "B" in cv:
        return cv["B"]
    if kind == "B" and "I" in cv:
        return max(cv["I"], cv.get("W", 0.0))
    if kind == "FB":
        return max(cv.get("F", 0.0), cv.get("B", 0.0))
    return max(cv.values(), default=0.0)


def step_spread(order: Sequence[int], pred: Mapping[int, Any], dur: Sequence[float], kinds: Sequence[str],
                compute: Sequence[bool], jitter: Jitter, *, samples: int = SAMPLES, seed: int = 0) -> Spread:
    """Percentiles of the makespan of the DAG (``order``, ``pred``) when every compute op's duration
    ``dur[i]`` varies by its kind's jitter and each sample's compute by the step's.

    Notes:
        O(samples * (ops + edges)), vectorised over the samples.
    """
    import numpy as np

    n = len(dur)
    rng = np.random.default_rng(seed)
    base = np.asarray(dur, dtype=np.float64)
    cvs = np.array([_kind_cv(jitter, k) if c else 0.0 for k, c in zip(kinds, compute)])
    z = np.clip(rng.standard_normal((n, samples)), -3, 3)
    step = 1 + jitter.step_cv * np.clip(rng.standard_normal(samples), -3, 3)
    d = base[:, None] * np.maximum(0.0, 1 + cvs[:, None] * z)
    mask = np.asarray(compute, dtype=bool)
    d[mask] *= step[None, :]
    end = np.zeros((n, samples))
    for v in order:
        ps = pred[v]
        if ps:
            idx = list(ps)
            start = end[idx[0]] if len(idx) == 1 else end[idx].max(axis=0)
            end[v] = start + d[v]
        else:
            end[v] = d[v]
    span = end.max(axis=0) if n else np.zeros(samples)
    p05, p50, p95 = (float(x) for x in np.percentile(span, [5, 50, 95]))
    return Spread(p05, p50, p95)
