"""Boundaries of the op-table core that no test reached: a span inside another, a transfer each way
between two ranks at one instant, an op exactly 5% or 50% beside compute, a window edge on an op's
end, the V's last stage, a DEL in a path. Each test pins one hand-written mutant of
``/work/wt/_mutants/core.py`` (``python tests/hand_mutants.py --extra ...``); every number is
worked out by hand in the comment beside it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tomllib

from pptl.config import config_from_mapping
from pptl.contexts import ALONE, Span, context_errors, contexts_of, measure_compute_contexts, measure_contexts
from pptl.dag import graph_of, left_in_cycles
from pptl.errors import InvalidScheduleError
from pptl.events import memory_events
from pptl.export import export_file, export_torchtitan
from pptl.intervals import union
from pptl.ir import Op, Schedule
from pptl.issue_order import program
from pptl.messages import message_key
from pptl.render.layout import build_layout
from pptl.schedules import build_schedule
from pptl.schedules._moe_metrics import exposed_time
from pptl.timeline import Event, Timeline, TimelineMeta

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


# --- intervals -----------------------------------------------------------------------------------------------

def test_union_keeps_the_end_of_a_span_that_contains_the_next() -> None:
    # (2, 3) lies inside (0, 10): the union is (0, 10), not cut back to the inner span's end 3
    assert union([(0.0, 10.0), (2.0, 3.0)]) == [(0.0, 10.0)]
    assert union([(0.0, 10.0), (2.0, 3.0), (4.0, 12.0)]) == [(0.0, 12.0)]


def test_an_all_to_all_inside_another_adds_no_time() -> None:
    # rank 0: one all-to-all runs 0-10, another 2-3 inside it; compute 0-4. The rank spends 10 in
    # all-to-alls, 6 of them (4-10) with the compute lane idle
    total, exposed = exposed_time([(0, "comm", "A2A", 0.0, 10.0), (0, "comm", "A2A", 2.0, 3.0),
                                   (0, "compute", "F", 0.0, 4.0)], frozenset({"A2A"}))
    assert total == {0: 10.0} and exposed == {0: 6.0}


# --- the issue order: each pair of ranks sees its transfers in one order -------------------------------------

def _transfers_with(s: Schedule, order: list[int], peer: int) -> list[tuple[str, int, int, int]]:
    """The message keys of ``order``'s SENDs and RECVs with ``peer``, in that order."""
    ops = s.ops
    return [message_key(ops[i]) for i in order if ops[i].kind in ("SEND", "RECV") and ops[i].peer == peer]


def test_derived_program_orders_a_pairs_transfers_alike_on_both_ranks() -> None:
    """Interleaved 1F1B, pp 2, vpp 2, 2 micro-batches, F 1, B 2, no message time. Stage 3 (rank 1)
    takes mb0's F at 3 and its B runs 4-6, mb1's 7-9; rank 0's B of stage 2 then runs 6-8 (mb0),
    9-11 (mb1); rank 1's B of stage 1 runs 9-11 (mb0), 11-13 (mb1). At t = 11 rank 0 sends the
    gradient of stage 2 mb1 back across the chunk wrap to stage 1 on rank 1 (ending its B 9-11) and
    rank 1 sends the gradient of stage 1 mb0 to rank 0 (ending its B 9-11): two transfers at one
    instant, one each way. NCCL matches a pair's transfers in order, so both ranks
    must put the same one first: the two lists of message keys are equal, and of the two ranks
    exactly one sends first at t = 11."""
    s = build_schedule(config_from_mapping({"schedule": "interleaved-1f1b", "pp": 2, "vpp": 2, "microbatches": 2,
                                            "costs": {"F": 1, "B": 2}}))
    prog = program(s)
    on0, on1 = _transfers_with(s, prog[0], 1), _transfers_with(s, prog[1], 0)
    assert len(on0) == len(on1) == 12  # 0 -> 1: 4 F (stages 0, 2) and 2 B (stage 2); 1 -> 0: 2 F and 4 B
    assert on0 == on1
    at_11 = {("B", 0, 2, 1), ("B", 0, 1, 0)}  # (flow, direction, sender's stage, mb)
    first0 = next(k for k in on0 if k in at_11)
    first1 = next(k for k in on1 if k in at_11)
    assert first0 == first1


