"""Monte Carlo over a plan's dependency graph: every sample at once, op by op.

The graph is the simulator's (:func:`pptl.dag.successors`: data facts plus lane order) and so is
the order it is walked in (:func:`pptl.dag.kahn_order`). Each op holds a vector of ``samples``
ends: its start is the largest end among its predecessors (0 without any), its end that plus its
drawn duration. The mean durations are the simulator's for the same costs (context hooks
included), so a spread that draws every factor as 1 gives the simulator's makespan exactly
(a measured spread's first-op extra, SEND hold and step opening, ``Spread.first``, ``Spread.send_hold``
and ``Spread.opening``, are what the simulator does not model).

Memory: an op's vector of ends lives only until its last successor has read it (slots are
reused), and of the ops with two predecessors or more, which one each sample waited for (one byte
per sample), for the critical path. The criticality of an op is the share of samples whose
critical path, walked back from the op that ends last, passes through it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pptl.config import Costs
from pptl.errors import InputError, InvalidScheduleError
from pptl.formats._quote import counted
from pptl.ir import Schedule
from pptl.whatif.spread import QUANTILE_POINTS, Spread, delay_in

__all__ = ["Samples", "monte_carlo", "makespan_quantiles", "MAX_CELLS"]

#: Largest ops x samples one run takes: the "waited for" record is one byte per op and sample
#: (0.5 GB here; a 400k-op plan takes 1,250 samples).
MAX_CELLS = 500_000_000
#: Ops whose durations are drawn at once (a block of ``_CHUNK x samples`` floats).
_CHUNK = 2048
#: Points at which each quantile table is read for drawing: the piecewise-linear quantile function
#: at the midpoints of ``_FINE`` equal steps of u. A draw is then one integer and one gather (the
#: interpolated draw costs ten passes over the block); the mean is the table's to within 1e-6.
_FINE = 1024


@dataclass(frozen=True)
class Samples:
    """What the samples of one plan came to (arrays of numpy, ``samples`` long where not said)."""

    makespan: Any
    """Step time of each sample: the ops' span plus the drawn offset."""
    busy: Any
    """(ranks, samples): compute-lane time of each rank."""
    span: Any
    """The ops' span of each sample (makespan without the offset)."""
    critical: Any
    """(ops,): share of samples whose critical path holds the op."""
    planned: float
    """The simulator's makespan with every op as planned (no offset)."""
    seed: int
    planned_start: Any = None
    """(ops,): each op's start with every op at its mean duration under the spread (stragglers
    included; what the figure draws)."""
    planned_end: Any = None

    @property
    def idle(self) -> Any:
        """(ranks, samples): the span minus each rank's compute time, never below 0. The span is summed
        op by op along the path and the busy time in blocks, so a rank busy the whole span (a chain)
        differs by rounding (-1.8e-15): that is 0, not a negative or a tiny idle."""
        import numpy as np

        idle = self.span[None, :] - self.busy
        tiny = 1e-9 * np.maximum(np.abs(self.span), 1e-300)[None, :]
        return np.where(idle > tiny, idle, 0.0)

    def quantiles(self, qs: Sequence[float] = (0.5, 0.95, 0.99)) -> tuple[float, ...]:
        import numpy as np

        return tuple(float(v) for v in np.quantile(self.makespan, qs))


def makespan_quantiles(schedule: Schedule, costs: Costs | None = None, spread: Spread | None = None,
                       samples: int = 1000, seed: int = 0,
                       qs: Sequence[float] = (0.5, 0.95, 0.99)) -> tuple[float, ...]:
    """Quantiles ``qs`` of the step time of ``schedule`` under ``spread`` (for ranking plans:
    by p50, near-ties broken by p95). See :func:`monte_carlo`."""
    return monte_carlo(schedule, costs, spread, samples=samples, seed=seed, critical=False).quantiles(qs)


