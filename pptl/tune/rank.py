"""Evaluate every candidate: build, check (every rule of ``pptl check``), time with per-stage costs,
count memory per rank, and rank.

A structure (family and sizes) is built and checked once; each layer split then only changes the
op durations and the per-stage memory, so it is timed on the same DAG and topological order. The
timing is the simulator's longest path (:func:`pptl.simulate.simulate`), with durations from the
split: an overlapped FB costs the F of its stage plus the B of its pair's stage.

Peak memory of a rank = weights of every stage it holds (DualPipe holds two copies of the model)
+ the peak of its activations over the timed ops (F allocates at its start; B, or I and W by
``w_activation``, free at their end; FB allocates its F half at its start and frees its B half at
its end), with the coefficients of ``TuneConfig.memory`` (:mod:`pptl.tune.memory`: activation
scales, messages and data the runtime holds, working memory).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from pptl.checks import Context, check_context
from pptl.config import MAX_OPS, Config, Costs
from pptl.errors import InputError, InvalidScheduleError
from pptl.formats._quote import counted
from pptl.ir import Schedule
from pptl.schedules import get_family
from pptl.tune.candidates import Structure, structures
from pptl.tune.memory import rank_peaks
from pptl.tune.model import SPLIT_FAMILIES, TuneConfig
from pptl.tune.split import Split, megatron_layout, splits_for, stage_costs, stage_memory
from pptl.tune.spread import Spread, step_spread
from pptl.tune.synth import SynthInput, build_synth

__all__ = ["Result", "TuneResult", "tune", "config_for", "MAX_TUNE_OPS", "estimated_ops", "peak_and_limit"]

#: Per rank, the (kind, micro-batch) compute order of a synthesised plan.
Orders = tuple[tuple[tuple[str, int], ...], ...]

#: Most simulate -> duty -> rescale passes with a duty exponent (they stop once duty moves < 1e-4).
_DUTY_PASSES = 6
#: Most ops, over every candidate structure, one tune builds and times (each timed once per split):
#: about a minute on 2 cores (7 us an op there: 2.9M ops took 21 s). Past it a sweep runs for many
#: minutes with nothing to show, where ``pptl whatif`` and ``pptl plan`` refuse such sizes up front.
MAX_TUNE_OPS = 10_000_000
#: Families whose plans hold I and W ops: the split-backward ones, and DualPipe(V), whose whole
#: backward is B but whose cool-down splits it into I and W (zero-bubble style) at every size.
_NEEDS_IW = SPLIT_FAMILIES | {"dualpipe", "dualpipev"}


@dataclass
class Result:
    """One candidate: a structure under one split, timed, or rejected with the reason."""

    structure: Structure
    split: Split | None
    step: float | None = None
    bubble: float | None = None
    peak: tuple[float, ...] = ()
    """Per rank: weights + peak activations."""
    fits: bool = False
    rejected: str | None = None
    skipped: str | None = None
    """Why the candidate was not tried (an ILP too large, or no solver): it is no verdict on the order."""
    schedule: Schedule | None = field(default=None, repr=False)
    notes: tuple[str, ...] = ()
    duty: tuple[float, ...] = ()
    """Per rank: busy share of the step the timing converged to (empty when ``duty_exponent`` is 0)."""
    spread: Spread | None = None
    """Percentiles of the step under the calibrating run's per-op variation (None: no variation known)."""
    costs: Costs | None = field(default=None, repr=False)
    """The costs the step was timed with (per stage, messages on their producers under sync-send,
    ``rank_scale`` from the duty): the written plan carries them, so ``pptl plan`` of it gives ``step``."""
    orders: Orders | None = field(default=None, repr=False)
    """synth: per rank, the (kind, micro-batch) order that was timed (the plan is rebuilt from it,
    not re-synthesised: the exact order under a time limit need not come out the same twice)."""

    @property
    def label(self) -> str:
        s = self.structure.label
        return s if self.split is None else f"{s} split={self.split.name}"

    @property
    def max_peak(self) -> float | None:
        return max(self.peak) if self.peak else None

    @property
    def layout(self) -> str | None:
        return megatron_layout(self.split.layers) if self.split is not None else None

    def to_dict(self) -> dict[str, Any]:
        s = self.structure
        return {"label": self.label, "family": s.family, "microbatches": s.microbatches, "vpp": s.vpp,
                "group_size": s.group, "inflight": s.inflight, "pattern": s.pattern,
                "split": None if self.split is None else self.split.name,
                "stage_layers": None if self.split is None else list(self.split.layers),
                "megatron_layout": self.layout, "step": self.step,
                "step_p05": None if self.spread is None else self.spread.p05,
                "step_p95": None if self.spread is None else self.spread.p95, "bubble": self.bubble,
                "peak_memory": list(self.peak), "fits": self.fits, "rejected": self.rejected,
                "skipped": self.skipped,
                "notes": list(self.notes)}


