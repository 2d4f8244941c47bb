"""Pieces every family shares: the family record, stage placement, and turning per-rank compute
orders into a full schedule with SEND/RECV ops and the derived dependencies.

A family only decides the order of compute ops on each rank (its phase table); everything that
follows from the model (communication, dependencies) is built here the same way for all.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from pptl.config import Config
from pptl.deps import roles, training_deps
from pptl.errors import InputError
from pptl.ir import Op, Schedule, ScheduleBuilder

__all__ = [
    "Family",
    "flush_bubble",
    "loop_rank",
    "v_rank",
    "compute_op",
    "assemble",
    "require",
    "backward_ops",
    "uniform_cost_assumptions",
    "span_idle",
    "overlap_metrics",
]


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
    extra_metrics: Callable[[Schedule, Any], dict] | None = None
    """Family metrics merged into ``pptl plan``'s (schedule, simulation) -> JSON-ready dict; its
    optional ``report`` key holds lines the text output prints."""


def require(cond: bool, cfg: Config, field_name: str, value: object, expected: str) -> None:
    """Raise the one-line config error every family uses."""
    if not cond:
        raise InputError(f"{cfg.source}: field '{field_name}': got {value}, {expected} for schedule '{cfg.schedule}'")


def flush_bubble(cfg: Config) -> float:
    """(p-1)(F+B): each rank idles while the first micro-batch fills and the last drains the pipeline."""
    c = cfg.costs
    return (cfg.pp - 1) * (c.lookup("F") + c.lookup("B"))


def loop_rank(stage: int, pp: int) -> tuple[int, int]:
    """Looped placement: stage s on rank s % pp, chunk s // pp (GPipe, 1F1B, interleaved)."""
    return stage % pp, stage // pp


def v_rank(stage: int, pp: int) -> tuple[int, int]:
    """V placement: rank r holds stages r and 2pp-1-r (ZB-V, DualPipeV)."""
    return (stage, 0) if stage < pp else (2 * pp - 1 - stage, 1)


def compute_op(kind: str, rank: int, stage: int, mb: int, chunk: int = 0, direction: int = 0,
               pair: tuple[int, int, int] | None = None) -> Op:
    return Op(kind=kind, rank=rank, lane="compute", stage=stage, mb=mb, chunk=chunk, direction=direction, pair=pair)


def backward_ops(cfg: Config, rank: int, stage: int, mb: int, chunk: int = 0, direction: int = 0) -> list[Op]:
    """B, or I then W when the config splits the backward."""
    if cfg.split_backward:
        return [compute_op("I", rank, stage, mb, chunk, direction), compute_op("W", rank, stage, mb, chunk, direction)]
    return [compute_op("B", rank, stage, mb, chunk, direction)]


def assemble(cfg: Config, family: str, orders: dict[int, list[Op]], *, num_stages: int, microbatches: int,
             directions: int = 1, meta: dict | None = None, comm: bool = True) -> Schedule:
    """Build a :class:`Schedule` from each rank's compute order.

    SENDs go on the producer's ``send`` lane in the order their data is produced; RECVs on the
    consumer's ``recv`` lane in the order their data is needed. Stages on one rank pass data
    locally (no SEND/RECV). With ``comm=False`` only compute lanes are built.
    """
    # The work of every op, found once (placement, messages and receive positions all read it).
    work = {rank: [roles(op) for op in ops] for rank, ops in orders.items()}
    place: dict[tuple[int, int], int] = {}
    for rank, per_op in work.items():
        for items in per_op:
            for _, d, s, _ in items:
                place.setdefault((d, s), rank)
    b = ScheduleBuilder()
    for rank in sorted(orders):
        b.extend(orders[rank])
    if comm:
        sends: dict[int, list[Op]] = {}
        recvs: dict[int, list[tuple[int, int, Op]]] = {}
        last = num_stages - 1
        for rank in sorted(orders):
            for items in work[rank]:
                for role, d, s, mb in items:
                    if role == "F" and s < last:
                        peer_stage, flow = s + 1, "F"
                    elif role == "G" and s > 0:
                        peer_stage, flow = s - 1, "B"
                    else:
                        continue
                    peer = place.get((d, peer_stage))
                    if peer is None or peer == rank:
                        continue
                    sends.setdefault(rank, []).append(
                        Op(kind="SEND", rank=rank, lane="send", stage=s, mb=mb, direction=d, peer=peer, flow=flow))
                    recvs.setdefault(peer, []).append((0, 0, Op(kind="RECV", rank=peer, lane="recv", stage=peer_stage,
                                                                  mb=mb, direction=d, peer=rank, flow=flow)))
        # A RECV sits just before the op that needs it, in that rank's compute order.
        need_pos = _need_positions(orders, work)
        for rank, items in recvs.items():
            keyed = []
            for _, _, op in items:
                role = "F" if op.flow == "F" else "G"
                keyed.append((need_pos.get((rank, role, op.direction, op.stage, op.mb), 1 << 60), op.flow != "F", op))
            keyed.sort(key=lambda t: (t[0], t[1]))
            b.extend(op for _, _, op in keyed)
        for rank in sorted(sends):
            b.extend(sends[rank])
    return Schedule(family=family, pp=cfg.pp, num_stages=num_stages, microbatches=microbatches, ops=b.ops,
                    lanes=b.lanes, deps=training_deps(b.ops, num_stages), directions=directions, config=cfg,
                    meta=dict(meta or {}))