def monte_carlo(schedule: Schedule, costs: Costs | None = None, spread: Spread | None = None, *,
                samples: int = 1000, seed: int = 0, critical: bool = True, name: str = "") -> Samples:
    """Draw ``samples`` steps of ``schedule`` (durations from ``costs`` and ``spread``).

    Deterministic for a ``seed``. ``critical`` off skips the critical-path walk (criticality 0).
    ``name``: the plan's file, which errors about the plan name (several plans are sampled at once).

    Raises:
        InputError: ``samples`` below 1 or too many cells; a straggler's rank or micro-batch not in
            the plan; a measured spread of another plan (other ranks, or a compute op the run never had).
        InvalidScheduleError: the graph has a cycle or a cost is missing.

    Notes:
        O((ops + edges) * samples) arithmetic in numpy, one Python step per op.
    """
    import numpy as np

    from pptl.simulate import simulate

    spread = spread or Spread()
    n = schedule.n_ops
    if samples < 1:
        raise InputError(f"--samples: got {samples}, expected 1 or more")
    if n * samples > MAX_CELLS:
        raise InputError(f"--samples: {samples:,} samples of {n:,} ops is more than {MAX_CELLS:,} op draws; "
                         f"take fewer samples")
    moved: dict[int, float] = {}
    if spread.duty_exponent > 0:
        costs, moved = _at_plan_duty(schedule, costs, spread)
    sim = simulate(schedule, costs)
    base = np.asarray(sim.end, dtype=np.float64) - np.asarray(sim.start, dtype=np.float64)
    ops = _OpColumns.of(schedule)
    g = _Graph.of(schedule)
    if spread.send_hold > 0:
        base = _sends_hold(schedule, base, ops, g, spread.send_hold)
    if spread.opening:
        base = _opened(schedule, base, ops, spread)
    draw = _Draw.of(schedule, ops, base, spread, samples, seed, moved, name=name)
    span, last, via2, viam, busy = _walk(g, draw, ops, samples)
    crit = _criticality(g, via2, viam, last, samples) if critical and n else np.zeros(n)
    offset = draw.offsets()
    start, end = _mean_times(g, base * draw.scale + draw.add)
    return Samples(makespan=span + offset, busy=busy, span=span, critical=crit, planned=float(sim.makespan),
                   seed=seed, planned_start=start, planned_end=end)


def _sends_hold(schedule: Schedule, base: Any, ops: "_OpColumns", g: "_Graph", hold: float) -> Any:
    """``base`` with each SEND the lane order puts on a compute lane (:mod:`pptl.whatif.lanes`)
    held ``hold`` at most, and the rest of its time (the message's, SEND start to data) on its
    RECV: the lane is free again once the send is issued, the receiver still waits for the data."""
    import numpy as np

    out = base.copy()
    on = [i for (_, lane), order in schedule.lanes.items() if lane == _COMPUTE for i in order]
    lane_ops = np.zeros(base.size, dtype=bool)
    lane_ops[np.asarray(on, dtype=np.int64)] = True
    send = np.flatnonzero(lane_ops & (ops.kind_arr == "SEND"))
    out[send] = np.minimum(base[send], hold)
    is_send = np.zeros(base.size, dtype=bool)
    is_send[send] = True
    for v in np.flatnonzero(ops.kind_arr == "RECV").tolist():
        for u in g.preds[g.bounds[v]:g.bounds[v + 1]].tolist():
            if is_send[u]:
                out[v] += base[u] - out[u]
    return out


def _opened(schedule: Schedule, base: Any, ops: "_OpColumns", spread: Spread) -> Any:
    """``base`` with each measured compute op of a rank the run timed (``Spread.opening``) scaled by
    the factor of the work its rank has done when the op starts (:mod:`pptl.whatif.opening`): the
    rank's first compute op, which ``Spread.first`` adds to, is the lead."""
    import numpy as np

    from pptl.whatif.opening import opening_factors

    out = base.copy()
    timed = ops.compute & (base > 0)
    for (rank, lane), order in schedule.lanes.items():
        o = spread.opening.get(rank)
        if lane != _COMPUTE or o is None or not order:
            continue
        on = np.asarray(order, dtype=np.int64)
        idx = on[timed[on]]
        if idx.size:
            extra = spread.first.get(rank, 0.0) if int(idx[0]) == order[0] else 0.0
            out[idx] *= np.asarray(opening_factors(base[idx].tolist(), o, lead_extra=extra))
    return out


def _mean_times(g: "_Graph", dur: Any) -> tuple[Any, Any]:
    """Start and end of every op with the durations ``dur`` (one longest-path pass)."""
    import numpy as np

    n = dur.size
    start, end = [0.0] * n, [0.0] * n
    d = dur.tolist()
    pl, bl = g.preds.tolist(), g.bounds.tolist()
    for v in g.order:
        t = max((end[u] for u in pl[bl[v]:bl[v + 1]]), default=0.0)
        start[v], end[v] = t, t + d[v]
    return np.asarray(start), np.asarray(end)


