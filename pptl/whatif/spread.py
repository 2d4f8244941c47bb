"""Duration spread: how far each op's time strays from what the cost model says.

Vocabulary: an op's *factor* multiplies its planned duration (1: as planned). A :class:`Spread`
says how factors are drawn: per (stage, kind) of the compute ops, the empirical distribution a
measured run showed (:class:`Quantiles`, mean 1), a *step factor* common to every compute op of
one step (what moves a whole step: clocks, the host), a normal *jitter* on every op, and
*stragglers*, ranks whose compute is slower by a factor or a delay. A measured step also lasts a
little longer than its ops' span (the clock anchor to the first op): the *offset*, drawn from what
the run showed.

Everything here is pure; input from files (a timeline's ``meta.extra``) is bounded and checked
before it is used.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from pptl.errors import InputError
from pptl.fields import MAX_NUMBER
from pptl.formats._quote import counted
from pptl.timeline import unit_scale
from pptl.whatif.opening import Opening, fit_opening

__all__ = ["QUANTILE_POINTS", "Quantiles", "Jitter", "Straggler", "Spread", "parse_jitter", "parse_straggler",
           "spread_from_timeline", "first_ops", "delay_in", "parse_duty_exponent", "MAX_STEP_RECORDS",
           "measured_only", "measured_steps", "SELF_TOLERANCE"]

#: Points of every quantile table (0, 1/(Q-1), ..., 1): percentiles, min and max included.
QUANTILE_POINTS = 101
#: Most (op, step) durations read from a timeline's per-step record.
MAX_STEP_RECORDS = 2_000_000
#: Compute lanes: where the step factor and the measured spreads apply (messages keep their times).
_COMPUTE = "compute"


@dataclass(frozen=True, slots=True)
class Quantiles:
    """An empirical distribution of a factor, as its quantiles at ``QUANTILE_POINTS`` even steps
    (``values[0]`` the smallest sample, ``values[-1]`` the largest)."""

    values: tuple[float, ...]
    count: int
    """Samples it was made from."""

    @staticmethod
    def of(samples: Sequence[float] | Any, *, unit_mean: bool = True) -> "Quantiles":
        """Quantiles of ``samples`` (non-negative, finite), scaled to mean 1 when ``unit_mean``."""
        import numpy as np

        x = np.asarray(samples, dtype=np.float64).reshape(-1)
        if x.size == 0:
            raise ValueError("no samples")
        q = np.quantile(x, np.linspace(0.0, 1.0, QUANTILE_POINTS))
        if unit_mean:
            # Scaled by the table's own mean, not the samples': draws interpolate between quantiles, and
            # from few samples that mean differs (1, 1, 1, 5 averages 2; its table 1.67).
            m = float((q[1:] + q[:-1]).sum() / (2 * (QUANTILE_POINTS - 1)))
            q = q / m if m > 0 else np.ones_like(q)
        return Quantiles(tuple(float(v) for v in q), int(x.size))

    @property
    def mean(self) -> float:
        """Mean of the piecewise-linear distribution the table stands for (what draws average)."""
        v = self.values
        return sum((a + b) / 2 for a, b in zip(v, v[1:])) / (len(v) - 1)


@dataclass(frozen=True, slots=True)
class Jitter:
    """Every op's factor drawn from a normal distribution around 1 (clipped at 0)."""

    sd: float
    """Standard deviation of the factor (0.05 for ``--jitter 5%``)."""


@dataclass(frozen=True, slots=True)
class Straggler:
    """A rank whose compute-lane ops run slower: ``factor`` times as long, plus ``delay``."""

    rank: int
    factor: float = 1.0
    delay: float = 0.0
    """Added to each matching op, in ``unit``."""
    unit: str = ""
    """"" (the plan's own unit), "ms" or "us"."""
    mb: int | None = None
    """Only the rank's compute ops of this micro-batch, each of them (in 1F1B its F and its B: the
    step can grow by twice the delay); an overlapped FB counts once for either of its two
    micro-batches. None: all of them."""


