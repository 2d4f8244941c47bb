"""Rules about the op set itself: well-formed, unique, complete, in range, one rank per stage."""
from __future__ import annotations

from pptl.checks import Context, Violation
from pptl.deps import roles
from pptl.ir import COMM_KINDS, COMPUTE_KINDS, KINDS

__all__ = ["malformed_ops", "duplicate_ops", "missing_work", "index_out_of_range", "stage_on_two_ranks"]

_ROLE_NAMES = {"F": "F", "G": "B (or I)", "W": "B (or W)"}


def malformed_ops(ctx: Context) -> list[Violation]:
    """PP001: an op of unknown kind, on a rank that does not exist, or missing its indices.

    Fixture: fixtures/invalid/malformed.json. Notes: O(ops).
    """
    s = ctx.schedule
    out: list[Violation] = []
    for op in s.ops:
        why = ""
        if op.kind not in KINDS:
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

    Notes: O(ops).
    """
    s = ctx.schedule
    out: list[Violation] = []
    seen: set = set()
    work: dict[tuple, str] = {}
    for op in s.ops:
        if op in seen:
            out.append(Violation("PP002", f"duplicate op {op.id}", (op.id,)))
            continue
        seen.add(op)
        for key in roles(op):
            if key in work:
                role, d, st, mb = key
                out.append(Violation("PP002", f"{_ROLE_NAMES[role]} of stage {st} mb {mb}"
                                     f"{_dir(d)} is done twice: by {work[key]} and by {op.id}",
                                     (work[key], op.id)))
            else:
                work[key] = op.id
    return out


def missing_work(ctx: Context) -> list[Violation]:
    """PP003: a stage and micro-batch without its F, its input gradient or its weight gradient.

    A schedule whose ops are all of other kinds (a weight update: H2D, BCAST, RELOAD...) is not a
    training schedule and has no F/B/W to cover; its family's own rules check its completeness.

    Notes: O(directions x stages x microbatches).
    """
    s = ctx.schedule
    if s.ops and not any(op.kind in COMPUTE_KINDS or op.kind in COMM_KINDS for op in s.ops):
        return []
    have: set[tuple] = set()
    for op in s.ops:
        have.update(roles(op))
    out: list[Violation] = []
    for d in range(s.directions):
        for st in range(s.num_stages):
            for mb in range(s.microbatches):
                missing = [r for r in ("F", "G", "W") if (r, d, st, mb) not in have]
                if missing:
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
    out: list[Violation] = []
    for op in s.ops:
        for _, d, st, mb in roles(op):
            if not (0 <= st < s.num_stages and 0 <= mb < s.microbatches and 0 <= d < s.directions):
                out.append(Violation(
                    "PP004", f"{op.id}: stage {st}, mb {mb}, direction {d} outside stages 0..{s.num_stages - 1}, "
                    f"micro-batches 0..{s.microbatches - 1}, directions 0..{s.directions - 1}", (op.id,)))
                break
    return out


def stage_on_two_ranks(ctx: Context) -> list[Violation]:
    """PP005: one stage's work on two ranks (its weights would live in two places).

    Notes: O(ops).
    """
    where: dict[tuple[int, int], dict[int, str]] = {}
    for op in ctx.schedule.ops:
        for _, d, st, _ in roles(op):
            where.setdefault((d, st), {}).setdefault(op.rank, op.id)
    out: list[Violation] = []
    for (d, st), ranks in sorted(where.items()):
        if len(ranks) > 1:
            names = ", ".join(f"r{r}" for r in sorted(ranks))
            out.append(Violation("PP005", f"stage {st}{_dir(d)} runs on ranks {names}", tuple(ranks.values())))
    return out


def _dir(d: int) -> str:
    return f" (direction {d})" if d else ""
