"""Durations that depend on what runs beside an op: the cost model's *contexts* (pure).

An op on a side lane (an all-to-all on ``comm``, a copy on ``d2h``/``h2d``) shares the GPU with
the compute lane of its rank: measured on H200s, an MoE all-to-all paired with a GEMM takes 3-4x
as long as one that runs alone. One mean per cost key is then wrong both ways (too slow where the
op is alone and exposed, too fast where it hides behind compute).

``Costs.context`` maps cost key -> context -> duration, where a context is ``"alone"`` or the kind
of a compute op (``"ATTN"``, ``"MLP"``, ``"F"`` ...): the time the op takes when all of it runs in
that context. An op that is beside compute for part of its length **progresses at the rate of each
context it passes through** (:func:`paced_duration`): an all-to-all that starts 0.3 ms before an
attention kernel ends does 0.3 / 1.1 of its work beside it and the rest at the alone rate, not
1.1 ms beside compute (what a single context per op gives, leaving 0.8 ms of it exposed) nor
0.15 ms alone. :func:`context_durations` re-times a plan's ops this way (the simulator calls it
until the durations settle); :func:`measure_contexts` learns the durations from a measured
timeline (``pptl plan --costs-from``) by the same rule read backwards: the alone duration from the
ops with no compute beside them, then per compute kind the time spent beside it over the work
done there. :func:`contexts_of` names one context per op (``"alone"``, or the kind of the compute
op that overlaps it longest when that covers at least half of it): ``pptl compare``'s error per
context (:func:`context_errors`) is grouped by it. Nothing here knows a family: the context is read
off the lanes of one rank.

The same holds the other way: a compute op beside a side-lane op (an all-to-all's copy kernel
holds SMs, even while it waits for its peers) runs at another rate than alone. ``Costs.beside``
holds, per stage and compute cost key, its duration with a side-lane op beside it all along (no
rank factor: measured on 4 H200s, 2026-11-26, the EP member whose GPU computes 5-11% faster alone
ran its MLPs beside a copy no faster than its partner, 1.04 against 1.00 ms), and
``Costs.rank_scale`` applies to the alone rate only. :func:`measure_compute_contexts` learns both
from a timeline, :func:`compute_context_durations` paces compute ops by them in the simulator.

Notes:
    O(ops log ops): compute intervals sorted per rank, each op looks at the ones it overlaps.
"""
from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

__all__ = ["ALONE", "BUSY", "Span", "ContextRow", "ComputeContexts", "contexts_of", "paced_duration",
           "context_durations", "measure_contexts", "is_side", "measure_compute_contexts", "compute_context_durations",
           "context_errors", "CONTEXT_PASSES", "BESIDE_PASSES"]

ALONE = "alone"
BUSY = "busy"
"""The learned mean over every overlapped context: the fallback for a context never measured."""
CONTEXT_PASSES = 6
"""Most re-timings the simulator makes; a plan whose durations still move keeps the last."""
BESIDE_PASSES = 12
""":data:`CONTEXT_PASSES` for plans whose compute is paced too (``Costs.beside``): with steps back
halved, an MoE plan of 2 EP members settles in about 10 (2026-11-26)."""
_COVER = 0.5
_ALONE_COVER = 0.05
"""An op with compute beside it for at most this share of its length times the alone duration."""
_SETTLED = 1e-9
"""Relative change below which a re-timed duration keeps its previous value (so re-timing ends)."""


@dataclass(frozen=True, slots=True)
class Span:
    """One op's interval, as both a plan (ops + times) and a timeline (events) can give it."""

    rank: int
    lane: str
    kind: str
    start: float
    end: float