@dataclass(frozen=True)
class Spread:
    """How op durations are drawn (the empty spread: every op as planned)."""

    stages: Mapping[tuple[int, str], Quantiles] = field(default_factory=dict)
    """(stage, kind) -> factor of the compute ops of that stage and kind."""
    ranks: Mapping[tuple[int, str], Quantiles] = field(default_factory=dict)
    """(rank, kind) -> factor: for a plan whose stages the run did not have (more chunks per rank)."""
    step: Quantiles | None = None
    """Factor common to every compute op of one step."""
    offset: tuple[float, ...] = ()
    """Measured step time minus its ops' span, one per measured step (added to each sample)."""
    jitter: Jitter | None = None
    stragglers: tuple[Straggler, ...] = ()
    units: str = ""
    """Unit of ``offset`` and of the plan it was measured for ("" when made by hand)."""
    source: str = ""
    """The measured timeline it came from ("" when made by hand)."""
    pp: int = 0
    """Ranks of the measured run (0 when made by hand)."""
    duty: Mapping[int, float] = field(default_factory=dict)
    """Rank -> share of the measured step its compute lane was busy (the duty its costs were measured at)."""
    duty_exponent: float = 0.0
    """alpha of the duty model (``pptl tune``'s ``device.duty_exponent``, docs/tune.md): under a power
    cap an op takes ``u ** alpha`` of its full-duty time on a rank busy a share ``u`` of the step, so
    a plan's ranks run their compute at ``(u_plan / u_run) ** alpha`` of the run's op times. 0: off."""
    duty_learnt: bool = False
    """``duty_exponent`` was learnt from the measured run (:mod:`pptl.whatif.duty`), not given."""
    duty_range: tuple[float, float] | None = None
    """Where the run leaves alpha (:func:`pptl.whatif.duty.duty_exponent_range`): each sample draws
    its own alpha uniformly in it, so a plan's band holds what the run cannot tell of how op times
    move with duty (None or a point: every sample at ``duty_exponent``)."""
    free_clock: str | None = None
    """Where the run's clock record showed no rank held by a power or thermal limit, how its ranks ran
    (:func:`pptl.power.unthrottled`): why no duty exponent was learnt."""
    first: Mapping[int, float] = field(default_factory=dict)
    """Rank -> how much longer (in ``units``) the run's first compute op of a step on that rank ran
    than the other ops of its stage and kind: the op right after the barrier that opens each step
    pays it once a step whatever the plan, so it is kept apart from its group's mean and factors
    and added to the first compute op of the rank in a plan."""
    send_hold: float = 0.0
    """How long a SEND held its rank's compute lane (a run that sent on the compute stream, CUDA
    ``sync-send``: the median measured SEND, in ``units``); the rest of the message's time, from the
    SEND's start to the data at the receiver, goes to its RECV, off the compute lane. 0: a SEND
    holds its lane for the whole message."""
    duty_moves: Mapping[int, float] = field(default_factory=dict)
    """Stage -> log(u_run[rank that runs it] / u_run[rank it was measured on]): the duty move of a
    cost taken from another rank's stage (:func:`pptl.whatif.roles.by_role`), which a sample's own
    alpha scales too."""
    opening: Mapping[int, Opening] = field(default_factory=dict)
    """Rank -> how fast it computed in the first and the second half of its work in a step of the
    run (:mod:`pptl.whatif.opening`): a plan's compute op on that rank is scaled by the factor of
    the work the rank has done when it starts."""

    b_parts: bool = False
    """The run's B ran as I then W and marked where its I part ended (:func:`pptl.planning.b_parts`):
    its costs give I and W their measured parts, and a plan's I and W, which the run never ran as ops,
    vary as the B they were parts of."""

    @property
    def measured(self) -> bool:
        return bool(self.source)

    def factor_for(self, stage: int, rank: int, kind: str) -> Quantiles | None:
        """The measured factor of a compute op: its (stage, kind), else its (rank, kind), else None; an
        I or W the run only ran inside its B (:attr:`b_parts`), that B's."""
        q = self.stages.get((stage, kind))
        q = q if q is not None else self.ranks.get((rank, kind))
        if q is None and self.b_parts and kind in ("I", "W"):
            return self.factor_for(stage, rank, "B")
        return q

    def describe(self) -> str:
        """One line: where the spread comes from."""
        parts = []
        if self.measured:
            step = f", step factor p5-p95 {_band(self.step)}" if self.step is not None else ""
            parts.append(f"measured {self.source} ({len(self.stages)} stage x kind spreads{step})")
        if self.duty_exponent > 0:
            busy = ", ".join(f"{u:.2f}" for _, u in sorted(self.duty.items()))
            how = "learnt from the run, whose" if self.duty_learnt else "the run's"
            span = (f", each sample's drawn in {self.duty_range[0]:.2f}-{self.duty_range[1]:.2f}"
                    if self.duty_range is not None and self.duty_range[1] > self.duty_range[0] else "")
            parts.append(f"duty exponent {self.duty_exponent:.2f} ({how} ranks busy {busy}{span})")
        elif self.duty_learnt and self.free_clock is not None:
            parts.append(f"duty exponent 0 (no power or thermal limit held the run's clocks: {self.free_clock})")
        if self.opening:
            each = ", ".join(f"{o.early:.3f}/{o.late:.3f}" for _, o in sorted(self.opening.items()))
            parts.append(f"step opening {each} per rank (op time over its mean, first/second half of the "
                         f"rank's work in a step)")
        if self.jitter is not None:
            parts.append(f"jitter {100 * self.jitter.sd:g}%")
        for s in self.stragglers:
            what = []
            if s.factor != 1.0:
                what.append(f"x{s.factor:g}")
            if s.delay:
                what.append(f"+{s.delay:g}{s.unit}" + (f" on each op of mb {s.mb}" if s.mb is not None else ""))
            parts.append(f"rank {s.rank} {' '.join(what) or 'as planned'}")
        return "; ".join(parts) or "no spread (every op as planned)"


