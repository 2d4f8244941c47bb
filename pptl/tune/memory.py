"""Peak memory per rank of a timed candidate, and the fit of its coefficients to a measured run.

A rank's memory at time ``t`` is

    weights of the stages it holds
    + data * (inputs and targets it holds: one per micro-batch of a first or last stage)
    + full_scale * (activations of micro-batches whose backward is B or FB, from F's start to B's end)
    + split_scale * (activations of micro-batches whose backward is split: F's start to I's and W's
      ends, ``w_activation`` of it held until W, plus ``i_working`` of the stage's activation on top
      while I runs: the gradients W will need are made before the forward's tensors go)
    + message * (SEND and RECV buffers started so far: ``pptl run`` keeps every message referenced
      until the step ends, so the caching allocator never reuses memory a transfer still uses)
    + working (the op in flight's temporaries and the GEMM workspaces: one constant per rank)

and its peak is the largest such value over the step (at equal times a free comes before an
allocation). :class:`MemoryModel` holds the coefficients; the default (scales 1, the rest 0) is the
model's activations and weights as given. :func:`fit_memory` fits ``working`` and the scale of the
backward kind a measured run used by least squares over its ranks (the peak moment moves with the
scale, so the fit iterates), then raises ``working`` so every measured rank is covered, with a
margin of the worst rank's distance above the fit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pptl.ir import Schedule
from pptl.op import COMPUTE_KINDS

__all__ = ["MemoryModel", "MemoryFit", "rank_events", "rank_peaks", "fit_memory", "data_count"]

#: Passes of the fit: each re-finds every rank's peak moment under the latest scale.
_FIT_PASSES = 8


@dataclass(frozen=True, kw_only=True)
class MemoryModel:
    """Coefficients of the per-rank peak (see the module docstring); the memory unit is the model's."""

    full_scale: float = 1.0
    """Multiplies the activation of a micro-batch whose backward is B (or FB)."""
    split_scale: float = 1.0
    """Multiplies the activation of a micro-batch whose backward is split into I and W."""
    message: float = 0.0
    """Held by each SEND and RECV buffer from its start to the step's end."""
    data: float = 0.0
    """Held by each micro-batch's input (first stage) and target (last stage) for the whole step."""
    working: float = 0.0
    """Constant per rank: the op in flight's temporaries and the GEMM workspaces."""
    split_working: float | None = None
    """``working`` of a rank whose backwards are all split into I and W (None: ``working``). A run of
    full backwards measures B's temporaries, among them each weight gradient autograd writes to a
    fresh tensor before adding it into ``.grad``; W adds in place and makes none."""


@dataclass(frozen=True)
class MemoryFit:
    """What :func:`fit_memory` found, for the note ``pptl tune`` prints."""

    model: MemoryModel
    kind: str
    """``full`` or ``split``: the backward the run used, whose scale was fitted."""
    scale: float
    """The least-squares scale (before the floor at 0)."""
    residual: float
    """Largest distance of a measured rank from the least-squares line (covered by ``working``)."""
    ranks: int


# One event: (time, 0 free / 1 allocate, full activation, split activation, messages).
_Event = tuple[float, int, float, float, float]


def _split_keys(schedule: Schedule) -> set[tuple[int, int, int]]:
    return {(op.direction, op.stage, op.mb) for op in schedule.ops if op.kind == "I"}


def data_count(schedule: Schedule) -> dict[int, int]:
    """Per rank, inputs and targets held: one per (direction, micro-batch) of a first or last stage
    whose forward runs there."""
    last = schedule.num_stages - 1
    seen: dict[int, set[tuple[int, int, int]]] = {}
    for op in schedule.ops:
        if op.kind in ("F", "FB") and op.stage in (0, last):
            seen.setdefault(op.rank, set()).add((op.stage, op.direction, op.mb))
    return {r: len(v) for r, v in seen.items()}


def rank_events(schedule: Schedule, start: Sequence[float], end: Sequence[float], act: Sequence[float],
                *, w_activation: float, i_working: float) -> dict[int, list[_Event]]:
    """Per rank, the memory events of the timed ops (unscaled; see the module docstring), sorted."""
    split = _split_keys(schedule)
    w = w_activation
    ev: dict[int, list[_Event]] = {}
    for i, op in enumerate(schedule.ops):
        k, r = op.kind, op.rank
        out = ev.setdefault(r, [])
        if k in ("SEND", "RECV"):
            out.append((start[i], 1, 0.0, 0.0, 1.0))
            continue
        if op.lane != "compute" or k not in COMPUTE_KINDS:
            continue
        a = act[op.stage]
        is_split = (op.direction, op.stage, op.mb) in split
        if k in ("F", "FB"):
            out.append((start[i], 1, 0.0, a, 0.0) if is_split else (start[i], 1, a, 0.0, 0.0))
        if k == "B":
            out.append((end[i], 0, -a, 0.0, 0.0))
        elif k == "I":
            if i_working > 0:
                out.append((start[i], 1, 0.0, a * i_working, 0.0))
            out.append((end[i], 0, 0.0, -a * ((1 - w) + i_working), 0.0))
        elif k == "W":
            out.append((end[i], 0, 0.0, -a * w, 0.0))
        elif k == "FB":
            ps, pm, pd = op.pair if op.pair else (op.stage, op.mb, op.direction)
            b = act[ps]
            out.append((end[i], 0, 0.0, -b, 0.0) if (pd, ps, pm) in split else (end[i], 0, -b, 0.0, 0.0))
    for evs in ev.values():
        evs.sort()
    return ev