# --- the DAG -------------------------------------------------------------------------------------------------

def test_left_in_cycles_names_only_the_nodes_kahn_cannot_order() -> None:
    # 0 -> 1 -> 2 -> 1: node 0 has no predecessor and is ordered; 1 and 2 wait on each other
    succ = graph_of(3, np.array([0, 1, 2]), np.array([1, 2, 1]))
    assert left_in_cycles(succ) == [1, 2]
    assert left_in_cycles(graph_of(2, np.array([0]), np.array([1]))) == []


# --- memory: what the Chrome trace's activation counter adds up ---------------------------------------------

def test_memory_events_of_a_combined_op_and_an_onload() -> None:
    # FB runs the F of one micro-batch (allocates one activation) and the B of another (frees one);
    # an ONLOAD brings its payload back onto the GPU at its end (a negative free)
    assert memory_events(Op("FB", 0, "compute"), 2.0, 0.0) == (2.0, 2.0)
    assert memory_events(Op("ONLOAD", 0, "h2d", payload=0.25), 1.0, 0.0) == (0.0, -0.25)
    assert memory_events(Op("OFFLOAD", 0, "d2h", payload=0.25), 1.0, 0.0) == (0.0, 0.25)


@pytest.mark.parametrize("fixture", ["dualpipe_seed.yaml", "moe_overlap.yaml"])
def test_the_chrome_activation_counter_ends_each_step_at_zero(fixture: str) -> None:
    # every activation a step allocates is freed by its end: DualPipe frees half of them in its FB
    # ops, the MoE plan takes offloaded ones back with ONLOADs before their backward frees them
    trace = json.loads(export_file(FIXTURES / fixture, to="chrome").data)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    last: dict[int, float] = {}
    for e in events:
        if e.get("ph") == "C":
            last[e["pid"]] = e["args"]["activation"]
    assert last and all(v == 0 for v in last.values()), last


# --- contexts: which compute an op ran beside ----------------------------------------------------------------

def test_an_op_half_beside_compute_takes_the_computes_context() -> None:
    # A2A 1-3 beside MLP 0-2: 1 of its 2 units, exactly the half that names a context
    spans = [Span(0, "compute", "MLP", 0.0, 2.0), Span(0, "comm", "A2A", 1.0, 3.0)]
    assert contexts_of(spans) == [None, "MLP"]


def test_a_tie_between_two_compute_kinds_goes_to_the_first_name() -> None:
    # A2A 0.5-1.5 beside MLP 0-1 for 0.5 and ATTN 1-2 for 0.5: a tie, broken by name (ATTN < MLP),
    # not by which kernel ran first (MLP)
    spans = [Span(0, "compute", "MLP", 0.0, 1.0), Span(0, "compute", "ATTN", 1.0, 2.0),
             Span(0, "comm", "A2A", 0.5, 1.5)]
    assert contexts_of(spans) == [None, None, "ATTN"]


def _planned_beside_measured_alone() -> list[tuple[Span, Span]]:
    # planned: A2A 1-3 inside MLP 0-4 (context MLP, 2 long); measured: the A2A ran 5-6 after the MLP
    # (context alone, 1 long)
    return [(Span(0, "compute", "MLP", 0.0, 4.0), Span(0, "compute", "MLP", 0.0, 4.0)),
            (Span(0, "comm", "A2A", 1.0, 3.0), Span(0, "comm", "A2A", 5.0, 6.0))]