def _band(q: Quantiles) -> str:
    n = QUANTILE_POINTS - 1
    return f"{q.values[n * 5 // 100]:.3f}-{q.values[n * 95 // 100]:.3f}"


# --------------------------------------------------------------------------------------------
# By hand: --jitter and --straggler

_PERCENT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(%?)\s*$")


def parse_jitter(text: str) -> Jitter:
    """``5%`` or ``0.05``: the standard deviation of every op's factor.

    Raises:
        InputError: not a number, negative, or 100% and more (a factor below 0 half the time).
    """
    m = _PERCENT.match(text)
    if not m:
        raise InputError(f"--jitter: got '{text}', expected a share such as 5% or 0.05")
    sd = float(m.group(1)) / (100.0 if m.group(2) else 1.0)
    if not (math.isfinite(sd) and 0.0 <= sd < 1.0):
        raise InputError(f"--jitter: got '{text}', expected 0% up to (not including) 100%")
    return Jitter(sd)


_DELAY = re.compile(r"^\+([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)(ms|us|s)?(?:@mb([0-9]+))?$")
_FACTOR = re.compile(r"^x([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)$")
_STRAGGLER_HELP = "expected rank=R,xFACTOR (rank=2,x1.3) or rank=R,+DELAY[ms|us|s][@mbK] (rank=1,+2ms@mb7)"
#: Largest straggler factor: a rank a million times slower is a hang, not a straggler, and a plan's
#: times (each at most 1e15) times more would leave the range every writer keeps finite.
_MAX_FACTOR = 1e6
_MAX_TEXT = f"{MAX_NUMBER:.0e}".replace("e+", "e")  # 1e15, as users write it


