"""Events and op ids read from the table's columns equal what the per-op ``Op`` gives: the
``Op`` dataclass is the oracle (its ``id`` is the id's one definition)."""
from __future__ import annotations

from pathlib import Path

import pytest

from pptl.events import op_events
from pptl.ir import Schedule
from pptl.op import Op
from pptl.optable import OpTable
from pptl.planning import plan_config
from pptl.timeline import Event, Timeline

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CONFIGS = sorted(p.name for p in FIXTURES.glob("*.yaml")) + ["1f1b_few_microbatches.toml"]


def _oracle_events(schedule: Schedule, start: list[float], end: list[float]) -> list[Event]:
    ops = schedule.ops
    waits: dict[int, list[str]] = {}
    for u, v in schedule.deps:
        waits.setdefault(v, []).append(ops[u].id)
    return [Event(op.id, op.rank, op.lane, start[i], end[i], op.kind, op.stage, op.mb, op.direction, op.chunk,
                  op.pair, op.label, op.sub, op.peer, tuple(waits.get(i, ())), op.flow, op.bucket, op.half)
            for i, op in enumerate(ops)]


@pytest.mark.parametrize("name", CONFIGS)
def test_every_family_fixture_gives_the_ops_own_ids_and_events(name: str) -> None:
    sim = plan_config(FIXTURES / name, {}, None, None).simulation
    s = sim.schedule
    assert s.table.ids() == [op.id for op in s.ops]
    assert op_events(s, sim.start, sim.end) == _oracle_events(s, sim.start, sim.end)


def test_ids_at_the_edges_of_each_part() -> None:
    # peer 0 and rank 10 (a falsy peer, a two-digit rank), a reverse-direction pair, values other
    # than -1 below zero (not shown, as Op.id), a label, a bucket 0 and a half 0
    ops = [
        Op("SEND", 10, "send", stage=3, mb=0, peer=0, flow="F"),
        Op("RECV", 0, "recv", stage=3, mb=0, peer=10, flow="F"),
        Op("SEND", 1, "send", stage=0, mb=2, peer=-1),
        Op("FB", 2, "compute", stage=5, mb=7, direction=1, pair=(4, 11, 1)),
        Op("FB", 2, "compute", stage=5, mb=8, pair=(4, 12, 0)),
        Op("F", 3, "compute", stage=-2, mb=-5, sub=0, label="Attn"),
        Op("BCAST", 4, "comm", mb=-1, bucket=0, half=0, peer=0),
        Op("F", 12, "compute", stage=123, mb=4567, direction=-1),
    ]
    ids = OpTable.from_ops(ops).ids()
    assert ids == [op.id for op in ops]
    assert ids == [
        "r10/send/SEND_F s3 mb0 ->r0",
        "r0/recv/RECV_F s3 mb0 <-r10",
        "r1/send/SEND s0 mb2",
        "r2/compute/FB s5 mb7 d1 +B s4 mb11 d1",
        "r2/compute/FB s5 mb8 +B s4 mb12",
        "r3/compute/F Attn #0",
        "r4/comm/BCAST bucket0 half0",
        "r12/compute/F s123 mb4567 d-1",
    ]


def test_an_empty_table_has_no_ids_and_no_events() -> None:
    assert OpTable.from_ops([]).ids() == []


def test_a_far_apart_value_column_is_formatted_per_value() -> None:
    # micro-batches far apart (range much larger than the table): formatted per distinct value
    ops = [Op("F", 0, "compute", stage=0, mb=m) for m in (9_999_999, 0, 5_000_000, 0)]
    assert OpTable.from_ops(ops).ids() == [op.id for op in ops]


def test_the_timeline_span_follows_its_events_list() -> None:
    tl = Timeline([Event("a", 0, "compute", 2.0, 5.0, "F")])
    assert (tl.start, tl.makespan) == (2.0, 3.0)
    tl.events = [Event("a", 0, "compute", 1.0, 9.0, "F"), Event("b", 1, "compute", 4.0, 10.0, "F")]
    assert (tl.start, tl.makespan) == (1.0, 9.0)
    assert (Timeline([]).start, Timeline([]).makespan) == (0.0, 0.0)


def test_ids_of_ranks_and_names_too_many_for_one_int64_key() -> None:
    # 2**14 distinct lanes, kinds and flows, and ranks 0 and 2**22 with the same names: packed into one
    # int64, (rank * lanes + lane) * kinds ... would give both the key 2**64 = 0 (a wrap); the rows
    # themselves key the heads, and the second op keeps its own rank
    k = 1 << 14
    same = dict(lane="lane0", flow="f0", stage=0, mb=0)
    ops = [Op("K0", 0, **same), Op("K0", 1 << 22, **same)]
    ops += [Op(f"K{i}", 1, f"lane{i}", stage=0, mb=i, flow=f"f{i}") for i in range(1, k)]
    t = OpTable.from_ops(ops)
    assert len(t.lane_names) == len(t.kind_names) == len(t.flow_names) == k
    ids = t.ids()
    assert ids[:2] == ["r0/lane0/K0_f0 s0 mb0", "r4194304/lane0/K0_f0 s0 mb0"]
    assert ids == [op.id for op in ops]
