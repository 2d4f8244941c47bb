"""Inference: forward passes only, on any pp and vpp (as DeepSpeed's ``InferenceSchedule``).

Looped placement: stage s on rank s % pp, chunk s // pp. With one chunk a rank runs its forwards
in micro-batch order; with V chunks it runs Megatron's table (groups of G = pp micro-batches
through chunk 0, then chunk 1, ...), so a chunk's next micro-batch is ready when its rank reaches
it. Phase table of rank r:

    for each group of pp micro-batches (the last: what is left)
        for c in 0 .. V-1:   F(c, group)

Memory: a forward keeps no activation for a backward; a rank holds the output of a forward from
its start until the next stage has it (its SEND ends, or the next chunk's forward on the same rank
ends), so at most 2 chunk outputs per rank with zero communication time: the one being computed
and the one being sent. Bubble: (p-1)F per rank (the fill and drain of the V chunks' pipeline),
F of one chunk; the last group's shortfall (m mod pp, when not 0) adds more.

Assumptions: ``activation`` is the size of one chunk's output for one micro-batch.
"""
from __future__ import annotations

from pptl.config import Config
from pptl.ir import Schedule
from pptl.schedules._common import Family, Order, assemble, require, uniform_cost_assumptions
from pptl.schedules._moe_meta import MoEMeta

__all__ = ["FAMILY", "NAME", "build", "validate", "phase_order"]

NAME = "inference"


def phase_order(rank: int, p: int, v: int, m: int) -> Order:
    """The forwards of ``rank`` as columns."""
    rows: list[tuple[str, int, int, int, int]] = []
    for lo in range(0, m, p):
        for c in range(v):
            rows += [("F", c * p + rank, mb, 0, c) for mb in range(lo, min(lo + p, m))]
    return Order.of_rows(rows)


def validate(cfg: Config) -> None:
    require(not cfg.split_backward, cfg, "split_backward", cfg.split_backward,
            "expected false (inference runs no backward)")


def build(cfg: Config) -> Schedule:
    validate(cfg)
    p, v, m = cfg.pp, cfg.vpp, cfg.microbatches
    s = assemble(cfg, NAME, {r: phase_order(r, p, v, m) for r in range(p)}, num_stages=p * v, microbatches=m)
    # A forward's output is held until the next stage has it: its SEND's end, or (on the same
    # rank, pp = 1) the next chunk's forward end; the last stage's output until its own end.
    at: dict[tuple[str, int, int], int] = {}
    for i, op in enumerate(s.ops):
        if op.kind in ("F", "SEND"):
            at[op.kind, op.stage, op.mb] = i
    last = s.num_stages - 1
    held = []
    for (kind, st, mb), i in at.items():
        if kind != "F":
            continue
        until = at.get(("SEND", st, mb))
        if until is None:
            nxt = at.get(("F", st + 1, mb)) if st < last else None
            until = nxt if nxt is not None and s.ops[nxt].rank == s.ops[i].rank else i
        held.append((i, 0, until, 1, cfg.activation))
    s.meta.update(MoEMeta(held=tuple(held), held_saved=True).to_meta())
    return s


def bubble(cfg: Config) -> float:
    return (cfg.pp - 1) * cfg.costs.lookup("F")


def memory(cfg: Config) -> float:
    return float(min(2, cfg.microbatches * cfg.vpp)) * cfg.activation


def assumptions(cfg: Config) -> list[str]:
    out = uniform_cost_assumptions(cfg, ("F",))
    if cfg.vpp > 1 and cfg.microbatches % cfg.pp:
        out.append(f"microbatches={cfg.microbatches} is not a multiple of pp={cfg.pp}: the last group waits "
                   "for its own round trip between chunks")
    return out


FAMILY = Family(
    name=NAME,
    summary="forward only (inference): micro-batches flow through the pipeline, no backward",
    constraints="any pp >= 1, vpp >= 1, microbatches >= 1; split_backward false",
    validate=validate,
    build=build,
    bubble=bubble,
    bubble_formula="(p-1)F with F of one chunk (m a multiple of p when vpp > 1)",
    memory=memory,
    memory_formula="min(2, mV) chunk outputs per rank (one computed, one being sent)",
    source="forward-only pipeline (DeepSpeed InferenceSchedule; GPipe's forward half)",
    assumptions=assumptions,
    aliases=("forward-only", "infer"),
    memory_bound=True,
    style="default",
    runtime=None,  # the training executor runs its F, B, I and W
    kinds=frozenset({"F"}),
)
