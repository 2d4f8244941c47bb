"""``pptl whatif``: several plans under one spread, sampled alike (what the command calls).

A plan file or config gives the schedule and its costs; ``--from`` a measured run replaces the
costs by the run's (:func:`pptl.planning.costs_from_timeline`, as ``pptl plan --costs-from``) and
adds the spread the run showed (:func:`pptl.whatif.spread.spread_from_timeline`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from pptl.config import Costs
from pptl.errors import InputError
from pptl.ir import Schedule
from pptl.whatif.montecarlo import Samples, monte_carlo
from pptl.whatif.spread import Jitter, Spread, Straggler, spread_from_timeline

__all__ = ["PlanOutcome", "Measured", "RunPlan", "load_measured", "study", "study_plans"]


@dataclass(frozen=True)
class RunPlan:
    """What tells the plan a measured run ran, and the steps it measured."""

    family: str
    pp: int
    microbatches: int
    compute: frozenset[tuple[int, int, str, int, int]]
    """(rank, stage, kind, micro-batch, chunk) of every compute op of a step."""
    step_p50: float
    """Median of the run's timed steps (``meta.extra.step_ms``), in the timeline's unit."""

    def ran(self, schedule: Schedule) -> bool:
        """Whether ``schedule`` is this plan: same family, ranks, micro-batches and compute ops."""
        if (schedule.family, schedule.pp, schedule.microbatches) != (self.family, self.pp, self.microbatches):
            return False
        return _compute_ops(schedule) == self.compute


def _compute_ops(schedule: Schedule) -> frozenset[tuple[int, int, str, int, int]]:
    return frozenset((op.rank, op.stage, op.kind, op.mb, op.chunk) for op in schedule.ops
                     if op.lane == "compute" and op.kind not in ("SEND", "RECV"))


def _run_plan(tl: Any) -> RunPlan | None:
    """The plan ``tl`` (a measured timeline) ran, where its meta and its step record say it."""
    import statistics

    from pptl.whatif.spread import measured_steps

    steps = measured_steps(tl.meta.extra)
    m = tl.meta
    if not steps or not m.family or m.pp is None or m.microbatches is None:
        return None
    ops = frozenset((e.rank, e.stage, e.kind, e.mb, e.chunk) for e in tl.events if e.lane == "compute"
                    and e.kind not in ("SEND", "RECV"))
    return RunPlan(str(m.family), int(m.pp), int(m.microbatches), ops, float(statistics.median(steps)))


@dataclass(frozen=True)
class Measured:
    """A measured run read once: its costs and its spread."""

    costs: Costs
    spread: Spread
    sends_on_compute: bool
    """The run sent on the compute stream (CUDA, ``sync-send``): plans are sampled so."""
    stage_rank: Mapping[int, int] = field(default_factory=dict)
    """Stage -> the rank that ran it."""
    send_hold: float = 0.0
    """Median measured SEND (``Spread.send_hold``), where the run sent on the compute stream."""
    layers: Callable[[int], int] | None = None
    """Stage -> MLP blocks of the run's workload (:func:`pptl.whatif.roles.layers_from_mapping`);
    None where the run does not say (an imported profiler trace): the plan's are taken."""
    full_backward: str | None = None
    """How the run's B ran (``meta.extra.full_backward``): ``i-then-w`` (input then weight
    gradient, each weight gradient accumulated by its GEMM), or None (autograd's, runs made before)."""
    free_clock: str | None = None
    """Where the run's clock record shows no rank held by a power or thermal limit
    (:func:`pptl.power.unthrottled`), how they ran: no duty law is learnt from it."""
    run: RunPlan | None = None
    """The plan the run ran and its median step, where the run's record says them."""


@dataclass(frozen=True)
class PlanOutcome:
    """One plan's samples, with what the report names."""

    name: str
    schedule: Schedule
    units: str
    samples: Samples
    ids: list[str]
    """Op ids, indexed like the schedule's ops."""
    spread: Spread
    sends_on_compute: bool = False
    """Sampled with its SENDs on the compute lane (:func:`pptl.whatif.lanes.sends_on_compute`)."""
    beside_sends: int = 0
    """Of those, the SENDs ``pptl run`` keeps beside compute (:func:`pptl.run.program.beside_compute`): a wait
    of theirs for the receive slows the compute beside it, which the samples do not draw."""
    run_p50: float | None = None
    """Where this plan is the one the ``--from`` run ran: the median step the run measured, to hold the
    samples' median against (how well the run's ops account for its steps)."""

    @property
    def self_error(self) -> float | None:
        """The samples' median over ``run_p50``, less 1 (None unless the run ran this plan)."""
        if self.run_p50 is None or self.run_p50 <= 0:
            return None
        return self.samples.quantiles((0.5,))[0] / self.run_p50 - 1.0

    def top_critical(self, k: int) -> list[tuple[str, float]]:
        """The ``k`` ops with time most often on the critical path (ties in op order)."""
        import numpy as np

        # ops that take time: a message of no time is on the path only as its SEND's shadow
        timed = self.samples.planned_end > self.samples.planned_start
        crit = np.where(timed, self.samples.critical, 0.0)
        idx = np.argsort(-crit, kind="stable")[:k]
        return [(self.ids[i], float(crit[i])) for i in idx.tolist() if crit[i] > 0]


