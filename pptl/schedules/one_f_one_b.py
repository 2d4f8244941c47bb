"""1F1B (PipeDream-flush): warm up with forwards, then alternate one forward and one backward.

Source: Narayanan et al. 2021 (Megatron-LM, "non-interleaved" schedule); torch's Schedule1F1B.
Assumptions: looped placement, one stage per rank. Unlike torch.distributed.pipelining, fewer
micro-batches than stages is allowed: warmup is then capped at the micro-batch count.
"""
from __future__ import annotations

from pptl.config import Config
from pptl.ir import Op, Schedule
from pptl.schedules._common import Family, assemble, backward_ops, compute_op, flush_bubble, require

__all__ = ["FAMILY", "build", "validate"]


def validate(cfg: Config) -> None:
    require(cfg.vpp == 1, cfg, "vpp", cfg.vpp, "expected 1 (use interleaved-1f1b for several chunks per rank)")


def build(cfg: Config) -> Schedule:
    validate(cfg)
    p, m = cfg.pp, cfg.microbatches
    orders: dict[int, list[Op]] = {}
    for r in range(p):
        warmup = min(p - r - 1, m)
        order: list[Op] = []
        # Phase 1 (warmup): F_0 .. F_{w-1}
        for mb in range(warmup):
            order.append(compute_op("F", r, r, mb))
        # Phase 2 (steady): (F_{w+k}, B_k) for k < m - w
        for k in range(m - warmup):
            order.append(compute_op("F", r, r, warmup + k))
            order += backward_ops(cfg, r, r, k)
        # Phase 3 (cooldown): B_{m-w} .. B_{m-1}
        for mb in range(m - warmup, m):
            order += backward_ops(cfg, r, r, mb)
        orders[r] = order
    return assemble(cfg, "1f1b", orders, num_stages=p, microbatches=m)


FAMILY = Family(
    name="1f1b",
    summary="one forward, one backward after a warmup of p-1-r forwards",
    constraints="vpp = 1; any pp >= 1 and microbatches >= 1 (fewer micro-batches than stages is fine)",
    validate=validate,
    build=build,
    bubble=flush_bubble,
    bubble_formula="(p-1)(F+B)",
    memory=lambda cfg: float(min(cfg.pp, cfg.microbatches)) * cfg.activation,
    memory_formula="min(p, m) on rank 0",
    source="Narayanan et al. 2021 (PipeDream-flush / Megatron-LM 1F1B)",
    aliases=("one-f-one-b", "pipedream-flush"),
)
