"""``pptl compare``: a plan against what ``pptl run`` measured (pure: no drawing, no files).

Both sides are :class:`~pptl.timeline.Timeline` objects matched by op id. Times are compared after
moving each timeline to start at 0. Plan times in another time unit than the run's (ms against us)
are converted exactly; a plan in cost-model units is scaled so its makespan equals the measured
one, which compares shapes only; ``pptl plan --costs-from MEASURED`` makes a plan in ms whose error
is the model's real error.

Bubble is :func:`pptl.timeline.bubble_fraction`: the share of the makespan the compute lanes are
idle, over all ranks (as ``pptl plan`` reports it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pptl.errors import InputError
from pptl.formats._quote import counted, shell_word
from pptl.op import COMPUTE_KINDS
from pptl.timeline import Event, Timeline, unit_scale

__all__ = ["KindRow", "OpRow", "Comparison", "compare_timelines", "compare_files", "display_units", "header_difference",
           "planned_timeline", "comparison_lines", "schedule_difference"]


@dataclass(frozen=True)
class KindRow:
    kind: str
    count: int
    planned_mean: float
    measured_mean: float

    @property
    def error(self) -> float | None:
        """(planned - measured) / measured of the mean duration."""
        return (self.planned_mean - self.measured_mean) / self.measured_mean if self.measured_mean > 0 else None


@dataclass(frozen=True)
class OpRow:
    op: str
    kind: str
    rank: int
    planned_start: float
    planned_end: float
    measured_start: float
    measured_end: float

    @property
    def end_error(self) -> float:
        """Planned end minus measured end (how far the plan's clock is off at this op)."""
        return self.planned_end - self.measured_end


@dataclass
class Comparison:
    planned: Timeline
    measured: Timeline
    scale: float
    """Factor applied to planned times: 1 in the same unit, the conversion between two time units
    (1000 from ms to us), else the ratio of the makespans (see :attr:`shapes_only`)."""
    units: str
    makespan_planned: float
    makespan_measured: float
    bubble_planned: float
    bubble_measured: float
    kinds: list[KindRow]
    ops: list[OpRow]
    missing: list[str] = field(default_factory=list)
    """Planned ops the measurement lacks (a failed or partial run)."""
    notes: list[str] = field(default_factory=list)
    contexts: list[Any] = field(default_factory=list)
    """:class:`pptl.contexts.ContextRow` per (kind, context) of the side-lane ops."""
    measurement: list[Any] = field(default_factory=list)
    """:class:`pptl.checks.Violation` per measurement error in the run (:mod:`pptl.checks.measured`)."""
    shapes_only: bool = False
    """The plan's unit is no clock's (cost-model units): ``scale`` fits its makespan to the run's, so
    the makespan error is zero by construction and only shapes compare."""

    @property
    def makespan_error(self) -> float | None:
        """(planned - measured) / measured."""
        m = self.makespan_measured
        return (self.makespan_planned - m) / m if m > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "units": self.units, "scale": self.scale, "shapes_only": self.shapes_only,
            "makespan": {"planned": self.makespan_planned, "measured": self.makespan_measured,
                         "error": self.makespan_error},
            "bubble": {"planned": self.bubble_planned, "measured": self.bubble_measured},
            "kinds": [{"kind": k.kind, "count": k.count, "planned_mean": k.planned_mean,
                       "measured_mean": k.measured_mean, "error": k.error} for k in self.kinds],
            "ops": [{"op": o.op, "kind": o.kind, "rank": o.rank, "planned_start": o.planned_start,
                     "planned_end": o.planned_end, "measured_start": o.measured_start,
                     "measured_end": o.measured_end, "end_error": o.end_error} for o in self.ops],
            "missing": self.missing, "notes": self.notes,
            "measurement_errors": [v.to_dict() for v in self.measurement],
            "contexts": [{"kind": c.kind, "context": c.context, "planned_count": c.planned_count,
                          "measured_count": c.measured_count, "planned_mean": c.planned_mean,
                          "measured_mean": c.measured_mean, "error": c.error} for c in self.contexts],
        }

    def worst_ops(self, n: int) -> list[OpRow]:
        return sorted(self.ops, key=lambda o: (-abs(o.end_error), o.op))[:n]