def load_measured(path: Path) -> Measured:
    """Costs and spread of a measured timeline (``pptl run -o`` or a profiler trace pptl reads).

    Raises:
        InputError: the file holds no timeline with compute ops, a planned one (not measured), or a
            malformed per-step record.
    """
    from pptl.config import costs_from_mapping
    from pptl.formats.loader import load_any
    from pptl.planning import costs_from_timeline
    from pptl.whatif.spread import measured_only

    loaded = load_any(path)
    tl = loaded.timeline
    if tl is None or not tl.events:
        raise InputError(f"{path}: has no timeline to take durations from (expected the output of pptl run -o)")
    measured_only(path, loaded, "--from")
    spread = spread_from_timeline(tl, str(path))
    extra = tl.meta.extra
    sync = extra.get("messages") == "sync-send" and extra.get("device") not in (None, "cpu")
    from pptl.whatif.roles import layers_from_mapping

    stage_rank = {e.stage: e.rank for e in tl.events if e.lane == "compute" and e.stage >= 0}
    wl = extra.get("workload")
    costs = _without_first_ops(costs_from_timeline(tl), tl)
    sends = sorted(e.duration for e in tl.events if e.kind == "SEND") if sync else []
    hold = sends[len(sends) // 2] if sends else 0.0
    fb = extra.get("full_backward")
    from pptl.power import unthrottled

    return Measured(costs_from_mapping(costs, source=str(path)), spread, sync, stage_rank, hold,
                    layers_from_mapping(wl) if isinstance(wl, Mapping) else None,
                    fb if isinstance(fb, str) and len(fb) <= 40 else None,
                    unthrottled(extra.get("gpu"), len({e.rank for e in tl.events})), _run_plan(tl))


def _without_first_ops(costs: dict[str, Any], tl: Any) -> dict[str, Any]:
    """``costs`` with each (stage, kind) that holds a rank's first compute op of the step timed
    by its other ops: the spread adds the first op's extra itself (``Spread.first``)."""
    from pptl.whatif.spread import first_ops

    lead = first_ops(tl)
    events = [e for e in tl.events if e.lane == "compute" and e.stage >= 0]
    stages = costs.get("stages")
    for e0 in (e for e in events if e.op in lead):
        rest = [e.duration for e in events if (e.stage, e.kind) == (e0.stage, e0.kind) and e.op != e0.op]
        row = stages.get(e0.stage) if isinstance(stages, dict) else None
        if rest and isinstance(row, dict) and e0.kind in row:
            row[e0.kind] = sum(rest) / len(rest)
    return costs


def study(schedule: Schedule, name: str, spread: Spread, *, costs: Costs | None = None, samples: int = 1000,
          seed: int = 0) -> PlanOutcome:
    """Sample one schedule (its own costs unless ``costs``)."""
    from pptl.optable import table_of

    units = spread.units or str(schedule.meta.get("units") or "unit")
    out = monte_carlo(schedule, costs, spread, samples=samples, seed=seed, name=name)
    t = table_of(schedule)
    ids = [op.id for op in schedule.ops] if schedule.has_ops() else [t.op(i).id for i in range(t.n)]
    return PlanOutcome(name, schedule, units, out, ids, spread)


def study_plans(paths: Sequence[Path], *, measured: Path | None = None, samples: int = 1000, seed: int = 0,
                jitter: Jitter | None = None, stragglers: Sequence[Straggler] = (),
                duty_exponent: float | None = 0.0) -> list[PlanOutcome]:
    """Every plan of ``paths`` under the same spread and seed.

    ``duty_exponent`` None: learnt from the measured run (:func:`pptl.whatif.duty.fit_duty_exponent`;
    0 where its ranks' duty barely differs or without one).

    Raises:
        InputError: a file holds no schedule, or a spread does not fit a plan (see
            :func:`pptl.whatif.montecarlo.monte_carlo`).
    """
    from pptl.formats.loader import load_any

    m = load_measured(measured) if measured is not None else None
    learnt = duty_exponent is None
    if learnt and m is None:
        raise InputError("--duty-exponent learn: needs --from a measured run (it is learnt from the run's ranks)")
    duty_range = None
    if duty_exponent is None:
        duty_exponent, duty_range = _learnt_duty_exponent(m) if m is not None else (None, None)
        duty_exponent = duty_exponent or 0.0
    spread = replace(m.spread if m is not None else Spread(), jitter=jitter, stragglers=tuple(stragglers),
                     duty_exponent=duty_exponent, duty_learnt=learnt, duty_range=duty_range,
                     free_clock=m.free_clock if m is not None else None)
    plans = []
    for p in paths:
        loaded = load_any(p)
        if loaded.schedule is None:
            raise InputError(f"{p}: is a {loaded.kind}, not a plan; pptl whatif takes plans and configs")
        plans.append((p, loaded.schedule))
    if m is None:
        _one_unit(plans)
    out = []
    for p, plan in plans:
        schedule = plan
        beside = 0
        if m is not None and m.sends_on_compute:
            from pptl.run.program import beside_compute
            from pptl.whatif.lanes import sends_on_compute

            held_off = beside_compute(plan)
            beside = len(held_off)
            schedule = sends_on_compute(schedule, held_off)
        costs, spread_p = (None, spread) if m is None else _by_role(schedule, m, spread)
        if m is not None and schedule is not plan:
            spread_p = replace(spread_p, send_hold=m.send_hold)
        o = study(schedule, str(p), spread_p, costs=costs, samples=samples, seed=seed)
        run = m.run if m is not None and m.run is not None and m.run.ran(plan) else None
        out.append(replace(o, sends_on_compute=schedule is not plan, beside_sends=beside,
                           run_p50=run.step_p50 if run is not None else None))
    return out


def _one_unit(plans: Sequence[tuple[Path, Schedule]]) -> None:
    """Refuse plans of different time units side by side: the table has one unit column, and a
    straggler's delay without a unit is in each plan's own unit (2 cost-model units on one, 2 ms on
    another). With ``--from`` every plan takes the run's costs, in the run's unit.

    Raises:
        InputError: two plans in different units.
    """
    first_path, first = plans[0]
    u0 = str(first.meta.get("units") or "unit")
    for p, s in plans[1:]:
        u = str(s.meta.get("units") or "unit")
        if u != u0:
            raise InputError(f"{p} is in {_unit_name(u)} and {first_path} in {_unit_name(u0)}: plans side by side "
                             f"share one unit; compare plans of one unit, or give --from a measured run (every plan "
                             f"then takes its costs)")


def _unit_name(u: str) -> str:
    return "cost-model units" if u == "unit" else f"'{u}'"




def _by_role(schedule: Schedule, m: Measured, spread: Spread) -> tuple[Costs, Spread]:
    """The run's costs and spread keyed by the plan's stages through their roles
    (:mod:`pptl.whatif.roles`)."""
    import numpy as np

    from pptl.optable import table_of
    from pptl.whatif.roles import by_role, layers_from_mapping, sources

    t = table_of(schedule)
    compute = [k for k, name in enumerate(t.lane_names) if name == "compute"]
    on = (t.stage >= 0) & np.isin(t.lane, compute)
    if not on.any() or not m.stage_rank:
        return m.costs, spread
    plan_rank = {int(s): int(r) for s, r in zip(t.stage[on].tolist(), t.rank[on].tolist())}
    wl = schedule.config.workload if schedule.config is not None else None
    plan_layers = wl.layers_of if wl is not None else layers_from_mapping(None)
    srcs = sources(max(plan_rank) + 1, sorted(m.stage_rank), plan_layers=plan_layers,
                   run_layers=m.layers or plan_layers, keys=("F", "B", "I", "W"))
    return by_role(m.costs, spread, srcs, plan_rank=plan_rank, run_rank=m.stage_rank)


def _learnt_duty_exponent(m: Measured) -> tuple[float | None, tuple[float, float] | None]:
    """alpha from the run's ranks, and the range the run leaves it in; None without its workload (a
    profiler trace of another model: the GEMM count that separates a stage's role from its rank's
    duty does not hold).

    A run of a first and a last stage whose B ran as I then W: the range the last stage's loss leaves
    (:func:`pptl.whatif.duty.loss_bounded_range`), alpha its middle. Otherwise the kinds fitted each
    alone (:func:`pptl.whatif.duty.duty_exponent_range`) around the pooled fit: with autograd's B, B's
    GEMM count missed its per-parameter accumulation, and the loss and that error pulled the kinds'
    fits apart."""
    from pptl.whatif.duty import duty_exponent_range, fit_duty_exponent, loss_bounded_range

    if m.layers is None:
        return None, None
    if m.free_clock is not None:  # no power cap held a clock: speed does not follow duty
        return 0.0, None
    times = {(s, k): v for s, k in m.spread.stages if (v := m.costs.lookup(k, s)) is not None}
    args = (times, m.stage_rank, m.spread.duty, m.layers)
    if m.full_backward == "i-then-w":
        bounded = loss_bounded_range(*args)
        if bounded is not None:
            return (bounded[0] + bounded[1]) / 2, bounded
    return fit_duty_exponent(*args), duty_exponent_range(*args)