_COMPUTE = "compute"
#: Most simulate -> duty -> rescale passes (they stop once no rank's duty moves by 1e-4), as pptl tune.
_DUTY_PASSES = 8


def _at_plan_duty(schedule: Schedule, costs: Costs | None, spread: Spread) -> tuple[Costs, dict[int, float]]:
    """``costs`` (measured at the run's duty) with each rank's compute scaled to the plan's duty:
    ``(max(u_plan, u_min) / u_run) ** alpha``, iterated to a fixed point (the duty depends on the
    timing), where ``u_min`` is the run's least busy rank's duty. A straggler's factor slows its
    rank's lane but is no work: its holds count as idle. Also rank -> ``log(max(u_plan, u_min) /
    u_run)`` at the fixed point, what a sample's own alpha multiplies (``Spread.duty_range``).

    Raises:
        InputError: no measured duty to start from (the spread was not measured).
    """
    from dataclasses import replace

    from pptl.simulate import simulate

    if not spread.duty:
        raise InputError("--duty-exponent: needs --from a measured run (the duty its op times were measured at)")
    if costs is None:
        cfg = schedule.config
        costs = cfg.costs if cfg is not None else Costs()
    slow: dict[int, float] = {}
    for s in spread.stragglers:
        slow[s.rank] = slow.get(s.rank, 1.0) * s.factor
    own = dict(costs.rank_scale)
    alpha = spread.duty_exponent
    # No faster than the run's least busy rank: a power cap binds only above some duty, and the run
    # shows the law only down to its least busy rank; below, nothing says the clock rises further.
    floor = max(1e-3, min(spread.duty.values()))
    scale: dict[int, float] = {}
    duty: dict[int, float] = {}
    for _ in range(_DUTY_PASSES):
        rs = {r: own.get(r, 1.0) * scale.get(r, 1.0) * slow.get(r, 1.0)
              for r in set(own) | set(scale) | set(slow)}
        sim = simulate(schedule, replace(costs, rank_scale=rs))
        if sim.makespan <= 0:
            break
        new = {m.rank: min(1.0, m.busy / slow.get(m.rank, 1.0) / sim.makespan) for m in sim.ranks}
        done = bool(duty) and max(abs(new[r] - duty.get(r, 0.0)) for r in new) < 1e-4
        duty = new
        scale = {r: (max(u, floor) / spread.duty[r]) ** alpha for r, u in duty.items()
                 if spread.duty.get(r, 0.0) > 0}
        if done:
            break
    merged = {r: own.get(r, 1.0) * scale.get(r, 1.0) for r in set(own) | set(scale)}
    moved = {r: math.log(max(u, floor) / spread.duty[r]) for r, u in duty.items() if spread.duty.get(r, 0.0) > 0}
    return replace(costs, rank_scale=merged), moved


@dataclass(frozen=True)
class _OpColumns:
    rank: Any
    stage: Any
    mb: Any
    pair_mb: Any
    """The micro-batch of an overlapped FB's B half (-1 for every other op)."""
    compute: Any
    kind: list[str]
    pp: int
    kind_arr: Any
    """``kind`` as an array (for masks)."""

    @staticmethod
    def of(schedule: Schedule) -> "_OpColumns":
        import numpy as np

        from pptl.optable import table_of

        t = table_of(schedule)
        compute = np.isin(t.lane, [k for k, name in enumerate(t.lane_names) if name == "compute"])
        pp = max(schedule.pp, int(t.rank.max()) + 1 if t.n else 0)
        kinds = t.strings("kind")
        pair_mb = np.where(t.has_pair, t.pair[:, 1], -1)
        return _OpColumns(t.rank, t.stage, t.mb, pair_mb, compute, kinds, pp, np.asarray(kinds, dtype=object))


