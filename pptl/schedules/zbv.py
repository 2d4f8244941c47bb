"""ZB-V: zero bubble on a V placement, two stages per rank.

Source: Qi et al., "Zero Bubble Pipeline Parallelism" (arXiv 2401.10241, Section 6) and the
order of torch.distributed.pipelining ``ScheduleZBVZeroBubble._calculate_single_rank_operations``.

Placement: p ranks, 2p stages in a V: rank r holds stage r (chunk 0) and stage 2p-1-r (chunk 1),
so micro-batches enter and leave at rank 0. Phase table of rank r, with n = max(m, 2p-1):

    warmup 1   F0                    x 2(p-r)-1
    warmup 2   F1 F0                 x r
    warmup 3   F1 I1 W1              x p-r
    steady     F0 I0 W0 F1 I1 W1     until every F has run (F0 dropped once all n are in)
    cooldown 1 I0 I1                 x r
    cooldown 2 I0 W0                 x p-r
    tail       W1 ..., then W0 ...   what is left, oldest first

Each chunk runs its F, I and W in micro-batch order (a weight-gradient FIFO per stage). With
fewer than 2p-1 micro-batches the table is built for n = 2p-1 and the ops of micro-batches >= m
are dropped, as torch does.

Assumptions: B is always split; zero bubble (no idle time between a rank's first and last op)
needs F = I = W and zero communication; peak activation is 2p stage activations on rank 0, the
same memory as 1F1B over a model of p stages of twice the size.
"""
from __future__ import annotations

from pptl.config import Config
from pptl.ir import Op, Schedule
from pptl.schedules._common import Family, Order, assemble, overlap_metrics, require
from pptl.schedules._pipeline_meta import PipelineMeta
from pptl.schedules.zero_bubble import zero_bubble_assumptions

__all__ = ["FAMILY", "NAME", "build", "validate", "phase_table", "phase_order"]

NAME = "zbv"


def phase_table(rank: int, p: int, m: int) -> list[Op]:
    """The compute order of ``rank`` (stages r and 2p-1-r)."""
    return phase_order(rank, p, m).ops(rank)


def phase_order(rank: int, p: int, m: int) -> Order:
    """:func:`phase_table` as columns (what ``build`` hands to ``assemble``)."""
    n = max(m, 2 * p - 1)
    stages = (rank, 2 * p - 1 - rank)
    nxt = {(kind, c): 0 for kind in "FIW" for c in (0, 1)}
    out: list[tuple[str, int, int, int, int]] = []

    def put(kind: str, c: int) -> None:
        mb = nxt[kind, c]
        nxt[kind, c] += 1
        if mb < m:
            out.append((kind, stages[c], mb, 0, c))

    for _ in range(2 * (p - rank) - 1):  # warmup 1: F0
        put("F", 0)
    for _ in range(rank):  # warmup 2: F1 F0
        put("F", 1)
        put("F", 0)
    for _ in range(p - rank):  # warmup 3: F1 I1 W1
        put("F", 1)
        put("I", 1)
        put("W", 1)
    while nxt["F", 1] < nxt["F", 0] or nxt["F", 0] < n:  # steady: F0 I0 W0 F1 I1 W1
        if nxt["F", 0] < n:
            put("F", 0)
        put("I", 0)
        put("W", 0)
        put("F", 1)
        put("I", 1)
        put("W", 1)
    for _ in range(rank):  # cooldown 1: I0 I1
        put("I", 0)
        put("I", 1)
    for _ in range(p - rank):  # cooldown 2: I0 W0
        put("I", 0)
        put("W", 0)
    while nxt["W", 1] < nxt["I", 1]:  # tail: the W1 left, then the W0 left
        put("W", 1)
    while nxt["W", 0] < nxt["I", 0]:
        put("W", 0)
    return Order.of_rows(out)


def validate(cfg: Config) -> None:
    require(cfg.vpp in (1, 2), cfg, "vpp", cfg.vpp, "expected 2 (the V placement; 1 is read as 2)")


def build(cfg: Config) -> Schedule:
    validate(cfg)
    p, m = cfg.pp, cfg.microbatches
    orders = {r: phase_order(r, p, m) for r in range(p)}
    return assemble(cfg, NAME, orders, num_stages=2 * p, microbatches=m,
                    meta=PipelineMeta(weight_grad_store="stage", placement="v").to_meta())


def bubble(cfg: Config) -> float | None:
    """0 within each rank's span when the zero-bubble claim applies; None otherwise."""
    c = cfg.costs
    holds = c.lookup("F") == c.lookup("I") == c.lookup("W") and cfg.microbatches >= 2 * cfg.pp - 1
    return 0.0 if holds else None


def assumptions(cfg: Config) -> list[str]:
    return zero_bubble_assumptions(cfg, 2 * cfg.pp - 1)


FAMILY = Family(
    name=NAME,
    summary="zero bubble V: two stages per rank in a V, B split into I and W; 1F1B's memory",
    constraints="any pp >= 1, microbatches >= 1; vpp 2 (implied)",
    validate=validate,
    build=build,
    bubble=bubble,
    bubble_formula="0 within each rank's span when F = I = W and m >= 2p-1",
    memory=lambda cfg: float(2 * cfg.pp) * cfg.activation,
    memory_formula="2p stage activations on rank 0",
    source="Qi et al. 2024 (ZB-V); torch ScheduleZBVZeroBubble",
    assumptions=assumptions,
    extra_metrics=overlap_metrics,
    aliases=("zb-v",),
)
