"""Rules about memory."""
from __future__ import annotations

from pptl.checks.base import Context, Violation
from pptl.simulate import memory_timeline

__all__ = ["memory_over_limit"]


def memory_over_limit(ctx: Context) -> list[Violation]:
    """PP009: a rank's activation memory rises above ``--memory-limit``; names the rank, the
    moment and the op whose start crossed it. Notes: O(ops log ops) (events sorted per rank)."""
    limit = ctx.memory_limit
    if limit is None and ctx.schedule.config is not None:
        limit = ctx.schedule.config.memory_limit
    if limit is None:
        return []
    s = ctx.schedule
    sim = ctx.simulation
    cfg = s.config
    act = cfg.activation if cfg is not None else 1.0
    wact = cfg.w_activation if cfg is not None else 0.0
    per_rank = memory_timeline(s, sim.start, sim.end, act, wact)
    out: list[Violation] = []
    for r in sorted(per_rank):
        cur = 0.0
        peak = 0.0
        first = None
        for t, _, delta, i in per_rank[r]:
            cur += delta
            if cur > limit + 1e-9 and first is None:
                first = (t, i, cur)
            peak = max(peak, cur)
        if first is not None:
            t, i, cur = first
            out.append(Violation("PP009", f"rank {r} holds {cur:g} activation units at t={t:g} "
                                 f"(when {s.ops[i].id} starts), over the limit {limit:g}; peak {peak:g}",
                                 (s.ops[i].id,)))
    return out
