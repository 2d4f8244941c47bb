"""What every `pptl run` test holds a measured timeline to: each lane ran in the plan's order, every
op was measured once, and the lanes one host runs one op at a time started in that order.

The executed order is what each rank recorded as it started its ops (the host's order; on CUDA, the
order the host enqueued them on their streams), not the program it was handed."""
from __future__ import annotations

from typing import Any, Iterable


def assert_runs_the_plans_order(schedule: Any, timeline: Any, *, serial_lanes: Iterable[str] = ()) -> None:
    executed = timeline.meta.extra["executed"]
    assert set(executed) == {str(r) for r in range(schedule.pp)}, f"ranks that recorded an order: {sorted(executed)}"
    for (rank, lane), order in schedule.lanes.items():
        planned = [schedule.ops[i].id for i in order]
        ran = executed[str(rank)].get(lane, [])
        assert ran == planned, (f"rank {rank} lane {lane}: started "
                                f"{next((f'{a} where the plan has {b}' for a, b in zip(ran, planned) if a != b), '')}"
                                f" ({len(ran)} ops started, {len(planned)} planned)")
    assert sorted(e.op for e in timeline.events) == sorted(op.id for op in schedule.ops)
    start = {e.op: e.start for e in timeline.events}
    serial = set(serial_lanes)
    for (rank, lane), order in schedule.lanes.items():
        if lane in serial:
            starts = [start[schedule.ops[i].id] for i in order]
            assert starts == sorted(starts), (rank, lane)
