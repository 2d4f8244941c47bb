"""ZB-H1 and ZB-H2: 1F1B with the backward split into I (input gradient) and W (weight gradient).

Source: Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024, arXiv 2401.10241), Section 3
(handcrafted schedules), and sail-sg/zero-bubble-pipeline-parallelism.

Phase table of stage i of p with m micro-batches and offset k (k = 1: ZB-H1, k = 2: ZB-H2):

    warmup    F                x k(p-1-i)
    ramp      F I              x k*i
    steady    F I W            x m-k(p-1)     indices (F_x, I_{x-k(p-1-i)}, W_{x-k(p-1)})
    drain     I W              x k(p-1-i)
    tail      W                x k*i

F, I and W each run their micro-batches in order, so W drains the stage's I in FIFO order.
ZB-H1 holds at most p activations (as 1F1B); ZB-H2 up to 2p-1 and, when F = I = W, leaves no
idle time between a rank's first and last op (the parallelogram of the paper's Figure 3).

Assumptions: one stage per rank, looped placement; B is always split (``split_backward`` is
implied). The bubble formula of ZB-H1, (p-1)(F+B-2W), assumes zero communication, uniform
per-stage costs, B = I + W and I >= F (see :func:`assumptions`).
"""
from __future__ import annotations

from pptl.config import Config
from pptl.ir import Op, Schedule
from pptl.schedules._common import Family, Order, assemble, overlap_metrics, require, uniform_cost_assumptions
from pptl.schedules._pipeline_meta import PipelineMeta

__all__ = ["FAMILY_H1", "FAMILY_H2", "build_h1", "build_h2", "phase_table", "phase_order", "validate_h1", "validate_h2",
           "assumptions_h1", "assumptions_h2", "zero_bubble_assumptions"]


def phase_table(rank: int, p: int, m: int, k: int) -> list[Op]:
    """The compute order of ``rank`` (stage ``rank``) for offset ``k``."""
    return phase_order(rank, p, m, k).ops(rank)


def phase_order(rank: int, p: int, m: int, k: int) -> Order:
    """:func:`phase_table` as columns (what ``build`` hands to ``assemble``)."""
    nxt = {"F": 0, "I": 0, "W": 0}
    rows: list[tuple[str, int, int, int, int]] = []
    add = rows.append

    def put(*kinds: str) -> None:
        for kind in kinds:
            add((kind, rank, nxt[kind], 0, 0))
            nxt[kind] += 1

    for _ in range(k * (p - 1 - rank)):  # warmup: F
        put("F")
    for _ in range(k * rank):  # ramp: F I
        put("F", "I")
    for _ in range(m - k * (p - 1)):  # steady: F I W
        put("F", "I", "W")
    for _ in range(k * (p - 1 - rank)):  # drain: I W
        put("I", "W")
    for _ in range(k * rank):  # tail: W
        put("W")
    return Order.of_rows(rows)


def _validate(cfg: Config, k: int) -> None:
    require(cfg.vpp == 1, cfg, "vpp", cfg.vpp, "expected 1 (use zbv for two stages per rank)")
    need = k * (cfg.pp - 1) + 1
    require(cfg.microbatches >= need, cfg, "microbatches", cfg.microbatches,
            f"expected at least {'' if k == 1 else '2*'}(pp-1)+1 = {need}")


def validate_h1(cfg: Config) -> None:
    _validate(cfg, 1)


def validate_h2(cfg: Config) -> None:
    _validate(cfg, 2)


def _build(cfg: Config, k: int, name: str) -> Schedule:
    _validate(cfg, k)
    p, m = cfg.pp, cfg.microbatches
    orders = {r: phase_order(r, p, m, k) for r in range(p)}
    return assemble(cfg, name, orders, num_stages=p, microbatches=m, meta=PipelineMeta(weight_grad_store="stage").to_meta())


def build_h1(cfg: Config) -> Schedule:
    return _build(cfg, 1, "zb-h1")


def build_h2(cfg: Config) -> Schedule:
    return _build(cfg, 2, "zb-h2")


def _bubble_h1(cfg: Config) -> float:
    c = cfg.costs
    return (cfg.pp - 1) * (c.lookup("F") + c.lookup("B") - 2 * c.lookup("W"))


def _bubble_zero(cfg: Config) -> float | None:
    c = cfg.costs
    return 0.0 if c.lookup("F") == c.lookup("I") == c.lookup("W") else None


def assumptions_h1(cfg: Config) -> list[str]:
    """Why (p-1)(F+B-2W) is not exact for ``cfg``.

    Measured with the simulator (tests/schedules/test_zero_bubble.py): with zero communication,
    every rank idles exactly (p-1)(F+B-2W) when W <= min(F, I), and (p-1)(W-min(F, I)) more
    otherwise: a W longer than the F or I next to it no longer fits the slot it fills.
    """
    out = uniform_cost_assumptions(cfg, ("F", "B", "I", "W"))
    c = cfg.costs
    f, i, w = c.lookup("F"), c.lookup("I"), c.lookup("W")
    if None not in (f, i, w) and cfg.pp > 1 and w > min(f, i):
        low = min(f, i)
        out.append(f"W={w:g} > min(F, I)={low:g}: each rank idles (p-1)(W-min(F,I)) = "
                   f"{(cfg.pp - 1) * (w - low):g} more than the formula")
    return out


def assumptions_h2(cfg: Config) -> list[str]:
    return zero_bubble_assumptions(cfg, 2 * cfg.pp - 1)


def zero_bubble_assumptions(cfg: Config, min_microbatches: int) -> list[str]:
    """Why "zero bubble" (no idle time within a rank's span) does not hold for ``cfg``."""
    out = uniform_cost_assumptions(cfg, ("F", "I", "W"))
    c = cfg.costs
    f, i, w = c.lookup("F"), c.lookup("I"), c.lookup("W")
    if not f == i == w:
        out.append(f"F={f:g}, I={i:g}, W={w:g} are not all equal (zero bubble needs F = I = W)")
    if cfg.microbatches < min_microbatches:
        out.append(f"microbatches={cfg.microbatches} < {min_microbatches} (zero bubble needs 2p-1 micro-batches)")
    return out


FAMILY_H1 = Family(
    name="zb-h1",
    summary="zero bubble H1: 1F1B with B split into I and W, W filling the bubbles; peak memory as 1F1B",
    constraints="vpp = 1; microbatches >= pp",
    validate=validate_h1,
    build=build_h1,
    bubble=_bubble_h1,
    bubble_formula="(p-1)(F+B-2W) on every rank when W <= min(F, I)",
    memory=lambda cfg: float(cfg.pp) * cfg.activation,
    memory_formula="p activations on rank 0",
    source="Qi et al. 2024, Zero Bubble Pipeline Parallelism (ZB-H1)",
    assumptions=assumptions_h1,
    extra_metrics=overlap_metrics,
    aliases=("zbh1", "zb1p"),
)

FAMILY_H2 = Family(
    name="zb-h2",
    summary="zero bubble H2: ZB-H1 with doubled offsets (more warmup forwards): no idle time when F = I = W",
    constraints="vpp = 1; microbatches >= 2pp-1",
    validate=validate_h2,
    build=build_h2,
    bubble=_bubble_zero,
    bubble_formula="0 within each rank's span when F = I = W",
    memory=lambda cfg: float(2 * cfg.pp - 1) * cfg.activation,
    memory_formula="2p-1 activations on rank 0",
    source="Qi et al. 2024, Zero Bubble Pipeline Parallelism (ZB-H2)",
    assumptions=assumptions_h2,
    extra_metrics=overlap_metrics,
    aliases=("zbh2",),
)
