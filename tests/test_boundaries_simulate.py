"""Boundaries of the simulator and interval arithmetic, against values worked out by hand.

The critical path where two ops end last together and where an op has two predecessors ending as it
starts (the documented tie-breaks: the first op of the latest end, a data need before the lane's
order), zero-length ops at t = 0 (the path stops at the first op that starts at 0), a held span that
names the op one past the last, and an empty span with nothing to merge into.
"""
from __future__ import annotations

import numpy as np
import pytest

from pptl.checks import Context
from pptl.config import config_from_mapping
from pptl.dag import verified_order
from pptl.deps import training_deps
from pptl.errors import InputError
from pptl.intervals import union
from pptl.ir import Op, Schedule, ScheduleBuilder
from pptl.schedules import build_schedule
from pptl.simulate import peak_memory, simulate

# ----------------------------------------------------------------------------------------------
# Critical path


def _two_directions() -> Schedule:
    """Two ranks, two stages, one micro-batch in each of two directions, compute only (its training
    facts are direct edges). Direction 0 runs stage 0 on rank 0, direction 1 stage 0 on rank 1; each rank
    runs both forwards, then both backwards, its own direction's stage 0 last.

        op 0-3, rank 0: F s0 (d0)  F s1 d1  B s1 d1  B s0 (d0)
        op 4-7, rank 1: F s0 d1    F s1     B s1     B s0 d1
    """
    b = ScheduleBuilder()
    for rank in (0, 1):
        own, other = rank, 1 - rank  # the direction whose stage 0 this rank holds
        for kind, stage, d in (("F", 0, own), ("F", 1, other), ("B", 1, other), ("B", 0, own)):
            b.add(Op(kind=kind, rank=rank, lane="compute", stage=stage, mb=0, direction=d))
    return Schedule("custom", 2, 2, 1, b.ops, b.lanes, training_deps(b.ops, 2), directions=2)


def test_critical_path_ties_follow_the_documented_order() -> None:
    # F=1, B=2: both stage-0 forwards [0,1], both stage-1 forwards [1,2], both stage-1 backwards
    # [2,4], both stage-0 backwards [4,6]. Two ops end last at 6: the first one (op 3, rank 0's
    # B s0) ends the path. Its start 4 is the end of its data need B s1 (op 6) and of its lane
    # predecessor B s1 d1 (op 2): the data need comes first. So does F s0 (op 0) for F s1 (op 5),
    # which also follows rank 1's F s0 d1 (op 4) on its lane, both ending at 1.
    sim = simulate(_two_directions())
    assert sim.makespan == 6.0
    assert sim.metrics()["critical_path"] == ["r0/compute/F s0 mb0", "r1/compute/F s1 mb0", "r1/compute/B s1 mb0",
                                              "r0/compute/B s0 mb0"]


def test_critical_path_starts_at_the_first_op_that_starts_at_zero() -> None:
    # GPipe pp=2 m=1 with F = 0, B = 1, no message time: both forwards and their messages take no
    # time at t=0; B s1 [0,1], its gradient SEND and RECV at 1, B s0 [1,2]. The path into B s0
    # goes back to B s1, which starts at 0: the zero-length forwards before it add nothing.
    s = build_schedule(config_from_mapping({"schedule": "gpipe", "pp": 2, "microbatches": 1,
                                            "costs": {"F": 0, "B": 1}}))
    sim = simulate(s)
    assert sim.makespan == 2.0
    assert sim.metrics()["critical_path"] == ["r1/compute/B s1 mb0", "r1/send/SEND_B s1 mb0 ->r0",
                                              "r0/recv/RECV_B s0 mb0 <-r1", "r0/compute/B s0 mb0"]


# ----------------------------------------------------------------------------------------------
# A plan file's order hint: every edge strictly forward