def contexts_of(spans: Sequence[Span], *, compute_lane: str = "compute") -> list[str | None]:
    """The context of every span: None on the compute lane, else :data:`ALONE` or a compute kind."""
    comp = _compute_by_rank(spans, compute_lane)
    out: list[str | None] = []
    for s in spans:
        if s.lane == compute_lane:
            out.append(None)
            continue
        span = s.end - s.start
        by_kind = _overlap_by_kind(s, comp.get(s.rank)) if span > 0 else {}
        if not by_kind:
            out.append(ALONE)
            continue
        kind, ov = max(sorted(by_kind.items()), key=lambda kv: kv[1])
        out.append(kind if sum(by_kind.values()) >= _COVER * span else ALONE)
    return out


class _Compute:
    """The compute intervals of one rank, sorted, with what a search from a time needs."""

    __slots__ = ("spans", "starts", "longest")

    def __init__(self, spans: list[tuple[float, float, str]]) -> None:
        spans.sort()
        self.spans = spans
        self.starts = [a for a, _, _ in spans]
        self.longest = max((b - a for a, b, _ in spans), default=0.0)

    def first(self, t: float) -> int:
        """Index of the first interval that may end after ``t``."""
        return bisect.bisect_left(self.starts, t - self.longest)


def _compute_by_rank(spans: Sequence[Span], compute_lane: str) -> dict[int, _Compute]:
    comp: dict[int, list[tuple[float, float, str]]] = {}
    for s in spans:
        if s.lane == compute_lane and s.end > s.start:
            comp.setdefault(s.rank, []).append((s.start, s.end, s.kind))
    return {r: _Compute(v) for r, v in comp.items()}


def paced_duration(start: float, compute: _Compute | None, alone: float,
                   beside: Callable[[str], float]) -> float:
    """How long an op that starts at ``start`` runs, doing its work at the rate of the context it is
    in: ``1 / alone`` per unit of time while its rank's compute lane is idle, ``1 / beside(kind)``
    while compute of that kind runs (a duration of 0 finishes the rest at once).

    Example: alone 0.2, beside MLP 0.6, an MLP running until 0.3 after the start: the first 0.3 do
    half the work, the rest takes 0.1 alone, so 0.4.
    """
    if compute is None or not compute.spans:
        return alone
    v = compute.spans
    j = compute.first(start)
    t, left = start, 1.0  # share of the op's work still to do
    while True:
        while j < len(v) and v[j][1] <= t:
            j += 1
        if j == len(v):
            return t + left * alone - start
        a, b, kind = v[j]
        if a > t:  # idle compute lane until a
            if t + left * alone <= a:
                return t + left * alone - start
            left -= (a - t) / alone
            t = a
        d = beside(kind)
        if d <= 0 or t + left * d <= b:
            return t + left * max(d, 0.0) - start
        left -= (b - t) / d
        t = b
        j += 1


def context_durations(spans: Sequence[Span], keys: Sequence[str], base: Sequence[float],
                      table: Mapping[str, Mapping[str, float]], memo: list[float | None] | None = None
                      ) -> list[float]:
    """``base`` with each side-lane op whose key has contexts in ``table`` re-timed by
    :func:`paced_duration` from its start in ``spans`` and the compute intervals of its rank there.

    The alone duration is ``table[key]["alone"]`` (else the op's ``base``); a compute kind not in
    the table takes :data:`BUSY`, else the alone duration. ``memo`` (one entry per op, updated in
    place) holds the durations of the previous call: one that moved by less than a relative 1e-9
    keeps its old value, so a caller re-timing until nothing changes stops."""
    comp = _compute_by_rank(spans, "compute")
    out = list(base)
    for i, (s, key) in enumerate(zip(spans, keys)):
        row = table.get(key)
        if row is None or s.lane == "compute":
            continue
        alone = row.get(ALONE, base[i])
        busy = row.get(BUSY, alone)
        d = paced_duration(s.start, comp.get(s.rank), alone, lambda kind: row.get(kind, busy))
        if memo is not None:
            prev = memo[i]
            if prev is not None and abs(d - prev) <= _SETTLED * max(1.0, abs(prev)):
                d = prev
            memo[i] = d
        out[i] = d
    return out