class _Draw:
    """The durations of one block of ops (in walk order), all samples at once."""

    def __init__(self, base: Any, gid: Any, tables: Any, step: Any, spread: Spread, scale: Any, add: Any,
                 compute: Any, rng: Any, samples: int, duty_log: Any = None, dalpha: Any = None) -> None:
        self.base, self.gid, self.tables, self.step = base, gid, tables, step
        self.spread, self.scale, self.add, self.compute = spread, scale, add, compute
        self.rng, self.samples = rng, samples
        self.duty_log, self.dalpha = duty_log, dalpha
        """(ops,) log of each op's duty move, and (samples,) each sample's alpha minus the one the
        mean durations were scaled with: the op's factor is ``exp(duty_log * dalpha)``."""

    @staticmethod
    def of(schedule: Schedule, ops: _OpColumns, base: Any, spread: Spread, samples: int, seed: int,
           moved: Mapping[int, float] | None = None, *, name: str = "") -> "_Draw":
        import numpy as np

        n = base.size
        plan = f"the plan {name} ({schedule.family})" if name else f"the plan ({schedule.family})"
        if spread.measured and spread.pp and spread.pp != ops.pp:
            raise InputError(f"{spread.source}: the run had {counted(spread.pp, 'rank')}, {plan} "
                             f"{ops.pp}: measure a run with the plan's ranks")
        gid = np.full(n, -1, dtype=np.int64)
        tables: list[tuple[float, ...]] = []
        if spread.measured:
            index: dict[int, int] = {}
            for i in np.flatnonzero(ops.compute & (base > 0)).tolist():
                q = spread.factor_for(int(ops.stage[i]), int(ops.rank[i]), ops.kind[i])
                if q is None:
                    raise InputError(f"{spread.source}: the run has no {ops.kind[i]} on stage {int(ops.stage[i])} "
                                     f"or rank {int(ops.rank[i])}, which {plan} runs: it was "
                                     f"measured on another plan; measure one with the plan's stages and kinds")
                gid[i] = index.setdefault(id(q), len(tables))
                if gid[i] == len(tables):
                    tables.append(q.values)
        scale = np.ones(n)
        add = np.zeros(n)
        where = name or "the plan"
        mbs = ops.mb[ops.compute & (ops.mb >= 0)]
        last_mb = int(mbs.max()) if mbs.size else -1
        for s in spread.stragglers:
            if s.rank >= ops.pp:
                raise InputError(f"--straggler: rank {s.rank} is not in {where} (ranks 0-{ops.pp - 1})")
            if s.mb is not None and s.mb > last_mb:
                # A hiccup that hits no op would leave the plan as planned and say nothing.
                each = f" in each of its {schedule.directions} directions" if schedule.directions > 1 else ""
                held = f"micro-batches 0-{last_mb}{each}" if last_mb >= 0 else "no micro-batches"
                raise InputError(f"--straggler: micro-batch {s.mb} is not in {where} ({held})")
            rows = ops.compute & (ops.rank == s.rank)
            scale[rows] *= s.factor
            if s.delay:
                # an FB computes two micro-batches: a hiccup in either delays it, once
                on = rows & ((ops.mb == s.mb) | (ops.pair_mb == s.mb)) if s.mb is not None else rows
                add[on] += delay_in(s, spread.units or _units(schedule), name=name)
        if spread.first:
            for (rank, lane), order in schedule.lanes.items():
                if lane == _COMPUTE and order and rank in spread.first:
                    add[order[0]] += spread.first[rank]
        rng = np.random.default_rng(seed)
        step = None
        if spread.step is not None:
            step = _fine([spread.step.values])[rng.integers(0, _FINE, samples)]
        duty_log = dalpha = None
        rg = spread.duty_range
        if spread.duty_exponent > 0 and rg is not None and rg[1] > rg[0]:
            # Drawn after the step factor, so a spread without a range draws every other number as before.
            dalpha = rng.uniform(rg[0], rg[1], samples) - spread.duty_exponent
            by_rank = np.zeros(ops.pp)
            for r, v in (moved or {}).items():
                if 0 <= r < ops.pp:
                    by_rank[r] = v
            by_stage = np.zeros(int(ops.stage.max()) + 2 if ops.stage.size else 1)
            for st, v in spread.duty_moves.items():
                if 0 <= st < by_stage.size - 1:
                    by_stage[st] = v
            duty_log = np.where(ops.compute, by_rank[ops.rank] + by_stage[ops.stage], 0.0)
            if not duty_log.any():
                duty_log = dalpha = None
        return _Draw(base, gid, _fine(tables), step, spread, scale, add, ops.compute, rng, samples, duty_log, dalpha)

    def block(self, rows: Any) -> Any:
        """(len(rows), samples) durations of the ops ``rows``."""
        import numpy as np

        s = self.samples
        col = (self.base[rows] * self.scale[rows])[:, None]
        d = np.empty((rows.size, s))
        d[:] = col
        g = self.gid[rows]
        drawn = np.flatnonzero(g >= 0)
        if drawn.size:
            pick = self.rng.integers(0, _FINE, (drawn.size, s), dtype=np.int32)
            pick += (g[drawn] * _FINE).astype(np.int32)[:, None]
            f = self.tables[pick]
            f *= col[drawn] if self.step is None else col[drawn] * self.step[None, :]
            d[drawn] = f
        if self.dalpha is not None:
            lg = self.duty_log[rows]
            on = np.flatnonzero(lg)
            if on.size:
                d[on] *= np.exp(lg[on][:, None] * self.dalpha[None, :])
        if self.spread.jitter is not None and self.spread.jitter.sd > 0:
            timed = np.flatnonzero(d[:, 0] > 0)  # an op of no time stays so (a RECV: its SEND carries it)
            z = self.rng.standard_normal((timed.size, s))
            d[timed] *= np.maximum(0.0, 1.0 + self.spread.jitter.sd * z)
        d += self.add[rows][:, None]
        return d

    def offsets(self) -> Any:
        import numpy as np

        off = self.spread.offset
        if not off:
            return np.zeros(self.samples)
        return np.asarray(off, dtype=np.float64)[self.rng.integers(0, len(off), self.samples)]


