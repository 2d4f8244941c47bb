"""Boundaries of the plan reader, diagnose, explain, tune and serve, against numbers worked out by hand.

Each test pins a value exactly at a limit, a first/last element, a remainder of 0, 1 or odd, a
two-digit rank, or a tie: the places a mutation pass found no test reaching. docs/testing.md lists
the hand-written mutants each one kills (``python tests/hand_mutants.py`` applies them).
"""
from __future__ import annotations

import copy
import http.client
import json
import threading
from typing import Any, Iterator

import pytest

from pptl.config import config_from_mapping
from pptl.diagnose import diagnose_dumps
from pptl.diagnose.ops import ranks_text
from pptl.errors import InputError
from pptl.explain import explain, explanation_lines
from pptl.formats.flight_recorder import FrDump, FrEntry, FrGroup
from pptl.formats.plan import plan_from_dict, plan_to_dict
from pptl.schedules import build_schedule
from pptl.serve.server import MAX_BODY_BYTES, make_server
from pptl.timeline import MAX_TIME, Event, Timeline, TimelineMeta
from pptl.tune.candidates import Structure
from pptl.tune.model import LayerCost, ModelDesc
from pptl.tune.rank import Result, _rank_key
from pptl.tune.split import even_split, megatron_layout, stage_costs, stage_memory

# ----------------------------------------------------------------------------------------------
# Plan reader


def _plan_dict(**schedule: Any) -> dict[str, Any]:
    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 2}))
    d = copy.deepcopy(plan_to_dict(s))
    d["schedule"].update(schedule)
    return d


def test_schedule_sizes_up_to_ten_million_are_sizes() -> None:
    # 10,000,000 micro-batches is a size the reader takes (then refused as too much work: 2 stages x
    # 10M > MAX_OPS); 10,000,001 is not a size at all.
    with pytest.raises(InputError, match="2 stages x 10000000 micro-batches x 1 direction is more than"):
        plan_from_dict(_plan_dict(microbatches=10_000_000))
    with pytest.raises(InputError, match=r"field 'schedule.microbatches': got 10000001, expected an integer >= 1"):
        plan_from_dict(_plan_dict(microbatches=10_000_001))
    with pytest.raises(InputError, match=r"field 'schedule.pp': got 0, expected an integer >= 1"):
        plan_from_dict(_plan_dict(pp=0))


def test_a_payload_of_zero_bytes_is_a_payload() -> None:
    d = _plan_dict()
    n = len(d["ops"]["stage"])
    d["ops"]["payload"] = [0] * (n - 1) + [2.5]  # first ones 0 (the limit), the last one not
    s, _ = plan_from_dict(d)
    assert [op.payload for op in s.ops][:2] == [0.0, 0.0] and s.ops[-1].payload == 2.5
    d["ops"]["payload"] = [-1e-300] + [0] * (n - 1)
    with pytest.raises(InputError, match=r"ops.payload: got -1e-300, expected a finite number >= 0"):
        plan_from_dict(d)


def test_timeline_times_up_to_max_time() -> None:
    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 2}))
    d = copy.deepcopy(plan_to_dict(s))
    n = len(s.ops)
    d["timeline"] = {"meta": {"source": "planned"}, "start": [0.0] * n, "end": [MAX_TIME] * n}
    _, tl = plan_from_dict(d)
    assert tl is not None and tl.events[-1].end == 1e18
    d["timeline"]["end"] = [MAX_TIME] * (n - 1) + [MAX_TIME * 1.0000001]
    with pytest.raises(InputError, match="expected a finite number within"):
        plan_from_dict(d)


# ----------------------------------------------------------------------------------------------
# diagnose


@pytest.mark.parametrize(("ranks", "text"), [
    ([], ""),
    ([3], "3"),
    ([0, 1], "0, 1"),  # a run of two is listed
    ([0, 1, 2], "0-2"),  # of three, a range
    ([9, 10, 11], "9-11"),  # across the two-digit boundary
    ([1, 10, 11], "1, 10, 11"),
    ([0, 1, 2, 3, 5], "0-3, 5"),
    ([11, 10, 1, 2, 0], "0-2, 10, 11"),
    ([5, 5, 6, 7], "5-7"),
])
def test_rank_lists(ranks: list[int], text: str) -> None:
    assert ranks_text(ranks) == text