def is_side(lane: str, kind: str) -> bool:
    """An op that shares its rank's GPU with the compute lane: not compute, not a zero-length
    marker (``pass``), not a pipeline message (SEND/RECV: measured beside them, compute runs at
    its alone rate)."""
    return lane not in ("compute", "pass") and kind not in ("SEND", "RECV")


def _side_union(spans: Sequence[Span]) -> dict[int, _Compute]:
    """Per rank, the union of its side-lane ops' intervals (lanes may overlap each other), as the
    sorted disjoint intervals :func:`paced_duration` walks (kind ``"side"``)."""
    per: dict[int, list[tuple[float, float]]] = {}
    for s in spans:
        if s.end > s.start and is_side(s.lane, s.kind):
            per.setdefault(s.rank, []).append((s.start, s.end))
    out: dict[int, _Compute] = {}
    for r, v in per.items():
        v.sort()
        merged: list[tuple[float, float, str]] = []
        for a, b in v:
            if merged and a <= merged[-1][1]:
                if b > merged[-1][1]:
                    merged[-1] = (merged[-1][0], b, "side")
            else:
                merged.append((a, b, "side"))
        out[r] = _Compute(merged)
    return out


def _covered(s: Span, side: _Compute | None) -> float:
    """Time of ``s`` with a side-lane op of its rank beside it."""
    if side is None:
        return 0.0
    v, j, t = side.spans, side.first(s.start), 0.0
    while j < len(v) and v[j][0] < s.end:
        t += max(0.0, min(v[j][1], s.end) - max(v[j][0], s.start))
        j += 1
    return t


@dataclass(frozen=True)
class ComputeContexts:
    """What :func:`measure_compute_contexts` learns: per stage and cost key, the duration alone
    (the mean of the ops with no side-lane op beside them) and beside a side-lane op; per rank
    that shares a stage, its speed alone relative to the others (``Costs.rank_scale``)."""

    alone: dict[int, dict[str, float]]
    beside: dict[int, dict[str, float]]
    rank_scale: dict[int, float]