@dataclass
class TuneResult:
    results: list[Result]
    """Ranked: fitting candidates by step time per micro-batch, then over-limit ones by peak memory,
    then rejected ones."""
    limit: float | None
    notes: list[str]

    @property
    def best(self) -> Result | None:
        r = self.results[0] if self.results else None
        return r if r is not None and r.fits else None

    def unbuilt(self, source: str) -> str | None:
        """When no candidate was timed: one line that says why (the config fits no family; bad input,
        not a schedule that failed), naming the candidates of the most common reason. None otherwise."""
        if any(r.step is not None for r in self.results):
            return None
        why: dict[str, list[str]] = {}
        for r in self.results:
            why.setdefault(r.rejected or r.skipped or "not built", []).append(r.label)
        if not why:
            return f"{source}: no candidate to build (no family and micro-batch count to try)"
        reason, labels = max(why.items(), key=lambda kv: len(kv[1]))
        named = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
        others = len(self.results) - len(labels)
        rest = f" ({others} other candidate{'s' if others > 1 else ''} for other reasons)" if others else ""
        return f"{source}: no candidate could be built: {named}: {reason}{rest}"

    def closest(self) -> Result | None:
        """The timed candidate with the lowest peak memory (when nothing fits)."""
        timed = [r for r in self.results if r.step is not None]
        return min(timed, key=lambda r: (r.max_peak, r.step)) if timed else None


def config_for(tc: TuneConfig, st: Structure, split: Split | None = None) -> Config:
    """The pptl :class:`Config` of a structure (costs and workload of ``split`` when given)."""
    costs = Costs(base=_base_costs(tc), comm_latency=tc.comm_latency, comm_bandwidth=tc.comm_bandwidth,
                  comm_bytes=tc.model.message_bytes)
    workload = tc.workload
    if split is not None:
        costs = replace(costs, stages=stage_costs(tc.model, split.layers))
        workload = replace(workload, stage_layers=_run_layers(tc, split))
    return Config(schedule=st.family if st.family != "synth" else "zb-h1", pp=tc.pp,
                  microbatches=st.microbatches, vpp=st.vpp, group_size=st.group,
                  split_backward=st.split_backward, costs=costs,
                  options={"memory": "pattern"} if st.pattern else {},
                  # The plan's own memory count (activation units, pptl check's limit rule) has I
                  # free a share of F's; what I makes beyond it is in the ranking's peaks only.
                  w_activation=min(1.0, tc.model.w_activation),
                  workload=workload, source=tc.source)


def _run_layers(tc: TuneConfig, split: Split) -> tuple[int, ...]:
    """What ``pptl run`` executes per stage: the split's layers, plus the embedding and the head
    as ``run_blocks`` MLP blocks each (the synthetic workload has no embedding of its own)."""
    out = list(split.layers)
    out[0] += tc.run_blocks[0]
    out[-1] += tc.run_blocks[1]
    return tuple(out)


def _base_costs(tc: TuneConfig) -> dict[str, float]:
    m = tc.model
    return {k: v for k in ("F", "B", "I", "W") if (v := m.part_cost(m.layer, k)) is not None}