def planned_timeline(path: str) -> Timeline:
    """The planned timeline of a plan file (its stored one) or of a config (simulated now)."""
    from pptl.formats.loader import load_any
    from pptl.planning import timeline_of

    tl = timeline_of(load_any(path))  # a timeline file can stand for a plan (e.g. an earlier run)
    if tl is None:
        raise InputError(f"{path}: has no schedule or timeline to compare")
    return tl


def compare_timelines(planned: Timeline, measured: Timeline) -> Comparison:
    """Match events by op id and measure how far the plan is from the run.

    Raises:
        InputError: the measured timeline has no event in common with the plan.
    """
    if not measured.events:
        raise InputError("the measured timeline has no events")
    p_by = {e.op: e for e in planned.events}
    m_by = {e.op: e for e in measured.events}
    common = [op for op in p_by if op in m_by]
    if not common:
        raise InputError("the plan and the measurement share no op id (were they made from the same plan?)")
    differs = schedule_difference(planned, measured)
    if differs:
        raise InputError(f"the plan and the measurement are different schedules: {differs}")
    notes: list[str] = []
    span_p, span_m = planned.makespan, measured.makespan
    units = measured.meta.units
    scale, shapes_only = 1.0, False
    if planned.meta.units != measured.meta.units:
        exact = unit_scale(planned.meta.units, units)
        if exact is not None:
            # Two clocks' units: a plan in ms against a run in us is the same plan, converted exactly;
            # fitting its makespan instead would hide the very error compare is asked for.
            scale = exact
            notes.append(f"the plan is in '{planned.meta.units}' and the run in '{units}': plan times are converted "
                         f"(x{scale:g})")
        else:
            scale = span_m / span_p if span_p > 0 else 1.0
            shapes_only = True
            notes.append(f"the plan is in '{planned.meta.units}' and the run in '{units}': plan times are scaled by "
                         f"{scale:.4g} so the makespans match (shapes only); calibrate with 'pptl plan --costs-from'")
    p0, m0 = planned.start, measured.start
    ops = [_row(p_by[op], m_by[op], p0, m0, scale) for op in common]
    from pptl.checks.measured import RECV_BEFORE_SEND, measured_violations

    measurement = measured_violations(measured)
    # A message whose RECV ends before its SEND starts has no true duration on this clock: its SEND
    # and RECV stay out of the kinds' means rather than be counted as transfer time.
    untrue = {op for v in measurement if v.code == RECV_BEFORE_SEND for op in v.ops}
    if untrue:
        notes.append(f"{len(untrue)} SEND/RECV ops with a measurement error are left out of the mean durations")
    kinds: dict[str, list[tuple[float, float]]] = {}
    for op in common:
        if op in untrue:
            continue
        p, m = p_by[op], m_by[op]
        kinds.setdefault(p.kind, []).append((p.duration * scale, m.duration))
    rows = [KindRow(k, len(v), sum(a for a, _ in v) / len(v), sum(b for _, b in v) / len(v))
            for k, v in sorted(kinds.items(), key=lambda kv: _kind_order(kv[0]))]
    missing = [op for op in p_by if op not in m_by]
    if missing:
        notes.append(f"{len(missing)} planned ops were not measured (a failed or partial run?)")
    if measured.meta.extra.get("failed"):
        notes.append(f"the run failed: {measured.meta.extra['failed']}")
    return Comparison(planned, measured, scale, units, span_p * scale, span_m, planned.bubble_fraction(),
                      measured.bubble_fraction(), rows, ops, missing, notes,
                      _contexts([(p_by[op], m_by[op]) for op in common], scale), measurement, shapes_only)


_COLLECTIVES = frozenset({"A2A_DISPATCH", "A2A_COMBINE"})


def _from_last_member(events: list[Event]) -> dict[str, float]:
    """Per all-to-all event: the latest start among the copies of that all-to-all (same kind, flow,
    stage, micro-batch, layer; a stage sits on one EP group's members). A copy that starts early
    waits for its peers; that wait is no transfer time (the plan, like ``--costs-from``, times an
    all-to-all from its last member's start)."""
    latest: dict[tuple, float] = {}
    for e in events:
        if e.kind in _COLLECTIVES:
            k = (e.kind, e.flow, e.stage, e.mb, e.sub, e.chunk)
            latest[k] = max(latest.get(k, e.start), e.start)
    return {e.op: min(e.end, latest[(e.kind, e.flow, e.stage, e.mb, e.sub, e.chunk)])
            for e in events if e.kind in _COLLECTIVES}