def measure_compute_contexts(spans: Sequence[Span], keys: Sequence[str | None], stages: Sequence[int]
                             ) -> ComputeContexts:
    """Compute-lane rates alone and beside side-lane ops (:func:`is_side`), read off a timeline.

    ``keys``: the cost key of each compute span (None: not learned from). An op is alone when a
    side-lane op covers at most 5% of it; a (stage, key)'s alone duration is the mean over ranks of
    each rank's mean of those. The rank factor of each rank that shares a stage is its alone rate
    fitted from every op's alone part (:func:`_alone_rates`), over the ranks' mean; the beside
    duration of a (stage, key) is, under the rule :func:`paced_duration` times by, (time its ops
    spent beside a side-lane op) / (work they did there), an op with ``t0`` alone having done
    ``t0 / (alone * factor)`` of its work alone. A (stage, key) never timed alone learns nothing here.

    Why the rank factor is not read off the wholly-alone ops: in an overlapped MoE plan those are the
    warm-up and cool-down, where two H200s under their power cap ran 3.5-7.3% apart (2026-11-27, 2 GPUs,
    pp 1 x ep 2), while the alone parts of the steady state's ops ran closer; one factor from the former
    made the faster member wait at every all-to-all in the plan and not in the run (the exposed
    all-to-all 0.4-0.9 ms over, in-sample). Fitted from every op, 12 of 14 launches' exposure was within
    20% or 0.3 ms in-sample, against 7."""
    side = _side_union(spans)
    ops: list[tuple[int, str, int, float, float]] = []  # stage, key, rank, length, covered
    for s, key, stage in zip(spans, keys, stages):
        if key is None or s.lane != "compute" or s.end <= s.start or stage < 0:
            continue
        t = s.end - s.start
        ops.append((stage, key, s.rank, t, _covered(s, side.get(s.rank))))
    # alone means per (stage, key), and per rank within it
    groups: dict[tuple[int, str], dict[int, list[float]]] = {}
    for stage, key, rank, t, tc in ops:
        if tc <= _ALONE_COVER * t:
            acc = groups.setdefault((stage, key), {}).setdefault(rank, [0.0, 0.0])
            acc[0] += t
            acc[1] += 1
    alone: dict[int, dict[str, float]] = {}
    for (stage, key), by_rank in sorted(groups.items()):
        # the mean over ranks of each rank's mean: ranks need not be alone equally often
        alone.setdefault(stage, {})[key] = sum(t / n for t, n in by_rank.values()) / len(by_rank)
    own: dict[int, float] = {}
    expected: dict[int, float] = {}
    parts: dict[tuple[int, str], list[tuple[int, float, float]]] = {}
    for stage, key, rank, t, tc in ops:
        if key in alone.get(stage, {}):
            parts.setdefault((stage, key), []).append((rank, t - tc, tc))
    for rows in parts.values():
        rates = _alone_rates(rows)
        if len(rates) < 2:
            continue
        mean = sum(rates.values()) / len(rates)
        count = Counter(r for r, _, _ in rows)
        for r, a in rates.items():
            own[r] = own.get(r, 0.0) + count[r] * a
            expected[r] = expected.get(r, 0.0) + count[r] * mean
    scale = {r: own[r] / expected[r] for r in sorted(own) if expected[r] > 0 and own[r] > 0}
    time: dict[tuple[int, str], float] = {}
    work: dict[tuple[int, str], float] = {}
    for stage, key, rank, t, tc in ops:
        a = alone.get(stage, {}).get(key)
        if a is None or tc <= _ALONE_COVER * t:
            continue
        done_alone = (t - tc) / (a * scale.get(rank, 1.0))
        time[stage, key] = time.get((stage, key), 0.0) + tc
        work[stage, key] = work.get((stage, key), 0.0) + max(0.0, 1.0 - done_alone)
    beside: dict[int, dict[str, float]] = {}
    for (stage, key), tc in sorted(time.items()):
        if work[stage, key] > 0:
            beside.setdefault(stage, {})[key] = tc / work[stage, key]
    return ComputeContexts(alone, beside, scale)


def _alone_rates(rows: Sequence[tuple[int, float, float]]) -> dict[int, float]:
    """Per rank, the duration alone of one op of a (stage, key), fitted from ``rows`` (rank, time
    alone, time beside a side-lane op; one per op): the least-squares solution of ``t0 / alone[rank]
    + tc / beside = 1`` for every op (each does one op's work; beside, the ranks share one rate, as
    :class:`ComputeContexts` holds it), linear in ``1 / alone`` and ``1 / beside``. Ranks with no time
    alone, or a fit that is not positive, are left out.

    Example: rank 0's ops 1.0 alone, rank 1's 1.1 alone, and one op of rank 0 that ran 0.5 alone and
    1.0 beside (beside 2.0): alone 1.0 and 1.1 exactly."""
    q: dict[int, float] = {}  # sum t0^2 per rank
    c: dict[int, float] = {}  # sum t0 tc per rank
    w: dict[int, float] = {}  # sum t0 per rank
    tc2 = tcs = 0.0
    for r, t0, tc in rows:
        q[r] = q.get(r, 0.0) + t0 * t0
        c[r] = c.get(r, 0.0) + t0 * tc
        w[r] = w.get(r, 0.0) + t0
        tc2 += tc * tc
        tcs += tc
    ranks = [r for r in q if q[r] > 0]
    # normal equations; y = 1 / beside from the reduced one, then each x_r = 1 / alone
    den = tc2 - sum(c[r] * c[r] / q[r] for r in ranks)
    y = (tcs - sum(c[r] * w[r] / q[r] for r in ranks)) / den if den > 1e-12 * max(tc2, 1e-300) else 0.0
    out = {}
    for r in ranks:
        x = (w[r] - c[r] * y) / q[r]
        if x > 0:
            out[r] = 1.0 / x
    return out


