"""Rules of MoE expert-parallel overlap with activation offloading (``moe-1f1b-overlap``, PP040-PP049).

Offload/onload pairs are matched by (rank, direction, stage, mb, layer): an OFFLOAD of a layer's
saved inputs and the ONLOAD that brings them back. The layer sub-ops of a backward are the
compute ops with flow "B" (MLP, ATTN, WGRAD) of the same key.
"""
from __future__ import annotations

import numpy as np

from pptl.checks.base import Context, Violation
from pptl.formats._quote import counted
from pptl.ir import Op
from pptl.schedules._moe_meta import MoEMeta

__all__ = ["backward_before_onload", "onload_without_offload", "ep_a2a_order", "paired_self_dependency",
           "incomplete_layers"]

_A2A = ("A2A_DISPATCH", "A2A_COMBINE")
_EPS = 1e-9


def _key(op: Op) -> tuple[int, int, int, int, int]:
    return (op.rank, op.direction, op.stage, op.mb, op.sub)


def _copies(ctx: Context) -> tuple[dict[tuple, int], dict[tuple, int]]:
    off: dict[tuple, int] = {}
    on: dict[tuple, int] = {}
    if "OFFLOAD" not in ctx.kinds and "ONLOAD" not in ctx.kinds:
        return off, on
    for i, op in enumerate(ctx.schedule.ops):
        if op.kind == "OFFLOAD":
            off.setdefault(_key(op), i)
        elif op.kind == "ONLOAD":
            on.setdefault(_key(op), i)
    return off, on


def backward_before_onload(ctx: Context) -> list[Violation]:
    """PP040: a backward sub-op that reads an offloaded layer before that layer's ONLOAD ends (or
    with no ONLOAD at all: its activations are still on the host).

    Checked on the simulated times: the first backward compute op (MLP, ATTN or WGRAD with flow
    B) of the offloaded (rank, stage, mb, layer) must start no earlier than its ONLOAD ends.
    Fixture: fixtures/invalid/moe_backward_before_onload.json. Notes: O(ops).
    """
    off, on = _copies(ctx)
    if not off:
        return []
    s = ctx.schedule
    sim = ctx.simulation
    first: dict[tuple, int] = {}
    for i, op in enumerate(s.ops):
        if op.flow == "B" and op.lane == "compute" and op.kind in ("MLP", "ATTN", "WGRAD") and _key(op) in off:
            k = _key(op)
            if k not in first or sim.start[i] < sim.start[first[k]]:
                first[k] = i
    out: list[Violation] = []
    ids = ctx.ids
    for k, b in sorted(first.items()):
        o = off[k]
        if k not in on:
            out.append(Violation("PP040", f"{ids[b]} reads layer {k[4]} of stage {k[2]} mb {k[3]}, offloaded by "
                                 f"{ids[o]}, but no ONLOAD brings it back: its activations are still on the host",
                                 (ids[b], ids[o])))
            continue
        n = on[k]
        if sim.start[b] < sim.end[n] - _EPS:
            out.append(Violation("PP040", f"{ids[b]} starts at t={sim.start[b]:g}, before its onload {ids[n]} ends "
                                 f"at t={sim.end[n]:g}: the backward reads activations still being copied back "
                                 "(make it wait on the onload)", (ids[b], ids[n])))
    return out


def onload_without_offload(ctx: Context) -> list[Violation]:
    """PP041: an ONLOAD with no OFFLOAD of the same layer on its rank (nothing on the host to load),
    or one that starts before that OFFLOAD ends (the host copy is not complete yet).

    The second half needs the simulated times (skipped while the DAG has a cycle). Fixture:
    fixtures/invalid/moe_onload_without_offload.json. Notes: O(ops).
    """
    off, on = _copies(ctx)
    if not on:
        return []
    ids = ctx.ids
    timed = ctx.order is not None
    out: list[Violation] = []
    for k, n in sorted(on.items()):
        o = off.get(k)
        if o is None:
            out.append(Violation("PP041", f"{ids[n]} loads layer {k[4]} of stage {k[2]} mb {k[3]} back, but rank "
                                 f"{k[0]} never offloads it (no OFFLOAD of that layer)", (ids[n],)))
        elif timed and ctx.simulation.start[n] < ctx.simulation.end[o] - _EPS:
            sim = ctx.simulation
            out.append(Violation("PP041", f"{ids[n]} starts at t={sim.start[n]:g}, before {ids[o]} ends at "
                                 f"t={sim.end[o]:g}: it would load a host copy that is not complete",
                                 (ids[n], ids[o])))
    return out


def _a2a_sequence(ctx: Context, rank: int) -> list[tuple[tuple, str]]:
    s = ctx.schedule
    seq: list[tuple[tuple, str]] = []
    for lane in sorted(s.rank_lanes(rank)):
        for i in s.lanes[(rank, lane)]:
            op = s.ops[i]
            if op.kind in _A2A:
                seq.append(((op.kind, op.flow, op.stage, op.mb, op.sub), ctx.ids[i]))
    return seq


def _describe(item: tuple) -> str:
    kind, flow, stage, mb, sub = item
    name = {"A2A_DISPATCH": "dispatch", "A2A_COMBINE": "combine"}[kind]
    return f"{name} {flow} s{stage} mb{mb} layer {sub}"


