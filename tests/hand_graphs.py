"""Small hand-made plans for the whatif tests: one F op per name, on the ranks given, joined by the
dependencies given, so a test's expected numbers can be worked out on paper."""
from __future__ import annotations

from pptl.ir import Op, Schedule


def hand_graph(ops: list[Op], deps: list[tuple[int, int]], pp: int = 1) -> Schedule:
    lanes: dict[tuple[int, str], list[int]] = {}
    for i, op in enumerate(ops):
        lanes.setdefault((op.rank, op.lane), []).append(i)
    return Schedule(family="hand", pp=pp, num_stages=pp, microbatches=1, ops=ops, lanes=lanes, deps=deps)


def hand_op(name: str, rank: int = 0, mb: int = 0) -> Op:
    """An F op of stage ``rank`` costed by ``name`` (the test's costs give each name its time)."""
    return Op("F", rank, "compute", stage=rank, mb=mb, cost=name)