def compute_context_durations(spans: Sequence[Span], base: Sequence[float],
                              beside: Sequence[tuple[int, float]], memo: list[float | None] | None = None,
                              swing: list[float] | None = None) -> list[float]:
    """``base`` with each compute op ``i`` of ``beside`` (index, duration beside a side-lane op)
    re-timed by :func:`paced_duration` from its start in ``spans``: at its ``base`` rate (alone,
    rank factor included) while no side-lane op of its rank runs, at the beside rate while one
    does. ``memo`` as in :func:`context_durations`; ``swing`` (one entry per op, 0 at first,
    updated in place) holds each op's last change, so a change back is halved."""
    side = _side_union(spans)
    out = list(base)
    for i, b in beside:
        s = spans[i]
        d = paced_duration(s.start, side.get(s.rank), base[i], lambda _kind: b)
        if memo is not None:
            prev = memo[i]
            if prev is not None and swing is not None:
                # a half step where the last went the other way: the members of a collective pace
                # each other, and full steps swing the lead from one to the other pass by pass
                step = d - prev
                if step * swing[i] < 0:
                    step *= 0.5
                swing[i] = step
                d = prev + step
            if prev is not None and abs(d - prev) <= _SETTLED * max(1.0, abs(prev)):
                d = prev
            memo[i] = d
        out[i] = d
    return out


def _overlap_by_kind(s: Span, comp: _Compute | None) -> dict[str, float]:
    out: dict[str, float] = {}
    if comp is None:
        return out
    v = comp.spans
    j = comp.first(s.start)
    while j < len(v) and v[j][0] < s.end:
        a, b, kind = v[j]
        ov = min(b, s.end) - max(a, s.start)
        if ov > 0:
            out[kind] = out.get(kind, 0.0) + ov
        j += 1
    return out


def measure_contexts(spans: Sequence[Span], keys: Sequence[str | None],
                     durations: Sequence[float] | None = None, *, min_count: int = 1
                     ) -> dict[str, dict[str, float]]:
    """Duration per (key, context) of the side-lane spans whose key is not None, under the rule
    :func:`paced_duration` times them by, plus :data:`BUSY` (every compute kind together).

    - alone: the mean length of the ops with compute beside them for at most 5% of their length
      (if none, of those beside compute for less than half);
    - a compute kind K: (time the ops spent beside K) / (work they did there), where an op with
      ``t0`` alone and ``tc`` beside compute did ``1 - t0 / alone`` of its work beside compute, shared
      among the kinds by time. A ratio of sums, so short overlaps weigh little.

    ``durations`` overrides a span's own length (a collective timed from its last participant).
    Contexts seen fewer than ``min_count`` times are left out."""
    comp = _compute_by_rank(spans, "compute")
    rows: dict[str, list[tuple[float, dict[str, float]]]] = {}
    for i, (s, key) in enumerate(zip(spans, keys)):
        if key is None or s.lane == "compute":
            continue
        t = durations[i] if durations is not None else s.end - s.start
        rows.setdefault(key, []).append((max(t, 0.0), _overlap_by_kind(s, comp.get(s.rank))))
    out: dict[str, dict[str, float]] = {}
    for key, ops in sorted(rows.items()):
        out[key] = _fit(ops, min_count)
    return out


def _fit(ops: list[tuple[float, dict[str, float]]], min_count: int) -> dict[str, float]:
    """One key's durations per context from (length, time beside each compute kind) per op."""
    res: dict[str, float] = {}
    pure = [t for t, by in ops if sum(by.values()) <= _ALONE_COVER * t]
    if not pure:
        pure = [t for t, by in ops if sum(by.values()) < _COVER * t]
    if pure and len(pure) >= min_count:
        res[ALONE] = sum(pure) / len(pure)
    alone = res.get(ALONE)
    if alone is None:
        alone = _alone_from_tails(ops, min_count)
        if alone is not None:
            res[ALONE] = alone
    res.update(_beside(ops, alone, min_count))
    return dict(sorted(res.items()))


