"""A plan's view of the NCCL calls (``pptl diagnose --plan``): each rank's sends and receives named by the
plan's op ids, what a stopped rank should have issued next, the plan's other end of a transfer.

Pure: no torch, no files.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping, Sequence

from pptl.diagnose.cause import PlanNext
from pptl.diagnose.ops import NcclOp
from pptl.ir import Schedule

__all__ = ["name_by_plan", "plan_next", "plan_counterparts", "plan_pairs"]


def name_by_plan(ops: dict[int, list[NcclOp]], schedule: Schedule, notes: list[str]) -> dict[int, list[NcclOp]]:
    """Name each rank's send/recv by the plan's op, aligning the rank's P2P order with the plan's
    (repeated once per step, after whatever set-up messages came first). Where the plan's order does not
    align on some rank and the order ``pptl run`` issues the plan in under one of its message modes
    aligns on every rank (``sync-send`` moves each SEND to right after its producer), that order names them."""
    from pptl.issue_order import program

    prog = program(schedule)
    if not all(_aligns(ops[r], schedule, prog.get(r, [])) for r in ops):
        for mode, order in _run_orders(schedule):
            if all(_aligns(ops[r], schedule, order.get(r, [])) for r in ops):
                notes.append(f"the dumps' send/receive order is the one pptl run issues this plan in with "
                             f"--messages {mode}: named in that order")
                prog = order
                break
    out: dict[int, list[NcclOp]] = {}
    for r, seq in ops.items():
        plan = [i for i in prog.get(r, []) if schedule.ops[i].kind in ("SEND", "RECV")]
        p2p = [o for o in seq if o.kind in ("send", "recv")]
        want = [("send" if schedule.ops[i].kind == "SEND" else "recv", schedule.ops[i].peer) for i in plan]
        got = [(o.kind, o.peer) for o in p2p]
        start = _align(got, want)
        if start and (len(got) - start) % len(want) and \
                {o.sizes for o in p2p[:start]} & {o.sizes for o in p2p[start:]}:
            # a part step after calls that move the step's own sizes: not set-up messages but the step's
            # calls in another order, which only happen to end like the plan
            start = None
        if start is None:
            if plan and p2p:
                notes.append(f"rank {r}: its NCCL send/receive order does not follow the plan's; its ops are "
                             "named by peer only (was the plan the one that ran?)")
            out[r] = list(seq)
            continue
        names = {id(o): (schedule.ops[plan[(k - start) % len(plan)]], (k - start) // len(plan))
                 for k, o in enumerate(p2p) if k >= start}
        out[r] = [replace(o, name=names[id(o)][0].id, step=names[id(o)][1], flow=names[id(o)][0].flow)
                  if id(o) in names else o for o in seq]
    return out


def _aligns(seq: Sequence[NcclOp], schedule: Schedule, order: Sequence[int]) -> bool:
    """Whether a rank's send/recv calls follow ``order`` (the plan's op indices, repeated once a step)."""
    want = [("send" if schedule.ops[i].kind == "SEND" else "recv", schedule.ops[i].peer) for i in order
            if schedule.ops[i].kind in ("SEND", "RECV")]
    got = [(o.kind, o.peer) for o in seq if o.kind in ("send", "recv")]
    return not got or _align(got, want) is not None


def _run_orders(schedule: Schedule) -> list[tuple[str, dict[int, list[int]]]]:
    """Per message mode, the issue order ``pptl run`` runs ``schedule`` in (none for a plan it cannot run)."""
    from pptl.errors import PptlError
    from pptl.run.options import MESSAGE_MODES
    from pptl.run.program import build_program, issued_for, orders

    try:
        built = build_program(schedule)  # once: each mode only reorders it
    except PptlError:
        return []
    return [(mode, orders(issued_for(built, mode))) for mode in MESSAGE_MODES]


def _align(got: list[tuple[str, int]], want: list[tuple[str, int]]) -> int | None:
    """The offset from which ``got`` follows ``want`` repeated (None: no offset does).

    Set-up messages can look like the start of a step, so an offset after which whole steps
    remain wins (a CUDA host issues a step's calls without blocking, so the last step is whole);
    else the smallest offset that fits.
    """
    if not want or not got:
        return None
    m = len(want)
    fits = [s for s in range(len(got)) if all(got[s + j] == want[j % m] for j in range(len(got) - s))]
    whole = [s for s in fits if (len(got) - s) % m == 0]
    return (whole or fits or [None])[0]


def plan_next(ops: Mapping[int, tuple[NcclOp, ...]], schedule: Schedule, ranks: Iterable[int]) -> dict[int, PlanNext]:
    """Per rank, the plan op after the last call named by the plan, and the plan's next SEND/RECV."""
    from pptl.issue_order import program

    prog = program(schedule)
    out: dict[int, PlanNext] = {}
    for r in ranks:
        last = next((o.name for o in reversed(ops.get(r, ())) if o.name), "")
        ids = [schedule.ops[i] for i in prog.get(r, [])]
        pos = next((k for k, op in enumerate(ids) if op.id == last), None)
        if pos is None or pos + 1 >= len(ids):
            continue
        comm = next((op.id for op in ids[pos + 1:] if op.kind in ("SEND", "RECV")), "")
        out[r] = PlanNext(ids[pos + 1].id, comm)
    return out


def plan_counterparts(schedule: Schedule) -> dict[str, str]:
    """Plan op id of each SEND and RECV -> the id of the op at the other end (same message key)."""
    from pptl.messages import message_key

    ends: dict[tuple[str, int, int, int], dict[str, str]] = {}
    for op in schedule.ops:
        if op.kind in ("SEND", "RECV"):
            ends.setdefault(message_key(op), {})[op.kind] = op.id
    out: dict[str, str] = {}
    for pair in ends.values():
        if len(pair) == 2:
            out[pair["SEND"]], out[pair["RECV"]] = pair["RECV"], pair["SEND"]
    return out


def plan_pairs(schedule: Schedule) -> dict[tuple[int, int], int]:
    """(src, dst) -> the plan's SENDs from src to dst per step."""
    out: dict[tuple[int, int], int] = {}
    for op in schedule.ops:
        if op.kind == "SEND" and op.peer >= 0:
            out[(op.rank, op.peer)] = out.get((op.rank, op.peer), 0) + 1
    return out
