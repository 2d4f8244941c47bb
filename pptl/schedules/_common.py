"""Pieces every family shares: the family record, stage placement, and turning per-rank compute
orders into a full schedule with SEND/RECV ops and the derived dependencies.

A family only decides the order of compute ops on each rank (its phase table); everything that
follows from the model (communication, dependencies) is built here the same way for all.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from pptl.config import Config
from pptl.errors import InputError
from pptl.ir import Op, Schedule
from pptl.schedules._assemble import assemble
from pptl.schedules._order import Order, phases

__all__ = [
    "Family",
    "Runtime",
    "flush_bubble",
    "flush_assumptions",
    "loop_rank",
    "v_rank",
    "compute_op",
    "assemble",
    "Order",
    "phases",
    "require",
    "uniform_cost_assumptions",
    "span_idle",
    "required_roles",
    "overlap_metrics",
]


@dataclass(frozen=True)
class Runtime:
    """How ``pptl run`` executes a family whose ops are not all training ops (F, B, I, W, FB,
    SEND, RECV). Names only: the executor is imported by :mod:`pptl.run.families`, with torch,
    so the core never imports the runtime."""

    executor: str
    """``module:Class`` of the family's executor (a subclass of :class:`pptl.run.executor.Executor`)."""
    kinds: frozenset[str]
    """The op kinds, beyond training's, that the executor runs."""
    check: Callable[[Schedule, str], None] | None = None
    """(schedule, source) -> None: refuses, before any process starts, a plan the executor cannot
    run (metadata a hand-written plan lacks...), raising InputError."""
    collectives: frozenset[str] = frozenset()
    """Kinds through which the family's ranks share data without SEND/RECV pairs: collectives (a
    broadcast, an all-to-all) and reads of buffers other ranks fill (IPC halves, the H2D buffer). A dependency
    may cross ranks into or out of one of these; every other crossing still needs its SEND/RECV."""


@dataclass(frozen=True)
class Family:
    """What a schedule family registers. ``pptl schedules`` prints these."""

    name: str
    summary: str
    constraints: str
    """The rules ``validate`` enforces, in words."""
    validate: Callable[[Config], None]
    """Raises InputError with the field, the value and the fix when a config does not fit."""
    build: Callable[[Config], Schedule]
    bubble: Callable[[Config], float | None]
    """Textbook idle time per rank with zero communication cost (None where none is published)."""
    bubble_formula: str
    memory: Callable[[Config], float | None]
    """Textbook peak activation on the busiest rank, in activation units."""
    memory_formula: str
    source: str = ""
    """Where the definition comes from (paper, repository)."""
    style: str = "default"
    """Figure style ``--style auto`` picks (default, dualpipe, moe, weight-update)."""
    aliases: tuple[str, ...] = field(default_factory=tuple)
    assumptions: Callable[[Config], list[str]] | None = None
    """Why ``bubble``'s formula does not hold for a config, one reason a line (empty: it holds).
    The checker turns each reason into a warning."""
    takes_options: bool = False
    """Whether the family reads (and checks) ``options:``; for the others any option is a typo."""
    own_costs: bool = False
    """Whether the family reads cost keys of its own (MoE sub-ops, weight-update copies), not only the
    op kinds F, B, I, W, FB; for the others any other key is a typo."""
    step_unit: str = "microbatches"
    """What one step is made of, as titles count it (``microbatches=8``; the weight update's buckets)."""
    memory_label: str | None = "peak act."
    """The plan table's memory column (peak activation units per rank); None where the family holds
    no activations and the column would only print zeros."""
    extra_metrics: Callable[[Schedule, Any], dict] | None = None
    """Family metrics merged into ``pptl plan``'s (schedule, simulation) -> JSON-ready dict; its
    optional ``report`` key holds lines the text output prints."""
    runtime: Runtime | None = None
    """How ``pptl run`` executes it; None: the training executor runs it."""
    kinds: frozenset[str] = frozenset({"F", "B", "I", "W"})
    """The compute kinds its plans are made of. A family without a backward kind (inference) plans
    forwards only, and the missing-work check (PP003) then asks each stage and micro-batch for its F
    alone."""
    memory_bound: bool = False
    """Whether ``memory`` is a bound the family's plans keep (PP023 warns when a rank's simulated peak
    passes it); the other families' formulas describe rank 0 or the usual case."""
    memory_target: Callable[[Config], tuple[float, str]] | None = None
    """What the family promises a rank holds at most, in activation units, and that promise in words
    (the V schedules: a share of 1F1B's); PP023 warns when a plan's peak passes it, which a plan can
    where the promise is out of reach (the words say why)."""
    torch_schedule: str = ""
    """torch.distributed.pipelining's schedule class that places its stages, where it is not the one
    its placement implies (1F1B for one stage per rank, Interleaved1F1B for a loop, ZBVZeroBubble
    for a V): ``pptl export --to torchtitan`` names it."""


def required_roles(family: Family | None) -> tuple[str, ...]:
    """The work roles (:func:`pptl.deps.roles`: F, G the input gradient, W the weight gradient) a
    plan of ``family`` covers for every stage and micro-batch: all three unless its kinds hold no
    backward. A plan of no family (an imported file) is a training plan."""
    if family is None or family.kinds & {"B", "I", "W", "FB"}:
        return ("F", "G", "W")
    return ("F",)


def require(cond: bool, cfg: Config, field_name: str, value: object, expected: str) -> None:
    """Raise the one-line config error every family uses."""
    if not cond:
        raise InputError(f"{cfg.source}: field '{field_name}': got {value}, {expected} for schedule '{cfg.schedule}'")


