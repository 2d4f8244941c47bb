"""Stage roles: a stage's op costs follow what its ops compute, not its index.

Where a stage sits on the data path decides what ``pptl run``'s model computes there
(:mod:`pptl.run.model`): the **first** stage's chunk input is data, so its backward computes no
input gradient; the **last** stage adds the loss to its forward and backward; a **middle** stage
does neither; a single stage (``only``) is both first and last. A 1F1B run on 2 ranks has a
first and a last stage and no middle one, yet interleaved 1F1B on the same ranks runs two middle
stages; keyed by index, its stage 2 (a middle stage on rank 0) would take a run stage's B that
computed no input gradient (3.22 ms on 2 H200s, where it ran 3.66 ms cool).

So each stage of a plan takes its costs from the run's stages of the same role (their mean),
scaled by the GEMMs each op runs (:func:`gemm_work`) where the layer counts differ. A role the
run did not have is derived from one it had by the same count: a middle stage from the first
(both without the loss, whose cost no GEMM count gives), else from the last. The measured spread
of each plan stage is its source stage's.

Vocabulary: *role* one of ``first``, ``middle``, ``last``, ``only``; *source* the run stage(s)
a plan stage takes its costs from.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from pptl.config import Costs
from pptl.whatif.spread import Quantiles, Spread

__all__ = ["ROLES", "role_of", "gemm_work", "Source", "sources", "by_role", "layers_from_mapping", "Layers"]

#: Stage -> MLP blocks.
Layers = Callable[[int], int]

ROLES = ("first", "middle", "last", "only")


def role_of(stage: int, stages: int) -> str:
    """The role of ``stage`` among ``stages`` stages along the data path."""
    if stages <= 1:
        return "only"
    return "first" if stage == 0 else "last" if stage == stages - 1 else "middle"


def gemm_work(kind: str, role: str, layers: int) -> float | None:
    """GEMMs one op of ``kind`` runs on a stage of ``role`` with ``layers`` MLP blocks (each GEMM of
    one size: tokens x hidden x 4 hidden), or None for a kind the count does not cover.

    Per block the forward runs 2 (up, down), the input gradient 2, the weight gradient 2, a full
    backward 4. A first stage (or the only one) needs no gradient of its chunk input: its I and B
    skip the up projection's input gradient of its first block, one GEMM. The loss is elementwise
    (no GEMM): the last stage's extra time stays in its measured costs.

    Example: ``gemm_work("B", "first", 2)`` is 7 and ``gemm_work("B", "middle", 2)`` 8, so a
    middle stage's B derived from a first stage's 3.22 ms is 3.68 ms.
    """
    per = {"F": 2, "I": 2, "W": 2, "B": 4}.get(kind)
    if per is None or layers < 1:
        return None
    skip = 1 if kind in ("I", "B") and role in ("first", "only") else 0
    return float(per * layers - skip)


@dataclass(frozen=True)
class Source:
    """Where one plan stage takes its costs from: the run stages ``stages`` (averaged) and the
    factor per cost key for what the plan stage computes more or less (1 where unknown)."""

    stage: int
    role: str
    stages: tuple[int, ...]
    work: Mapping[str, float]
    """Cost key -> the plan stage's GEMMs over the source's (missing: 1)."""


def sources(plan_stages: int, run_stages: Sequence[int], *, plan_layers: Layers, run_layers: Layers,
            keys: Sequence[str]) -> list[Source]:
    """For each stage ``0 .. plan_stages - 1`` of a plan, the run stages it takes its costs from.

    Args:
        plan_stages: stages of the plan (ranks x chunks).
        run_stages: the stage indices the run timed (``0 .. S - 1``).
        plan_layers, run_layers: stage -> MLP blocks (callables), of the plan and of the run.
        keys: the compute cost keys to scale (F, B, I, W; others keep a factor 1).

    Returns:
        One :class:`Source` per plan stage; empty when the run timed no stage.

    Notes:
        O(plan_stages x run_stages).
    """
    if not run_stages:
        return []
    n_run = max(run_stages) + 1
    by_role: dict[str, list[int]] = {}
    for s in sorted(set(run_stages)):
        by_role.setdefault(role_of(s, n_run), []).append(s)
    out = []
    for p in range(plan_stages):
        role = role_of(p, plan_stages)
        if plan_stages == n_run:
            src = [p] if p in run_stages else by_role.get(role, [])
        else:
            src = by_role.get(role, [])
        if not src:  # a role the run lacks: the nearest one in what it computes
            for alt in _NEAREST[role]:
                if alt in by_role:
                    src = by_role[alt]
                    break
        work = {}
        for k in keys:
            mine = gemm_work(k, role, int(plan_layers(p)))
            theirs = [gemm_work(k, role_of(s, n_run), int(run_layers(s))) for s in src]
            if mine is not None and theirs and all(t for t in theirs):
                work[k] = mine * len(theirs) / sum(theirs)  # type: ignore[arg-type]
        out.append(Source(p, role, tuple(src), work))
    return out


#: A role the run lacks -> the roles it is derived from, nearest first (same loss, then same input).
_NEAREST: Mapping[str, tuple[str, ...]] = {
    "middle": ("first", "last", "only"),
    "first": ("only", "middle", "last"),
    "last": ("only", "middle", "first"),
    "only": ("first", "last", "middle"),
}


def layers_from_mapping(data: Any, default: int = 1) -> Layers:
    """stage -> MLP blocks from a ``workload`` mapping of file data (``layers_per_stage``,
    ``stage_layers``), bounded; anything malformed counts as ``default`` blocks per stage."""
    per = default
    uneven: tuple[int, ...] = ()
    if isinstance(data, Mapping):
        v = data.get("layers_per_stage")
        if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 100_000:
            per = v
        sl = data.get("stage_layers")
        if isinstance(sl, list) and 0 < len(sl) <= 100_000 and all(
                isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= 100_000 for x in sl):
            uneven = tuple(sl)
    return lambda s: uneven[s] if 0 <= s < len(uneven) else per


def by_role(costs: Costs, spread: Spread, srcs: Sequence[Source], *, plan_rank: Mapping[int, int],
            run_rank: Mapping[int, int]) -> tuple[Costs, Spread]:
    """``costs`` and ``spread`` of a run, re-keyed for a plan's stages (:func:`sources`).

    Each plan stage's cost per key is its sources' mean times the work factor; with a duty model
    (``spread.duty_exponent`` > 0) also times ``(u_run[plan rank] / u_run[source rank]) ** alpha``:
    the cost as if measured on the rank that runs it in the plan, which the duty model
    (:func:`pptl.whatif.montecarlo.monte_carlo`) then takes to the plan's duty. Each plan stage's
    measured factors are its first source's.

    Notes:
        O(plan stages x keys x sources).
    """
    from dataclasses import replace

    if not srcs:
        return costs, spread
    alpha, duty = spread.duty_exponent, spread.duty
    stages: dict[int, dict[str, float]] = {}
    tables: dict[tuple[int, str], Quantiles] = {}
    moves: dict[int, float] = {}
    for src in srcs:
        logs = [math.log(u_dst / u_src) for s in src.stages
                if (u_src := duty.get(run_rank.get(s, -1), 0.0)) > 0
                and (u_dst := duty.get(plan_rank.get(src.stage, -1), 0.0)) > 0]
        if alpha > 0 and logs and any(logs):
            moves[src.stage] = sum(logs) / len(logs)
        keys = sorted({k for s in src.stages for k in costs.stages.get(s, {})})
        row: dict[str, float] = {}
        for k in keys:
            vals = []
            for s in src.stages:
                v = costs.lookup(k, s)
                if v is None:
                    continue
                u_src, u_dst = duty.get(run_rank.get(s, -1), 0.0), duty.get(plan_rank.get(src.stage, -1), 0.0)
                if alpha > 0 and u_src > 0 and u_dst > 0:
                    v *= (u_dst / u_src) ** alpha
                vals.append(v)
            if vals:
                row[k] = sum(vals) / len(vals) * src.work.get(k, 1.0)
        stages[src.stage] = row
        for (s, k), q in spread.stages.items():
            if s == src.stages[0]:
                tables[(src.stage, k)] = q
    return replace(costs, stages=stages), replace(spread, stages=tables, duty_moves=moves)