def _fine(tables: Sequence[Sequence[float]]) -> Any:
    """The quantile tables read at :data:`_FINE` midpoints each, one after the other (flat)."""
    import numpy as np

    grid = np.linspace(0.0, 1.0, QUANTILE_POINTS)
    u = (np.arange(_FINE) + 0.5) / _FINE
    return np.concatenate([np.interp(u, grid, t) for t in tables]) if tables else np.zeros(0)


def _units(schedule: Schedule) -> str:
    return str(schedule.meta.get("units") or "unit")


@dataclass(frozen=True)
class _Graph:
    """The DAG in walk order, predecessors per op (CSR), and where each op's ends live."""

    order: list[int]
    preds: Any
    """Predecessors of every op, op by op (in the order the simulator lists its edges)."""
    bounds: Any
    npred: Any
    row: Any
    """Per op: its row among the ops with exactly 2 predecessors (a "waited for the second"
    flag), or among those with more (the index of the one waited for), else -1."""
    n_two: int
    n_more: int
    slot: list[int]
    pred_slots: list[list[int]]
    n_slots: int
    sinks: list[bool]

    @staticmethod
    def of(schedule: Schedule) -> "_Graph":
        import numpy as np

        from pptl.dag import kahn_order, successors

        succ = successors(schedule)
        order = kahn_order(succ)
        if order is None:
            raise InvalidScheduleError("the schedule deadlocks (its DAG has a cycle); run 'pptl check' to see the cycle")
        n = schedule.n_ops
        by = np.argsort(succ.edge_v, kind="stable")
        preds = np.asarray(succ.edge_u, dtype=np.int64)[by]
        npred = np.bincount(np.asarray(succ.edge_v, dtype=np.int64), minlength=n)
        bounds = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(npred, out=bounds[1:])
        two, more = npred == 2, npred > 2
        row = np.full(n, -1, dtype=np.int64)
        row[two] = np.arange(int(two.sum()))
        row[more] = np.arange(int(more.sum()))
        # Liveness: an op's slot is free once the last of its successors (in walk order) has run.
        pos = np.empty(n, dtype=np.int64)
        pos[np.asarray(order, dtype=np.int64)] = np.arange(n)
        last = np.full(n, -1, dtype=np.int64)
        if succ.edge_u.size:
            np.maximum.at(last, np.asarray(succ.edge_u, dtype=np.int64), pos[np.asarray(succ.edge_v, dtype=np.int64)])
        last_l = last.tolist()
        pl = preds.tolist()
        bl = bounds.tolist()
        slot = [0] * n
        pred_slots: list[list[int]] = [[]] * n
        free: list[int] = []
        n_slots = 0
        freed_at: dict[int, list[int]] = {}
        for k, v in enumerate(order):
            s = free.pop() if free else n_slots
            if s == n_slots:
                n_slots += 1
            slot[v] = s
            ps = pl[bl[v]:bl[v + 1]]
            pred_slots[v] = [slot[u] for u in ps]
            for u in freed_at.pop(k, ()):
                free.append(slot[u])
            if last_l[v] < 0:
                free.append(s)  # a sink: read once, when the op ends
            else:
                freed_at.setdefault(last_l[v], []).append(v)
        return _Graph(order, preds, bounds, npred, row, int(two.sum()), int(more.sum()), slot, pred_slots, n_slots,
                      [x < 0 for x in last_l])


