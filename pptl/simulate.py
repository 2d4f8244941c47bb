"""The simulator: start and end of every op from the cost model, and the metrics of the plan.

Each op starts when its lane predecessor and every op it needs have ended (the longest path over
the DAG); lanes are serial, lanes of one rank run concurrently. Memory is counted per rank from
the timed events: F allocates at its start, B (or I and W, by the declared split) frees at its end.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from pptl.columns import KIND_CODE, LANE_CODE, Columns, table_if_arrays
from pptl.config import Costs
from pptl.dag import Adjacency, Successors, adjacency, kahn_order, successors, topological_order
from pptl.errors import InputError, InvalidScheduleError
from pptl.ir import Op, Schedule
from pptl.schedules._moe_meta import MoEMeta
from pptl.timeline import Event, RankStats, Timeline, TimelineMeta, bubble_fraction

if TYPE_CHECKING:
    import networkx as nx

    from pptl.optable import OpTable

__all__ = ["Simulation", "RankMetrics", "durations", "simulate", "memory_events", "memory_timeline", "peak_memory",
           "held_spans", "op_events"]


def op_at(schedule: Schedule, i: int) -> Op:
    """Op ``i``, without building the others when the schedule holds a table and no ops yet."""
    t = schedule.built_table()
    if t is not None and not schedule.has_ops():
        return t.op(i)
    return schedule.ops[i]


@dataclass(frozen=True, slots=True)
class RankMetrics(RankStats):
    """A rank's compute-lane :class:`~pptl.timeline.RankStats` in the plan, with its peak memory."""

    peak_activation: float
    """Peak activation memory (units of ``Config.activation``)."""


@dataclass
class Simulation:
    schedule: Schedule
    start: list[float]
    end: list[float]
    makespan: float
    ranks: list[RankMetrics]
    critical_path: list[int]
    """Op indices on one longest path, first to last."""
    peak_time: dict[int, float] = field(default_factory=dict)
    """Per rank: when its peak activation is first reached."""

    def metrics(self) -> dict[str, Any]:
        """JSON-ready metrics (the contract of ``pptl plan --output json``)."""
        s = self.schedule
        return {
            "makespan": self.makespan,
            "ops": s.n_ops,
            "ranks": [
                {"rank": r.rank, "busy": r.busy, "idle": r.idle, "bubble_fraction": r.bubble_fraction,
                 "peak_activation": r.peak_activation}
                for r in self.ranks
            ],
            "bubble_fraction": bubble_fraction(self.ranks, self.makespan),
            "peak_activation": max((r.peak_activation for r in self.ranks), default=0.0),
            "critical_path": [op_at(s, i).id for i in self.critical_path],
        }

    def timeline(self, *, with_waits: bool = True) -> Timeline:
        """The planned timeline (one :class:`Event` per op)."""
        return Timeline(op_events(self.schedule, self.start, self.end, with_waits=with_waits), self.timeline_meta())

    def timeline_meta(self) -> TimelineMeta:
        s = self.schedule
        return TimelineMeta(source="planned", units="unit" if not s.meta.get("units") else s.meta["units"],
                            family=s.family, pp=s.pp,
                            vpp=s.chunks_per_rank,
                            microbatches=s.microbatches, title=s.meta.get("title", ""),
                            extra={"makespan": self.makespan})


def op_events(schedule: Schedule, start: Sequence[float], end: Sequence[float], *,
              with_waits: bool = True) -> list[Event]:
    """One :class:`Event` per op (indexed like ``schedule.ops``), naming the ops it waits on."""
    waits: dict[int, list[int]] = {}
    if with_waits:
        for u, v in schedule.deps:
            waits.setdefault(v, []).append(u)
    ids = [op.id for op in schedule.ops]
    none: tuple[str, ...] = ()
    return [
        Event(op=ids[i], rank=op.rank, lane=op.lane, start=start[i], end=end[i], kind=op.kind,
              stage=op.stage, mb=op.mb, direction=op.direction, chunk=op.chunk, pair=op.pair,
              label=op.label, sub=op.sub, peer=op.peer,
              waits_on=tuple(ids[u] for u in waits[i]) if i in waits else none, flow=op.flow, bucket=op.bucket,
              half=op.half)
        for i, op in enumerate(schedule.ops)
    ]


