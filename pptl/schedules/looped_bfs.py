"""Looped BFS (breadth-first pipeline parallelism): every chunk runs all micro-batches before the next.

Source: Lamy-Poirier, "Breadth-First Pipeline Parallelism" (arXiv 2211.05953), as torch 2.13's
``ScheduleLoopedBFS`` orders it. Looped placement: stage s on rank s % pp, chunk s // pp.
Phase table of rank r, chunks c = 0..V-1 (stage c*pp + r):

    forward   F(c, 0..m-1)            for c = 0 .. V-1
    backward  B(c, m-1..0)            for c = V-1 .. 0 (newest micro-batch first)

Assumptions: B is never split (torch's class runs full backwards); every forward of a rank runs
before its first backward, so the peak is all mV chunk activations on every rank (GPipe's memory
over a looped model). Any pp, micro-batch count and vpp >= 2 (torch's multi-stage schedules
take 2 chunks or more per rank; with one, the order is gpipe's).
"""
from __future__ import annotations

from pptl.config import Config
from pptl.ir import Schedule
from pptl.schedules._common import Family, Order, assemble, require

__all__ = ["FAMILY", "NAME", "build", "validate", "phase_order"]

NAME = "looped-bfs"


def phase_order(rank: int, p: int, v: int, m: int) -> Order:
    """The compute order of ``rank`` as columns."""
    rows: list[tuple[str, int, int, int, int]] = []
    for c in range(v):  # forward: chunk by chunk, micro-batches in order
        rows += [("F", c * p + rank, mb, 0, c) for mb in range(m)]
    for c in reversed(range(v)):  # backward: last chunk first, newest micro-batch first
        rows += [("B", c * p + rank, mb, 0, c) for mb in reversed(range(m))]
    return Order.of_rows(rows)


def validate(cfg: Config) -> None:
    require(cfg.vpp >= 2, cfg, "vpp", cfg.vpp, "expected at least 2 chunks per rank, as torch's multi-stage "
            "schedules (one chunk is gpipe's order)")
    require(not cfg.split_backward, cfg, "split_backward", cfg.split_backward,
            "expected false (torch's ScheduleLoopedBFS runs full backwards; use interleaved-zb for I and W)")


def build(cfg: Config) -> Schedule:
    validate(cfg)
    p, v, m = cfg.pp, cfg.vpp, cfg.microbatches
    return assemble(cfg, NAME, {r: phase_order(r, p, v, m) for r in range(p)}, num_stages=p * v, microbatches=m)


def bubble(cfg: Config) -> float:
    """(p-1)(F+B) per rank with F, B of one chunk: the fill of chunk 0 and the drain of chunk 0,
    as GPipe's, since the chunks follow each other without a gap (each waits on nothing but its
    own rank once m >= p)."""
    c = cfg.costs
    return (cfg.pp - 1) * (c.lookup("F") + c.lookup("B"))


def assumptions(cfg: Config) -> list[str]:
    from pptl.schedules._common import uniform_cost_assumptions

    out = uniform_cost_assumptions(cfg, ("F", "B"))
    if cfg.microbatches < cfg.pp:
        out.append(f"microbatches={cfg.microbatches} < pp={cfg.pp}: each chunk after the first waits for the "
                   "round trip of the previous one")
    return out


FAMILY = Family(
    name=NAME,
    summary="breadth-first looped: each chunk runs every micro-batch before the next chunk (torch's LoopedBFS)",
    constraints="vpp >= 2; any pp >= 1, microbatches >= 1 (torch accepts every size); split_backward false",
    validate=validate,
    build=build,
    bubble=bubble,
    bubble_formula="(p-1)(F+B) with F, B of one chunk, when m >= p",
    memory=lambda cfg: float(cfg.vpp * cfg.microbatches) * cfg.activation,
    memory_formula="mV chunk activations on every rank (all forwards run first)",
    source="Lamy-Poirier 2023 (Breadth-First Pipeline Parallelism); torch ScheduleLoopedBFS",
    assumptions=assumptions,
    aliases=("loopedbfs", "bfs", "breadth-first"),
    memory_bound=True,
    style="default",
    runtime=None,  # the training executor runs its F, B, I and W
    kinds=frozenset({"F", "B"}),
    torch_schedule="ScheduleLoopedBFS",
)
