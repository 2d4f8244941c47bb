"""Turn what the ranks recorded into a measured :class:`~pptl.timeline.Timeline` (pure, no torch).

Every rank sends rank 0 one *payload* (a JSON-ready dict) per plan::

    {"rank": r,
     "steps": [{"step": k, "timed": bool, "step_ms": float, "wall_ms": float, "loss": float | None,
                "events": [[op index, start_ms, end_ms], ...],
                "b_input": [[op index of a B, ms its I part took], ...],
                "started": [op index, ...]}, ...],   # in the order the host started (CUDA: enqueued) them
     "partial": {"step": k, "events": [...]} | absent,   # the step a failure interrupted: its
                                                          # finished ops, and (CPU) its SENDs with end None
     "info": {"device": ..., "torch": ...}}

Times are milliseconds after the step's clock anchor (the end of a collective every rank joined);
each step also carries ``anchor_ms`` (that anchor on the rank's host clock, ``anchor_err_ms`` how
well it is placed there) and each payload ``"clock": {"host", "apply", "samples"}`` (offsets to
rank 0's clock): :mod:`pptl.run.timebase` puts every rank on rank 0's clock with them.
The timeline holds the timed step whose step time is the median, with the plan's op ids, so
``pptl render`` and ``pptl compare`` read it like a planned one.
"""
from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any, Iterable, Mapping

from pptl.ir import Schedule
from pptl.timeline import Event, Timeline, TimelineMeta

__all__ = ["CLOCK", "CLOCK_PER_RANK", "step_times", "build_timeline", "executed_order"]

CLOCK = ("one time base, rank 0's host clock: each rank's times are mapped onto it through its offset to "
         "rank 0, measured at the plan's start and end with the drift taken as linear (0 when the ranks share "
         "a host's monotonic clock); CUDA event times are placed on the host clock by an event synchronized "
         "at each step's start; time 0 is the step's first anchor (each rank stamps one after a collective every "
         "rank joined)")
#: What records without anchors on the host clock were measured on.
CLOCK_PER_RANK = ("per step: every rank joins a collective, then stamps an anchor (a CUDA event on the compute "
                  "stream, or the host clock on CPU); times are ms after each rank's anchor")


def step_times(payloads: list[Mapping[str, Any]], *, timed: bool, key: str = "step_ms") -> dict[int, float]:
    """Step index -> step time (the slowest rank's), over steps every rank completed.

    ``key`` "step_ms" is the event clock (anchor to the last op's end); "wall_ms" the host clock
    between barriers, as bench/torch_pp_anchor.py measures torch's schedules.
    """
    per: dict[int, list[float]] = {}
    for p in payloads:
        for st in p.get("steps", []):
            if bool(st["timed"]) == timed and key in st:
                per.setdefault(st["step"], []).append(float(st[key]))
    return {k: max(v) for k, v in sorted(per.items()) if len(v) == len(payloads)}


def executed_order(schedule: Schedule, payloads: Iterable[Mapping[str, Any]], step: int | None = None
                   ) -> dict[str, dict[str, list[str]]]:
    """Per rank and lane: op ids in the order the rank started them in ``step`` (default: its last
    step), as each rank recorded while running, not the program it was given."""
    out: dict[str, dict[str, list[str]]] = {}
    for p in payloads:
        steps = p.get("steps", [])
        rec = next((st for st in steps if st["step"] == step), steps[-1] if steps else {})
        lanes: dict[str, list[str]] = {}
        for i in rec.get("started", []):
            op = schedule.ops[i]
            lanes.setdefault(op.lane, []).append(op.id)
        out[str(p["rank"])] = lanes
    return out