_COPIES = frozenset(("OFFLOAD", "ONLOAD", "H2D", "COPY"))
"""Copy kinds: with no cost of their own they take ``payload / Costs.copy_bandwidth``."""


def durations(schedule: Schedule, costs: Costs) -> list[float]:
    """Duration of every op. Raises InvalidScheduleError for a cost key with no value."""
    table = table_if_arrays(schedule)
    if table is not None:
        return _durations_table(table, costs).tolist()  # type: ignore[no-any-return]
    out: list[float] = []
    # The cost table's answer per (cost key, stage), looked up once: plans run to 100k+ ops. A copy
    # with no cost of its own is timed from its payload, so only the table's answer is cached,
    # never a duration derived from one op's bytes.
    cache: dict[tuple[str, int], float | None] = {}
    for op in schedule.ops:
        if op.kind == "SEND":
            out.append(costs.comm_time(op.payload))
            continue
        if op.kind == "RECV":
            out.append(0.0)  # the transfer is on the SEND; a RECV completes with it
            continue
        key = (op.cost_key, op.stage)
        try:
            d = cache[key]
        except KeyError:  # first op of this key and stage (few: the hits pay no exception)
            d = cache[key] = costs.lookup(op.cost_key, op.stage)
        if d is None:
            if op.payload and op.kind in _COPIES:
                d = op.payload / costs.copy_bandwidth
            else:
                raise InvalidScheduleError(f"no cost for '{op.cost_key}' (op {op.id}); set it with --cost {op.cost_key}=VALUE")
        out.append(d)

    if costs.rank_scale:
        _scale_ranks(schedule, costs.rank_scale, out)
    return out