def tune(tc: TuneConfig, *, progress: Callable[[str], None] | None = None, workers: int = 1) -> TuneResult:
    """Search every structure and split (in ``workers`` processes); raise InputError when a needed
    cost is missing."""
    need = {"F", "B"} | ({"I", "W"} if any(f in _NEEDS_IW for f in tc.families) else set())
    missing = tc.model.missing(tuple(k for k in ("F", "B", "I", "W") if k in need))
    if missing:
        # the split-backward families first, then DualPipe(V) (whose whole backward is B)
        split_fams = sorted((f for f in tc.families if f in _NEEDS_IW), key=lambda f: f not in SPLIT_FAMILIES)
        hint = (f" (needed by {', '.join(split_fams)}; or list families without them)"
                if any(x.endswith((".I", ".W")) for x in missing) and split_fams else "")
        raise InputError(f"{tc.source}: field '{missing[0]}': no cost given{hint}; "
                         f"e.g. layer: {{F: 1, B: 2, I: 1, W: 1}}")
    results: list[Result] = []
    notes: list[str] = []
    sts = structures(tc)
    _refuse_oversized(tc, sts)
    if workers > 1 and len(sts) > 1:
        import multiprocessing as mp

        # Structures are independent: build, check and time them in forked workers. Results come
        # back without their schedules (pickling 10k-op plans costs more than rebuilding the best).
        with mp.get_context("fork").Pool(min(workers, len(sts))) as pool:
            for st, part in zip(sts, pool.imap(_evaluate_light, [(tc, st) for st in sts], chunksize=1)):
                if progress is not None:
                    progress(st.label)
                results.extend(part)
    else:
        for st in sts:
            if progress is not None:
                progress(st.label)
            results.extend(_evaluate(tc, st))
    results.sort(key=_rank_key(tc.memory_limit))
    notes.extend(dict.fromkeys(n for r in results for n in r.notes))
    note = _prefer_lower_p95(results)
    if note:
        notes.append(note)
    return TuneResult(results, tc.memory_limit, notes)


def estimated_ops(tc: TuneConfig, st: Structure) -> int:
    """Ops of ``st``'s plan, about: F, B (or I and W) and a message each way per micro-batch, stage
    and chunk (as :func:`_evaluate` bounds one plan)."""
    return 6 * tc.pp * st.vpp * st.microbatches


def _refuse_oversized(tc: TuneConfig, sts: list[Structure]) -> None:
    """Refuse a sweep of more than :data:`MAX_TUNE_OPS` ops before building any of it.

    Raises:
        InputError: the structures' plans add up to more ops than that.
    """
    total = sum(estimated_ops(tc, st) for st in sts)
    if total > MAX_TUNE_OPS:
        big = max(tc.microbatches)
        raise InputError(f"{tc.source}: {counted(len(sts), 'candidate plan')} of about {total:,} ops in all, more than the "
                         f"{MAX_TUNE_OPS:,} pptl tune times in one call (micro-batches up to {big:,} at pp {tc.pp}); "
                         f"sweep fewer or smaller micro-batch counts, or list fewer families")


def _prefer_lower_p95(results: list[Result]) -> str | None:
    """Among the fitting candidates whose spread (per micro-batch) overlaps the fastest one's, move
    the one with the lowest 95th percentile to the front: within the noise the run showed, the
    predicted order of their medians says little, and a plan that slips less is the safer pick."""
    top = results[0] if results else None
    if top is None or not top.fits or top.spread is None:
        return None
    m0 = top.structure.microbatches
    lo0, hi0 = top.spread.p05 / m0, top.spread.p95 / m0
    close: list[tuple[float, int, Spread]] = []
    for k, r in enumerate(results):
        if not r.fits or r.spread is None:
            continue
        m = r.structure.microbatches
        if r.spread.p05 / m <= hi0 and lo0 <= r.spread.p95 / m:
            close.append((r.spread.p95 / m, k, r.spread))
    _, k, spread = min(close, key=lambda c: (c[0], c[1]))
    if k == 0:
        return None
    pick = results.pop(k)
    results.insert(0, pick)
    return (f"pick: {pick.label} (p95 {spread.p95:.4g}) over {top.label} (p95 {top.spread.p95:.4g}): their "
            f"spreads overlap and it has the lower 95th percentile per micro-batch")


def _evaluate_light(args: tuple[TuneConfig, Structure]) -> list[Result]:
    out = _evaluate(*args)
    for r in out:
        r.schedule = None
    return out