def _entry(record_id: int, seq: int) -> FrEntry:
    return FrEntry(record_id=record_id, group="0", group_desc="default_pg", collective_seq_id=seq, p2p_seq_id=0,
                   op_id=seq, kind="all_reduce", profiling_name="nccl:all_reduce", peer=-1, input_sizes=((4,),),
                   output_sizes=((4,),), state="completed", retired=True, time_created_ns=1,
                   time_started_ns=2, time_completed_ns=3, is_p2p=False)


def _dumps(world: int, present: list[int], first_record: dict[int, int]) -> list[FrDump]:
    group = {"0": FrGroup("0", "default_pg", tuple(range(world)))}
    return [FrDump(f"rank{r}", r, "2.10", group, (_entry(first_record.get(r, 0), 1),)) for r in present]


def test_a_wrapped_ring_buffer_is_noted_from_record_one() -> None:
    # Record 0 first: nothing was lost. Record 1 first: one call fell out of the ring.
    notes = diagnose_dumps(_dumps(2, [0, 1], {1: 1})).notes
    assert [n.split(";")[0] for n in notes] == ["rank 1: the ring buffer wrapped (first record 1)"]
    assert diagnose_dumps(_dumps(2, [0, 1], {})).notes == ()


@pytest.mark.parametrize(("world", "present", "note"), [
    (3, [0, 1], "no dump for rank 2: their ops are unknown"),
    (4, [0, 1], "no dump for ranks 2, 3: their ops are unknown"),
    (12, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], "no dump for ranks 10, 11: their ops are unknown"),
    (12, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "no dump for ranks 0, 11: their ops are unknown"),
])
def test_missing_dumps_are_named(world: int, present: list[int], note: str) -> None:
    assert diagnose_dumps(_dumps(world, present, {})).notes == (note,)


# ----------------------------------------------------------------------------------------------
# explain


def _measured(events: list[Event]) -> Timeline:
    return Timeline(events, TimelineMeta(source="measured", units="ms"))


def test_a_rank_with_no_idle_time_prints_without_a_share() -> None:
    # r0 computes from 0 to 2 without a gap (idle 0: no percentage to print); r1 idles 1 of 2.
    tl = _measured([Event("r0/compute/F s0 mb0", 0, "compute", 0.0, 1.0, "F", stage=0, mb=0),
                    Event("r0/compute/F s0 mb1", 0, "compute", 1.0, 2.0, "F", stage=0, mb=1),
                    Event("r1/compute/F s1 mb9", 1, "compute", 1.0, 2.0, "F", stage=1, mb=9)])
    x = explain(tl)
    assert [(r.rank, r.busy, r.idle) for r in x.ranks] == [(0, 2.0, 0.0), (1, 1.0, 1.0)]
    lines = explanation_lines(x)
    assert lines[2].split() == ["0", "2", "0", "0", "0", "0", "0", "0"]
    assert lines[3].split()[:3] == ["1", "1", "1"] and "(100%)" in lines[3]


def _late_recv(recv_end: float) -> Timeline:
    # r0: F s0 [0, 1], its SEND posted at 1. r1: the RECV, then F s1 [2, 3].
    f0 = Event("r0/compute/F s0 mb0", 0, "compute", 0.0, 1.0, "F", stage=0, mb=0)
    send = Event("r0/send/SEND_F s0 mb0 ->r1", 0, "send", 1.0, 1.1, "SEND", stage=0, mb=0, peer=1, flow="F")
    recv = Event("r1/recv/RECV_F s1 mb0 <-r0", 1, "recv", 0.0, recv_end, "RECV", stage=1, mb=0, peer=0, flow="F")
    f1 = Event("r1/compute/F s1 mb0", 1, "compute", 2.0, 3.0, "F", stage=1, mb=0)
    return _measured([f0, send, recv, f1])


def test_explain_waits_for_data_until_it_arrived() -> None:
    # A true clock: the RECV ends at 1.5. r1's gap [0, 2]: 1 waiting for F s0 (the replay leaves
    # the same gap: bubble), 0.5 transfer (1 to 1.5), 0.5 host (1.5 to 2). Its tail [3, 3]: none.
    r1 = explain(_late_recv(1.5)).ranks[1]
    assert (r1.idle, r1.bubble, r1.transfer, r1.host, r1.late_input, r1.imbalance) == (2.0, 1.0, 0.5, 0.5, 0.0, 0.0)


