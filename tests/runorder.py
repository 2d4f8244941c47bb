"""What every `pptl run` test holds a measured timeline to: each lane ran in the plan's order, every
op was measured once, and the lanes one host runs one op at a time started in that order."""
from __future__ import annotations

from typing import Any, Iterable


def assert_runs_the_plans_order(schedule: Any, timeline: Any, *, serial_lanes: Iterable[str] = ()) -> None:
    executed = timeline.meta.extra["executed"]
    for (rank, lane), order in schedule.lanes.items():
        assert executed[str(rank)][lane] == [schedule.ops[i].id for i in order], (rank, lane)
    assert sorted(e.op for e in timeline.events) == sorted(op.id for op in schedule.ops)
    start = {e.op: e.start for e in timeline.events}
    serial = set(serial_lanes)
    for (rank, lane), order in schedule.lanes.items():
        if lane in serial:
            starts = [start[schedule.ops[i].id] for i in order]
            assert starts == sorted(starts), (rank, lane)