def _alone_from_tails(ops: list[tuple[float, dict[str, float]]], min_count: int) -> float | None:
    """The alone duration of a key never timed alone, from the parts of its ops with no compute
    beside them (an op that outlives the compute it started beside): the rates beside each kind
    are fitted with the alone part doing no work, the tails then did the rest of the work, and the
    two are fitted again until the alone duration settles. Without it the simulator ran such a
    tail at the key's mean overlapped duration (the last stage's loss combine, measured 0.2 ms
    alone after its attention, planned 1.7 ms)."""
    tails = [(t - sum(by.values()), by) for t, by in ops if t - sum(by.values()) > _ALONE_COVER * t]
    if len(tails) < min_count:
        return None
    alone: float | None = None
    for _ in range(50):
        rate = _beside(ops, alone, min_count)
        t0 = left = 0.0
        for t, by in tails:
            rest = 1.0 - sum(ov / rate[k] for k, ov in by.items() if rate.get(k, 0.0) > 0)
            if rest > 0:
                t0, left = t0 + t, left + rest
        if left <= 0:
            return alone
        new = t0 / left
        if alone is not None and abs(new - alone) <= 1e-6 * alone:
            return new
        alone = new
    return alone


def _beside(ops: list[tuple[float, dict[str, float]]], alone: float | None, min_count: int) -> dict[str, float]:
    """Duration per compute kind (and :data:`BUSY`) from the ops' time beside it over the work
    they did there, given the alone duration (None: the alone part did no work)."""
    res: dict[str, float] = {}
    time: dict[str, float] = {}
    work: dict[str, float] = {}
    count: dict[str, int] = {}
    for t, by in ops:
        tc = sum(by.values())
        if tc <= _ALONE_COVER * t or tc <= 0:
            continue
        t0 = max(0.0, t - tc)
        # without a pure-alone op to time against, the alone part counts as no work done
        done = max(0.0, 1.0 - t0 / alone) if alone else 1.0
        for kind, ov in by.items():
            for k in (kind, BUSY):
                time[k] = time.get(k, 0.0) + ov
                work[k] = work.get(k, 0.0) + done * ov / tc
            count[kind] = count.get(kind, 0) + 1
        count[BUSY] = count.get(BUSY, 0) + 1
    for k in sorted(time):
        if count[k] >= min_count and work[k] > 0:
            res[k] = time[k] / work[k]
    return res


@dataclass(frozen=True)
class ContextRow:
    kind: str
    context: str
    planned_count: int
    measured_count: int
    planned_mean: float
    measured_mean: float

    @property
    def error(self) -> float | None:
        return (self.planned_mean - self.measured_mean) / self.measured_mean if self.measured_mean > 0 else None


def context_errors(pairs: Iterable[tuple[Span, Span]], scale: float = 1.0) -> list[ContextRow]:
    """Planned against measured mean duration per (kind, context) of the side-lane ops, the context
    read off each op's own timeline (so a plan that puts an op beside the wrong compute shows it)."""
    pairs = list(pairs)
    pc = contexts_of([p for p, _ in pairs])
    mc = contexts_of([m for _, m in pairs])
    rows: dict[tuple[str, str], list[list[float]]] = {}
    for (p, m), a, b in zip(pairs, pc, mc):
        if a is None or b is None:
            continue
        row = rows.setdefault((m.kind, b), [[], []])
        row[1].append(m.end - m.start)
        prow = rows.setdefault((p.kind, a), [[], []])
        prow[0].append((p.end - p.start) * scale)
    mean: Callable[[list[float]], float] = lambda v: sum(v) / len(v) if v else 0.0  # noqa: E731
    return [ContextRow(k, c, len(p), len(m), mean(p), mean(m))
            for (k, c), (p, m) in sorted(rows.items())]