def _peak(evs: Sequence[_Event], mm: MemoryModel) -> tuple[float, tuple[float, float, float]]:
    """(peak of the time-varying part, its (full, split, messages) at the peak's first moment)."""
    full = sp = msg = 0.0
    best, at = 0.0, (0.0, 0.0, 0.0)
    for _, _, df, ds, dm in evs:
        full += df
        sp += ds
        msg += dm
        v = mm.full_scale * full + mm.split_scale * sp + mm.message * msg
        if v > best + 1e-12:
            best, at = v, (full, sp, msg)
    return best, at


def weights_held(schedule: Schedule, weight: Sequence[float], pp: int) -> list[float]:
    """Per rank, the weights of the stages it runs an F of (each direction's copy: DualPipe holds two)."""
    held: dict[int, set[tuple[int, int]]] = {r: set() for r in range(pp)}
    for op in schedule.ops:
        if op.kind in ("F", "FB") and op.lane == "compute":
            held[op.rank].add((op.direction, op.stage))
    return [sum(weight[s] for _, s in held[r]) for r in range(pp)]


def rank_peaks(schedule: Schedule, start: Sequence[float], end: Sequence[float], act: Sequence[float],
               weight: Sequence[float], *, pp: int, w_activation: float, i_working: float,
               mm: MemoryModel) -> tuple[float, ...]:
    """Peak memory of every rank (weights of the stages it runs an F of, DualPipe's two copies
    included)."""
    weights = weights_held(schedule, weight, pp)
    ev = rank_events(schedule, start, end, act, w_activation=w_activation, i_working=i_working)
    data = data_count(schedule) if mm.data else {}
    full_bw = {op.rank for op in schedule.ops if op.kind in ("B", "FB")}
    out = []
    for r in range(pp):
        top, _ = _peak(ev.get(r, []), mm)
        working = mm.working if r in full_bw or mm.split_working is None else mm.split_working
        out.append(weights[r] + mm.data * data.get(r, 0) + top + working)
    return tuple(out)


def fit_memory(schedule: Schedule, start: Sequence[float], end: Sequence[float], act: Sequence[float],
               weight: Sequence[float], measured: dict[int, float], *, pp: int, w_activation: float,
               i_working: float, base: MemoryModel) -> MemoryFit | None:
    """Fit the scale of the run's backward kind and ``working`` to ``measured`` peaks per rank.

    ``base`` gives the rest (messages, data, the other kind's scale, which follows the fitted one
    but never below 1: the run shows nothing of it). Least squares of ``peak - fixed = scale *
    held + working`` over the ranks, where ``held`` is the run's kind of activation at the rank's
    peak moment under the latest scale; ``working`` is then raised so that no measured rank is
    above its prediction, plus that margin again. With fewer than two distinct ``held`` values the scale stays that of
    ``base`` and ``working`` alone covers the ranks. None when no rank was measured.

    Example: peaks made by :func:`rank_peaks` with ``full_scale=0.9, working=300`` give back 0.9
    and 300 (the residuals, and so the margin, are 0).
    """
    ranks = sorted(r for r in measured if 0 <= r < pp)
    if not ranks:
        return None
    kind = "split" if _split_keys(schedule) else "full"
    weights = weights_held(schedule, weight, pp)
    ev = rank_events(schedule, start, end, act, w_activation=w_activation, i_working=i_working)
    data = data_count(schedule)
    fixed = {r: weights[r] + base.data * data.get(r, 0) for r in ranks}
    scale = base.full_scale if kind == "full" else base.split_scale

    def model(s: float) -> MemoryModel:
        other = max(1.0, s)
        return MemoryModel(full_scale=s if kind == "full" else other, split_scale=s if kind == "split" else other,
                           message=base.message, data=base.data, working=0.0)

    ls_scale = scale
    for _ in range(_FIT_PASSES):
        xs, ys = [], []
        for r in ranks:
            _, (full, sp, msg) = _peak(ev.get(r, []), model(scale))
            x = full if kind == "full" else sp
            rest = (sp if kind == "full" else full) * max(1.0, scale) + base.message * msg
            xs.append(x)
            ys.append(measured[r] - fixed[r] - rest)
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        if sxx <= 1e-12 * max(1.0, mx * mx):
            break  # every rank holds the same: the scale cannot be told from the working memory
        new = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        ls_scale = new
        new = max(0.0, new)
        if abs(new - scale) <= 1e-9 * max(1.0, abs(scale)):
            scale = new
            break
        scale = new
    mm = model(scale)
    tops = {r: _peak(ev.get(r, []), mm)[0] for r in ranks}
    gaps = [measured[r] - fixed[r] - tops[r] for r in ranks]
    mean = sum(gaps) / len(gaps)
    # Every measured rank covered, plus the worst rank's distance above the fit again: a margin
    # that grows with how far the ranks scatter around the fit.
    working = max(0.0, max(gaps) + (max(gaps) - mean))
    return MemoryFit(MemoryModel(full_scale=mm.full_scale, split_scale=mm.split_scale, message=mm.message,
                                 data=mm.data, working=working),
                     kind, ls_scale, max(gaps) - mean, len(ranks))
