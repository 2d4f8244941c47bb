"""Rules about the op set itself: well-formed, unique, complete, in range, one rank per stage."""
from __future__ import annotations

from pptl.checks.base import Context, Violation
from pptl.ir import COMM_KINDS, COMPUTE_KINDS
from pptl.kinds import is_known

__all__ = ["malformed_ops", "duplicate_ops", "missing_work", "index_out_of_range", "stage_on_two_ranks"]

_ROLE_NAMES = {"F": "F", "G": "B (or I)", "W": "B (or W)"}
#: Kinds whose ops do units of work (an FB without its pair does none).
_WORK_KINDS = frozenset({"F", "B", "I", "W", "FB"})


def malformed_ops(ctx: Context) -> list[Violation]:
    """PP001: an op of unknown kind, on a rank that does not exist, or missing its indices.

    Fixture: fixtures/invalid/malformed.json. Notes: O(ops).
    """
    s = ctx.schedule
    out: list[Violation] = []
    unknown = {k for k in ctx.kinds if not is_known(k)}  # asked once per kind, not per op
    for op in s.ops:
        why = ""
        if op.kind in unknown:
            why = f"unknown kind '{op.kind}'"
        elif not 0 <= op.rank < s.pp:
            why = f"rank {op.rank} is outside 0..{s.pp - 1}"
        elif not op.lane:
            why = "has no lane"
        elif op.kind in COMPUTE_KINDS and (op.stage < 0 or op.mb < 0):
            why = f"{op.kind} needs a stage and a micro-batch"
        elif op.kind == "FB" and op.pair is None:
            why = "FB must name the backward it overlaps (pair)"
        elif op.kind in ("SEND", "RECV") and (op.flow not in ("F", "B") or not 0 <= op.peer < s.pp):
            why = f"{op.kind} needs flow F or B and a peer rank in 0..{s.pp - 1}"
        elif op.kind in ("SEND", "RECV") and op.peer == op.rank:
            why = f"{op.kind} to its own rank"
        if why:
            out.append(Violation("PP001", f"malformed op {op.id}: {why}", (op.id,)))
    return out


def duplicate_ops(ctx: Context) -> list[Violation]:
    """PP002: the same op listed twice, or two ops doing the same work (e.g. F s2 mb3 twice).

    Notes: O(ops) (one look-up per unit of work; ops are compared only where work repeats).
    """
    s = ctx.schedule
    ops = s.ops
    work = ctx.work
    # Ops of other kinds (SEND, RECV, family kinds) are identical only to ops of the same kind.
    found: list[tuple[int, int, Violation]] = []
    seen: dict[object, int] = {}
    # SENDs and RECVs with distinct (kind, flow, direction, stage, mb) cannot be equal: then only
    # other kinds are compared whole (hashing every field of every message was most of this rule).
    skip = frozenset(("SEND", "RECV")) if not work.comm_repeated else frozenset()
    for i, op in enumerate(ops):
        k = op.kind
        if k in skip:
            continue
        if k not in _WORK_KINDS or (k == "FB" and op.pair is None):
            j = seen.setdefault(op, i)
            if j != i:
                found.append((i, 0, Violation("PP002", f"duplicate op {op.id}", (op.id,))))
    if work.repeated:
        done_by: dict[tuple[str, int, int, int], list[int]] = {}
        twins: set[int] = set()
        for i, role, d, st, mb in work.items:
            if i in twins:
                continue
            key = (role, d, st, mb)
            earlier = done_by.setdefault(key, [i])
            if earlier[0] == i:
                continue
            op = ops[i]
            if any(ops[k] == op for k in earlier):
                twins.add(i)  # an identical op repeats all its work: one message, not one per role
                found.append((i, 0, Violation("PP002", f"duplicate op {op.id}", (op.id,))))
                continue
            earlier.append(i)
            a, b = ops[earlier[0]].id, op.id
            found.append((i, 1, Violation("PP002", f"{_ROLE_NAMES[role]} of stage {st} mb {mb}{_dir(d)} is done twice: "
                                          f"by {a} and by {b}", (a, b))))
    found.sort(key=lambda t: (t[0], t[1]))
    return [v for _, _, v in found]


def missing_work(ctx: Context) -> list[Violation]:
    """PP003: a stage and micro-batch without its F, its input gradient or its weight gradient.

    A schedule whose ops are all of other kinds (a weight update: H2D, BCAST, RELOAD...) is not a
    training schedule and has no F/B/W to cover; its family's own rules check its completeness.

    Notes: O(directions x stages x microbatches).
    """
    s = ctx.schedule
    if s.ops and not (ctx.kinds & (COMPUTE_KINDS | COMM_KINDS)):
        return []
    have = ctx.work.producer
    out: list[Violation] = []
    for d in range(s.directions):
        for st in range(s.num_stages):
            for mb in range(s.microbatches):
                if ("F", d, st, mb) in have and ("G", d, st, mb) in have and ("W", d, st, mb) in have:
                    continue
                missing = [r for r in ("F", "G", "W") if (r, d, st, mb) not in have]
                names = ["F"] if "F" in missing else []
                if "G" in missing:
                    names.append("B" if "W" in missing else "I")
                elif "W" in missing:
                    names.append("W")
                out.append(Violation("PP003", f"missing {' and '.join(names)} for stage {st} mb {mb}{_dir(d)}"))
    return out


def index_out_of_range(ctx: Context) -> list[Violation]:
    """PP004: a stage, micro-batch or direction beyond the schedule's sizes.

    Notes: O(ops).
    """
    s = ctx.schedule
    S, M, D = s.num_stages, s.microbatches, s.directions
    out: list[Violation] = []
    last = -1
    for i, _, d, st, mb in ctx.work.items:
        if i != last and not (0 <= st < S and 0 <= mb < M and 0 <= d < D):
            last = i  # one violation per op
            op = s.ops[i]
            out.append(Violation(
                "PP004", f"{op.id}: stage {st}, mb {mb}, direction {d} outside stages 0..{S - 1}, "
                f"micro-batches 0..{M - 1}, directions 0..{D - 1}", (op.id,)))
    return out


def stage_on_two_ranks(ctx: Context) -> list[Violation]:
    """PP005: one stage's work on two ranks (its weights would live in two places).

    Notes: O(ops).
    """
    ops = ctx.schedule.ops
    first: dict[tuple[int, int], tuple[int, int]] = {}
    more: dict[tuple[int, int], dict[int, int]] = {}
    for i, _, d, st, _ in ctx.work.items:
        rank = ops[i].rank
        r0 = first.setdefault((d, st), (rank, i))
        if r0[0] != rank:
            more.setdefault((d, st), {}).setdefault(rank, i)
    out: list[Violation] = []
    for (d, st), others in sorted(more.items()):
        rank0, op0 = first[(d, st)]
        ranks = {rank0: op0, **others}
        names = ", ".join(f"r{r}" for r in sorted(ranks))
        out.append(Violation("PP005", f"stage {st}{_dir(d)} runs on ranks {names}",
                             tuple(ops[i].id for i in ranks.values())))
    return out


def _dir(d: int) -> str:
    return f" (direction {d})" if d else ""