def test_explain_trusts_the_receivers_clock_when_the_ranks_disagree() -> None:
    # The RECV ends at 0.5, before the SEND started (1.0): the data was on r1 at 0.5 by r1's own
    # clock. The wait ends there (0.5 bubble); the 1.5 after it is r1's (host), not transfer.
    x = explain(_late_recv(0.5))
    r1 = x.ranks[1]
    assert (r1.bubble, r1.transfer, r1.host, r1.late_input) == (0.5, 0.0, 1.5, 0.0)
    assert [v.code for v in x.measurement] == ["PP090"]
    assert explanation_lines(x)[0].startswith("measurement error (PP090): 1 event pair")


# ----------------------------------------------------------------------------------------------
# tune


@pytest.mark.parametrize(("layers", "stages", "split"), [
    (8, 4, (2, 2, 2, 2)),  # remainder 0
    (9, 4, (2, 3, 2, 2)),  # remainder 1: the first of the two middle stages
    (11, 4, (3, 3, 3, 2)),  # remainder 3: the middle two, then the first (ties go to the lower stage)
    (10, 3, (3, 4, 3)),  # odd stage count, remainder 1: the one middle stage
    (11, 3, (4, 4, 3)),  # remainder 2 of 3: the middle, then the first end
    (3, 1, (3,)),
    (12, 12, (1,) * 12),
    (13, 12, (1,) * 5 + (2,) + (1,) * 6),  # two-digit stage count: stage 5 is nearest the middle (5.5)
])
def test_even_split_puts_the_remainder_in_the_middle(layers: int, stages: int, split: tuple[int, ...]) -> None:
    assert even_split(layers, stages) == split
    assert sum(split) == layers


@pytest.mark.parametrize(("layers", "layout"), [
    ((0, 3), "E|t*3L"),  # a first stage of embedding only
    ((3, 0), "Et*3|L"),
    ((1,), "EtL"),
    ((1, 1), "Et|tL"),
    ((10, 2), "Et*10|t*2L"),
])
def test_megatron_layout_edges(layers: tuple[int, ...], layout: str) -> None:
    assert megatron_layout(layers) == layout


def _model() -> ModelDesc:
    # Non-default everything: an embedding without I/W (split 1:2 like the layer's I:W), a head with I
    # but no W, activations and weights on every part.
    return ModelDesc(layers=6, layer=LayerCost(F=1.0, B=3.0, I=1.0, W=2.0, activation=2.0, weight=10.0),
                     embedding=LayerCost(F=0.5, B=1.5, activation=1.0, weight=5.0),
                     head=LayerCost(F=2.0, B=6.0, I=4.0, activation=3.0, weight=7.0))


def test_stage_costs_add_embedding_to_the_first_and_head_to_the_last() -> None:
    m = _model()
    assert (m.part_cost(m.embedding, "I"), m.part_cost(m.embedding, "W")) == (0.5, 1.0)  # 1.5 split 1:2
    assert (m.part_cost(m.head, "I"), m.part_cost(m.head, "W")) == (4.0, 4.0)  # I given; W = 6 * 2/3
    assert stage_costs(m, (2, 3, 1)) == {
        0: {"F": 2.5, "B": 7.5, "I": 2.5, "W": 5.0},  # 2 layers + the embedding
        1: {"F": 3.0, "B": 9.0, "I": 3.0, "W": 6.0},
        2: {"F": 3.0, "B": 9.0, "I": 5.0, "W": 6.0},  # 1 layer + the head
    }
    # One stage is both first and last: it carries both.
    assert stage_costs(m, (4,)) == {0: {"F": 6.5, "B": 19.5, "I": 8.5, "W": 13.0}}


def test_stage_memory_adds_embedding_and_head() -> None:
    m = _model()
    assert stage_memory(m, (2, 3, 1)) == ([5.0, 6.0, 5.0], [25.0, 30.0, 17.0])
    assert stage_memory(m, (4,)) == ([12.0], [52.0])
    assert stage_memory(m, (0, 6)) == ([1.0, 15.0], [5.0, 67.0])  # a first stage of embedding only


def _result(family: str, microbatches: int, step: float | None, peak: float, fits: bool = True) -> Result:
    return Result(Structure(family, microbatches), None, step=step, peak=(peak,), fits=fits)


