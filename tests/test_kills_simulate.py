"""Memory accounting of the simulator pinned where the sampled mutation run (`make mutate-sample`,
docs/testing.md) found no test. Each test names the mutant it was written against; the expected
peaks are added up by hand from the events."""
from __future__ import annotations

from pptl.ir import Op, Schedule, ScheduleBuilder
from pptl.simulate import peak_memory


def _held_plan() -> Schedule:
    b = ScheduleBuilder()
    b.add(Op(kind="OFFLOAD", rank=0, lane="d2h", stage=0, mb=0, payload=1.0))  # op 0
    b.add(Op(kind="F", rank=0, lane="compute", stage=0, mb=0))  # op 1
    b.add(Op(kind="B", rank=0, lane="compute", stage=0, mb=0))  # op 2
    # 5 units held from the start of the F (op 1) to the end of the B (op 2)
    return Schedule("custom", 1, 1, 1, b.ops, b.lanes, meta={"held": [[1, 0, 2, 1, 5.0]]})


def test_span_between_kept_ops_counts_when_copies_are_skipped() -> None:
    # memory_events_of 97: a held span is dropped with the ops it runs between, looked up by op
    # index (entries 0 and 2), not by its edge flag (entry 1, 0 here: the skipped OFFLOAD's index)
    s = _held_plan()
    start, end = [0.0, 0.0, 1.0], [0.5, 1.0, 2.0]
    # at t=0: the F allocates 1 and the span 5; both go at t=2, when the B ends
    assert peak_memory(s, start, end, 1.0, 0.0, skip=frozenset({"OFFLOAD"})) == ({0: 6.0}, {0: 0.0})
    # skipping the F's kind drops the span with it: the OFFLOAD frees 1 at 0.5 from nothing held
    assert peak_memory(s, start, end, 1.0, 0.0, skip=frozenset({"F"})) == ({0: 0.0}, {0: 0.0})
