"""Rules of the overlapped and split-backward families (zero bubble, DualPipe): F&B pairing, the
weight-gradient FIFO, and warnings where a textbook bubble formula's assumption fails."""
from __future__ import annotations

from collections import deque

import numpy as np

from pptl.checks.base import Context, Violation
from pptl.checks.work_arrays import group_ids
from pptl.optable import OpTable
from pptl.schedules._pipeline_meta import PipelineMeta

__all__ = ["fb_self_dependency", "w_fifo_order", "formula_assumptions"]


def fb_self_dependency(ctx: Context) -> list[Violation]:
    """PP020: an FB op whose F half and B half depend on each other.

    The B half of (stage s', mb, direction d) needs the loss of that micro-batch, hence every
    forward of (mb, d) at every stage; so an F half of the same micro-batch and direction
    (at any stage) is a dependency of its own partner. (A forward never needs a gradient, so
    the other way round cannot happen.) The op could never start: the dependency graph drops
    the self-edge when both halves sit on one stage, so this rule names it. Fixture:
    fixtures/invalid/dualpipe_fb_self_dependency.json. Notes: O(ops).
    """
    out: list[Violation] = []
    if "FB" not in ctx.kinds:
        return out
    t = ctx.table
    fb = t.where("kind", frozenset({"FB"}))
    rows = np.flatnonzero(fb & t.has_pair & (t.pair[:, 1] == t.mb) & (t.pair[:, 2] == t.direction))
    for op in map(t.op, rows.tolist()):
        ps = op.pair[0]  # type: ignore[index]
        how = "needs it directly" if ps == op.stage else "needs it through the loss"
        out.append(Violation(
            "PP020", f"{op.id} overlaps F of stage {op.stage} mb {op.mb} with B of stage {ps} of the same "
            f"micro-batch; that backward {how}, so the pair can never start", (op.id,)))
    return out


def w_fifo_order(ctx: Context) -> list[Violation]:
    """PP021: W ops that do not pop the weight-gradient FIFO in the order their I ran.

    A split backward pushes the weight-gradient work of each I onto a FIFO and each W pops the
    oldest (DualPipe's ``WeightGradStore``; the zero-bubble runtime). The FIFO is one per rank
    when ``schedule.meta['weight_grad_store'] == 'rank'`` (DualPipe, DualPipeV: both chunks
    share it) and one per (rank, direction, stage) otherwise. A W whose I is missing or comes
    later is left to PP003/PP006. Reports the first out-of-order W per FIFO. Fixture:
    fixtures/invalid/zb_w_fifo.json. Notes: O(ops) (each FIFO scanned once; a W found behind
    the head costs a scan of the pending queue).
    """
    s = ctx.schedule
    if "I" not in ctx.kinds or "W" not in ctx.kinds:
        return []  # no split backward: no FIFO
    per_rank = PipelineMeta.of(s).per_rank_store
    if _fifo_in_order(ctx, ctx.table, per_rank):
        return []
    ops = s.ops
    out: list[Violation] = []
    for (rank, lane), order in s.lanes.items():
        queues: dict[tuple[int, ...], deque[tuple[tuple[int, int, int], int]]] = {}
        reported: set[tuple[int, ...]] = set()
        for i in order:
            op = ops[i]
            kind = op.kind
            if kind != "I" and kind != "W":
                continue
            key = (op.direction, op.stage, op.mb)
            fifo = () if per_rank else key[:2]
            q = queues.get(fifo)
            if q is None:
                q = queues[fifo] = deque()
            if kind == "I":
                q.append((key, i))  # the op's index: its id is built only if a message names it
                continue
            if q and q[0][0] == key:  # the usual case: W pops the head
                q.popleft()
                continue
            pos = next((k for k, (item, _) in enumerate(q) if item == key), None)
            if pos is None:
                continue  # no earlier I: PP003 or PP006 says so
            if fifo not in reported:
                reported.add(fifo)
                where = f"rank {rank}" if per_rank else f"rank {rank}, stage {op.stage}{_dir(op.direction)}"
                head = ops[q[0][1]].id
                out.append(Violation(
                    "PP021", f"{op.id} pops the weight-gradient FIFO of {where} before {head.replace('/I ', '/W ', 1)}: "
                    f"its I ran after {head}, and W drains in the order of its I", (op.id, head)))
            del q[pos]
    return out


def _fifo_in_order(ctx: Context, t: OpTable, per_rank: bool) -> bool:
    """Whether every FIFO of :func:`w_fifo_order` drains in order, shown on arrays: in each
    (lane, FIFO) the k-th W does the work of the k-th I and comes after it. Then each W finds its
    I at the head of the queue, so the rule reports nothing; when this does not hold (a missing or
    extra W, another order, a lane that lists an op twice) the rule walks the ops and says what is wrong."""
    la = ctx.lane_arrays
    if not la.unique:
        return False
    is_i, is_w = t.where("kind", frozenset({"I"}))[la.op], t.where("kind", frozenset({"W"}))[la.op]
    pos = np.flatnonzero(is_i | is_w)  # lane entries in lane order, lane after lane
    rows, is_i = la.op[pos], is_i[pos]
    cols = (la.lane[pos],) if per_rank else (la.lane[pos], t.direction[rows], t.stage[rows])
    group, _ = group_ids(*cols)
    by = np.lexsort((pos, group))  # each FIFO's ops in lane order
    i_at, w_at = by[is_i[by]], by[~is_i[by]]
    if i_at.size != w_at.size or not (group[i_at] == group[w_at]).all():
        return False  # some FIFO has more I than W or the other way round
    ri, rw = rows[i_at], rows[w_at]
    return bool((pos[w_at] > pos[i_at]).all() and (t.direction[ri] == t.direction[rw]).all()
                and (t.stage[ri] == t.stage[rw]).all() and (t.mb[ri] == t.mb[rw]).all())


def formula_assumptions(ctx: Context) -> list[Violation]:
    """PP022 (warning): the family's textbook bubble formula does not hold for this config.

    Asks the family (``Family.assumptions``) which of its formula's assumptions fail: zero
    communication, one cost per kind, B = I + W, and the family's own conditions (ZB-H1:
    W <= min(F, I); DualPipe: I = F >= W, F&B = F+B; ZB-H2 and ZB-V: F = I = W). Each warning
    names the formula, its value, the failed assumption and the simulated idle time. Schedules
    without a config or family (imported plans) get no warning. Notes: O(1) plus the simulation
    the checker already ran.
    """
    s = ctx.schedule
    cfg = s.config
    if cfg is None:
        return []
    from pptl.schedules import get_family

    try:
        fam = get_family(s.family)
    except Exception:  # an imported plan of a family this build does not know
        return []
    if fam.assumptions is None:
        return []
    reasons = fam.assumptions(cfg)
    if not reasons:
        return []
    try:
        value = fam.bubble(cfg)
    except Exception:
        value = None
    idle = [r.idle for r in ctx.simulation.ranks]
    seen = f"{min(idle):g}" if idle and min(idle) == max(idle) else (f"{min(idle):g}..{max(idle):g}" if idle else "?")
    words = fam.bubble_formula.split(" ")
    # "about 4pF per rank ...": the approximate formulas name their value in two words
    stated = " ".join(words[:2] if words[0] == "about" else words[:1]).rstrip(",;") + (
        f" = {value:g}" if value is not None else "")
    return [Violation("PP022", f"{fam.name}: the textbook bubble {stated} does not apply: {why}; "
                      f"simulated idle per rank {seen}", (), severity="warning") for why in reasons]


def _dir(d: int) -> str:
    return f" (direction {d})" if d else ""
