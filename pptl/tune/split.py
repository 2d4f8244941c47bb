"""Splits of the model's layers into (virtual) stages, their per-stage costs and memory, and the
Megatron ``--pipeline-model-parallel-layout`` string of a split.

Three splits are tried per placement (duplicates dropped):

- **even**: ``layers // stages`` per stage, the remainder to the middle stages;
- **balanced**: the fewest-layers-on-the-bottleneck split of F+B time, counting the embedding on
  the first stage and the head on the last (found by trying each bottleneck value in order);
- **rank-balanced**: the balanced split, then layers moved from stages of the heaviest rank to
  stages of the lightest while that lowers the heaviest rank's total (for placements where one
  rank holds several stages, e.g. the V shape holds both the first and the last stage on rank 0).

Megatron's layout (``megatron/core/transformer/pipeline_parallel_layer_layout.py``, docs
"Custom Pipeline Model Parallel Layout"): one ``|``-separated entry per virtual stage in model
order, ``E`` the embedding, ``t`` a decoder layer (``t*N`` repeats it), ``L`` the loss head.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pptl.tune.model import ModelDesc

__all__ = ["Split", "even_split", "balanced_split", "rank_balanced_split", "splits_for", "stage_costs",
           "stage_memory", "megatron_layout"]


@dataclass(frozen=True)
class Split:
    name: str
    """even, balanced or rank-balanced."""
    layers: tuple[int, ...]
    """Decoder layers per (virtual) stage, in model order."""


def _weight(model: ModelDesc, part: object) -> float:
    f = model.part_cost(part, "F") or 0.0  # type: ignore[arg-type]
    b = model.part_cost(part, "B") or 0.0  # type: ignore[arg-type]
    return f + b


def even_split(layers: int, stages: int) -> tuple[int, ...]:
    base, extra = divmod(layers, stages)
    out = [base] * stages
    # The remainder goes to the middle stages: the first and last carry the embedding and head.
    order = sorted(range(stages), key=lambda s: (abs(s - (stages - 1) / 2), s))
    for s in order[:extra]:
        out[s] += 1
    return tuple(out)


def balanced_split(model: ModelDesc, stages: int) -> tuple[int, ...]:
    """Fewest F+B time on the slowest stage; every stage keeps at least one layer (with fewer layers
    than stages none can: the even split, whose empty stages rule the candidate out)."""
    L, c = model.layers, _weight(model, model.layer)
    extra = [0.0] * stages
    extra[0] += _weight(model, model.embedding)
    extra[-1] += _weight(model, model.head)
    if c <= 0 or L < stages:
        return even_split(L, stages)
    values = sorted({n * c + e for e in set(extra) for n in range(1, L + 1)})
    lo, hi = 0, len(values) - 1
    while lo < hi:  # the smallest bottleneck T where the stages can hold every layer
        mid = (lo + hi) // 2
        if sum(max(1, int((values[mid] - e) / c + 1e-9)) for e in extra) >= L:
            hi = mid
        else:
            lo = mid + 1
    T = values[lo]
    n = [max(1, int((T - e) / c + 1e-9)) for e in extra]
    while sum(n) > L:  # drop layers where the stage is heaviest (ties: the last such stage)
        s = max((k for k in range(stages) if n[k] > 1), key=lambda k: (n[k] * c + extra[k], k))
        n[s] -= 1
    return tuple(n)


def rank_balanced_split(model: ModelDesc, start: Sequence[int], rank_of: Sequence[int]) -> tuple[int, ...]:
    n = list(start)
    c = _weight(model, model.layer)
    if c <= 0:
        return tuple(n)
    extra = [0.0] * len(n)
    extra[0] += _weight(model, model.embedding)
    extra[-1] += _weight(model, model.head)
    ranks = sorted(set(rank_of))

    def totals() -> dict[int, float]:
        t = {r: 0.0 for r in ranks}
        for s, r in enumerate(rank_of):
            t[r] += n[s] * c + extra[s]
        return t

    for _ in range(sum(n)):
        t = totals()
        hi, lo = max(ranks, key=lambda r: t[r]), min(ranks, key=lambda r: t[r])
        if t[hi] - t[lo] <= c + 1e-12:
            break
        src = [s for s in range(len(n)) if rank_of[s] == hi and n[s] > 1]
        dst = [s for s in range(len(n)) if rank_of[s] == lo]
        if not src or not dst:
            break
        n[max(src, key=lambda s: n[s] * c + extra[s])] -= 1
        n[min(dst, key=lambda s: n[s] * c + extra[s])] += 1
    return tuple(n)


def splits_for(model: ModelDesc, rank_of: Sequence[int]) -> list[Split]:
    """The candidate splits for stages placed on ``rank_of[stage]``."""
    S = len(rank_of)
    out: dict[tuple[int, ...], Split] = {}
    even = even_split(model.layers, S)
    bal = balanced_split(model, S)
    for sp in (Split("balanced", bal), Split("rank-balanced", rank_balanced_split(model, bal, rank_of)),
               Split("even", even)):
        if min(sp.layers) >= 1:
            out.setdefault(sp.layers, sp)
    return list(out.values())


def stage_costs(model: ModelDesc, layers: Sequence[int]) -> dict[int, dict[str, float]]:
    """Per-stage durations of F, B, I, W (the kinds the model gives)."""
    last = len(layers) - 1
    out: dict[int, dict[str, float]] = {}
    for s, n in enumerate(layers):
        per: dict[str, float] = {}
        for k in ("F", "B", "I", "W"):
            v = model.part_cost(model.layer, k)
            if v is None:
                continue
            t = n * v
            for part, on in ((model.embedding, s == 0), (model.head, s == last)):
                if on:
                    t += model.part_cost(part, k) or 0.0
            per[k] = t
        out[s] = per
    return out


def stage_memory(model: ModelDesc, layers: Sequence[int]) -> tuple[list[float], list[float]]:
    """(activation per micro-batch, weight memory) of every stage."""
    last = len(layers) - 1
    act, weight = [], []
    for s, n in enumerate(layers):
        a, w = n * model.layer.activation, n * model.layer.weight
        if s == 0:
            a, w = a + model.embedding.activation, w + model.embedding.weight
        if s == last:
            a, w = a + model.head.activation, w + model.head.weight
        act.append(a)
        weight.append(w)
    return act, weight


def megatron_layout(layers: Sequence[int]) -> str:
    """``--pipeline-model-parallel-layout`` of a split, e.g. ``Et*7|t*9|t*9|t*7L``."""
    parts = []
    last = len(layers) - 1
    for s, n in enumerate(layers):
        body = "" if n == 0 else ("t" if n == 1 else f"t*{n}")
        parts.append(("E" if s == 0 else "") + body + ("L" if s == last else ""))
    return "|".join(parts)
