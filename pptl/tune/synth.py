"""A zero-bubble-style order synthesised for one model and memory limit (the ``synth`` candidate).

One stage per rank (looped placement), backward split into I and W. The order comes from a list
scheduler over simulated time, the heuristic of the zero-bubble auto-scheduler
(sail-sg/zero-bubble-pipeline-parallelism, ``pipeline_simulator``): whenever a rank is free it runs
the input gradient I of its oldest micro-batch if it is ready (it is on the critical path of the
stages before), else the next forward F if that is ready and the rank's activations stay under its
limit, else a pending weight gradient W (which nothing waits for, so it fills what would be idle
time); W drains in I's order (first in, first out, as the runtime's weight-gradient store).

Ranks are visited in order of the time they can next act, so every decision only depends on ops
that have already been placed (an op not yet placed cannot end before that time).

Assumptions: per-stage costs, a fixed message time between stages, activation held from F's start
until I frees ``1 - w_activation`` of it and W the rest. The result is checked and timed by the
same checker and simulator as every family; the greedy's own clock only decides the order.

Notes: O(pp * microbatches * pp) for the choice of the next rank.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from pptl.config import Config
from pptl.ir import Schedule
from pptl.schedules._common import assemble, compute_op
from pptl.schedules._pipeline_meta import PipelineMeta

__all__ = ["SynthInput", "greedy_orders", "build_synth"]


@dataclass(frozen=True)
class SynthInput:
    pp: int
    microbatches: int
    F: Sequence[float]
    I: Sequence[float]  # noqa: E741
    W: Sequence[float]
    activation: Sequence[float]
    """Per stage: activation of one micro-batch."""
    limit: Sequence[float]
    """Per rank: activation it may hold (inf: no limit); a rank holding none may always start an F."""
    w_activation: float
    message: float
    """Time from a producer's end to its consumer's data being there."""
    max_inflight: int = 1 << 30
    """Micro-batches whose W is still pending at which W takes priority over waiting."""


def greedy_orders(x: SynthInput) -> dict[int, list[tuple[str, int]]]:
    """Per rank, the (kind, micro-batch) order of F, I and W."""
    p, m = x.pp, x.microbatches
    free = [0.0] * p
    nf, ni, nw = [0] * p, [0] * p, [0] * p
    mem = [0.0] * p
    f_end: dict[tuple[int, int], float] = {}
    i_end: dict[tuple[int, int], float] = {}
    orders: dict[int, list[tuple[str, int]]] = {r: [] for r in range(p)}
    inf = math.inf

    def ready_i(r: int) -> float:
        if ni[r] >= nf[r]:
            return inf
        mb = ni[r]
        if r == p - 1:
            return f_end[(r, mb)]
        e = i_end.get((r + 1, mb))
        return inf if e is None else e + x.message

    def ready_f(r: int) -> float:
        if nf[r] >= m:
            return inf
        if mem[r] > 1e-12 and mem[r] + x.activation[r] > x.limit[r] + 1e-9:
            return inf  # waits until an I or W frees memory
        if r == 0:
            return 0.0
        e = f_end.get((r - 1, nf[r]))
        return inf if e is None else e + x.message

    remaining = 3 * p * m
    while remaining:
        best = None
        for r in range(p):
            ri, rf = ready_i(r), ready_f(r)
            t0 = free[r]
            if ri <= t0:
                choice = (t0, "I")
            elif rf <= t0:
                choice = (t0, "F")
            elif nw[r] < ni[r] and (min(ri, rf) >= t0 + x.W[r] - 1e-12 or min(ri, rf) == inf
                                    or nf[r] - nw[r] >= x.max_inflight):
                # A W runs when it ends before the next I or F can start (it then costs nothing),
                # when nothing else can come, or when held activations reach the in-flight cap.
                choice = (t0, "W")
            else:
                nxt = min(ri, rf)
                if nxt == inf:
                    continue
                choice = (nxt, "I" if ri <= rf else "F")
            if best is None or choice[0] < best[0]:
                best = (choice[0], choice[1], r)
        if best is None:  # cannot happen: the last stage always progresses
            raise RuntimeError("synth: no rank can act")
        t, kind, r = best
        if kind == "F":
            mb = nf[r]
            nf[r] += 1
            mem[r] += x.activation[r]
            end = t + x.F[r]
            f_end[(r, mb)] = end
        elif kind == "I":
            mb = ni[r]
            ni[r] += 1
            end = t + x.I[r]
            mem[r] -= x.activation[r] * (1 - x.w_activation)
            i_end[(r, mb)] = end
        else:
            mb = nw[r]
            nw[r] += 1
            end = t + x.W[r]
            mem[r] -= x.activation[r] * x.w_activation
        free[r] = end
        orders[r].append((kind, mb))
        remaining -= 1
    return orders


def build_synth(cfg: Config, x: SynthInput, *, name: str = "synth",
                orders: dict[int, list[tuple[str, int]]] | None = None) -> Schedule:
    """The schedule of ``orders`` (default: :func:`greedy_orders`), with SEND/RECV and dependencies
    built as for every family."""
    how = "greedy" if orders is None else "given"
    seqs = orders if orders is not None else greedy_orders(x)
    ops = {r: [compute_op(k, r, r, mb) for k, mb in seq] for r, seq in seqs.items()}
    return assemble(cfg, name, ops, num_stages=x.pp, microbatches=x.microbatches,
                    meta=PipelineMeta(weight_grad_store="stage", synthesised=how).to_meta())