def test_context_errors_group_each_side_by_its_own_context() -> None:
    # the planned A2A counts in (A2A, MLP), the measured one in (A2A, alone); a row with nothing
    # measured has no error (no division by a mean of 0); the planned 2 units scale by 2.0 to 4.0
    rows = context_errors(_planned_beside_measured_alone(), 2.0)
    got = [(r.kind, r.context, r.planned_count, r.measured_count, r.planned_mean, r.measured_mean) for r in rows]
    assert got == [("A2A", "MLP", 1, 0, 4.0, 0.0), ("A2A", ALONE, 0, 1, 0.0, 1.0)]
    assert rows[0].error is None
    assert rows[1].error == -1.0  # (0 - 1) / 1


def test_a_compute_op_five_percent_beside_a_copy_is_timed_alone() -> None:
    # MLP 0-20 with a copy 19-30 beside it for 1 = 5% of 20: alone, so stage 0's "mlp" is 20 alone.
    # MLP 40-70 with a copy 40-60: 10 alone (half its work at 20 alone), 20 beside doing the other
    # half, so 40 beside
    spans = [Span(0, "compute", "MLP", 0.0, 20.0), Span(0, "comm", "A2A", 19.0, 30.0),
             Span(0, "compute", "MLP", 40.0, 70.0), Span(0, "comm", "A2A", 40.0, 60.0)]
    got = measure_compute_contexts(spans, ["mlp", None, "mlp", None], [0, -1, 0, -1])
    assert got.alone == {0: {"mlp": 20.0}}
    assert got.beside == {0: {"mlp": 40.0}}


def _two_members() -> list[Span]:
    """Stage 0 on ranks 0 and 1: rank 0's mlp takes 10 alone, rank 1's 15; a third op on rank 1,
    20-45, runs 5 alone (1/3 of its work at 15) and then 20 beside a copy (the other 2/3): 30 beside.
    The fit is exact: 10 x0 = 1, 15 x1 = 1, 5 x1 + 20 y = 1."""
    return [Span(0, "compute", "MLP", 0.0, 10.0), Span(1, "compute", "MLP", 0.0, 15.0),
            Span(1, "compute", "MLP", 20.0, 45.0), Span(1, "comm", "A2A", 25.0, 45.0)]


def test_a_slower_members_alone_part_is_timed_at_its_own_rate() -> None:
    # alone: the mean of 10 and 15 = 12.5; factors 10 / 12.5 = 0.8 and (2 x 15) / (2 x 12.5) = 1.2
    # (weighted by op count); the beside op did 5 / (12.5 x 1.2) = 1/3 of its work alone, so its 20
    # beside did 2/3: 30, not 20 / (1 - 5 / 12.5) = 33.3 from the stage's mean rate
    got = measure_compute_contexts(_two_members(), ["mlp"] * 3 + [None], [0, 0, 0, -1])
    assert got.alone == {0: {"mlp": 12.5}}
    assert got.rank_scale == pytest.approx({0: 0.8, 1: 1.2})
    assert got.beside[0]["mlp"] == pytest.approx(30.0)


def test_a_stage_one_rank_ran_alone_says_nothing_of_that_ranks_speed() -> None:
    # rank 1 also runs stage 1 (20 alone) where no other rank ran: no one to compare with, so its
    # factor stays 1.2 from stage 0, not pulled toward 1 by (30 + 20) / (25 + 20)
    spans = _two_members() + [Span(1, "compute", "MLP", 100.0, 120.0)]
    got = measure_compute_contexts(spans, ["mlp"] * 3 + [None, "mlp"], [0, 0, 0, -1, 1])
    assert got.rank_scale == pytest.approx({0: 0.8, 1: 1.2})
    assert got.alone == {0: {"mlp": 12.5}, 1: {"mlp": 20.0}}


def test_a_side_op_five_percent_beside_compute_is_timed_alone() -> None:
    # A2A 19-39 beside MLP 0-20 for 1 = 5% of 20: alone, 20. A2A 55-95 beside MLP 60-65 for 5 =
    # 12.5% of 40: not alone, so the alone duration is 20, not the mean 30 of both
    spans = [Span(0, "compute", "MLP", 0.0, 20.0), Span(0, "comm", "A2A", 19.0, 39.0),
             Span(0, "compute", "MLP", 60.0, 65.0), Span(0, "comm", "A2A", 55.0, 95.0)]
    assert measure_contexts(spans, [None, "a2a", None, "a2a"])["a2a"][ALONE] == 20.0


