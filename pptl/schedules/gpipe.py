"""GPipe: every forward, then every backward (Huang et al., 2019, "GPipe").

Assumptions: looped placement, one stage per rank; backward runs in micro-batch order, as
torch.distributed.pipelining's ScheduleGPipe does. Works with fewer micro-batches than stages.
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
    n = m * (1 + nb)
    orders: dict[int, Order] = {}
    for r in range(p):
        # Phase 1: F_0 .. F_{m-1}.  Phase 2: B_0 .. B_{m-1} (1F1B's phases with all m forwards as warmup).
        orders[r] = Order(kind=phases(["F"] * m, [[k] * m for k in back_kinds], m), stage=[r] * n,
                          mb=phases(mbs, [mbs] * nb, m), direction=[0] * n, chunk=[0] * n)
    return assemble(cfg, "gpipe", orders, num_stages=p, microbatches=m)


FAMILY = Family(
    name="gpipe",
    summary="all forwards, then all backwards",
    constraints="vpp = 1; any pp >= 1 and microbatches >= 1 (fewer micro-batches than stages is fine)",
    validate=validate,
    build=build,
    bubble=flush_bubble,
    bubble_formula="(p-1)(F+B)",
    assumptions=flush_assumptions,
    memory=lambda cfg: float(cfg.microbatches) * cfg.activation,
    memory_formula="m",
    source="Huang et al. 2019, GPipe",
    torch_schedule="GPipe",
)