def parse_straggler(text: str) -> tuple[Straggler, ...]:
    """``rank=2,x1.3`` (rank 2's compute 1.3 times as long), ``rank=1,+2ms`` (each of its compute
    ops 2 ms longer), ``rank=1,+2ms@mb7`` (each of its compute ops of micro-batch 7 2 ms longer).
    The parts combine as the same parts in repeated flags do: factors multiply, delays on every op
    add, and each ``@mb`` delay applies to its own micro-batch (``rank=0,x1.1,x2,+0.5ms@mb1,+1ms@mb2``).
    A delay without a unit is in the plan's unit.

    Returns the spec's effects: the first carries the factor and the delay on every op, then one per
    further unit or micro-batch (what :func:`pptl.whatif.montecarlo.monte_carlo` applies in turn).

    Raises:
        InputError: a malformed part, a rank below 0, a factor not above 0, a value past its bound,
            or no effect named.
    """
    parts = [p.strip() for p in text.split(",")]
    if not parts or not parts[0].startswith("rank="):
        raise InputError(f"--straggler: got '{text}', {_STRAGGLER_HELP}")
    r = parts[0][5:]
    if not r.isdigit() or len(r) > 7:
        raise InputError(f"--straggler: got rank '{r}' in '{text}', expected a rank 0 or more")
    if len(parts) < 2:
        raise InputError(f"--straggler: got '{text}' (no effect), {_STRAGGLER_HELP}")
    factor = 1.0
    # (unit, micro-batch) -> summed delay: delays of one unit and one target add up exactly; a delay
    # in another unit stays its own effect until the plan's unit is known (delay_in).
    delays: dict[tuple[str, int | None], float] = {}
    for p in parts[1:]:
        f, d = _FACTOR.match(p), _DELAY.match(p)
        if f:
            x = float(f.group(1))
            if not math.isfinite(x):
                raise InputError(f"--straggler: got factor '{p}' in '{text}', expected a finite factor (x1.3)")
            if not 0.0 < x <= _MAX_FACTOR:
                raise InputError(f"--straggler: got factor '{p}' in '{text}', expected x above 0 and at most "
                                 f"x{_MAX_FACTOR:g} (x1.3)")
            factor *= x
            if factor > _MAX_FACTOR:
                raise InputError(f"--straggler: the factors of '{text}' multiply to x{factor:g}, more than "
                                 f"x{_MAX_FACTOR:g}")
        elif d:
            delay = float(d.group(1))
            if not math.isfinite(delay):
                raise InputError(f"--straggler: got delay '{p}' in '{text}', expected a finite time (+2ms)")
            if delay > MAX_NUMBER:
                raise InputError(f"--straggler: got delay '{p}' in '{text}', expected a time in 0..{_MAX_TEXT} "
                                 f"(+2ms)")
            key = (d.group(2) or "", int(d.group(3)) if d.group(3) is not None else None)
            delays[key] = delays.get(key, 0.0) + delay
            if delays[key] > MAX_NUMBER:
                raise InputError(f"--straggler: the delays of '{text}' add up to more than {_MAX_TEXT}")
        else:
            raise InputError(f"--straggler: got '{p}' in '{text}', {_STRAGGLER_HELP}")
    rank = int(r)
    every = [(u, mb, v) for (u, mb), v in delays.items() if mb is None]
    once = [(u, mb, v) for (u, mb), v in delays.items() if mb is not None]
    head_unit, head_mb, head_delay = every.pop(0) if every else ("", None, 0.0)
    out = [Straggler(rank, factor, head_delay, head_unit, head_mb)]
    out += [Straggler(rank, 1.0, v, u, mb) for u, mb, v in every + once]
    if len(out) > 1 and factor == 1.0 and not head_delay:
        out.pop(0)  # only hiccups: a first effect of nothing would read "as planned" among them
    return tuple(out)


def delay_in(s: Straggler, units: str, *, name: str = "") -> float:
    """The straggler's delay in the plan's unit ``units`` ("ms", "us" or a cost-model unit);
    ``name``, the plan's file, for the error.

    Raises:
        InputError: a delay with a time unit on a plan in cost-model units.
    """
    if not s.unit or s.delay == 0.0:
        return s.delay
    scale = unit_scale(s.unit, units)
    if scale is None:
        at = f"@mb{s.mb}" if s.mb is not None else ""
        raise InputError(f"--straggler: rank={s.rank},+{s.delay:g}{s.unit}{at}: {name or 'the plan'} is in "
                         f"'{units or 'unit'}' "
                         f"(cost-model units), not time; give the delay without a unit (+{s.delay:g}) or "
                         f"calibrate with --from a measured run")
    return s.delay * scale


# --------------------------------------------------------------------------------------------
# From a measured timeline