def test_without_an_op_alone_the_alone_duration_is_from_ops_under_half_beside() -> None:
    # no op is within 5%: A2A 10-30 is beside MLP 0-20 for 10 = exactly half (not under it), A2A
    # 40-80 beside MLP 70-80 for 10 = a quarter; the alone duration is the latter's 40, not 30
    spans = [Span(0, "compute", "MLP", 0.0, 20.0), Span(0, "comm", "A2A", 10.0, 30.0),
             Span(0, "compute", "MLP", 70.0, 80.0), Span(0, "comm", "A2A", 40.0, 80.0)]
    assert measure_contexts(spans, [None, "a2a", None, "a2a"])["a2a"][ALONE] == 40.0


def test_one_tail_is_enough_to_learn_the_alone_duration() -> None:
    # truth: 0.4 alone, 0.6 beside MLP 0-1. A2A 0.1-0.7 wholly beside it; A2A 0.7-1.2 does 0.3 / 0.6
    # = half its work beside the MLP, the other half alone in 0.2: its one tail gives 0.2 / 0.5 = 0.4
    spans = [Span(0, "compute", "MLP", 0.0, 1.0), Span(0, "comm", "A2A", 0.7, 1.2),
             Span(0, "comm", "A2A", 0.1, 0.7)]
    m = measure_contexts(spans, [None, "a2a", "a2a"])["a2a"]
    assert m[ALONE] == pytest.approx(0.4, rel=1e-4)
    assert m["MLP"] == pytest.approx(0.6, rel=1e-4)


def test_a_tail_of_five_percent_is_no_tail() -> None:
    # A2A 0-20 beside MLP 0-19: its last 1 (5% of 20) is alone, as noise as a 5% overlap is; A2A
    # 20-60 wholly beside MLP 20-60. No op has a tail, so nothing says how long one takes alone
    spans = [Span(0, "compute", "MLP", 0.0, 19.0), Span(0, "comm", "A2A", 0.0, 20.0),
             Span(0, "compute", "MLP", 20.0, 60.0), Span(0, "comm", "A2A", 20.0, 60.0)]
    assert ALONE not in measure_contexts(spans, [None, "a2a", None, "a2a"])["a2a"]


# --- the figure layout ---------------------------------------------------------------------------------------

def _three_ops() -> Timeline:
    # rank 0: F mb0 0-10, F mb1 10-20, B mb0 20-30 (the step spans 0-30)
    ev = [Event(op="f0", rank=0, lane="compute", kind="F", start=0.0, end=10.0, stage=0, mb=0),
          Event(op="f1", rank=0, lane="compute", kind="F", start=10.0, end=20.0, stage=0, mb=1),
          Event(op="b0", rank=0, lane="compute", kind="B", start=20.0, end=30.0, stage=0, mb=0)]
    return Timeline(ev, TimelineMeta(source="planned", units="ms", family="1f1b", pp=1))


def test_a_window_draws_no_op_that_only_touches_its_edges() -> None:
    # window 10-20: F mb0 ends at 10 and B mb0 starts at 20; only F mb1 is inside
    lay = build_layout(_three_ops(), window=(10.0, 20.0))
    assert lay.blocks.event.tolist() == [1]
    assert (lay.blocks.start.tolist(), lay.blocks.end.tolist()) == ([10.0], [20.0])


def test_a_window_draws_a_zero_length_op_at_either_edge() -> None:
    # zero-length ops at 10 and at 20 are inside the closed window 10-20
    tl = _three_ops()
    marks = [Event(op="m10", rank=0, lane="compute", kind="F", start=10.0, end=10.0, stage=0, mb=2),
             Event(op="m20", rank=0, lane="compute", kind="F", start=20.0, end=20.0, stage=0, mb=3)]
    lay = build_layout(Timeline(tl.events + marks, tl.meta), window=(10.0, 20.0))
    assert sorted(lay.blocks.event.tolist()) == [1, 3, 4]


