"""``pptl explain``: where each rank's compute idle time went, in a measured timeline (pure).

Each rank's idle time is the step's makespan minus the time its compute lane was busy; it is the
sum of the gaps on that lane (before the first op, between ops, after the last). Every gap ends
when an op X starts (or the step ends) and is cut, in time order, into:

- waiting for X's input from another rank, up to the moment the producing rank had it ready
  (its producer ended, and its SEND was posted when the trace shows one). That wait is split
  against two replays of the same order with zero communication and zero host delay:
  **bubble** (a): at most the gap the replay with each kind's mean duration leaves before X
  (the schedule's own bubble); **imbalance** (e): at most what the replay with the measured
  durations adds to it (uneven stages); **late input** (b): the rest: the input came later
  than the schedule at these durations implies; ``late`` names the op up the chain that made it
  late;
- **transfer** (c): from then until the data was on this rank (the RECV's end; without RECV
  events, zero: the wait ends at the producer); and, of what is left, the time this rank's own
  SEND/RECV ran (a send on the compute stream, a stream waiting for an NCCL kernel);
- **host** (d): the rest: X's inputs were there and the GPU was free, yet X had not started;
  in profiler traces X's kernel launch time says when the launching thread got to it.

The gap after a rank's last op is split by the same replays (bubble, imbalance, then late: the
other ranks ran later than the replay). So the five parts add up to the measured idle exactly.
The critical path is walked back from the op that ends last: at each op, the later of its lane
predecessor's end and its inputs' arrival.
"""
from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from pptl.deps import training_deps
from pptl.errors import InputError
from pptl.formats._quote import counted
from pptl.intervals import union
from pptl.ir import Op, Schedule
from pptl.timeline import Event, Timeline

__all__ = ["PARTS", "PART_LABELS", "RankSplit", "LateInput", "PathStep", "Explanation", "explain", "explanation_lines",
           "for_display"]

#: The parts of idle time, in the order tables and figures show them.
PARTS = ("bubble", "late_input", "transfer", "host", "imbalance")
PART_LABELS = {"bubble": "schedule bubble", "late_input": "late input", "transfer": "transfer",
               "host": "host gap", "imbalance": "imbalance"}
_MAX_CHAIN = 10_000


@dataclass(frozen=True, slots=True)
class RankSplit:
    """One rank's compute idle time and its parts (in the timeline's unit)."""

    rank: int
    busy: float
    idle: float
    bubble: float
    late_input: float
    transfer: float
    host: float
    imbalance: float

    def parts(self) -> dict[str, float]:
        return {p: getattr(self, p) for p in PARTS}

    @property
    def parts_sum(self) -> float:
        return sum(self.parts().values())


@dataclass(frozen=True, slots=True)
class LateInput:
    """An op that waited for an input longer than the schedule implies, and why."""

    op: str
    rank: int
    waited: float
    producer: str
    root: str
    """The op up the chain whose delay made the input late."""
    reason: str
    delay: float = 0.0
    """How long that delay was."""


@dataclass(frozen=True, slots=True)
class PathStep:
    op: str
    rank: int
    kind: str
    start: float
    end: float
    via: str
    """How the previous step of the path held this one up: "lane", "data", or "" for the first."""
    wait: float
    """Time between the previous step's end (or the data's arrival) and this op's start."""