def spread_from_timeline(tl: Any, source: str) -> Spread:
    """The spread a measured timeline shows: per (stage, kind) of its compute ops the factor of
    each op's duration over its group's mean; with ``pptl run``'s per-step record
    (``meta.extra['step_ops']``), over all timed steps, with the step factor (a step's compute
    time over the mean step's) taken out of each op's factor and kept as its own distribution.
    Without it (one step, e.g. an imported profiler trace), the step factor comes from the run's
    step times (``meta.extra['step_ms']``) when there are two or more.

    Raises:
        InputError: no compute events, or a malformed per-step record.
    """
    import numpy as np

    events = [e for e in tl.events if e.lane == _COMPUTE and e.stage >= 0]
    if not events:
        raise InputError(f"{source}: has no compute ops with a stage to measure a spread from (expected the "
                         f"timeline of pptl run or a profiler trace)")
    extra = tl.meta.extra if isinstance(tl.meta.extra, Mapping) else {}
    record = _step_record(extra.get("step_ops"), source)
    by_op = {e.op: e for e in events}
    if record is not None:
        ids = [op for op in record[0] if op in by_op]
        d = np.array([record[1][op] for op in ids], dtype=np.float64)  # (ops, steps)
        evs = [by_op[op] for op in ids]
        spans = record[2]
    else:
        evs = events
        d = np.array([[e.duration] for e in evs], dtype=np.float64)
        spans = None
    if d.size == 0:
        raise InputError(f"{source}: its per-step record names none of its compute ops")
    keys = [(e.stage, e.kind) for e in evs]
    group = {k: g for g, k in enumerate(dict.fromkeys(keys))}
    gid = np.array([group[k] for k in keys])
    lead = first_ops(tl)
    first = np.array([e.op in lead for e in evs], dtype=bool)
    alone = np.bincount(gid, weights=~first, minlength=len(group)) == 0  # a group of its first op only
    kept = ~first | alone[gid]
    sums = np.bincount(gid[kept], weights=d[kept].sum(axis=1), minlength=len(group))
    counts = np.bincount(gid[kept], minlength=len(group)) * d.shape[1]
    mean = sums / np.maximum(counts, 1)
    expected = mean[gid]  # (ops,) planned-by-mean duration of each op
    lead_extra: dict[int, float] = {}
    for i in np.flatnonzero(~kept).tolist():
        own = float(d[i].mean())
        lead_extra[evs[i].rank] = own - float(expected[i])
        expected[i] = own  # the step factor sees the first op as it ran
    step = None
    offset: tuple[float, ...] = ()
    steps_ms = _floats(extra.get("step_ms"))
    if d.shape[1] >= 2:
        total = float(expected.sum())
        c = d.sum(axis=0) / total if total > 0 else np.ones(d.shape[1])
        step = Quantiles.of(c)
        resid = d / (np.maximum(c, 1e-300)[None, :] * np.where(expected > 0, expected, 1.0)[:, None])
        if spans is not None and len(steps_ms) == len(spans):
            offset = tuple(max(0.0, s - sp) for s, sp in zip(steps_ms, spans))
    else:
        resid = d / np.where(expected > 0, expected, 1.0)[:, None]
        if len(steps_ms) >= 2:
            step = Quantiles.of(steps_ms)
        med = extra.get("median_step_ms")
        if isinstance(med, (int, float)) and not isinstance(med, bool) and math.isfinite(med):
            span = max(e.end for e in tl.events) - min(e.start for e in tl.events)
            offset = (max(0.0, float(med) - span),)
    stages: dict[tuple[int, str], Quantiles] = {}
    per_rank: dict[tuple[int, str], list[Any]] = {}
    for k, g in group.items():
        rows = resid[(gid == g) & kept]
        stages[k] = Quantiles.of(rows)
    for e, row, keep in zip(evs, resid, kept.tolist()):
        if keep:
            per_rank.setdefault((e.rank, e.kind), []).append(row)
    ranks = {k: Quantiles.of(np.concatenate(v)) for k, v in per_rank.items()}
    # Each op's time over every timed step (the group means above are over the same record).
    ran: dict[int, list[tuple[float, float, float, bool]]] = {}
    for e, row, g, lead in zip(evs, d.mean(axis=1).tolist(), gid.tolist(), first.tolist()):
        ran.setdefault(e.rank, []).append((e.start, row, float(mean[g]), lead))
    opening = {}
    for r, ops in sorted(ran.items()):
        o = fit_opening([(t, m, lead) for _, t, m, lead in sorted(ops, key=lambda x: x[0])])
        if o is not None:
            opening[r] = o
    from pptl.planning import b_parts

    return Spread(stages=stages, ranks=ranks, step=step, offset=offset, units=tl.meta.units, source=source,
                  pp=int(tl.meta.pp or (max(e.rank for e in tl.events) + 1)), duty=_duty(tl), first=lead_extra,
                  opening=opening, b_parts=b_parts(tl) is not None)


def first_ops(tl: Any) -> set[str]:
    """Ids of each rank's first compute op with a stage (the earliest start) in a timeline."""
    lead: dict[int, Any] = {}
    for e in tl.events:
        if e.lane == _COMPUTE and e.stage >= 0 and (e.rank not in lead or e.start < lead[e.rank].start):
            lead[e.rank] = e
    return {e.op for e in lead.values()}