def build_timeline(schedule: Schedule, payloads: list[Mapping[str, Any]], *,
                   extra: Mapping[str, Any] | None = None) -> Timeline:
    """The measured timeline of the median timed step (or of an interrupted step's partial events)."""
    payloads = sorted(payloads, key=lambda p: p["rank"])
    timed = step_times(payloads, timed=True)
    bare = step_times(payloads, timed=False)
    meta_extra: dict[str, Any] = {}
    partial = False
    if timed:
        ordered = sorted(timed, key=lambda k: (timed[k], k))
        chosen = ordered[(len(ordered) - 1) // 2]
        picked = [(p, st) for p in payloads for st in p["steps"] if st["step"] == chosen]
        meta_extra["step"] = chosen
    else:
        partial = True
        picked = [(p, p["partial"]) for p in payloads if (p.get("partial") or {}).get("events")]
        if not picked:  # no complete step either: fall back to the last complete step any rank has
            picked = [(p, st) for p in payloads for st in p.get("steps", [])[-1:]]
    rows, clock_meta = _on_one_clock(picked)
    rows = _delivered(schedule, rows)
    if clock_meta is not None:
        meta_extra["clock"] = clock_meta
    waits: dict[int, list[int]] = {}
    for u, v in schedule.deps:
        waits.setdefault(v, []).append(u)
    ids = [op.id for op in schedule.ops]
    events = []
    for i, start, end in sorted(rows, key=lambda r: (r[1], r[0])):
        op = schedule.ops[i]
        events.append(Event(op=ids[i], rank=op.rank, lane=op.lane, start=float(start), end=float(max(end, start)),
                            kind=op.kind, stage=op.stage, mb=op.mb, direction=op.direction, chunk=op.chunk,
                            pair=op.pair, label=op.label, sub=op.sub, peer=op.peer, flow=op.flow, bucket=op.bucket,
                            half=op.half,
                            waits_on=tuple(ids[u] for u in waits.get(i, ()))))
    info0 = payloads[0].get("info", {}) if payloads else {}
    if info0.get("device") == "cpu":
        events = _sends_end_at_delivery(schedule, events)
    timed_ms = list(timed.values())
    bare_ms = list(bare.values())
    wall = list(step_times(payloads, timed=False, key="wall_ms").values())
    meta_extra.update({
        "untimed_wall_ms": wall,
        "median_untimed_wall_ms": statistics.median(wall) if wall else None,
        "step_ms": timed_ms,
        # The chosen step's own time (the lower median for an even count): the step the timeline holds.
        "median_step_ms": timed[meta_extra["step"]] if "step" in meta_extra else None,
        "untimed_step_ms": bare_ms,
        "median_untimed_step_ms": statistics.median(bare_ms) if bare_ms else None,
        "overhead": (statistics.median(timed_ms) / statistics.median(bare_ms) - 1.0
                     if timed_ms and bare_ms and statistics.median(bare_ms) > 0 else None),
        "executed": executed_order(schedule, payloads, meta_extra.get("step")),
    })
    b_input = _b_input(schedule, picked)
    if b_input:
        meta_extra["b_input_ms"] = b_input
    record = _step_ops(schedule, payloads, list(timed))
    if record is not None:
        meta_extra["step_ops"] = record
    losses = [st.get("loss") for p in payloads for st in p.get("steps", []) if st.get("loss") is not None]
    if losses:
        meta_extra["loss"] = _last_step_loss(payloads)
    info = payloads[0].get("info", {}) if payloads else {}
    meta_extra.update(info)
    meta_extra.update(_allocator(payloads))
    if partial:
        meta_extra["partial"] = True
    meta_extra.update(extra or {})
    device = info.get("device", "?")
    span = (max(e.end for e in events) - min(e.start for e in events)) if events else 0.0
    title = f"{schedule.family}: measured on {device}, pp={schedule.pp} makespan={span:.3f} ms"
    meta = TimelineMeta(source="measured", units="ms", family=schedule.family, pp=schedule.pp,
                        vpp=schedule.chunks_per_rank,
                        microbatches=schedule.microbatches, title=title,
                        clock=CLOCK if clock_meta is not None else CLOCK_PER_RANK, extra=meta_extra)
    timeline = Timeline(events, meta)
    if clock_meta is not None:
        from pptl.checks.measured import measured_violations

        # What the rule finds is kept with the timeline, so `pptl run` can say so at once.
        found = measured_violations(timeline)
        clock_meta["violations"] = len(found)
        if found:
            clock_meta["first_violation"] = found[0].message
    return timeline


def _allocator(payloads: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Only where it happened (CUDA runs): per rank, in how many recorded steps the allocator mapped new
    GPU memory (``steps_mapping``: a cudaMalloc inside a step waits for the GPU, a message spinning
    there too)."""
    mapping = {str(p["rank"]): n for p in payloads
               if (n := sum(1 for st in p.get("steps", []) if isinstance(st.get("device_allocs"), int)
                            and st["device_allocs"] > 0))}
    return {"steps_mapping": mapping} if mapping else {}


def _delivered(schedule: Schedule, rows: list[list[Any]]) -> list[list[Any]]:
    """``rows`` without the ops an interrupted step left unfinished (end None).

    A SEND left so (a CPU send is known to be done only when its rank waits for it, at the step's
    end) was delivered if its RECV finished: it ends there, so a partial timeline keeps the
    messages that did arrive (``pptl check``'s PP090 reads them).
    """
    if all(r[2] is not None for r in rows):
        return rows
    ops = schedule.ops
    end = {int(r[0]): r[2] for r in rows if r[2] is not None}
    recv_of = {u: v for u, v in schedule.deps if ops[u].kind == "SEND" and ops[v].kind == "RECV"}
    out = []
    for i, start, stop in rows:
        if stop is None:
            got = end.get(recv_of.get(int(i), -1))
            if got is None or ops[int(i)].kind != "SEND":
                continue
            stop = max(got, start)
        out.append([i, start, stop])
    return out


def _on_one_clock(picked: list[tuple[Mapping[str, Any], Mapping[str, Any]]]
                  ) -> tuple[list[list[Any]], dict[str, Any] | None]:
    """The picked step's events of every rank on one time base (run/timebase.py), zero at the
    earliest rank's anchor; and what the clocks were.

    Records without anchors or offsets (written before both existed) keep each rank's own zero,
    and the clock part is None.
    """
    from pptl.run.timebase import ClockSample, fit_clock, tolerance_ms

    usable = [(p, st) for p, st in picked if isinstance(st.get("anchor_ms"), (int, float))
              and isinstance(p.get("clock"), Mapping) and p["clock"].get("samples")]
    if not picked or len(usable) != len(picked):
        return [ev for _, st in picked for ev in st.get("events", [])], None
    hosts = {str(p["clock"].get("host")) for p, _ in usable}
    apply = len(hosts) > 1 or any(bool(p["clock"].get("apply")) for p, _ in usable)
    clocks, errs, samples = {}, {}, {}
    for p, st in usable:
        r = int(p["rank"])
        samples[r] = [ClockSample.from_list(x) for x in p["clock"]["samples"]]
        clocks[r] = fit_clock(samples[r], apply=apply)
        errs[r] = float(st.get("anchor_err_ms") or 0.0)
    # Time 0 is the first anchor on the base, so every event is at or after 0 (each follows its own).
    first = min(usable, key=lambda ps: int(ps[0]["rank"]))
    zero = min(clocks[int(p["rank"])].to_base(float(st["anchor_ms"])) for p, st in usable)
    rows: list[list[Any]] = []
    ranks: dict[str, Any] = {}
    for p, st in usable:
        r = int(p["rank"])
        c, anchor = clocks[r], float(st["anchor_ms"])
        rows += [[i, c.to_base(anchor + a) - zero, None if b is None else c.to_base(anchor + b) - zero]
                 for i, a, b in st.get("events", [])]
        ranks[str(r)] = {"measured_offset_ms": samples[r][0].offset_ms, "offset_ms": c.offset_ms,
                         "drift_ppm": c.drift * 1e6, "uncertainty_ms": c.uncertainty_ms, "anchor_err_ms": errs[r],
                         # Where this rank's own anchor sat on the time base: the shift a per-rank zero made
                         # (a CPU rank that left the barrier late, say).
                         "anchor_skew_ms": c.to_base(anchor) - zero}
    meta = {"base": f"rank {int(first[0]['rank'])}'s host clock", "same_host": len(hosts) == 1,
            "offsets_applied": apply, "tolerance_ms": tolerance_ms(clocks, errs), "ranks": ranks}
    return rows, meta


def _b_input(schedule: Schedule, picked: list[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> dict[str, float]:
    """B's op id -> the time its I part took (ms, from B's start to the event between its I and W;
    ``pptl run``'s B is I then W): a run of full backwards then says what I and W each cost."""
    out: dict[str, float] = {}
    n = len(schedule.ops)
    for _, st in picked:
        for row in st.get("b_input") or ():
            i, ms = int(row[0]), float(row[1])
            if 0 <= i < n and schedule.ops[i].kind == "B":
                out[schedule.ops[i].id] = max(0.0, ms)
    return out


#: Most (compute op, timed step) durations a timeline keeps (``meta.extra.step_ops``); a larger
#: run keeps its median step only.
MAX_STEP_OPS = 200_000


def _step_ops(schedule: Schedule, payloads: list[Mapping[str, Any]], steps: list[int]) -> dict[str, Any] | None:
    """Every timed step's compute-op durations and span (first start to last end, ms): how op
    times spread across steps, for ``pptl whatif --from``. ``{"span_ms": [per step], "ms": {op id:
    [per step]}}``, steps in the order of ``meta.extra.step_ms``; ops missing from a step are left out."""
    compute = [i for i, op in enumerate(schedule.ops) if op.lane == "compute"]
    if not steps or not compute or len(compute) * len(steps) > MAX_STEP_OPS:
        return None
    pos = {k: j for j, k in enumerate(steps)}
    ms: dict[int, list[float | None]] = {i: [None] * len(steps) for i in compute}
    lo, hi = [float("inf")] * len(steps), [float("-inf")] * len(steps)
    for p in payloads:
        for st in p.get("steps", []):
            j = pos.get(st["step"])
            if j is None or not st["timed"]:
                continue
            for i, a, b in st["events"]:
                lo[j], hi[j] = min(lo[j], a), max(hi[j], b)
                if i in ms:
                    ms[i][j] = round(max(0.0, b - a), 6)
    ids = [op.id for op in schedule.ops]
    return {"span_ms": [round(max(0.0, b - a), 6) if b >= a else 0.0 for a, b in zip(lo, hi)],
            "ms": {ids[i]: row for i, row in ms.items() if None not in row}}


def _sends_end_at_delivery(schedule: Schedule, events: list[Event]) -> list[Event]:
    """On CPU a gloo send's work reports completion only once waited on, which the rank does at the
    end of the step: its bar would span the step. The send had completed when its RECV did (the
    receiver held the data), so a SEND ends then: posted -> delivered, and a wait for it shows."""
    ids = [op.id for op in schedule.ops]
    recv_of = {ids[u]: ids[v] for u, v in schedule.deps
               if schedule.ops[u].kind == "SEND" and schedule.ops[v].kind == "RECV"}
    end = {e.op: e.end for e in events}
    out = []
    for e in events:
        r = recv_of.get(e.op) if e.kind == "SEND" else None
        if r is not None and r in end and e.start <= end[r] < e.end:
            e = replace(e, end=end[r])
        out.append(e)
    return out


def _last_step_loss(payloads: list[Mapping[str, Any]]) -> float | None:
    """The step loss of the last step every rank completed: the sum over the ranks holding a loss."""
    last = min((p["steps"][-1]["step"] for p in payloads if p.get("steps")), default=None)
    if last is None:
        return None
    total = 0.0
    for p in payloads:
        for st in p["steps"]:
            if st["step"] == last and st.get("loss") is not None:
                total += float(st["loss"])
    return total