@dataclass
class Explanation:
    units: str
    makespan: float
    ranks: list[RankSplit]
    late: list[LateInput]
    path: list[PathStep]
    notes: list[str] = field(default_factory=list)
    measurement: list[Any] = field(default_factory=list)
    """:class:`pptl.checks.Violation` per measurement error (:mod:`pptl.checks.measured`): where the
    ranks' times contradict causality, waits across ranks are not transfer (or late input) time."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "units": self.units, "makespan": self.makespan,
            "ranks": [{"rank": r.rank, "busy": r.busy, "idle": r.idle, **r.parts()} for r in self.ranks],
            "late_inputs": [{"op": x.op, "rank": x.rank, "waited": x.waited, "producer": x.producer,
                             "root": x.root, "reason": x.reason, "delay": x.delay} for x in self.late],
            "critical_path": [{"op": s.op, "rank": s.rank, "kind": s.kind, "start": s.start, "end": s.end,
                               "via": s.via, "wait": s.wait} for s in self.path],
            "notes": self.notes,
            "measurement_errors": [v.to_dict() for v in self.measurement],
        }


# ----------------------------------------------------------------------------------------------
# Inputs: ops, their facts, their times


@dataclass(frozen=True)
class _Inputs:
    """Producer links of each compute event (indices into the timeline's events)."""

    # consumer -> [(producer compute event, SEND event or -1, RECV event or -1)]
    needs: dict[int, list[tuple[int, int, int]]]


def _ops_of(events: list[Event]) -> list[Op]:
    return [Op(kind=e.kind, rank=e.rank, lane=e.lane, stage=e.stage, mb=e.mb, direction=e.direction,
               chunk=e.chunk, pair=e.pair, peer=e.peer, flow=e.flow) for e in events]


def _inputs(tl: Timeline, plan: Schedule | None) -> _Inputs:
    events = tl.events
    if plan is not None:
        index = {e.op: i for i, e in enumerate(events)}
        where = [index.get(op.id, -1) for op in plan.ops]
        deps = [(where[u], where[v]) for u, v in plan.deps if where[u] >= 0 and where[v] >= 0]
    else:
        ops = _ops_of(events)
        stages = max((op.stage for op in ops), default=-1) + 1
        if any(op.pair for op in ops):
            stages = max(stages, max(op.pair[0] for op in ops if op.pair) + 1)
        deps = training_deps(ops, max(stages, 1))
    into: dict[int, list[int]] = defaultdict(list)
    for u, v in deps:
        into[v].append(u)
    needs: dict[int, list[tuple[int, int, int]]] = {}
    for v, us in into.items():
        if events[v].lane != "compute":
            continue
        links: list[tuple[int, int, int]] = []
        for u in us:
            kind = events[u].kind
            if kind == "RECV":
                sends = [s for s in into.get(u, ()) if events[s].kind == "SEND"]
                send = sends[0] if sends else -1
                prods = [p for p in into.get(send, ()) if events[p].lane == "compute"] if send >= 0 else []
                if prods:
                    links.append((prods[0], send, u))
            elif kind == "SEND":
                continue
            elif events[u].lane == "compute":
                links.append((u, -1, -1))
        needs[v] = links
    return _Inputs(needs)


# ----------------------------------------------------------------------------------------------
# The replay: same order per rank, given durations, no communication or host delay


def _replay(order: dict[int, list[int]], needs: dict[int, list[tuple[int, int, int]]],
            dur: dict[int, float]) -> tuple[dict[int, float], dict[int, float]] | None:
    """Start and end of every compute event; None when the order contradicts the facts (a cycle)."""
    succ: dict[int, list[int]] = defaultdict(list)
    indeg: dict[int, int] = {i: 0 for i in dur}
    for ids in order.values():
        for a, b in zip(ids, ids[1:]):
            succ[a].append(b)
            indeg[b] += 1
    for v, links in needs.items():
        for p, _, _ in links:
            if p in indeg and v in indeg and p != v:
                succ[p].append(v)
                indeg[v] += 1
    start = {i: 0.0 for i in dur}
    end: dict[int, float] = {}
    queue = deque(i for i, d in indeg.items() if d == 0)
    while queue:
        u = queue.popleft()
        end[u] = start[u] + dur[u]
        for v in succ[u]:
            if end[u] > start[v]:
                start[v] = end[u]
            indeg[v] -= 1
            if indeg[v] == 0:
                queue.append(v)
    if len(end) != len(dur):
        return None
    return start, end


def _gaps(order: dict[int, list[int]], start: dict[int, float], end: dict[int, float]
          ) -> tuple[dict[int, float], dict[int, float]]:
    """The gap before each op on its lane, and after each rank's last op, in a replay."""
    t0 = min(start.values(), default=0.0)
    t1 = max(end.values(), default=0.0)
    before: dict[int, float] = {}
    tail: dict[int, float] = {}
    for r, ids in order.items():
        prev = t0
        for i in ids:
            before[i] = max(0.0, start[i] - prev)
            prev = max(prev, end[i])
        tail[r] = max(0.0, t1 - prev)
    return before, tail


# ----------------------------------------------------------------------------------------------
# The split


def explain(tl: Timeline, plan: Schedule | None = None) -> Explanation:
    """Split every rank's compute idle time into its parts; walk the critical path.

    Raises:
        InputError: the timeline has no compute events.
    """
    events = tl.events
    # Zero-length ops (UNSHARD/RESHARD that ran no GPU work) neither occupy the lane nor end a gap.
    compute = [i for i, e in enumerate(events) if e.lane == "compute" and e.end > e.start]
    if not compute:
        raise InputError("the timeline has no compute events to explain")
    notes: list[str] = _unmeasured_ranks(tl, {events[i].rank for i in compute})
    t0, t1 = tl.start, tl.start + tl.makespan
    order: dict[int, list[int]] = defaultdict(list)
    for i in sorted(compute, key=lambda i: (events[i].start, events[i].end)):
        order[events[i].rank].append(i)
    ins = _inputs(tl, plan)
    dur = {i: events[i].duration for i in compute}
    by_kind: dict[str, list[float]] = defaultdict(list)
    for i in compute:
        by_kind[events[i].kind].append(dur[i])
    # One mean per kind, summed in event order as before: per event it made explain quadratic.
    mean = {k: sum(ds) / len(ds) for k, ds in by_kind.items()}
    bal = {i: mean[events[i].kind] for i in compute}
    sim_m, sim_b = _replay(order, ins.needs, dur), _replay(order, ins.needs, bal)
    if sim_m is None or sim_b is None:
        notes.append("the measured order contradicts the schedule's data facts (an op ran before its input); "
                     "bubble and imbalance are not separated from late input")
        g_m = g_b = {}
        tail_m = tail_b = {}
    else:
        g_m, tail_m = _gaps(order, *sim_m)
        g_b, tail_b = _gaps(order, *sim_b)
    launch = tl.meta.extra.get("launch") if isinstance(tl.meta.extra, dict) else None
    launch = launch if isinstance(launch, dict) else {}

    parts_of: dict[int, dict[str, float]] = {}
    late_rows: list[tuple[int, int, int, float]] = []  # (op, producer, its SEND, late part)
    splits: list[RankSplit] = []
    p2p = _p2p_intervals(events)
    for r in sorted({e.rank for e in events}):
        ids = order.get(r, [])
        acc = dict.fromkeys(PARTS, 0.0)
        prev = t0
        busy = 0.0
        for i in ids:
            e = events[i]
            if e.start > prev:
                p, src, send, _ = _split_gap(events, ins.needs.get(i, []), prev, e.start,
                                             g_b.get(i, 0.0), g_m.get(i, 0.0))
                if p["host"] > 0:
                    # Of the rest, the time this rank's own messages ran is theirs, not the host's: a
                    # send on the compute stream (sync-send), a stream waiting for an NCCL kernel.
                    own = _overlap(p2p.get(r, []), e.start - p["host"], e.start)
                    p["host"] -= own
                    p["transfer"] += own
                parts_of[i] = p
                for k, v in p.items():
                    acc[k] += v
                if p["late_input"] > 0 and src >= 0:
                    late_rows.append((i, src, send, p["late_input"]))
            busy += max(0.0, e.end - max(prev, e.start))
            prev = max(prev, e.end)
        tail = max(0.0, t1 - prev)
        tb = min(tail, tail_b.get(r, 0.0))
        tm = min(tail - tb, max(0.0, tail_m.get(r, 0.0) - tb))
        acc["bubble"] += tb
        acc["imbalance"] += tm
        acc["late_input"] += tail - tb - tm
        idle = (t1 - t0) - busy
        splits.append(RankSplit(r, busy, idle, **acc))
    if launch:
        notes.append(_host_note(events, order, launch))
    prev_on_lane = {i: ids[k - 1] for ids in order.values() for k, i in enumerate(ids) if k > 0}
    late = [_late(events, prev_on_lane, parts_of, ins.needs, bal, i, src, send, w) for i, src, send, w in late_rows]
    late.sort(key=lambda x: -x.waited)
    path = _critical_path(events, order, ins.needs)
    from pptl.checks.measured import measured_violations

    return Explanation(tl.meta.units, tl.makespan, splits, late, path, notes, measured_violations(tl))


def _unmeasured_ranks(tl: Timeline, measured: set[int]) -> list[str]:
    """A note on the ranks of the run with no compute event: a rank the table leaves out, or shows idle all
    step, whose outputs the other ranks still waited for. Those waits cannot be split (their producer is
    not in the timeline), so they read as transfer or host gap on the ranks next to it."""
    seen = {e.rank for e in tl.events}
    absent = sorted(set(range(tl.meta.pp)) - seen) if tl.meta.pp > 0 else []
    idle = sorted(seen - measured)
    out = []
    for ranks, what in ((absent, "no events"), (idle, "no compute events")):
        if ranks:
            many = len(ranks) > 1
            out.append(f"rank{'s' if many else ''} {', '.join(map(str, ranks))} ha{'ve' if many else 's'} {what} in "
                       f"the timeline (pp={tl.meta.pp or max(seen) + 1}): the waits of the ranks that take "
                       f"{'their' if many else 'its'} outputs show as transfer or host gap, not as "
                       f"{'their' if many else 'its'} delay")
    return out


def _p2p_intervals(events: list[Event]) -> dict[int, list[tuple[float, float]]]:
    """Per rank, the union of its SEND and RECV intervals, sorted and disjoint."""
    per: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if e.kind in ("SEND", "RECV") and e.end > e.start:
            per[e.rank].append((e.start, e.end))
    return {r: union(iv) for r, iv in per.items()}


def _overlap(iv: list[tuple[float, float]], a: float, b: float) -> float:
    import bisect

    k = max(0, bisect.bisect_right(iv, (a, float("inf"))) - 1)
    total = 0.0
    while k < len(iv) and iv[k][0] < b:
        total += max(0.0, min(b, iv[k][1]) - max(a, iv[k][0]))
        k += 1
    return total


def _split_gap(events: list[Event], links: list[tuple[int, int, int]], a: float, b: float, g_bal: float,
               g_meas: float) -> tuple[dict[str, float], int, int, int]:
    """Cut the gap [a, b] before an op into its parts (see the module docstring); also return the
    producer, SEND and RECV of the input that came last (-1 when none)."""
    t_prod, t_data, src, recv, src_send = a, a, -1, -1, -1
    for p, send, rcv in links:
        # A same-rank input ended before the gap began (one lane, in order): it never binds.
        ready = events[p].end
        if send >= 0:
            ready = max(ready, events[send].start)  # posted late by the sender: still the sender's delay
        if rcv >= 0:
            # The data was on this rank when its RECV ended: a producer or SEND stamped later than
            # that is a clock error (pptl check reports it, PP090/PP091), not a wait of this rank's.
            ready = min(ready, events[rcv].end)
        arrive = max(ready, events[rcv].end) if rcv >= 0 else ready
        if ready > t_prod or (src < 0 and ready >= t_prod):
            t_prod, src, src_send = ready, p, send
        if arrive > t_data:
            t_data, recv = arrive, rcv
    t_prod = min(max(t_prod, a), b)
    t_data = min(max(t_data, t_prod), b)
    wait = t_prod - a
    bubble = min(wait, max(0.0, min(g_bal, g_meas)))
    imbalance = min(wait - bubble, max(0.0, g_meas - bubble))
    parts = {"bubble": bubble, "imbalance": imbalance, "late_input": wait - bubble - imbalance,
             "transfer": t_data - t_prod, "host": b - t_data}
    return parts, src, src_send, recv


def _late(events: list[Event], prev_on_lane: dict[int, int], parts_of: dict[int, dict[str, float]],
          needs: dict[int, list[tuple[int, int, int]]], bal: dict[int, float], op: int, src: int, send: int,
          waited: float) -> LateInput:
    """Follow the chain back from the producer that came late to the op that made it late: at each
    op, its own waiting for a late input leads further back; the op with the largest own delay
    (a host gap or transfer before it, a duration over its kind's mean, or its SEND posted after
    it ended) is the root."""
    best, best_delay, reason = src, 0.0, ""
    cur, post, seen = src, _posted_late(events, src, send), 0
    while cur >= 0 and seen < _MAX_CHAIN:
        seen += 1
        p = parts_of.get(cur, {})
        own = {"host gap before it": p.get("host", 0.0), "transfer into it": p.get("transfer", 0.0),
               "ran longer than its kind's mean": events[cur].duration - bal.get(cur, events[cur].duration),
               "its SEND started after it ended (behind the rank's earlier ops or messages)": post}
        why, delay = max(own.items(), key=lambda kv: kv[1])
        if delay > best_delay:
            best, best_delay, reason = cur, delay, why
        post = 0.0
        if p.get("late_input", 0.0) > 0:
            links = [lk for lk in needs.get(cur, []) if events[lk[0]].rank != events[cur].rank]
            if links:
                nxt, nsend, _ = max(links, key=lambda lk: events[lk[0]].end)
                cur, post = nxt, _posted_late(events, nxt, nsend)
            else:
                cur = -1
        elif p:
            cur = -1  # its wait was bubble, transfer or host: the chain ends here
        else:
            cur = prev_on_lane.get(cur, -1)  # no gap: it started when its lane predecessor ended
    return LateInput(events[op].op, events[op].rank, waited, events[src].op, events[best].op,
                     reason or "the start of the step", best_delay)


def _posted_late(events: list[Event], producer: int, send: int) -> float:
    return max(0.0, events[send].start - events[producer].end) if send >= 0 else 0.0


def _critical_path(events: list[Event], order: dict[int, list[int]],
                   needs: dict[int, list[tuple[int, int, int]]]) -> list[PathStep]:
    prev_on_lane = {i: ids[k - 1] for ids in order.values() for k, i in enumerate(ids) if k > 0}
    last = max((i for ids in order.values() for i in ids), key=lambda i: events[i].end)
    steps: list[PathStep] = []
    cur, seen = last, set()
    while cur >= 0 and cur not in seen and len(seen) < _MAX_CHAIN:
        seen.add(cur)
        e = events[cur]
        cands: list[tuple[float, str, int]] = []
        lp = prev_on_lane.get(cur, -1)
        if lp >= 0:
            cands.append((events[lp].end, "lane", lp))
        for p, _, rcv in needs.get(cur, []):
            if events[p].rank != e.rank:  # a same-rank input ended before the lane predecessor did
                cands.append((max(events[p].end, events[rcv].end if rcv >= 0 else 0.0), "data", p))
        if not cands:
            steps.append(PathStep(e.op, e.rank, e.kind, e.start, e.end, "", 0.0))
            break
        ready, via, nxt = max(cands, key=lambda c: (c[0], c[1] == "data"))
        steps.append(PathStep(e.op, e.rank, e.kind, e.start, e.end, via, max(0.0, e.start - ready)))
        cur = nxt
    steps.reverse()
    # Each step's "via" says how it was held up by the step before it.
    return steps


def _host_note(events: list[Event], order: dict[int, list[int]], launch: dict[str, Any]) -> str:
    late = 0.0
    for ids in order.values():
        prev = None
        for i in ids:
            t = launch.get(events[i].op)
            if isinstance(t, (int, float)) and prev is not None and t > prev:
                late += min(t, events[i].start) - prev
            prev = events[i].end if prev is None else max(prev, events[i].end)
    return f"kernel launches: the GPU waited {late:.4g} in all for kernels its launching thread had not yet " \
           "launched (part of the host gaps)"


# ----------------------------------------------------------------------------------------------
# Text


def for_display(x: Explanation) -> Explanation:
    """Profiler traces are in us, and a step is tens of ms: show ms."""
    return _scaled(x, 1e-3, "ms") if x.units == "us" else x


def explanation_lines(x: Explanation, *, top: int = 8) -> list[str]:
    x = for_display(x)
    u = x.units
    from pptl.checks.measured import measurement_line

    bad = measurement_line(x.measurement)
    lines = [bad] if bad is not None else []
    lines.append(f"makespan {x.makespan:.4g} {u}; compute idle per rank and where it went ({u}):")
    head = f"{'rank':>4}{'busy':>11}{'idle':>11}" + "".join(f"{PART_LABELS[p]:>17}" for p in PARTS)
    lines.append(head)
    for r in x.ranks:
        cells = "".join(f"{_cell(getattr(r, p), r.idle):>17}" for p in PARTS)
        lines.append(f"{r.rank:>4}{r.busy:>11.4g}{r.idle:>11.4g}{cells}")
    lines += [f"note: {n}" for n in x.notes]
    if x.late:
        lines.append(f"late inputs ({min(top, len(x.late))} of {len(x.late)}, longest first):")
        for li in x.late[:top]:
            lines.append(f"  {li.op} waited {li.waited:.4g} {u} for {li.producer}; made late by {li.root}: "
                         f"{li.reason}" + (f" ({li.delay:.4g} {u})" if li.delay > 0 else ""))
    lines.append(f"critical path ({counted(len(x.path), 'op')}, first to last):")
    for s in x.path:
        how = "" if not s.via else f"  after {s.via}" + (f" +{s.wait:.4g}" if s.wait > 0 else "")
        lines.append(f"  {s.start:>10.4g}-{s.end:<10.4g} {s.op}{how}")
    return lines


def _scaled(x: Explanation, k: float, units: str) -> Explanation:
    ranks = [RankSplit(r.rank, r.busy * k, r.idle * k, *(getattr(r, p) * k for p in PARTS)) for r in x.ranks]
    late = [LateInput(li.op, li.rank, li.waited * k, li.producer, li.root, li.reason, li.delay * k) for li in x.late]
    path = [PathStep(s.op, s.rank, s.kind, s.start * k, s.end * k, s.via, s.wait * k) for s in x.path]
    return Explanation(units, x.makespan * k, ranks, late, path, x.notes, x.measurement)


def _cell(v: float, idle: float) -> str:
    return f"{v:.4g} ({100 * v / idle:.0f}%)" if idle > 0 else f"{v:.4g}"

