"""1F1B (PipeDream-flush): warm up with forwards, then alternate one forward and one backward.

Source: Narayanan et al. 2021 (Megatron-LM, "non-interleaved" schedule); torch's Schedule1F1B.
Assumptions: looped placement, one stage per rank. Unlike torch.distributed.pipelining, fewer
micro-batches than stages is allowed: warmup is then capped at the micro-batch count.
"""
from __future__ import annotations

from pptl.config import Config
from pptl.ir import Schedule
from pptl.schedules._common import Family, Order, assemble, flush_assumptions, flush_bubble, phases, require

__all__ = ["FAMILY", "build", "validate"]


def validate(cfg: Config) -> None:
    require(cfg.vpp == 1, cfg, "vpp", cfg.vpp, "expected 1 (use interleaved-1f1b for several chunks per rank)")


def build(cfg: Config) -> Schedule:
    validate(cfg)
    p, m = cfg.pp, cfg.microbatches
    back_kinds = ("I", "W") if cfg.split_backward else ("B",)
    nb = len(back_kinds)
    mbs = list(range(m))
    orders: dict[int, Order] = {}
    for r in range(p):
        # Phase 1 (warmup): F_0 .. F_{w-1}; phase 2 (steady): (F_{w+k}, B_k) for k < m - w;
        # phase 3 (cooldown): B_{m-w} .. B_{m-1} (pptl.schedules._order.phases, one column at a time).
        warmup = min(p - r - 1, m)
        n = m * (1 + nb)
        orders[r] = Order(kind=phases(["F"] * m, [[k] * m for k in back_kinds], warmup), stage=[r] * n,
                          mb=phases(mbs, [mbs] * nb, warmup), direction=[0] * n, chunk=[0] * n)
    return assemble(cfg, "1f1b", orders, num_stages=p, microbatches=m)


FAMILY = Family(
    name="1f1b",
    summary="one forward, one backward after a warmup of p-1-r forwards",
    constraints="vpp = 1; any pp >= 1 and microbatches >= 1 (fewer micro-batches than stages is fine)",
    validate=validate,
    build=build,
    bubble=flush_bubble,
    bubble_formula="(p-1)(F+B)",
    assumptions=flush_assumptions,
    memory=lambda cfg: float(min(cfg.pp, cfg.microbatches)) * cfg.activation,
    memory_formula="min(p, m) on rank 0",
    source="Narayanan et al. 2021 (PipeDream-flush / Megatron-LM 1F1B)",
    aliases=("one-f-one-b", "pipedream-flush"),
)
