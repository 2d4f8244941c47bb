"""Rules about the op set itself: well-formed, unique, complete, in range, one rank per stage.

Each rule finds the offending rows with numpy over the op table's columns
(:attr:`pptl.checks.base.Context.table`) and builds an ``Op`` only for a row it reports, to
write the message; checking a valid table-made plan builds none.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from pptl.checks import work_arrays as wa
from pptl.checks.base import Context, Violation
from pptl.ir import COMM_KINDS, COMPUTE_KINDS, Op
from pptl.kinds import is_known
from pptl.optable import OpTable

__all__ = ["malformed_ops", "duplicate_ops", "missing_work", "index_out_of_range", "stage_on_two_ranks"]

_ROLE_NAMES = {"F": "F", "G": "B (or I)", "W": "B (or W)"}


def malformed_ops(ctx: Context) -> list[Violation]:
    """PP001: an op of unknown kind, on a rank that does not exist, or missing its indices.

    Fixture: fixtures/invalid/malformed.json. Notes: O(ops).
    """
    s = ctx.schedule
    unknown = frozenset(k for k in ctx.kinds if not is_known(k))  # asked once per kind, not per op
    # Rows that may be malformed: each test of _malformed, on columns; only these become Ops.
    t = ctx.table
    suspects = t.where("kind", unknown) | (t.rank < 0) | (t.rank >= s.pp) | t.where("lane", lambda v: not v)
    suspects |= t.where("kind", COMPUTE_KINDS) & ((t.stage < 0) | (t.mb < 0))
    suspects |= t.where("kind", frozenset({"FB"})) & ~t.has_pair
    bad_flow = t.where("flow", lambda v: v not in ("F", "B"))
    suspects |= t.where("kind", COMM_KINDS) & (bad_flow | (t.peer < 0) | (t.peer >= s.pp) | (t.peer == t.rank))
    out: list[Violation] = []
    for op in map(t.op, np.flatnonzero(suspects).tolist()):
        why = _malformed(op, unknown, s.pp)
        if why:
            out.append(Violation("PP001", f"malformed op {op.id}: {why}", (op.id,)))
    return out


def _malformed(op: Op, unknown: frozenset[str], pp: int) -> str:
    """What is wrong with ``op`` ("" if nothing)."""
    if op.kind in unknown:
        return f"unknown kind '{op.kind}'"
    if not 0 <= op.rank < pp:
        return f"rank {op.rank} is outside 0..{pp - 1}"
    if not op.lane:
        return "has no lane"
    if op.kind in COMPUTE_KINDS and (op.stage < 0 or op.mb < 0):
        return f"{op.kind} needs a stage and a micro-batch"
    if op.kind == "FB" and op.pair is None:
        return "FB must name the backward it overlaps (pair)"
    if op.kind in ("SEND", "RECV") and (op.flow not in ("F", "B") or not 0 <= op.peer < pp):
        return f"{op.kind} needs flow F or B and a peer rank in 0..{pp - 1}"
    if op.kind in ("SEND", "RECV") and op.peer == op.rank:
        return f"{op.kind} to its own rank"
    return ""


def duplicate_ops(ctx: Context) -> list[Violation]:
    """PP002: the same op listed twice, or two ops doing the same work (e.g. F s2 mb3 twice).

    Notes: O(ops) (one look-up per unit of work; ops are compared only where work repeats).
    """
    t, w = ctx.table, ctx.work_arrays
    # Whole ops are compared where no unit of work tells them apart (ops of other kinds, FB
    # without its pair); work is indexed by :mod:`pptl.checks.work_arrays`.
    whole = ~t.where("kind", COMPUTE_KINDS) | (t.where("kind", frozenset({"FB"})) & ~t.has_pair)
    comm = t.where("kind", COMM_KINDS)
    if comm.any():
        # SENDs and RECVs whose (kind, message key) are all distinct cannot be equal (hashing
        # every field of every message would be most of this rule). Within one kind and flow the
        # key's stage is the op's shifted by a constant, so (kind, flow, direction, stage, mb)
        # repeats exactly where the key does.
        c = np.flatnonzero(comm)
        recv = t.where("kind", frozenset({"RECV"}))[c]
        ids, size = wa.group_ids(recv.astype(np.int64), _canonical(t.flow_names)[t.flow[c]], t.direction[c],
                                 t.stage[c], t.mb[c])
        if not (np.bincount(ids, minlength=size) > 1).any():
            whole &= ~comm
    found: list[tuple[int, int, Violation]] = []
    for i in _equal_to_an_earlier(t, np.flatnonzero(whole)):
        op = t.op(i)
        found.append((i, 0, Violation("PP002", f"duplicate op {op.id}", (op.id,))))
    rows = np.flatnonzero(w.repeated)
    if rows.size:
        items = zip(w.op[rows].tolist(), [wa.ROLES[r] for r in w.role[rows].tolist()], w.direction[rows].tolist(),
                    w.stage[rows].tolist(), w.mb[rows].tolist())
        built: dict[int, Op] = {}

        def op_at(i: int) -> Op:
            op = built.get(i)
            if op is None:
                op = built[i] = t.op(i)
            return op

        found += _work_done_twice(items, op_at)
    found.sort(key=lambda x: (x[0], x[1]))
    return [v for _, _, v in found]


def _work_done_twice(items: Any, op_at: Callable[[int], Op]) -> list[tuple[int, int, Violation]]:
    """PP002's reports on work done by two ops, from ``items`` ((op, role, direction, stage, mb) in
    op order; items whose work no other op does may be left out: they report nothing)."""
    found: list[tuple[int, int, Violation]] = []
    done_by: dict[tuple[str, int, int, int], list[int]] = {}
    twins: set[int] = set()
    # Two full backwards of one unit do both its I-work and its W-work: one report, not one a role.
    pairs: dict[tuple[int, int, int, int, int], int] = {}
    for i, role, d, st, mb in items:
        if i in twins:
            continue
        key = (role, d, st, mb)
        earlier = done_by.setdefault(key, [i])
        if earlier[0] == i:
            continue
        op = op_at(i)
        if any(op_at(k) == op for k in earlier):
            twins.add(i)  # an identical op repeats all its work: one message, not one per role
            found.append((i, 0, Violation("PP002", f"duplicate op {op.id}", (op.id,))))
            continue
        earlier.append(i)
        a, b = op_at(earlier[0]).id, op.id
        pair = (earlier[0], i, d, st, mb)
        if pair in pairs:
            k = pairs[pair]
            found[k] = (i, 1, Violation("PP002", f"B of stage {st} mb {mb}{_dir(d)} is done twice: by {a} and by {b}",
                                        (a, b)))
            continue
        pairs[pair] = len(found)
        found.append((i, 1, Violation("PP002", f"{_ROLE_NAMES[role]} of stage {st} mb {mb}{_dir(d)} is done twice: "
                                      f"by {a} and by {b}", (a, b))))
    return found


def _equal_to_an_earlier(t: OpTable, rows: Any) -> list[int]:
    """The rows (of ``rows``, ascending) whose op equals the op of an earlier one, in order."""
    payload = t.payload[rows]
    # A NaN payload makes an Op equal to no other (float NaN is unequal to itself).
    rows = rows[~np.isnan(payload)]
    if rows.size < 2:
        return []
    bits = (t.payload[rows] + 0.0).view(np.int64)  # + 0.0: -0.0 and 0.0 are equal floats
    cols = [_canonical(t.kind_names)[t.kind[rows]], t.rank[rows], _canonical(t.lane_names)[t.lane[rows]],
            t.stage[rows], t.mb[rows], t.direction[rows], t.chunk[rows], t.has_pair[rows].astype(np.int64),
            *np.where(t.has_pair[rows, None], t.pair[rows], -1).T, t.peer[rows], _canonical(t.flow_names)[t.flow[rows]], t.sub[rows],
            _canonical(t.label_names)[t.label[rows]], bits, _canonical(t.cost_names)[t.cost[rows]], t.bucket[rows],
            t.half[rows]]
    ids, _ = wa.group_ids(*(np.ascontiguousarray(c, dtype=np.int64) for c in cols))
    order = np.argsort(ids, kind="stable")
    later = np.ones(rows.size, dtype=bool)
    later[0] = False
    later[1:] = ids[order][1:] == ids[order][:-1]  # not the first row of its group
    return sorted(rows[order[later]].tolist())


def missing_work(ctx: Context) -> list[Violation]:
    """PP003: a stage and micro-batch without its F, its input gradient or its weight gradient.

    A schedule whose ops are all of other kinds (a weight update: H2D, BCAST, RELOAD...) is not a
    training schedule and has no F/B/W to cover; its family's own rules check its completeness.

    Notes: O(directions x stages x microbatches).
    """
    s = ctx.schedule
    if ctx.n and not (ctx.kinds & (COMPUTE_KINDS | COMM_KINDS)):
        return []
    from pptl.schedules import find_family
    from pptl.schedules._common import required_roles

    roles = required_roles(find_family(s.family))  # a forward-only family asks for its F alone
    # One flag per slot: the sizes are bounded where a schedule is read or built (pptl.config.MAX_OPS
    # units of work), and every missing slot is a violation to list anyway.
    w = ctx.work_arrays
    D, S, M = max(s.directions, 0), max(s.num_stages, 0), max(s.microbatches, 0)
    have = np.zeros((3, D, S, M), dtype=bool)
    ok = w.in_range(S, M, D)
    have[w.role[ok], w.direction[ok], w.stage[ok], w.mb[ok]] = True
    need = [k for k, r in enumerate(wa.ROLES) if r in roles]
    have = have[need]
    out: list[Violation] = []
    for flat in np.flatnonzero(~have.all(axis=0)).tolist():  # direction, then stage, then mb
        d, rest = divmod(flat, S * M)
        st, mb = divmod(rest, M)
        out.append(_missing([wa.ROLES[k] for j, k in enumerate(need) if not have[j, d, st, mb]], d, st, mb))
    return out


def _missing(missing: list[str], d: int, st: int, mb: int) -> Violation:
    """PP003's report for the roles ``missing`` of one stage and micro-batch."""
    names = ["F"] if "F" in missing else []
    if "G" in missing:
        names.append("B" if "W" in missing else "I")
    elif "W" in missing:
        names.append("W")
    return Violation("PP003", f"missing {' and '.join(names)} for stage {st} mb {mb}{_dir(d)}")