def _walk(g: _Graph, draw: _Draw, ops: _OpColumns, samples: int) -> tuple[Any, Any, Any, Any, Any]:
    """(span, op ending last, "waited for" records of the ops with 2 and with more
    predecessors, busy per rank) of every sample."""
    import numpy as np

    n = len(g.order)
    buf = np.zeros((max(1, g.n_slots), samples))
    wide = int(g.npred.max()) if n else 0
    # bool for the common case: a ufunc writing bool into uint8 casts through a buffer (twice the time)
    via2 = np.zeros((g.n_two, samples), dtype=bool)
    viam = np.zeros((g.n_more, samples), dtype=np.uint8 if wide <= 255 else np.int64)
    span = np.zeros(samples)
    last = np.full(samples, -1, dtype=np.int64)
    busy = np.zeros((ops.pp, samples))
    order = np.asarray(g.order, dtype=np.int64)
    maximum, add, greater, putmask = np.maximum, np.add, np.greater, np.putmask
    slot, pslots, row, sinks = g.slot, g.pred_slots, g.row.tolist(), g.sinks
    for lo in range(0, n, _CHUNK):
        rows = order[lo:lo + _CHUNK]
        d = draw.block(rows)
        on = np.flatnonzero(draw.compute[rows])
        if on.size:  # compute time per rank of this block (no matrix product: BLAS threads fight the walk)
            r = ops.rank[rows[on]]
            by = np.argsort(r, kind="stable")
            cut = np.flatnonzero(np.diff(r[by])) + 1
            sums = np.add.reduceat(d[on[by]], np.concatenate(([0], cut)), axis=0)
            busy[r[by][np.concatenate(([0], cut))]] += sums
        for j, v in enumerate(rows.tolist()):
            out = buf[slot[v]]
            ps = pslots[v]
            k = len(ps)
            if k == 0:
                out[:] = d[j]
            elif k == 1:
                add(buf[ps[0]], d[j], out=out)
            elif k == 2:
                a, b = buf[ps[0]], buf[ps[1]]
                greater(b, a, out=via2[row[v]])
                maximum(a, b, out=out)
                out += d[j]
            else:  # pairwise: argmax over a stack of rows is a strided reduction, 10x slower
                w = viam[row[v]]
                out[:] = buf[ps[0]]
                for t in range(1, k):
                    b = buf[ps[t]]
                    putmask(w, greater(b, out), t)
                    maximum(out, b, out=out)
                out += d[j]
            if sinks[v]:
                later = out > span
                span[later] = out[later]
                last[later] = v
    return span, last, via2, viam, busy


def _criticality(g: _Graph, via2: Any, viam: Any, last: Any, samples: int) -> Any:
    """Share of samples whose critical path holds each op: walk every sample back at once from
    its last op, each op to the predecessor it waited for, until an op with none."""
    import numpy as np

    n = len(g.order)
    stop = n  # a sentinel op with no predecessors, where finished samples wait
    npred = np.append(g.npred, 0)
    bounds = np.append(g.bounds[:-1], g.bounds[-1])
    row = np.append(g.row, -1)
    preds = np.append(g.preds, stop)
    cur = np.where(last >= 0, last, stop)
    ar = np.arange(samples)
    counts = np.zeros(n + 1, dtype=np.int64)
    seen: list[Any] = []
    while True:
        seen.append(cur)
        if len(seen) >= 256:
            counts += np.bincount(np.concatenate(seen), minlength=n + 1)
            seen = []
        k = npred[cur]
        if not k.any():
            break
        r = np.maximum(row[cur], 0)
        pick = np.zeros(samples, dtype=np.int64)
        for rec, on in ((via2, k == 2), (viam, k > 2)):
            if rec.size and on.any():
                pick[on] = rec[r[on], ar[on]]
        cur = np.where(k > 0, preds[np.minimum(bounds[cur] + pick, preds.size - 1)], stop)
    if seen:
        counts += np.bincount(np.concatenate(seen), minlength=n + 1)
    return counts[:n] / samples