def _rank_key(limit: float | None) -> Callable[[Result], tuple]:
    def key(r: Result) -> tuple:
        if r.step is None:
            return (3, 0.0, 0.0, False, r.label)
        # Time per micro-batch, so a sweep over micro-batch counts compares throughput.
        per_mb = r.step / r.structure.microbatches
        synth = r.structure.family == "synth"  # on a tie, the named family is easier to adopt
        if not r.fits:
            return (2, r.max_peak, per_mb, synth, r.label)
        return (1, per_mb, r.max_peak, synth, r.label)

    return key


def _evaluate(tc: TuneConfig, st: Structure) -> list[Result]:
    cfg = config_for(tc, st)
    fam_name = "zb-h1" if st.family == "synth" else st.family
    if st.family != "synth":
        try:
            get_family(fam_name).validate(cfg)
        except InputError as e:
            return [Result(st, None, rejected=_reason(str(e), tc.source))]
    estimate = estimated_ops(tc, st)  # as build_schedule bounds hostile sizes
    if estimate > MAX_OPS:
        return [Result(st, None, rejected=f"about {estimate:,} ops, more than the {MAX_OPS:,} pptl plans")]
    if st.family == "synth":
        # Its order depends on the costs: one schedule per split.
        rank_of = list(range(tc.pp))
        splits = splits_for(tc.model, rank_of)
        if st.method == "ilp":  # seconds each: the balanced split only
            splits = splits[:1]
        return [_time_synth(tc, st, sp) for sp in splits]
    schedule = get_family(fam_name).build(cfg)
    checked = _check(schedule)
    if isinstance(checked, str):
        return [Result(st, None, rejected=checked)]
    ctx = checked
    rank_of = _rank_of(schedule)
    splits = splits_for(tc.model, rank_of)
    if not splits:
        return [Result(st, None, rejected=f"{len(rank_of)} stages need at least that many layers "
                                          f"(model.layers={tc.model.layers})")]
    return [_time(tc, st, schedule, ctx, sp) for sp in splits]


def _reason(msg: str, source: str) -> str:
    head = f"{source}: "
    return msg[len(head):] if msg.startswith(head) else msg


def _check(schedule: Schedule) -> Context | str:
    ctx = Context(schedule)
    errors = [v for v in check_context(ctx) if v.severity == "error"]
    if errors or ctx.order is None:
        v = errors[0] if errors else None
        return f"invalid schedule: {v.code} {v.message}" if v else "invalid schedule: its DAG has a cycle"
    return ctx


def _rank_of(schedule: Schedule) -> list[int]:
    place: dict[int, int] = {}
    for op in schedule.ops:
        if op.lane == "compute" and op.direction == 0 and op.stage >= 0:
            place.setdefault(op.stage, op.rank)
    return [place[s] for s in range(schedule.num_stages)]


def _time_synth(tc: TuneConfig, st: Structure, sp: Split) -> Result:
    costs = stage_costs(tc.model, sp.layers)
    act, weight = stage_memory(tc.model, sp.layers)
    p = tc.pp
    mm = tc.memory
    act = [a * mm.split_scale for a in act]  # every micro-batch of synth splits its backward
    if st.inflight is not None:
        limit = [st.inflight * act[r] for r in range(p)]
    else:
        # What the activations may use: the limit less what the rank holds anyway, the messages
        # included (pptl run keeps each until the step ends; a rank of a one-stage-per-rank pipeline
        # sends and receives one per micro-batch and direction it has a neighbour in). Without them the
        # order fits its budget and its timed peak, which decides "fits", goes over.
        data = [mm.data * st.microbatches * ((r == 0) + (r == p - 1)) for r in range(p)]
        msgs = [mm.message * 2 * st.microbatches * ((r > 0) + (r < p - 1)) for r in range(p)]
        limit = [max(0.0, tc.memory_limit - weight[r] - data[r] - msgs[r] - mm.working  # type: ignore[operator]
                      - tc.model.i_working * act[r]) for r in range(p)]
    cfg = config_for(tc, st, sp)
    message = cfg.costs.comm_time(0.0)
    x = SynthInput(pp=p, microbatches=st.microbatches, F=[costs[s]["F"] for s in range(p)],
                   I=[costs[s]["I"] for s in range(p)], W=[costs[s]["W"] for s in range(p)],
                   activation=act, limit=limit, w_activation=tc.model.w_activation, message=message)
    notes: tuple[str, ...] = ()
    if st.method == "ilp":
        from pptl.tune.synth import greedy_orders
        from pptl.tune.synth_ilp import ilp_orders

        greedy = greedy_orders(x)
        orders, note = ilp_orders(x, horizon=sum(costs[s]["F"] + costs[s]["B"] for s in range(p)) * st.microbatches,
                                  time_limit=tc.ilp_time_limit, warm=_best_start(x, greedy))
        notes = (note,)
        if orders is None:  # the greedy candidate already stands for this order
            return Result(st, sp, skipped=note, notes=notes)
        schedule = build_synth(cfg, x, orders=orders)
    else:
        schedule = build_synth(cfg, x)
    checked = _check(schedule)
    if isinstance(checked, str):
        return Result(st, sp, rejected=checked, notes=notes)
    return replace(_time(tc, st, schedule, checked, sp, cfg=cfg), notes=notes)