def _duty(tl: Any) -> dict[int, float]:
    """Per rank: compute-lane time over the step's span (first start to last end)."""
    t0 = min(e.start for e in tl.events)
    span = max(e.end for e in tl.events) - t0
    busy: dict[int, float] = {}
    for e in tl.events:
        if e.lane == _COMPUTE:
            busy[e.rank] = busy.get(e.rank, 0.0) + e.duration
    return {r: min(1.0, b / span) for r, b in sorted(busy.items())} if span > 0 else {}


def parse_duty_exponent(text: str | float) -> float | None:
    """``--duty-exponent``: 0 (off) to 1, or ``learn`` (None: learnt from the ``--from`` run).

    Raises:
        InputError: not ``learn`` nor a number, outside 0..1 or not finite.
    """
    if isinstance(text, str) and text.strip().lower() == "learn":
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"--duty-exponent: got '{text}', expected 'learn' or a number 0 (off) to 1") from None
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise InputError(f"--duty-exponent: got {value:g}, expected 0 (off) to 1 (pptl tune fitted 0.25-0.29 on "
                         f"H200s, docs/tune.md)")
    return value


#: How far a run's own plan, timed from the run, may stray from the median step the run measured before
#: ``pptl whatif`` and ``pptl tune`` say so: the issue's 3% on p95. Over the 36 calibrating runs stored under
#: tests/data/whatif_gpu (2 H200s) whatif's samples strayed 1.4% at most, and tune's ranking 2.2% over the
#: stored cross-validation runs; a run whose steps hold time its ops do not (a host issuing ops as late as
#: the GPU ends them, receives that wait for their issue) strayed 10.9% (docs/whatif.md "Call 34").
SELF_TOLERANCE = 0.03


def measured_steps(extra: Mapping[str, Any]) -> list[float]:
    """The timed steps a run recorded (``meta.extra.step_ms``, pptl run's), each finite and positive;
    [] where there is no such record."""
    return [x for x in _floats(extra.get("step_ms")) if x > 0]


def _floats(v: Any) -> list[float]:
    """A list of finite non-negative numbers from file data, else []."""
    if not isinstance(v, list) or len(v) > MAX_STEP_RECORDS:
        return []
    out = []
    for x in v:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not (math.isfinite(x) and x >= 0):
            return []
        out.append(float(x))
    return out


def _step_record(raw: Any, source: str) -> tuple[list[str], dict[str, list[float]], list[float]] | None:
    """``meta.extra['step_ops']`` of ``pptl run``: ``{"span_ms": [per step], "ms": {op id: [per step]}}``.

    Returns (op ids, durations per op, span per step), or None when absent.

    Raises:
        InputError: present but malformed (the message names the field).
    """
    if raw is None:
        return None
    where = f"{source}: field 'meta.extra.step_ops"
    if not isinstance(raw, Mapping) or not isinstance(raw.get("ms"), Mapping):
        raise InputError(f"{where}': expected {{\"span_ms\": [...], \"ms\": {{op id: [ms per step]}}}}")
    spans = _floats(raw.get("span_ms"))
    k = len(spans)
    if k == 0:
        raise InputError(f"{where}.span_ms': expected a list of step spans >= 0 (ms)")
    ms = raw["ms"]
    if len(ms) * k > MAX_STEP_RECORDS:
        raise InputError(f"{where}': {len(ms):,} ops x {k} steps, more than the {MAX_STEP_RECORDS:,} durations "
                         f"pptl reads")
    out: dict[str, list[float]] = {}
    for op, row in ms.items():
        vals = _floats(row)
        if not isinstance(op, str) or len(vals) != k:
            raise InputError(f"{where}.ms[{str(op)[:60]!r}]': expected {counted(k, 'duration')} >= 0 (one per step)")
        out[op] = vals
    return list(out), out, spans


def measured_only(path: Any, loaded: Any, flag: str) -> None:
    """Refuse a file whose timeline was simulated, not measured (``meta.source``): its durations are
    the cost model's, so a spread or costs taken from it would be labelled measured and say nothing
    the plan does not. ``pptl run -o`` timelines and imported profiler traces say ``measured``.

    Raises:
        InputError: ``loaded`` (what :func:`pptl.formats.loader.load_any` read from ``path``) is a
            plan or a planned timeline.
    """
    tl = loaded.timeline
    if tl is None or tl.meta.source == "measured":
        return
    what = "a plan" if loaded.kind == "plan" else f"a {tl.meta.source or 'planned'} timeline"
    raise InputError(f"{path} is {what}, not a measured run; {flag} takes a 'pptl run -o' timeline (or a "
                     f"profiler trace)")