@pytest.mark.parametrize("window, outside", [
    ((30.0, 40.0), True),  # starts where the step ends
    ((-5.0, 0.0), True),  # ends where the step starts
    ((29.0, 40.0), False),
    ((-5.0, 1.0), False),
])
def test_a_window_that_only_touches_the_step_is_outside_it(window: tuple[float, float], outside: bool) -> None:
    title = build_layout(_three_ops(), window=window).title
    assert title.endswith(", outside the step (0-30)") is outside, title


def test_only_compute_rows_carry_the_ranks_bubble() -> None:
    # rank 0 computes 0-1 and 3-4 of a step 0-4 (bubble 0.5) and sends 1-2; its send row has none
    ev = [Event(op="f", rank=0, lane="compute", kind="F", start=0.0, end=1.0, stage=0, mb=0),
          Event(op="s", rank=0, lane="send", kind="SEND", start=1.0, end=2.0, stage=0, mb=0),
          Event(op="b", rank=0, lane="compute", kind="B", start=3.0, end=4.0, stage=0, mb=0)]
    lay = build_layout(Timeline(ev, TimelineMeta(source="measured", units="ms", family="1f1b", pp=1)))
    assert [(r.spec.key, r.bubble) for r in lay.rows] == [((0, "compute"), 0.5), ((0, "send"), None)]


# --- exports -------------------------------------------------------------------------------------------------

def test_torchtitan_two_stages_per_rank_need_no_layers_per_stage() -> None:
    # interleaved pp 4 vpp 2: 2 stages per rank, torchtitan's default for multi-stage schedules
    toml = export_torchtitan(FIXTURES / "interleaved.yaml", csv_path="pp.csv").toml
    assert "pipeline_parallel_layers_per_stage" not in toml
    assert "2 stage(s) per rank" in toml


def test_torchtitan_v_comment_names_the_last_stage_of_the_v() -> None:
    # ZB-V on 4 ranks: 8 stages 0-7; rank r holds r and 7 - r (rank 0: 0 and 7, rank 3: 3 and 4)
    files = export_torchtitan(FIXTURES / "zbv.yaml", csv_path="pp.csv")
    assert "(a V: rank r holds stages r and 7-r)" in files.toml
    rows = files.csv.decode().splitlines()
    stages = [sorted({int(c.split("F")[0]) for c in row.split(",") if c.endswith(tuple("0123456789")) and "F" in c})
              for row in rows]
    assert stages == [[r, 7 - r] for r in range(4)]


def test_torchtitan_one_micro_batch_is_singular() -> None:
    toml = export_torchtitan(FIXTURES / "1f1b.yaml", csv_path="pp.csv", microbatches=1).toml
    assert toml.splitlines()[0].endswith(", 1 micro-batch")


def test_torchtitan_csv_path_with_a_delete_character_reads_back() -> None:
    # DEL (0x7F) is a control character TOML refuses raw: escaped, the file parses and names the path
    toml = export_torchtitan(FIXTURES / "1f1b.yaml", csv_path="pp\x7f.csv").toml
    assert "\\u007F" in toml
    assert tomllib.loads(toml)["parallelism"]["pipeline_parallel_schedule_csv"] == "pp\x7f.csv"


def test_export_refuses_ops_on_a_negative_rank(tmp_path: Path) -> None:
    # a 1F1B pp 4 plan whose first lane (rank 0's compute, 16 ops) was moved to rank -1
    from pptl.formats.plan import dumps, plan_to_dict

    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 4, "microbatches": 8}))
    data = json.loads(dumps(plan_to_dict(s)))
    data["lanes"][0]["rank"] = -1
    path = tmp_path / "neg.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InvalidScheduleError, match=r"is on rank -1, outside the plan's ranks 0-3 \(16 ops"):
        export_file(path, to="torch-csv")