def _contexts(pairs: list[tuple[Event, Event]], scale: float) -> list[Any]:
    """Per-context rows of the side-lane ops other than messages (none for plain training plans)."""
    from pptl.contexts import Span, context_errors

    side = [(p, m) for p, m in pairs if p.lane not in ("compute", "pass") and p.kind not in ("SEND", "RECV")]
    if not side:
        return []
    starts = [_from_last_member([p for p, _ in pairs]), _from_last_member([m for _, m in pairs])]

    def span(e: Event, k: int) -> Span:
        return Span(e.rank, e.lane, e.kind, max(e.start, starts[k].get(e.op, e.start)), e.end)

    # contexts need each side's compute ops too; only side-lane rows come back
    rows = context_errors([(span(p, 0), span(m, 1)) for p, m in pairs if p.lane != "pass"
                           and p.kind not in ("SEND", "RECV")], scale)
    return rows


def header_difference(family: str | None, pp: int | None, microbatches: int | None, measured: Timeline,
                      plan_ids: set[str], vpp: int | None = None) -> str:
    """What tells from its header and op names alone that ``measured`` ran another plan than the one of
    ``family``, ``pp``, ``microbatches``, ``vpp`` (None: not known) and ops ``plan_ids`` ("" when
    nothing): no simulation, so a plan that deadlocks (the hung run's) is compared too."""
    mm = measured.meta
    if family and mm.family and mm.family != "measured" and family != mm.family:
        return f"the plan is {family}, the run is {mm.family}"
    # Plans of two vpp share op ids, so without this the first op placed differently is reported
    # as a reordered rank instead of the cause. Only a header that records vpp (pptl run's) is
    # held to it: an imported trace's is inferred from the stages it saw, which a partial one lacks.
    recorded_vpp = vpp if mm.family and mm.family != "measured" else None
    for name, a in (("pp", pp), ("microbatches", microbatches), ("vpp", recorded_vpp)):
        b = getattr(mm, name)
        if a and b and a != b:
            return f"the plan has {name} {a}, the run {b}"
    extra = [e.op for e in measured.events if e.kind in COMPUTE_KINDS and e.op not in plan_ids]
    if extra:
        return f"the run has {len(extra)} compute op(s) the plan lacks, such as {extra[0]}"
    return ""


def schedule_difference(planned: Timeline, measured: Timeline) -> str:
    """What makes ``measured`` a run of another schedule than ``planned`` ("" when none):
    family, ranks or micro-batches in the metadata, compute work the plan lacks, or a rank
    running its compute ops in another order. Work the run lacks is not a difference (a failed
    or partial run; compare notes it)."""
    pm = planned.meta
    header = header_difference(pm.family, pm.pp, pm.microbatches, measured, {e.op for e in planned.events},
                               vpp=pm.vpp)
    if header:
        return header
    ran_lanes, plan_lanes = _compute_orders(measured), _compute_orders(planned)
    for r, ran in sorted(ran_lanes.items()):
        ran_set = set(ran)
        want = [op for op in plan_lanes.get(r, []) if op in ran_set]
        for k, (a, b) in enumerate(zip(ran, want)):
            if a != b:
                return f"rank {r} runs {a} as compute op {k} where the plan runs {b}"
    return ""


def _compute_orders(tl: Timeline) -> dict[int, list[str]]:
    lanes: dict[int, list[str]] = {}
    for e in sorted(tl.events, key=lambda e: (e.start, e.end)):
        if e.kind in COMPUTE_KINDS and e.lane == "compute":
            lanes.setdefault(e.rank, []).append(e.op)
    return lanes


def _row(p: Event, m: Event, p0: float, m0: float, scale: float) -> OpRow:
    return OpRow(p.op, p.kind, p.rank, (p.start - p0) * scale, (p.end - p0) * scale, m.start - m0, m.end - m0)


_ORDER = {k: i for i, k in enumerate(("F", "B", "I", "W", "FB", "SEND", "RECV"))}


