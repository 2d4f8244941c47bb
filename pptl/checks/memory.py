"""Rules about memory."""
from __future__ import annotations

import numpy as np

from pptl.checks.base import Context, Violation
from pptl.simulate import memory_events_of, rounding_slack

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
    ev = memory_events_of(s, sim.start, sim.end, act, wact)
    out: list[Violation] = []
    cuts = np.flatnonzero(np.diff(ev.rank)) + 1
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), int(ev.rank.size)]):
        cur = np.cumsum(ev.delta[lo:hi])
        # a sum past the limit by rounding alone (0.1 + 0.1 + 0.1 > 0.3) is at the limit
        over = np.flatnonzero(cur > limit + rounding_slack(ev.delta[lo:hi], 1e-9))
        if over.size:
            j = lo + int(over[0])
            op = s.table.op(int(ev.op[j]))
            held = float(cur[over[0]])
            out.append(Violation("PP009", f"rank {int(ev.rank[j])} holds {held:g} activation unit{'' if held == 1 else 's'} at "
                                 f"t={float(ev.time[j]):g} (when {op.id} starts), over the limit {limit:g}; peak "
                                 f"{max(float(cur.max()), 0.0):g}", (op.id,)))
    return out