def _durations_table(t: OpTable, costs: Costs) -> Any:
    """:func:`durations` on a table, with the same floats and the same error: the cost table is
    asked once per (cost key, stage) present, a SEND's time and a copy's once per payload (in
    Python, as the loop computes them), and the answers are spread over the rows."""
    import numpy as np

    n = t.n
    kinds = t.kind_names
    send = _rows_of(t.kind, kinds, ("SEND",))
    comm = send | _rows_of(t.kind, kinds, ("RECV",))
    # cost key per row: the op's cost name, else its kind name; numbered over (kind, cost) codes
    nc = len(t.cost_names)
    combo = t.kind.astype(np.int64) * nc + t.cost
    key_names = [t.cost_names[c % nc] or kinds[c // nc] for c in range(len(kinds) * nc)]
    pair_code, pairs = _codes(combo, t.stage)
    value = np.zeros(len(pairs))
    missing = np.zeros(len(pairs), dtype=bool)
    for p in np.flatnonzero(np.bincount(pair_code[~comm], minlength=len(pairs))).tolist():
        c, stage = pairs[p]
        d = costs.lookup(key_names[c], stage)
        if d is None:
            missing[p] = True
        else:
            value[p] = d
    out = value[pair_code] if n else np.zeros(0)
    out[comm] = 0.0  # a RECV completes with its SEND, which carries the transfer
    if send.any():
        out[send] = _per_payload(t.payload[send], costs.comm_time)
    if missing.any():
        miss = missing[pair_code] & ~comm
        copies = miss & _rows_of(t.kind, kinds, _COPIES) & (t.payload != 0)
        bad = np.flatnonzero(miss & ~copies)
        if bad.size:
            op = t.op(int(bad[0]))
            raise InvalidScheduleError(f"no cost for '{op.cost_key}' (op {op.id}); set it with --cost {op.cost_key}=VALUE")
        bw = costs.copy_bandwidth
        out[copies] = _per_payload(t.payload[copies], lambda b: b / bw)
    if costs.rank_scale:
        compute = np.flatnonzero(_rows_of(t.lane, t.lane_names, ("compute",)))
        ranks = t.rank[compute]
        for r, f in costs.rank_scale.items():
            rows = compute[ranks == r]
            out[rows] *= f
    return out


def _rows_of(codes: Any, names: tuple[str, ...], wanted: Any) -> Any:
    """Mask of the rows whose string field (``codes`` into ``names``) is one of ``wanted``."""
    import numpy as np

    hit = [k for k, name in enumerate(names) if name in wanted]
    return np.isin(codes, hit) if hit else np.zeros(codes.size, dtype=bool)


def _codes(combo: Any, stage: Any) -> tuple[Any, list[tuple[int, int]]]:
    """A code per row for its (combo, stage) and the (combo, stage) of each code."""
    import numpy as np

    n = int(combo.size)
    if not n:
        return np.zeros(0, dtype=np.int64), []
    lo = int(stage.min())
    span = int(stage.max()) - lo + 1
    total = (int(combo.max()) + 1) * span
    if total <= max(1 << 16, 4 * n):  # few stages (every plan pptl builds): one count, no sort
        flat = combo * span + (stage - lo)
        present = np.flatnonzero(np.bincount(flat, minlength=total))
        code = np.zeros(total, dtype=np.int64)
        code[present] = np.arange(present.size)
        return code[flat], [(p // span, p % span + lo) for p in present.tolist()]
    found, inverse = np.unique(np.stack([combo, stage], axis=1), axis=0, return_inverse=True)
    return inverse.reshape(-1), [(int(c), int(st)) for c, st in found.tolist()]


def _per_payload(payload: Any, time_of: Any) -> Any:
    """``time_of(payload)`` per row, called once per distinct payload (as Python floats)."""
    import numpy as np

    found, inverse = np.unique(payload, return_inverse=True)
    return np.array([time_of(p) for p in found.tolist()], dtype=np.float64)[inverse.reshape(-1)]


def _scale_ranks(schedule: Schedule, scale: Any, out: list[float]) -> None:
    """``Costs.rank_scale``: each rank's compute-lane ops at its own speed (side lanes keep theirs:
    an all-to-all or a copy is not the rank's compute)."""
    for i, op in enumerate(schedule.ops):
        if op.lane == "compute":
            f = scale.get(op.rank)
            if f is not None:
                out[i] *= f


def simulate(schedule: Schedule, costs: Costs | None = None, *, dag: nx.DiGraph | Adjacency | Successors | None = None,
             order: list[int] | None = None, activation: float | None = None,
             w_activation: float | None = None) -> Simulation:
    """Time every op of ``schedule`` and compute its metrics.

    ``dag`` and ``order`` let a caller that has them (the checker) save their cost; ``dag`` is an
    :class:`~pptl.dag.Adjacency` or a networkx graph of the same edges.

    Raises:
        InvalidScheduleError: the DAG has a cycle (run the checker for the cycle) or a cost is missing.

    Notes:
        O(ops + edges): one topological pass over the DAG.
    """
    cfg = schedule.config
    if costs is None:
        costs = cfg.costs if cfg is not None else Costs()
    if activation is None:
        activation = cfg.activation if cfg is not None else 1.0
    if w_activation is None:
        w_activation = cfg.w_activation if cfg is not None else 0.0
    n = schedule.n_ops
    table = table_if_arrays(schedule)
    # durations as an array too where the passes below run on arrays
    dur_array = _durations_table(table, costs) if table is not None else None
    dur = dur_array.tolist() if dur_array is not None else durations(schedule, costs)
    contexts = bool(costs.context or costs.beside)
    succ: Successors | None = None
    if not contexts and (isinstance(dag, Successors) or (dag is None and table is not None)):
        # Large plans: one walk over successor lists, no list of predecessors per op.
        succ = dag if isinstance(dag, Successors) else successors(schedule)
        if order is None:
            order = kahn_order(succ)
        if order is None:
            raise InvalidScheduleError(_CYCLE)
        start, end = _push_longest(order, succ, dur)
    else:
        g = dag if dag is not None and not isinstance(dag, Successors) else adjacency(schedule)
        start = [0.0] * n
        end = [0.0] * n
        via = [-1] * n
        pred = g.pred
        if order is None:
            order = topological_order(g if isinstance(g, Adjacency) else adjacency(schedule))
        if order is None:
            raise InvalidScheduleError(_CYCLE)
        _longest_path(order, pred, dur, start, end, via)
        if contexts:
            dur = _retime_in_context(schedule, costs, order, pred, dur, start, end, via)
            dur_array = None
    # On arrays only when the checker built the columns already (or the schedule was made from a
    # table): building them for these passes alone costs more than the loops (2026-11-26: 97k-op
    # interleaved plan, 97 ms against 83).
    cols = table.columns if table is not None and n else None
    times = None
    if cols is not None:
        import numpy as np

        times = (np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64))
        # max and argmax as the loops take them: the first op of the latest end
        makespan = float(times[1].max()) - float(times[0].min())
        last = int(times[1].argmax())
    else:
        makespan = max(end, default=0.0) - min(start, default=0.0)
        last = max(range(n), key=end.__getitem__) if n else -1
    if not makespan < float("inf"):  # also NaN; every renderer and writer needs finite times
        raise InputError(f"the timed schedule overflows a float (makespan {makespan}): a cost, comm.bytes or a "
                         "bandwidth is out of scale; costs up to 1e15 and bandwidths that keep bytes / bandwidth "
                         "finite work")
    if succ is not None:
        path = _critical_path(succ, start, end, last)
    else:
        path = []
        v = last
        while v >= 0:
            path.append(v)
            v = via[v]
        path.reverse()
    peaks, peak_at = _peak_memory(schedule, start, end, activation, w_activation, times=times)
    busy = _busy_arrays(schedule, cols, dur if dur_array is None else dur_array) if cols is not None else None
    if busy is None:
        busy = {r: 0.0 for r in range(schedule.pp)}
        for i, op in enumerate(schedule.ops):
            if op.lane == "compute":
                busy[op.rank] = busy.get(op.rank, 0.0) + dur[i]
    ranks = [
        RankMetrics.of(r, b, makespan, peak_activation=peaks.get(r, 0.0))
        for r, b in sorted(busy.items())
    ]
    return Simulation(schedule, start, end, makespan, ranks, path, peak_at)


def _busy_arrays(schedule: Schedule, cols: Columns, dur: list[float]) -> dict[int, float] | None:
    """Compute-lane time per rank on arrays (None for ranks below 0: the plain loop takes those).
    ``bincount`` adds each rank's durations in op order, as the loop does (same floats)."""
    import numpy as np

    comp = cols.lane == LANE_CODE["compute"]
    ranks = cols.rank[comp]
    if ranks.size and int(ranks.min()) < 0:
        return None
    sums = np.bincount(ranks, weights=np.asarray(dur, dtype=np.float64)[comp], minlength=schedule.pp)
    busy = dict(enumerate(sums.tolist()))
    seen = np.zeros(sums.size, dtype=bool)
    seen[ranks] = True
    seen[:schedule.pp] = True
    return {r: busy[r] for r in np.flatnonzero(seen).tolist()}


_CYCLE = "the schedule deadlocks (its DAG has a cycle); run 'pptl check' to see the cycle"


def _push_longest(order: list[int], succ: Successors, dur: list[float]) -> tuple[list[float], list[float]]:
    """:func:`_longest_path` pushed along successors: each op, once its own end is known, raises
    the start of the ops after it. The same floats (a max is a max in any order)."""
    n = len(dur)
    start = [0.0] * n
    end = [0.0] * n
    bounds, targets = succ.bounds, succ.targets
    for u in order:
        e = start[u] + dur[u]
        end[u] = e
        for v in targets[bounds[u]:bounds[u + 1]]:
            if e > start[v]:
                start[v] = e
    return start, end


def _critical_path(succ: Successors, start: list[float], end: list[float], last: int) -> list[int]:
    """The longest path into ``last``, as :func:`_longest_path`'s ``via`` walks it: from each op
    to its first predecessor (in edge order) that ends when the op starts (none when it starts
    at 0). Only the ops on the path look their predecessors up."""
    import numpy as np

    if last < 0:
        return []
    n = len(start)
    by = np.argsort(succ.edge_v, kind="stable")  # each op's predecessors in edge order
    preds = succ.edge_u[by]
    bounds = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(succ.edge_v, minlength=n), out=bounds[1:])
    path: list[int] = []
    v = last
    while v >= 0:
        path.append(v)
        t = start[v]
        nxt = -1
        if t > 0.0:
            for u in preds[bounds[v]:bounds[v + 1]].tolist():
                if end[u] == t:
                    nxt = u
                    break
        v = nxt
    path.reverse()
    return path


def _longest_path(order: list[int], pred: Any, dur: list[float], start: list[float], end: list[float],
                  via: list[int]) -> None:
    for v in order:
        t = 0.0
        best = -1
        for u in pred[v]:
            e = end[u]
            if e > t:
                t, best = e, u
        start[v] = t
        end[v] = t + dur[v]
        via[v] = best


def _retime_in_context(schedule: Schedule, costs: Costs, order: list[int], pred: Any, dur: list[float],
                       start: list[float], end: list[float], via: list[int]) -> list[float]:
    """Context hook (:mod:`pptl.contexts`): ops whose cost key has durations per context (alone, or
    beside compute of a kind) progress at the rate of the context they are in along their timed
    span, and so do compute ops with a duration beside a side-lane op (``Costs.beside``);
    re-timed until the durations settle. Family-agnostic: read off the lanes of each rank."""
    from pptl.contexts import BESIDE_PASSES, CONTEXT_PASSES, Span, compute_context_durations, context_durations, is_side

    ops = schedule.ops
    keys = [op.cost_key for op in ops]
    base = dur
    beside: list[tuple[int, float]] = []
    issued: list[tuple[int, list[int]]] = []
    if costs.beside:
        for i, op in enumerate(ops):
            if op.lane == "compute":
                b = costs.beside.get(op.stage, {}).get(op.cost_key)
                if b is not None:
                    beside.append((i, b))
            elif is_side(op.lane, op.kind):
                issued.append((i, [u for u in pred[i] if ops[u].rank == op.rank]))
    memo: list[float | None] = [None] * len(ops)
    swing = [0.0] * len(ops) if beside else []
    for _ in range(BESIDE_PASSES if beside else CONTEXT_PASSES):
        spans = [Span(op.rank, op.lane, op.kind, start[i], end[i]) for i, op in enumerate(ops)]
        new = context_durations(spans, keys, base, costs.context, memo) if costs.context else list(base)
        if beside:
            # both from the previous pass's spans: a compute op's rate depends on the side-lane
            # ops beside it and theirs on the compute beside them. A side-lane op holds its GPU
            # from when its own rank's inputs are ready: a collective's kernel, issued then, waits
            # there for its peers (the plan starts it when all are ready), as measured.
            held = list(spans)
            for i, us in issued:
                a = max((end[u] for u in us), default=start[i])
                held[i] = Span(ops[i].rank, ops[i].lane, ops[i].kind, min(a, start[i]), end[i])
            paced = compute_context_durations(held, base, beside, memo, swing)
            for i, _ in beside:
                new[i] = paced[i]
        if new == dur:
            break
        dur = new
        _longest_path(order, pred, dur, start, end, via)
    return dur


def memory_events(op: Op, activation: float, w_activation: float) -> tuple[float, float]:
    """(allocated at start, freed at end) by one op, in activation units (a negative free is an
    allocation at the end: an ONLOAD's data is on the GPU once the copy ends)."""
    k = op.kind
    if k == "F":
        return activation, 0.0
    if k == "B":
        return 0.0, activation
    if k == "I":
        return 0.0, activation * (1.0 - w_activation)
    if k == "W":
        return 0.0, activation * w_activation
    if k == "FB":
        return activation, activation
    # Offloaded activations are off the GPU from the end of their OFFLOAD to the end of their
    # ONLOAD; for these two kinds ``payload`` is in the unit of ``activation``.
    if k == "OFFLOAD":
        return 0.0, op.payload
    if k == "ONLOAD":
        return 0.0, -op.payload
    return 0.0, 0.0


_TRAINING_KINDS = frozenset({"F", "B", "I", "W", "FB"})


def memory_timeline(schedule: Schedule, start: list[float], end: list[float], activation: float,
                    w_activation: float, skip: frozenset[str] = frozenset()
                    ) -> dict[int, list[tuple[float, int, float, int]]]:
    """Per rank, the memory events (time, 0 free / 1 allocate, delta, op index), sorted.

    At equal times frees come before allocations (an op that ends as the next begins has freed).
    Ops of the kinds in ``skip`` are left out (e.g. the copies, for the peak without offloading).
    """
    per_rank: dict[int, list[tuple[float, int, float, int]]] = {}
    # A family whose held spans carry the saved activations layer by layer (meta['held_saved']):
    # its training-role markers hold nothing, or the activations would count twice.
    saved = MoEMeta.of(schedule).held_saved is True
    for i, op in enumerate(schedule.ops):
        if op.kind in skip or (saved and op.kind in _TRAINING_KINDS):
            continue
        alloc, free = memory_events(op, activation, w_activation)
        if alloc:
            per_rank.setdefault(op.rank, []).append((start[i], 1, alloc, i))
        if free:
            per_rank.setdefault(op.rank, []).append((end[i], 0, -free, i))
    for a, ea, b, eb, amount in held_spans(schedule):
        # memory a family declares between two ops' edges (e.g. an MoE layer's working tensors)
        if schedule.ops[a].kind in skip or schedule.ops[b].kind in skip:
            continue
        rank = schedule.ops[a].rank
        per_rank.setdefault(rank, []).append(((end if ea else start)[a], 1, amount, a))
        per_rank.setdefault(rank, []).append(((end if eb else start)[b], 0, -amount, b))
    for evs in per_rank.values():
        evs.sort()
    return per_rank


def held_spans(schedule: Schedule) -> list[tuple[int, int, int, int, float]]:
    """``meta['held']``: ``[op a, 0 start | 1 end, op b, 0 | 1, amount]`` — ``amount`` activation
    units held on op a's rank from that edge of a to that edge of b. Plan files are input from
    elsewhere: a malformed entry is an error naming it."""
    held = MoEMeta.of(schedule).held
    if not held:
        return []
    n = len(schedule.ops)
    out: list[tuple[int, int, int, int, float]] = []
    for k, (a, ea, b, eb, amount) in enumerate(held):
        if not (a < n and b < n and schedule.ops[a].rank == schedule.ops[b].rank):
            raise InputError(f"field 'meta.held[{k}]': got {[a, ea, b, eb, amount]}, expected [op index, 0|1, op "
                             "index on the same rank, 0|1, amount >= 0]")
        out.append((a, ea, b, eb, float(amount)))
    return out


def peak_memory(schedule: Schedule, start: list[float], end: list[float], activation: float,
                w_activation: float, skip: frozenset[str] = frozenset()
                ) -> tuple[dict[int, float], dict[int, float]]:
    """Peak activation per rank and when it is first reached.

    Counts the training kinds and activation offloading (OFFLOAD frees its payload at its end,
    ONLOAD brings it back at its end; see :func:`memory_events`).
    """
    return _peak_memory(schedule, start, end, activation, w_activation, skip)


def _peak_memory(schedule: Schedule, start: list[float], end: list[float], activation: float, w_activation: float,
                 skip: frozenset[str] = frozenset(), times: tuple[Any, Any] | None = None
                 ) -> tuple[dict[int, float], dict[int, float]]:
    """:func:`peak_memory`; ``times``: ``start`` and ``end`` as float64 arrays, when the caller has them."""
    table = table_if_arrays(schedule) if not skip else None
    if table is not None and not held_spans(schedule) and MoEMeta.of(schedule).held_saved is not True:
        at, till = times if times is not None else (start, end)
        return _peaks_arrays(schedule, table.columns, at, till, activation, w_activation, table)
    peaks: dict[int, float] = {}
    when: dict[int, float] = {}
    for r, evs in memory_timeline(schedule, start, end, activation, w_activation, skip).items():
        cur = best = 0.0
        at = 0.0
        for t, _, delta, _ in evs:
            cur += delta
            if cur > best + 1e-12:
                best, at = cur, t
        peaks[r] = best
        when[r] = at
    return peaks, when


def _peaks_arrays(schedule: Schedule, cols: Columns, start: Any, end: Any, activation: float,
                  w_activation: float, table: OpTable | None = None) -> tuple[dict[int, float], dict[int, float]]:
    """:func:`peak_memory` (no skipped kinds, no held spans) on arrays, with the same floats: the
    events sorted as :func:`memory_timeline` sorts them, each rank's running sum added in order
    (``cumsum`` is sequential), and the peak's tolerance applied where the running sum reaches a
    new high (the only places the loop can move its peak)."""
    import numpy as np

    n = schedule.n_ops
    k = cols.kind
    alloc = np.zeros(n)
    free = np.zeros(n)
    code = KIND_CODE
    alloc[(k == code["F"]) | (k == code["FB"])] = activation
    free[(k == code["B"]) | (k == code["FB"])] = activation
    free[k == code["I"]] = activation * (1.0 - w_activation)
    free[k == code["W"]] = activation * w_activation
    if table is not None:  # of the family kinds, only the copies of activations count (memory_events)
        offload = _rows_of(table.kind, table.kind_names, ("OFFLOAD",))
        free[offload] = table.payload[offload]
        onload = _rows_of(table.kind, table.kind_names, ("ONLOAD",))
        free[onload] = -table.payload[onload]
    else:
        for i in np.flatnonzero(k == 0).tolist():  # family kinds (OFFLOAD, ONLOAD...): as the loop says
            alloc[i], free[i] = memory_events(schedule.ops[i], activation, w_activation)
    a = np.flatnonzero(alloc)
    f = np.flatnonzero(free)
    idx = np.concatenate([a, f])
    t = np.concatenate([np.asarray(start, dtype=np.float64)[a], np.asarray(end, dtype=np.float64)[f]])
    flag = np.concatenate([np.ones(a.size, dtype=np.int8), np.zeros(f.size, dtype=np.int8)])
    delta = np.concatenate([alloc[a], -free[f]])
    rank = cols.rank[idx]
    o = np.lexsort((idx, delta, flag, t, rank))
    t, delta, rank, idx = t[o], delta[o], rank[o], idx[o]
    bounds = np.flatnonzero(np.diff(rank)) + 1
    starts = [0, *bounds.tolist()]
    stops = [*bounds.tolist(), int(rank.size)]
    found: list[tuple[int, int, float, float]] = []
    for lo, hi in zip(starts, stops):
        if lo == hi:
            continue
        cur = np.cumsum(delta[lo:hi])
        high = np.maximum(np.maximum.accumulate(cur), 0.0)
        new = np.flatnonzero(cur > np.concatenate(([0.0], high[:-1])))
        best = at = 0.0
        for j in new.tolist():
            c = float(cur[j])
            if c > best + 1e-12:
                best, at = c, float(t[lo + j])
        found.append((int(idx[lo:hi].min()), int(rank[lo]), best, at))
    found.sort()  # ranks in the order their first event's op comes, as the loop's dict fills
    return {r: p for _, r, p, _ in found}, {r: w for _, r, _, w in found}