def _kind_order(kind: str) -> tuple[int, str]:
    return (_ORDER.get(kind, len(_ORDER)), kind)


def display_units(units: str) -> tuple[float, str]:
    """(factor, unit) times are shown in: profiler and run times in us read as ms, as ``pptl explain``
    shows them (a step is tens of ms); other units as they are."""
    return (1e-3, "ms") if units == "us" else (1.0, units)


def comparison_lines(cmp: Comparison, top: int = 10) -> list[str]:
    """The text report: makespan, bubble, per-kind table, the ``top`` ops the plan misses most."""
    k, u = display_units(cmp.units)
    err = cmp.makespan_error
    head = f"makespan: planned {k * cmp.makespan_planned:.4g} {u}, measured {k * cmp.makespan_measured:.4g} {u}"
    if cmp.shapes_only:
        # the plan was rescaled onto the run's makespan: its error says nothing, and must say so where it is read
        head += (f" (error {100 * err:+.1f}% by construction: the plan is in '{cmp.planned.meta.units}', "
                 f"scaled by {cmp.scale:.4g} to the run's makespan)" if err is not None else "")
    elif err is not None:
        head += f" (error {100 * err:+.1f}%)"
    lines = [head, f"bubble: planned {100 * cmp.bubble_planned:.1f}%, measured {100 * cmp.bubble_measured:.1f}%"]
    from pptl.checks.measured import measurement_line

    bad = measurement_line(cmp.measurement)
    if bad is not None:
        lines.append(bad)
    lines += [f"note: {n}" for n in cmp.notes]
    lines.append(f"{'kind':<6}{'ops':>6}{'planned':>12}{'measured':>12}{'error':>9}   (mean duration, {u})")
    for kr in cmp.kinds:
        e = "" if kr.error is None else f"{100 * kr.error:+.1f}%"
        lines.append(f"{kr.kind:<6}{kr.count:>6}{k * kr.planned_mean:>12.4g}{k * kr.measured_mean:>12.4g}{e:>9}")
    if cmp.contexts:
        lines.append(f"{'side-lane op':<14}{'context':<10}{'ops':>9}{'planned':>12}{'measured':>12}{'error':>9}"
                     f"   (mean duration, {u}; ops planned/measured in that context)")
        for c in cmp.contexts:
            e = "" if c.error is None or not c.planned_count else f"{100 * c.error:+.1f}%"
            n = f"{c.planned_count}/{c.measured_count}"
            lines.append(f"{c.kind:<14}{c.context:<10}{n:>9}{k * c.planned_mean:>12.4g}{k * c.measured_mean:>12.4g}"
                         f"{e:>9}")
    worst = cmp.worst_ops(top)
    if worst:
        lines.append(f"largest end-time errors ({len(worst)} of {counted(len(cmp.ops), 'op')}; planned - measured, {u}):")
        width = max(len(o.op) for o in worst)
        for o in worst:
            lines.append(f"  {o.op:<{width}}  planned {k * o.planned_start:.4g}-{k * o.planned_end:.4g}  "
                         f"measured {k * o.measured_start:.4g}-{k * o.measured_end:.4g}  {k * o.end_error:+.4g}")
    return lines


def compare_files(plan: str | Path, measured: str | Path) -> Comparison:
    """:func:`compare_timelines` of the plan (or config) at ``plan`` and the run at ``measured``.

    Raises:
        InputError: ``measured`` holds no measured timeline (a plan given second: the arguments
            swapped), or the two share no op.
    """
    from pptl.formats.loader import load_any

    loaded = load_any(measured)
    m = loaded.timeline
    if m is None:
        raise InputError(f"{measured}: is a {loaded.kind}, has no timeline (expected the output of pptl run)")
    p = planned_timeline(str(plan))
    second_planned = loaded.kind == "plan" or m.meta.source == "planned"
    if second_planned and p.meta.source == "measured":
        raise InputError(f"{plan}: is a measured run and {measured} a plan: give the plan first "
                         f"(pptl compare {shell_word(measured)} {shell_word(plan)})")
    cmp = compare_timelines(p, m)
    if second_planned:  # two plans: allowed (what-if against a baseline), but said where it is read
        cmp.notes.insert(0, f"{measured} is a plan, not a measured run: this compares two plans")
    return cmp