def index_out_of_range(ctx: Context) -> list[Violation]:
    """PP004: a stage, micro-batch or direction beyond the schedule's sizes.

    Notes: O(ops).
    """
    s = ctx.schedule
    S, M, D = s.num_stages, s.microbatches, s.directions
    w = ctx.work_arrays
    rows = np.flatnonzero(~w.in_range(S, M, D))
    out: list[Violation] = []
    last = -1
    for i, d, st, mb in zip(w.op[rows].tolist(), w.direction[rows].tolist(), w.stage[rows].tolist(),
                            w.mb[rows].tolist()):
        if i != last:
            last = i  # one violation per op
            op = ctx.table.op(i)
            out.append(Violation(
                "PP004", f"{op.id}: stage {st}, mb {mb}, direction {d} outside stages 0..{S - 1}, "
                f"micro-batches 0..{M - 1}, directions 0..{D - 1}", (op.id,)))
    return out


def stage_on_two_ranks(ctx: Context) -> list[Violation]:
    """PP005: one stage's work on two ranks (its weights would live in two places).

    Notes: O(ops).
    """
    t = ctx.table
    w = ctx.work_arrays
    rank = t.rank[w.op]
    ids, size = wa.group_ids(w.direction, w.stage)
    some = np.zeros(size, dtype=np.int64)
    some[ids] = rank  # one rank of each (direction, stage): every other must equal it
    bad = np.zeros(size, dtype=bool)
    bad[ids[rank != some[ids]]] = True
    rows = np.flatnonzero(bad[ids])  # every unit of work of a stage on two ranks, in order
    items = zip(w.op[rows].tolist(), w.direction[rows].tolist(), w.stage[rows].tolist(), rank[rows].tolist())
    first: dict[tuple[int, int], tuple[int, int]] = {}
    more: dict[tuple[int, int], dict[int, int]] = {}
    for i, d, st, rank in items:
        r0 = first.setdefault((d, st), (rank, i))
        if r0[0] != rank:
            more.setdefault((d, st), {}).setdefault(rank, i)
    out: list[Violation] = []
    for (d, st), others in sorted(more.items()):
        rank0, op0 = first[(d, st)]
        ranks = {rank0: op0, **others}
        names = ", ".join(f"r{r}" for r in sorted(ranks))
        out.append(Violation("PP005", f"stage {st}{_dir(d)} runs on ranks {names}",
                             tuple(t.op(i).id for i in ranks.values())))
    return out


def _dir(d: int) -> str:
    return f" (direction {d})" if d else ""


def _canonical(names: tuple[str, ...]) -> Any:
    """Codes to index with a column's codes: equal names get equal codes (a table's names need
    not be distinct)."""
    first: dict[str, int] = {}
    return np.array([first.setdefault(v, k) for k, v in enumerate(names)] or [0], dtype=np.int64)