def _backward_listed_first() -> Schedule:
    # Op 0 is the B, op 1 its F; the lane runs op 1 then op 0 (and the B needs the F).
    ops = [Op(kind="B", rank=0, lane="compute", stage=0, mb=0), Op(kind="F", rank=0, lane="compute", stage=0, mb=0)]
    return Schedule("custom", 1, 1, 1, ops, {(0, "compute"): [1, 0]}, training_deps(ops, 1))


def test_an_order_hint_with_a_tie_on_an_edge_is_not_trusted() -> None:
    s = _backward_listed_first()
    assert verified_order(s, np.array([1, 0])) == [1, 0]
    # Both ops at position 0: the edge F -> B does not go forward, and sorting by the hint would put
    # op 0 (the B) first. The hint is refused; the checker finds the order itself.
    assert verified_order(s, np.array([0, 0])) is None
    assert verified_order(s, np.array([0, 1])) is None
    assert Context(s.copy_with(order_hint=np.array([0, 0]))).order == [1, 0]


def test_an_order_hint_against_the_lane_order_alone_is_not_trusted() -> None:
    # Two forwards with no fact between them; the lane runs mb1 (op 1) first. A hint that puts op 0
    # first breaks only the lane's edge 1 -> 0.
    ops = [Op(kind="F", rank=0, lane="compute", stage=0, mb=0), Op(kind="F", rank=0, lane="compute", stage=0, mb=1)]
    s = Schedule("custom", 1, 1, 2, ops, {(0, "compute"): [1, 0]}, training_deps(ops, 1))
    assert s.deps == []
    assert verified_order(s, np.array([1, 0])) == [1, 0]
    assert verified_order(s, np.array([0, 1])) is None


# ----------------------------------------------------------------------------------------------
# Held spans (meta['held']): op indices up to n - 1


def _forward_backward(held: list[list[float]]) -> Schedule:
    b = ScheduleBuilder()
    b.add(Op(kind="F", rank=0, lane="compute", stage=0, mb=0))  # op 0
    b.add(Op(kind="B", rank=0, lane="compute", stage=0, mb=0))  # op 1
    return Schedule("custom", 1, 1, 1, b.ops, b.lanes, meta={"held": held})


def test_a_held_span_may_end_at_the_last_op() -> None:
    # 5 units from the F's start (t=0) to the B's end (op 1, the last op): with the F's own unit,
    # 6 at t=0.
    s = _forward_backward([[0, 0, 1, 1, 5.0]])
    assert peak_memory(s, [0.0, 1.0], [1.0, 3.0], 1.0, 0.0) == ({0: 6.0}, {0: 0.0})


@pytest.mark.parametrize("held", [[2, 0, 1, 1, 5.0], [0, 0, 2, 1, 5.0]], ids=["from-op-n", "to-op-n"])
def test_a_held_span_naming_op_n_is_an_input_error(held: list[float]) -> None:
    # Two ops: index 2 is one past the last; a file that names it is refused in one line, not an IndexError.
    s = _forward_backward([held])
    with pytest.raises(InputError, match=r"^field 'meta\.held\[0\]': got \[" + ", ".join(map(str, held)).replace(".", r"\.")):
        peak_memory(s, [0.0, 1.0], [1.0, 3.0], 1.0, 0.0)


# ----------------------------------------------------------------------------------------------
# Interval union


@pytest.mark.parametrize(("spans", "expected"), [
    ([(0, 1), (2, 2), (3, 4)], [(0, 1), (3, 4)]),  # empty, between two spans: dropped, not kept
    ([(5, 5)], []),
    ([(2, 1)], []),  # reversed: empty too
    ([(0, 1), (1, 1)], [(0, 1)]),  # empty at the end of one: nothing to add
    ([(0, 1), (1, 2)], [(0, 2)]),  # touching: one span
])
def test_union_drops_empty_spans_everywhere(spans: list[tuple[float, float]], expected: list[tuple[float, float]]) -> None:
    assert union(spans) == expected