def ep_a2a_order(ctx: Context) -> list[Violation]:
    """PP042: ranks of one expert-parallel group issuing their all-to-alls in different orders.

    An all-to-all is a collective: every member of the EP group must call the same one at the same
    point of its stream, or NCCL hangs (or mixes up tensors). The groups come from
    ``schedule.meta['ep_groups']`` (lists of ranks); each member's sequence of (kind, flow, stage,
    mb, layer) is compared with the first member's, and the first difference is named. Schedules
    without EP groups are not checked. Fixture: fixtures/invalid/moe_ep_a2a_order.json.
    Notes: O(ops).
    """
    groups = MoEMeta.of(ctx.schedule).ep_groups
    if groups is None:
        return []
    out: list[Violation] = []
    for members in groups:
        if len(members) < 2:
            continue
        group = list(members)  # named as the file writes it: [0, 1]
        ref_rank = group[0]
        ref = _a2a_sequence(ctx, ref_rank)
        for rank in group[1:]:
            seq = _a2a_sequence(ctx, rank)
            at = next((k for k, (a, b) in enumerate(zip(ref, seq)) if a[0] != b[0]), None)
            name = f"EP group {group}"
            if at is not None:
                out.append(Violation("PP042", f"{name}: all-to-all #{at + 1} of rank {rank} is "
                                     f"{_describe(seq[at][0])} ({seq[at][1]}) where rank {ref_rank} issues "
                                     f"{_describe(ref[at][0])} ({ref[at][1]}); the members of an EP group must "
                                     "issue their all-to-alls in one order, or NCCL hangs",
                                     (seq[at][1], ref[at][1])))
            elif len(seq) != len(ref):
                longer, n = (rank, seq) if len(seq) > len(ref) else (ref_rank, ref)
                extra = n[min(len(seq), len(ref))]
                out.append(Violation("PP042", f"{name}: rank {rank} issues {counted(len(seq), 'all-to-all')} and rank "
                                     f"{ref_rank} {len(ref)}; rank {longer}'s {_describe(extra[0])} ({extra[1]}) "
                                     "has no partner and would wait forever", (extra[1],)))
    return out


def paired_self_dependency(ctx: Context) -> list[Violation]:
    """PP043: a paired step (an F marker whose ``pair`` names the backward it overlaps) whose
    backward needs its own forward.

    A backward of (stage s', mb, direction d) needs the loss of that micro-batch, hence every
    forward of (mb, d); overlapping it with a forward of the same micro-batch and direction can
    never run. Megatron's combined 1F1B avoids it by one extra warmup micro-batch under VPP; without
    it the last rank's first steady step is exactly such a pair. (FB ops of other families are
    PP020's.) Fixture: fixtures/invalid/moe_no_extra_warmup.yaml. Notes: O(ops).
    """
    bad: dict[int, list[Op]] = {}
    if "F" not in ctx.kinds:
        return []
    t = ctx.table
    f = t.where("kind", frozenset({"F"}))
    for op in map(t.op, np.flatnonzero(f & t.has_pair & (t.pair[:, 1] == t.mb) & (t.pair[:, 2] == t.direction))):
        bad.setdefault(op.rank, []).append(op)
    out: list[Violation] = []
    for rank, ops in sorted(bad.items()):
        op = ops[0]
        ps, pm, _ = op.pair  # type: ignore[misc]
        how = "directly" if ps == op.stage else "through the loss"
        more = f" (and {len(ops) - 1} more such step{'s' if len(ops) > 2 else ''} on this rank)" if len(ops) > 1 else ""
        out.append(Violation(
            "PP043", f"rank {rank}: the paired step {op.id} overlaps F of stage {op.stage} mb {op.mb} with B of "
            f"stage {ps} mb {pm}, which needs that forward {how}: the pair depends on itself{more}; combined "
            "1F1B needs one more warmup micro-batch under VPP ('VPP + 1 warmup')", tuple(o.id for o in ops)))
    return out


_F_PARTS = (("ATTN", "F"), ("A2A_DISPATCH", "F"), ("MLP", "F"), ("A2A_COMBINE", "F"))
_B_PARTS = (("A2A_COMBINE", "B"), ("MLP", "B"), ("A2A_DISPATCH", "B"), ("ATTN", "B"), ("WGRAD", "B"))


def incomplete_layers(ctx: Context) -> list[Violation]:
    """PP044: a forward or backward pass of a MoE chunk missing some of its layer sub-ops.

    Uses ``schedule.meta['layers_per_chunk']`` (L): a pass that has any sub-op or marker needs, for
    each layer 0..L-1, Attn, EP-D, MLP and EP-C (forward) or EP-C, MLP, EP-D, Attn and WGrad
    (backward). Schedules without that key are not checked. Notes: O(ops).
    """
    s = ctx.schedule
    L = MoEMeta.of(s).layers_per_chunk
    if L is None:
        return []
    have: dict[tuple, set[tuple]] = {}
    where: dict[tuple, str] = {}
    for i, op in enumerate(s.ops):
        if op.kind in ("F", "I", "W") and op.lane != "compute":
            flow = "F" if op.kind == "F" else "B"
        elif (op.kind, op.flow) in _F_PARTS or (op.kind, op.flow) in _B_PARTS:
            flow = op.flow
        else:
            continue
        k = (op.rank, op.direction, op.stage, op.mb, flow)
        have.setdefault(k, set())
        where.setdefault(k, ctx.ids[i])
        if op.sub >= 0:
            have[k].add((op.kind, op.sub))
    out: list[Violation] = []
    for k in sorted(have):
        rank, d, st, mb, flow = k
        parts = _F_PARTS if flow == "F" else _B_PARTS
        missing = [f"{kind} of layer {layer}" for layer in range(L) for kind, _ in parts
                   if (kind, layer) not in have[k]]
        if missing:
            pass_ = "forward" if flow == "F" else "backward"
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            out.append(Violation("PP044", f"rank {rank}: the {pass_} of stage {st} mb {mb}"
                                 f"{f' (direction {d})' if d else ''} lacks {', '.join(missing[:3])}{more} "
                                 f"({'its layer needs' if L == 1 else f'each of its {L} layers needs'} every sub-op)",
                                 (where[k],)))
    return out
