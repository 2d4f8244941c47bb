"""A test-only fault: a rank issues two of its sends in the swapped order (pure, no torch).

``PPTL_RUN_FAULT='swap:RANK:A|B'`` (op ids of two SENDs of RANK, A issued before B) makes RANK
issue A right after B instead. A's data exists by then, so nothing fails on the rank itself; what
breaks is the order its peers expect. On a 1F1B plan of 4 ranks and 8 micro-batches,
``swap:1:r1/send/SEND_F s1 mb7 ->r2|r1/send/SEND_B s1 mb6 ->r0`` hangs: rank 2 needs F mb7 before
its B mb6, which rank 1 now sends only after it got B mb6 back. No other send of A's channel lies
between the two (else NCCL, which matches in order, would deliver the wrong micro-batch instead).

:func:`issued_plan` writes the order a run issues (message mode and fault included) into a copy
of the plan, so ``pptl check --p2p nccl`` and ``pptl diagnose --plan`` see what ran.
"""
from __future__ import annotations

from dataclasses import replace

from pptl.errors import InputError
from pptl.ir import Schedule
from pptl.run.program import Program
from pptl.schedules._pipeline_meta import PipelineMeta

__all__ = ["parse_swap", "swap_sends", "issued_plan"]


def parse_swap(rank: int, text: str) -> tuple[int, str, str]:
    """(rank, A, B) from the fault's ``A|B`` part."""
    a, sep, b = text.partition("|")
    if not sep or not a or not b:
        raise InputError(f"PPTL_RUN_FAULT swap:{rank}:{text}: expected two op ids joined by '|'")
    return rank, a, b


def swap_sends(program: Program, rank: int, first: str, then: str) -> Program:
    """``program`` where ``rank`` issues SEND ``first`` right after SEND ``then``.

    Raises:
        InputError: an id that is not a SEND of ``rank``, or ``first`` not issued before ``then``.
    """
    ops = program.schedule.ops
    issue = list(program.ranks[rank].issue)
    pos = {ops[i].id: k for k, i in enumerate(issue)}
    for name in (first, then):
        if name not in pos or ops[issue[pos[name]]].kind != "SEND":
            raise InputError(f"PPTL_RUN_FAULT swap: {name!r} is not a SEND of rank {rank}")
    a, b = pos[first], pos[then]
    if a >= b:
        raise InputError(f"PPTL_RUN_FAULT swap: rank {rank} issues {first!r} after {then!r} already")
    moved = issue.pop(a)
    issue.insert(b, moved)  # b shifted left by the pop: this is right after `then`
    ranks = tuple(replace(rp, issue=tuple(issue)) if rp.rank == rank else rp for rp in program.ranks)
    return replace(program, ranks=ranks)


def issued_plan(program: Program) -> Schedule:
    """A copy of the program's plan whose issue order (``meta["program_order"]``, lanes reordered to
    agree) is the program's, so the P2P checks read what the ranks issue."""
    s = program.schedule
    letter = {"compute": "c", "send": "s", "recv": "r"}
    lanes: dict[tuple[int, str], list[int]] = {}
    text = []
    for rp in program.ranks:
        chars = []
        for i in rp.issue:
            lane = s.ops[i].lane
            if lane not in letter:
                raise InputError(f"op {s.ops[i].id}: lane '{lane}' has no place in a P2P issue order")
            chars.append(letter[lane])
            lanes.setdefault((rp.rank, lane), []).append(i)
        text.append("".join(chars))
    given = replace(PipelineMeta.of(s), program_order=tuple(text)).to_meta()
    return replace(s, lanes=lanes, meta={**s.meta, **given})