def _need_positions(orders: dict[int, list[Op]], work: dict[int, list[list[tuple[str, int, int, int]]]] | None = None
                    ) -> dict[tuple[int, str, int, int, int], int]:
    """(rank, role needed, direction, stage of the receiver, mb) -> position of the first op needing it.

    role "F": the F at that stage needs activations; role "G": the op producing G at that stage
    needs the gradient from the next stage.
    """
    out: dict[tuple[int, str, int, int, int], int] = {}
    for rank, ops in orders.items():
        per_op = work[rank] if work is not None else [roles(op) for op in ops]
        for pos, items in enumerate(per_op):
            for role, d, s, mb in items:
                if role in ("F", "G"):
                    out.setdefault((rank, role, d, s, mb), pos)
    return out
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
    if "B" in keys and None not in (b, i, w) and abs(b - (i + w)) > 1e-9:
        out.append(f"B={b:g} is not I+W={i + w:g}")
    return out


def span_idle(schedule: Schedule, start: list[float], end: list[float], lane: str = "compute") -> dict[int, float]:
    """Per rank: idle time on ``lane`` between the rank's own first start and last end.

    This is the zero-bubble paper's per-stage measure (first F to last W); the simulator's
    ``RankMetrics.idle`` counts idle time against the whole makespan instead, which adds the
    stagger of a rank's start and end. Notes: O(ops).
    """
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    busy: dict[int, float] = {}
    for i, op in enumerate(schedule.ops):
        if op.lane != lane:
            continue
        r = op.rank
        first[r] = min(first.get(r, start[i]), start[i])
        last[r] = max(last.get(r, end[i]), end[i])
        busy[r] = busy.get(r, 0.0) + (end[i] - start[i])
    return {r: last[r] - first[r] - busy[r] for r in sorted(busy)}


def overlap_metrics(schedule: Schedule, sim: Any) -> dict[str, Any]:
    """Family metrics of the zero-bubble and DualPipe families (``Family.extra_metrics``): idle time
    within each rank's span, the model copies the pipeline holds (DualPipe: 2) and the stages
    (weights) each rank holds."""
    spans = span_idle(schedule, sim.start, sim.end)
    copies = int(schedule.meta.get("parameter_copies", 1))
    held: dict[int, set[tuple[int, int]]] = {}
    for op in schedule.ops:
        if op.lane == "compute" and op.kind in ("F", "FB"):
            held.setdefault(op.rank, set()).add((op.direction, op.stage))
    per_rank = max((len(v) for v in held.values()), default=0)
    return {
        "span_idle": [spans.get(r, 0.0) for r in range(schedule.pp)],
        "parameter_copies": copies,
        "stages_per_rank": per_rank,
        "report": [
            f"idle within each rank's own span (first op to last op): max {max(spans.values(), default=0.0):g}",
            f"parameters: {copies} cop{'ies' if copies != 1 else 'y'} of the model, {per_rank} stage(s) per rank",
        ],
    }