def test_ranking_is_per_micro_batch_then_peak_then_named_families() -> None:
    a = _result("1f1b", 4, 10.0, 1.0)  # 2.5 per micro-batch
    b = _result("gpipe", 8, 16.0, 1.0)  # 2.0: faster per micro-batch though its step is longer
    synth = _result("synth", 4, 8.0, 1.0)  # 2.0, the same peak as b
    zb = _result("zb-h1", 4, 8.0, 1.0)  # "synth" < "zb-h1", yet the named family wins the tie
    low = _result("zb-h1", 8, 16.0, 0.5)  # 2.0 with a lower peak: first of the ties
    over_fast = _result("1f1b", 4, 1.0, 9.0, fits=False)
    over_small = _result("gpipe", 4, 50.0, 8.0, fits=False)  # over the limit: the smaller peak first
    failed = _result("zbv", 4, None, 0.0)
    got = sorted([failed, over_fast, a, synth, over_small, zb, b, low], key=_rank_key(4.0))
    assert [(r.structure.family, r.structure.microbatches, r.step) for r in got] == [
        ("zb-h1", 8, 16.0), ("gpipe", 8, 16.0), ("zb-h1", 4, 8.0), ("synth", 4, 8.0), ("1f1b", 4, 10.0),
        ("gpipe", 4, 50.0), ("1f1b", 4, 1.0), ("zbv", 4, None)]


# ----------------------------------------------------------------------------------------------
# serve


@pytest.fixture
def server() -> Iterator[Any]:
    srv = make_server("127.0.0.1", 0, log=lambda line: None)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _post(srv: Any, body: bytes) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=60)
    conn.request("POST", "/api/plan", body=body, headers={"Content-Type": "application/json"})
    res = conn.getresponse()
    res.read()
    conn.close()
    return res.status


def test_a_body_of_exactly_the_limit_is_read(server: Any) -> None:
    core = json.dumps({"params": {"schedule": "1f1b", "pp": "2", "microbatches": "2"}}).encode()
    exact = core + b" " * (MAX_BODY_BYTES - len(core))  # JSON allows trailing spaces
    assert len(exact) == 65536
    assert _post(server, exact) == 200
    assert _post(server, exact + b" ") == 413


# ----------------------------------------------------------------------------------------------
# simulate, with every cost option away from its default


@pytest.mark.parametrize(("extra", "makespan", "rank1"), [
    # One micro-batch of GPipe on 2 ranks, F 1, B 2, a message 0.5 + 10 bytes / 20 = 1.0:
    # F0 [0,1], SEND [1,2], F1 [2,3], B1 [3,5], SEND back [5,6], B0 [6,8].
    ({}, 8.0, {"F": (2.0, 3.0), "B": (3.0, 5.0)}),
    # Stage 1's F costs 3: F1 [2,5], B1 [5,7], back [7,8], B0 [8,10].
    ({"stages": {1: {"F": 3}}}, 10.0, {"F": (2.0, 5.0), "B": (5.0, 7.0)}),
    # Rank 1 at half speed: F1 [2,4], B1 [4,8], back [8,9], B0 [9,11].
    ({"rank_scale": {1: 2.0}}, 11.0, {"F": (2.0, 4.0), "B": (4.0, 8.0)}),
    # No bytes: the latency alone, 0.5 a message: F1 [1.5,2.5], B1 [2.5,4.5], back [4.5,5], B0 [5,7].
    ({"comm": {"latency": 0.5}}, 7.0, {"F": (1.5, 2.5), "B": (2.5, 4.5)}),
], ids=["comm", "stage-override", "rank-scale", "latency-only"])
def test_simulate_charges_every_cost_option(extra: dict, makespan: float, rank1: dict) -> None:
    from pptl.simulate import simulate

    costs = {"F": 1, "B": 2, "comm": {"latency": 0.5, "bytes": 10, "bandwidth": 20}, **extra}
    s = build_schedule(config_from_mapping({"schedule": "gpipe", "pp": 2, "microbatches": 1, "costs": costs}))
    sim = simulate(s)
    assert sim.makespan == makespan
    got = {e.kind: (e.start, e.end) for e in sim.timeline().events if e.rank == 1 and e.lane == "compute"}
    assert got == rank1