def _best_start(x: SynthInput, greedy: dict[int, list[tuple[str, int]]]) -> dict[int, list[tuple[str, int]]]:
    """The ILP's start: the greedy order, or ZB-H1's when that fits the limit and is faster."""
    from pptl.schedules.zero_bubble import phase_table
    from pptl.tune.synth_ilp import order_makespan

    starts = [greedy]
    if x.microbatches >= x.pp:
        h1 = {r: [(op.kind, op.mb) for op in phase_table(r, x.pp, x.microbatches, 1)] for r in range(x.pp)}
        if all(_held_peak(seq, x.activation[r], x.w_activation) <= max(x.limit[r], x.activation[r]) + 1e-9
               for r, seq in h1.items()):
            starts.append(h1)
    return min(starts, key=lambda o: order_makespan(x, o))


def _held_peak(seq: list[tuple[str, int]], act: float, w: float) -> float:
    held = peak = 0.0
    for k, _ in seq:
        held += act if k == "F" else -act * ((1 - w) if k == "I" else w)
        peak = max(peak, held)
    return peak


def _time(tc: TuneConfig, st: Structure, schedule: Schedule, ctx: Context, sp: Split,
          cfg: Config | None = None) -> Result:
    try:
        tm = _timing(tc, st, schedule, ctx, sp, cfg)
    except InvalidScheduleError as e:  # an op the model has no cost for, or costs no plan could hold
        return Result(st, sp, rejected=str(e))
    start, end, dur = tm.start, tm.end, tm.dur
    makespan = max(end, default=0.0)
    act, weight = stage_memory(tc.model, sp.layers)
    busy = [0.0] * tc.pp
    for i, op in enumerate(schedule.ops):
        if op.lane == "compute":
            busy[op.rank] += dur[i]
    peaks = list(rank_peaks(schedule, start, end, act, weight, pp=tc.pp, w_activation=tc.model.w_activation,
                            i_working=tc.model.i_working, mm=tc.memory))
    bubble = 1 - sum(busy) / (makespan * tc.pp) if makespan > 0 else 0.0
    fits = tc.memory_limit is None or max(peaks) <= tc.memory_limit * (1 + 1e-9)
    spread = None
    if tc.jitter is not None:
        spread = step_spread(ctx.order, ctx.dag.pred, dur, [op.kind for op in schedule.ops],  # type: ignore[arg-type]
                             [op.lane == "compute" for op in schedule.ops], tc.jitter)
    return Result(st, sp, step=makespan, bubble=bubble, peak=tuple(peaks), fits=fits, spread=spread,
                  rejected=None if fits else "peak {} over the limit {}".format(*peak_and_limit(max(peaks),
                                                                                         tc.memory_limit)),
                  schedule=schedule, duty=tm.duty, costs=tm.costs, orders=_orders(schedule, st))


def peak_and_limit(peak: float, limit: float, digits: int = 6) -> tuple[str, str]:
    """``peak`` and ``limit`` as text, at ``digits`` significant digits or as many more as tell them
    apart: a peak just over its limit read "peak 11567.2 over the limit 11567.2" at ``:g``.

    Example: ``peak_and_limit(11567.1649, 11567.164)`` is ``("11567.1649", "11567.164")``.
    """
    a, b = f"{peak:.{digits}g}", f"{limit:.{digits}g}"
    for d in range(digits + 1, 18):
        if a != b:
            break
        a, b = f"{peak:.{d}g}", f"{limit:.{d}g}"
    return a, b


