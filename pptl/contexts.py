"""Durations that depend on what runs beside an op: the cost model's *contexts* (pure).

An op on a side lane (an all-to-all on ``comm``, a copy on ``d2h``/``h2d``) shares the GPU with
the compute lane of its rank: measured on H200s, an MoE all-to-all paired with a GEMM takes 3-4x
as long as one that runs alone. One mean per cost key is then wrong both ways (too slow where the
op is alone and exposed, too fast where it hides behind compute).

The **context** of an op is ``"alone"``, or the kind of the compute op of its rank that overlaps it
longest (``"ATTN"``, ``"MLP"``, ``"F"`` ...) when that overlap covers at least half of the op.
``Costs.context`` maps cost key -> context -> duration; :func:`context_durations` re-times a
plan's ops from it (the simulator calls it until the contexts settle), :func:`measure_contexts`
learns it from a measured timeline (``pptl plan --costs-from``), and :func:`context_errors` is
``pptl compare``'s error per context. Nothing here knows a family: the context is read off the
lanes of one rank.

Notes:
    O(ops log ops): compute intervals sorted per rank, each op looks at the ones it overlaps.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

__all__ = ["ALONE", "BUSY", "Span", "ContextRow", "contexts_of", "context_durations", "measure_contexts",
           "context_errors", "CONTEXT_PASSES"]

ALONE = "alone"
BUSY = "busy"
"""The learned mean over every overlapped context: the fallback for a context never measured."""
CONTEXT_PASSES = 6
"""Most re-timings the simulator makes; a plan whose contexts flip back and forth keeps the last."""
_COVER = 0.5


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
    comp: dict[int, list[tuple[float, float, str]]] = {}
    for s in spans:
        if s.lane == compute_lane and s.end > s.start:
            comp.setdefault(s.rank, []).append((s.start, s.end, s.kind))
    starts: dict[int, list[float]] = {}
    longest: dict[int, float] = {}
    for r, v in comp.items():
        v.sort()
        starts[r] = [a for a, _, _ in v]
        longest[r] = max(b - a for a, b, _ in v)
    out: list[str | None] = []
    for s in spans:
        if s.lane == compute_lane:
            out.append(None)
            continue
        span = s.end - s.start
        v = comp.get(s.rank)
        if not v or span <= 0:
            out.append(ALONE)
            continue
        # compute ops that may overlap: those starting after s.start - (longest compute op)
        j = bisect.bisect_left(starts[s.rank], s.start - longest[s.rank])
        by_kind: dict[str, float] = {}
        while j < len(v) and v[j][0] < s.end:
            a, b, kind = v[j]
            ov = min(b, s.end) - max(a, s.start)
            if ov > 0:
                by_kind[kind] = by_kind.get(kind, 0.0) + ov
            j += 1
        if not by_kind:
            out.append(ALONE)
            continue
        kind, ov = max(sorted(by_kind.items()), key=lambda kv: kv[1])
        out.append(kind if sum(by_kind.values()) >= _COVER * span else ALONE)
    return out


def lookup(table: Mapping[str, Mapping[str, float]], key: str, context: str | None) -> float | None:
    """The duration of ``key`` in ``context``: that context, else :data:`BUSY` for an overlapped one."""
    row = table.get(key)
    if row is None or context is None:
        return None
    if context in row:
        return row[context]
    return row.get(BUSY) if context != ALONE else None


def context_durations(spans: Sequence[Span], keys: Sequence[str], base: Sequence[float],
                      table: Mapping[str, Mapping[str, float]], sticky: list[str | None] | None = None) -> list[float]:
    """``base`` with each op whose key has contexts in ``table`` timed for the context it has in ``spans``.

    ``sticky`` (one entry per op, updated in place) keeps an op that was once beside compute there:
    a slower op can overlap less than half of the compute it sat beside and flip back to alone,
    then fast again, and so on; once beside compute stays beside compute, so re-timing settles."""
    ctx = contexts_of(spans)
    if sticky is not None:
        for i, c in enumerate(ctx):
            if c == ALONE and sticky[i] not in (None, ALONE):
                ctx[i] = sticky[i]
            elif c is not None:
                sticky[i] = c
    out = list(base)
    for i, (key, c) in enumerate(zip(keys, ctx)):
        d = lookup(table, key, c)
        if d is not None:
            out[i] = d
    return out


def measure_contexts(spans: Sequence[Span], keys: Sequence[str | None],
                     durations: Sequence[float] | None = None, *, min_count: int = 1
                     ) -> dict[str, dict[str, float]]:
    """Mean duration per (key, context) of the side-lane spans whose key is not None, plus
    :data:`BUSY` (every overlapped one). ``durations`` overrides a span's own length (a
    collective timed from its last participant). Contexts seen fewer than ``min_count`` times
    are left out."""
    ctx = contexts_of(spans)
    sums: dict[str, dict[str, list[float]]] = {}
    for i, (s, key, c) in enumerate(zip(spans, keys, ctx)):
        if key is None or c is None:
            continue
        d = durations[i] if durations is not None else s.end - s.start
        row = sums.setdefault(key, {})
        row.setdefault(c, []).append(d)
        if c != ALONE:
            row.setdefault(BUSY, []).append(d)
    return {k: {c: sum(v) / len(v) for c, v in sorted(row.items()) if len(v) >= min_count}
            for k, row in sorted(sums.items())}


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