def flush_bubble(cfg: Config) -> float:
    """(p-1)(F+B): each rank idles while the first micro-batch fills and the last drains the pipeline."""
    c = cfg.costs
    return (cfg.pp - 1) * (c.lookup("F") + c.lookup("B"))


def flush_assumptions(cfg: Config) -> list[str]:
    """Why :func:`flush_bubble` is not exact for ``cfg``: messages that take time, costs that differ
    by stage, or B that is not I + W (GPipe, 1F1B, interleaved 1F1B with its chunk's F and B)."""
    return uniform_cost_assumptions(cfg, ("F", "B"))


def loop_rank(stage: int, pp: int) -> tuple[int, int]:
    """Looped placement: stage s on rank s % pp, chunk s // pp (GPipe, 1F1B, interleaved)."""
    return stage % pp, stage // pp


def v_rank(stage: int, pp: int) -> tuple[int, int]:
    """V placement: rank r holds stages r and 2pp-1-r (ZB-V, DualPipeV)."""
    return (stage, 0) if stage < pp else (2 * pp - 1 - stage, 1)


def compute_op(kind: str, rank: int, stage: int, mb: int, chunk: int = 0, direction: int = 0,
               pair: tuple[int, int, int] | None = None) -> Op:
    # Positional: keywords cost a third more.
    return Op(kind, rank, "compute", stage, mb, direction, chunk, pair)


#: Relative difference under which a plan's B counts as its I + W for the textbook bubble formulas.
B_IW_TOLERANCE = 1e-3


def uniform_cost_assumptions(cfg: Config, keys: Iterable[str]) -> list[str]:
    """Reasons a textbook bubble formula over cost ``keys`` does not hold for ``cfg``.

    Every published bubble formula assumes zero communication time, one duration per key for
    every stage, and B = I + W; families add their own conditions on top.
    """
    c = cfg.costs
    keys = tuple(keys)
    out: list[str] = []
    if c.comm_time(0.0) > 0:
        out.append(f"communication takes {c.comm_time(0.0):g} per message (the formula assumes zero)")
    varied = sorted({k for per in c.stages.values() for k in per if k in keys})
    if varied:
        out.append(f"per-stage costs for {', '.join(varied)} (the formula assumes one value per kind)")
    b, i, w = (c.lookup(k) for k in ("B", "I", "W"))
    # Measured costs (pptl tune fits B and its I and W parts apart) agree to a few parts in a million, and
    # no formula's value moves with that: B counts as I + W within 0.1%.
    if "B" in keys and None not in (b, i, w) and abs(b - (i + w)) > B_IW_TOLERANCE * max(abs(b), abs(i + w)):
        out.append(f"B={b:g} is not I+W={i + w:g}")
    return out


def span_idle(schedule: Schedule, start: list[float], end: list[float], lane: str = "compute") -> dict[int, float]:
    """Per rank: idle time on ``lane`` between the rank's own first start and last end.

    This is the zero-bubble paper's per-stage measure (first F to last W); the simulator's
    ``RankMetrics.idle`` counts idle time against the whole makespan instead, which adds the
    stagger of a rank's start and end. Notes: O(ops) in numpy (``bincount`` adds each rank's
    durations in op order).
    """
    table = schedule.table
    rows = np.flatnonzero(table.where("lane", (lane,)))
    if not rows.size:
        return {}
    s = np.asarray(start, dtype=np.float64)[rows]
    e = np.asarray(end, dtype=np.float64)[rows]
    ranks, at = np.unique(table.rank[rows], return_inverse=True)
    at = at.reshape(-1)
    first = np.full(ranks.size, np.inf)
    np.minimum.at(first, at, s)
    last = np.full(ranks.size, -np.inf)
    np.maximum.at(last, at, e)
    busy = np.bincount(at, weights=e - s, minlength=ranks.size)
    return dict(zip(ranks.tolist(), (last - first - busy).tolist()))


def _stages_held(schedule: Schedule) -> int:
    """The most (direction, stage) pairs one rank runs forwards of (F or FB on its compute lane)."""
    table = schedule.table
    rows = np.flatnonzero(table.where("kind", ("F", "FB")) & table.where("lane", ("compute",)))
    if not rows.size:
        return 0
    held = np.unique(np.stack([table.rank[rows], table.direction[rows], table.stage[rows]], axis=1), axis=0)
    return int(np.unique(held[:, 0], return_counts=True)[1].max())


def overlap_metrics(schedule: Schedule, sim: Any) -> dict[str, Any]:
    """Family metrics of the zero-bubble and DualPipe families (``Family.extra_metrics``): idle time
    within each rank's span, the model copies the pipeline holds (DualPipe: 2) and the stages
    (weights) each rank holds."""
    from pptl.schedules._pipeline_meta import PipelineMeta  # here: asking for one family loads only its module

    spans = span_idle(schedule, sim.start, sim.end)
    copies = PipelineMeta.of(schedule).copies
    per_rank = _stages_held(schedule)
    return {
        "span_idle": [spans.get(r, 0.0) for r in range(schedule.pp)],
        "parameter_copies": copies,
        "stages_per_rank": per_rank,
        "report": [
            f"idle within each rank's own span (first op to last op): max {max(spans.values(), default=0.0):g}",
            f"parameters: {copies} cop{'ies' if copies != 1 else 'y'} of the model, {per_rank} stage(s) per rank",
        ],
    }