@dataclass(frozen=True)
class Timing:
    """One candidate timed: per op start, end and duration, the ranks' converged duty, and the
    costs (with ``rank_scale``) that give exactly these times in :func:`pptl.simulate.simulate`."""

    start: list[float]
    end: list[float]
    dur: list[float]
    duty: tuple[float, ...]
    costs: Costs


def _timing(tc: TuneConfig, st: Structure, schedule: Schedule, ctx: Context, sp: Split,
            cfg: Config | None = None) -> Timing:
    """``schedule`` timed under ``sp``'s costs (:func:`pptl.tune.costs.candidate_costs`), with each
    rank's compute at its duty factor when the duty exponent is set."""
    from pptl.simulate import durations
    from pptl.tune.costs import candidate_costs

    costs = candidate_costs(tc, schedule, sp.layers)
    compute = [op.lane == "compute" for op in schedule.ops]
    ranks = [op.rank for op in schedule.ops]
    n = len(compute)
    start, end = [0.0] * n, [0.0] * n
    pred = ctx.dag.pred
    order = ctx.order
    alpha = tc.alpha
    used = costs
    duty: tuple[float, ...] = ()
    dur: list[float] = []
    # Under a power cap a busy GPU clocks lower: compute runs at duty ** alpha of its full-duty
    # time, and no faster than at the GPU's top clock. The duty depends on the timing, so iterate
    # to a fixed point (a few passes converge: each rescale moves the makespan by a fraction of
    # alpha times the change in duty).
    for k in range(_DUTY_PASSES if alpha > 0 else 1):
        dur = durations(schedule, used)
        for v in order:  # type: ignore[union-attr]
            t = 0.0
            for u in pred[v]:
                if end[u] > t:
                    t = end[u]
            start[v], end[v] = t, t + dur[v]
        makespan = max(end, default=0.0)
        if alpha <= 0 or makespan <= 0:
            break
        work = [0.0] * tc.pp
        for i in range(n):
            if compute[i]:
                work[ranks[i]] += dur[i]
        new = tuple(min(1.0, w / makespan) for w in work)
        done = bool(duty) and max(abs(a - b) for a, b in zip(new, duty)) < 1e-4
        duty = new
        if done or k == _DUTY_PASSES - 1:
            break  # start/end stay those of ``used``
        used = replace(costs, rank_scale={r: max(tc.duty_floor.get(r, 0.0), max(d, 1e-3) ** alpha)
                                          for r, d in enumerate(duty)})
    return Timing(start, end, dur, duty, used)


def best_schedule(tc: TuneConfig, result: Result) -> Schedule:
    """The plan ``result`` was timed on: the same order (synth: the order it timed), its split's
    ``workload.stage_layers`` and the costs it was timed with, so that simulating it gives
    ``result.step``.

    Raises:
        InputError: ``result`` was not timed (a rejected candidate has no plan).
    """
    st, sp = result.structure, result.split
    if result.step is None or sp is None or result.costs is None:
        raise InputError(f"{result.label}: was not timed ({result.rejected}); it has no plan to write")
    cfg = config_for(tc, st, sp)
    schedule = result.schedule
    if schedule is None:
        if st.family == "synth":
            assert result.orders is not None  # every timed synth result keeps its order
            x = SynthInput(pp=tc.pp, microbatches=st.microbatches, F=[], I=[], W=[], activation=[], limit=[],
                           w_activation=tc.model.w_activation, message=0.0)
            schedule = build_synth(cfg, x, orders={r: list(seq) for r, seq in enumerate(result.orders)})
        else:
            schedule = get_family(st.family).build(config_for(tc, st))
    return schedule.copy_with(config=replace(cfg, costs=result.costs))


def _orders(schedule: Schedule, st: Structure) -> Orders | None:
    if st.family != "synth":
        return None
    return tuple(tuple((op.kind, op.mb) for op in schedule.lane_ops(r, "compute")) for r in range(schedule.pp))
