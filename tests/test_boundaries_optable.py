"""Boundaries of the op table every view reads (pptl/op.py, optable.py, ir.py, deps.py, timeline.py, the torch
CSV table and the loader): the facts of one table asked for with two stage counts, events appended after a
summary, lanes that start together or before compute, ranks of two digits, a rank with no event on the lane asked
about, a stage named on two ranks, file names in upper case (.JSON, .JSON.GZ), duplicate ops, one rank holding two
stages.

Each test kills a hand-written mutant (/work/wt/_mutants/wave3_optable.py) that the rest of the suite let through;
the numbers are worked out by hand in each docstring.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pptl.deps import facts_of_table, training_deps
from pptl.formats.loaded import load_data
from pptl.formats.loader import load_any
from pptl.ir import Schedule
from pptl.op import Op
from pptl.optable import OpTable, group_ids
from pptl.timeline import Event, RankStats, Timeline


def _ev(rank: int, lane: str, start: float, end: float, kind: str = "F") -> Event:
    return Event(f"r{rank}/{lane}/{kind} {start}", rank, lane, start, end, kind)


# ----------------------------------------------------------------------------------------------------------------
# deps: the remembered facts belong to one (table, stage count)


def test_facts_of_one_table_follow_the_stage_count_asked_for() -> None:
    """Ops: 0 F s0, 1 F s1, 2 B s1, 3 B s0 (one rank, mb 0, no messages: edges are direct).

    With 2 stages (last = 1): F s1 needs F s0 (0, 1); B s1 needs F s1 (1, 2) and, as the last stage, no G of
    the next; B s0 needs F s0 (0, 3) and G s1 (2, 3). With 1 stage (last = 0): F s1 still reads F s0 (0, 1)
    (its previous stage 0 is a stage), B s1 is past the last stage (no edge), B s0 needs F s0 (0, 3) and no G
    of stage 1 (past the last). The second call must not hand back the first's arrays."""
    ops = [Op("F", 0, "compute", stage=0, mb=0), Op("F", 0, "compute", stage=1, mb=0),
           Op("B", 0, "compute", stage=1, mb=0), Op("B", 0, "compute", stage=0, mb=0)]
    t = OpTable.from_ops(ops)
    u, v = facts_of_table(t, 2)
    assert list(zip(u.tolist(), v.tolist())) == [(0, 1), (0, 3), (1, 2), (2, 3)]
    u, v = facts_of_table(t, 1)
    assert list(zip(u.tolist(), v.tolist())) == [(0, 1), (0, 3)]


def test_an_empty_table_has_no_facts() -> None:
    """No ops, no facts (0 edges), at any stage count: not a reduction over zero values."""
    u, v = facts_of_table(OpTable.from_ops([]), 4)
    assert u.tolist() == [] and v.tolist() == []
    assert training_deps([], 1) == []


# ----------------------------------------------------------------------------------------------------------------
# timeline: the remembered summary, lane order, ranks without the lane


def test_an_event_appended_after_a_summary_counts() -> None:
    """F [0, 10] alone: makespan 10. Appending one that touches it, [10, 25], makes the makespan 25 and the
    lane busy 10 + 15 = 25, so no bubble."""
    tl = Timeline([_ev(0, "compute", 0.0, 10.0)])
    assert tl.makespan == 10.0
    tl.events.append(_ev(0, "compute", 10.0, 25.0))
    assert tl.makespan == 25.0
    assert tl.lane_busy() == {(0, "compute"): 25.0}
    assert tl.bubble_fraction() == 0.0


def test_compute_is_a_ranks_first_lane_even_when_another_starts_earlier() -> None:
    """The receive starts at 0, compute at 2: compute is drawn first all the same."""
    tl = Timeline([_ev(0, "recv", 0.0, 2.0, "RECV"), _ev(0, "compute", 2.0, 5.0)])
    assert tl.lanes() == [(0, "compute"), (0, "recv")]


def test_lanes_that_start_together_are_ordered_by_name() -> None:
    """send and recv both start at 5 (send listed first): the tie goes by name, recv before send."""
    tl = Timeline([_ev(0, "compute", 0.0, 5.0), _ev(0, "send", 5.0, 6.0, "SEND"), _ev(0, "recv", 5.0, 7.0, "RECV")])
    assert tl.lanes() == [(0, "compute"), (0, "recv"), (0, "send")]


def test_lanes_are_ordered_by_their_first_start_not_their_last() -> None:
    """recv runs at 3 and 10, send at 5 and 6: recv's first start (3) is before send's (5), so recv comes first
    (by last start, send's 6 would beat recv's 10)."""
    tl = Timeline([_ev(0, "compute", 0.0, 1.0), _ev(0, "recv", 3.0, 4.0, "RECV"), _ev(0, "send", 5.0, 6.0, "SEND"),
                   _ev(0, "send", 6.0, 7.0, "SEND"), _ev(0, "recv", 10.0, 11.0, "RECV")])
    assert tl.lanes() == [(0, "compute"), (0, "recv"), (0, "send")]


def test_two_digit_ranks_are_ordered_as_numbers() -> None:
    """Ranks 10 and 2: rank 2's lanes come first (as text "10" < "2")."""
    tl = Timeline([_ev(10, "compute", 0.0, 1.0), _ev(2, "compute", 0.0, 1.0), _ev(10, "send", 1.0, 2.0, "SEND")])
    assert tl.ranks() == [2, 10]
    assert tl.lanes() == [(2, "compute"), (10, "compute"), (10, "send")]


def test_a_rank_with_no_compute_event_is_all_bubble() -> None:
    """Rank 0 computes over [0, 10]; rank 1 only sends over [0, 10]. On compute: rank 0 busy 10 idle 0, rank 1
    busy 0 idle 10 (fraction 1); the bubble is (0 + 10) / (10 * 2) = 0.5."""
    tl = Timeline([_ev(0, "compute", 0.0, 10.0), _ev(1, "send", 0.0, 10.0, "SEND")])
    assert tl.rank_stats() == [RankStats(0, 10.0, 0.0, 0.0), RankStats(1, 0.0, 10.0, 1.0)]
    assert tl.bubble_fraction() == 0.5


# ----------------------------------------------------------------------------------------------------------------
# torch CSV: a stage named on two ranks


def test_a_stages_placement_is_read_from_the_first_rank_that_names_it(tmp_path: Path) -> None:
    """Stage 0 runs on rank 0 (0F0, 0B0) and again on rank 1 (0F1, 0B1, after 1F0): its first rank is 0, so
    stages {0: rank 0, 1: rank 1} are a loop placement over 2 ranks, 1 stage per rank (by its last rank,
    stage 0 would sit on rank 1 beside stage 1: a custom placement)."""
    path = tmp_path / "s.csv"
    path.write_text("0F0,0B0\n1F0,0F1,1B0,0B1\n")
    loaded = load_any(path)
    assert "placement: loop (stage s on rank s % 2, 1 per rank), 2 stages (inferred)" in loaded.notes


# ----------------------------------------------------------------------------------------------------------------
# the loader: upper-case names


def _trace() -> dict[str, Any]:
    """A CPU-only torch profiler trace of rank 0: PP:0F0 over [0, 10] us."""
    return {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "PP:0F0", "pid": 0, "tid": 1, "ts": 0, "dur": 10}]}


@pytest.mark.parametrize("name", ["RANK0.JSON", "rank0.Json"])
def test_an_upper_case_json_trace_is_read_as_a_trace(tmp_path: Path, name: str) -> None:
    """A .JSON name is a .json file: the profiler reader reads F0 over [0, 10]."""
    path = tmp_path / name
    path.write_text(json.dumps(_trace()))
    loaded = load_any(path)
    assert loaded.kind == "profiler"
    assert loaded.timeline is not None
    assert [(e.op, e.start, e.end) for e in loaded.timeline.events] == [("r0/compute/F s0 mb0", 0.0, 10.0)]


@pytest.mark.parametrize("name", ["RANK0.JSON.GZ", "rank0.Json.gz", "rank0.json.GZ"])
def test_an_upper_case_json_gz_trace_is_read_as_a_trace(tmp_path: Path, name: str) -> None:
    """A .JSON.GZ name is a gzipped trace, as .json.gz is (it was handed to the plan/config reader: "not a pptl
    plan, timeline or config")."""
    path = tmp_path / name
    path.write_bytes(gzip.compress(json.dumps(_trace()).encode()))
    loaded = load_any(path)
    assert loaded.kind == "profiler"
    assert loaded.timeline is not None
    assert [(e.op, e.start, e.end) for e in loaded.timeline.events] == [("r0/compute/F s0 mb0", 0.0, 10.0)]


# ----------------------------------------------------------------------------------------------------------------
# the schedule: duplicate ids, one rank holding two stages, a rank's lanes


def test_the_index_of_a_duplicated_op_is_its_first_occurrence() -> None:
    """The same F s0 mb0 at rows 0 and 2: its id maps to 0 (the checker reports the duplicate); B maps to 1."""
    f, b = Op("F", 0, "compute", stage=0, mb=0), Op("B", 0, "compute", stage=0, mb=0)
    s = Schedule(family="x", pp=1, num_stages=1, microbatches=1, ops=[f, b, f])
    assert s.index() == {"r0/compute/F s0 mb0": 0, "r0/compute/B s0 mb0": 1}


def test_one_rank_holding_two_stages_has_two_chunks() -> None:
    """No config (vpp 1): 2 stages on pp 1 are 2 // 1 = 2 chunks per rank; on pp 2, 1; 4 stages on pp 2, 2."""
    assert Schedule(family="x", pp=1, num_stages=2, microbatches=1, ops=[]).chunks_per_rank == 2
    assert Schedule(family="x", pp=2, num_stages=2, microbatches=1, ops=[]).chunks_per_rank == 1
    assert Schedule(family="x", pp=2, num_stages=4, microbatches=1, ops=[]).chunks_per_rank == 2


def test_a_ranks_lanes_are_only_its_own() -> None:
    """Ranks 0, 1 and 10: rank 1's lanes are compute and send, none of rank 0's or rank 10's."""
    ops = [Op("F", 0, "compute", stage=0, mb=0), Op("F", 1, "compute", stage=1, mb=0),
           Op("SEND", 1, "send", stage=1, mb=0, peer=10, flow="F"), Op("F", 10, "recvs", stage=2, mb=0)]
    s = Schedule(family="x", pp=11, num_stages=3, microbatches=1, ops=ops,
                 lanes={(0, "compute"): [0], (1, "compute"): [1], (1, "send"): [2], (10, "recvs"): [3]})
    assert s.rank_lanes(1) == ["compute", "send"]
    assert s.rank_lanes(10) == ["recvs"]


def test_a_lane_a_rank_does_not_have_holds_no_ops() -> None:
    """Rank 0 has a compute lane only: its send lane, and rank 1's compute lane, are empty, not errors."""
    f = Op("F", 0, "compute", stage=0, mb=0)
    s = Schedule(family="x", pp=2, num_stages=1, microbatches=1, ops=[f], lanes={(0, "compute"): [0]})
    assert s.lane_ops(0, "compute") == [f]
    assert s.lane_ops(0, "send") == []
    assert s.lane_ops(1, "compute") == []


# ----------------------------------------------------------------------------------------------------------------
# op and optable: the first bucket and half, a cost key, narrow codes


def test_an_ops_dict_keeps_bucket_zero_and_half_zero() -> None:
    """Bucket 0 and half 0 are the first bucket and buffer half, not the defaults (-1): the dict keeps both and
    reads back as the same op; the pair is written as a list."""
    op = Op("H2D", 0, "h2d", bucket=0, half=0)
    assert op.to_dict() == {"kind": "H2D", "rank": 0, "lane": "h2d", "bucket": 0, "half": 0}
    assert Op(**op.to_dict()) == op
    fb = Op("FB", 1, "compute", stage=0, mb=1, pair=(1, 0, 0))
    assert fb.to_dict() == {"kind": "FB", "rank": 1, "lane": "compute", "stage": 0, "mb": 1, "pair": [1, 0, 0]}


def test_an_ops_cost_key_is_its_cost_else_its_kind() -> None:
    """A MoE layer's F costed as "attn_f" looks up "attn_f" (what "no cost for ..." names); one without a cost
    key looks up its kind."""
    assert Op("F", 0, "compute", stage=0, mb=0, cost="attn_f").cost_key == "attn_f"
    assert Op("F", 0, "compute", stage=0, mb=0).cost_key == "F"


def test_group_ids_of_narrow_codes_do_not_wrap() -> None:
    """int8 codes -100 and 100 span 201 values: ids 0 and 200 (100 - -100), size 201; in int8 arithmetic
    100 - -100 would wrap to -56."""
    ids, size = group_ids(np.array([-100, 100], dtype=np.int8))
    assert ids.tolist() == [0, 200]
    assert size == 201
    ids, size = group_ids(np.array([-100, 100, -100], dtype=np.int8), np.array([0, 1, 1], dtype=np.int8))
    assert ids.tolist() == [0, 401, 1]  # (code + 100) * 2 + second
    assert size == 402


# ----------------------------------------------------------------------------------------------------------------
# timeline: an empty selection


def test_selecting_no_ranks_or_no_lanes_selects_no_events() -> None:
    """An empty list of ranks (or lanes) is a selection of nothing, not of everything; None is everything."""
    tl = Timeline([_ev(0, "compute", 0.0, 1.0), _ev(1, "send", 1.0, 2.0, "SEND")])
    assert tl.select(ranks=[]).events == []
    assert tl.select(lanes=[]).events == []
    assert tl.select(ranks=None).events == tl.events
    assert [e.rank for e in tl.select(ranks=[1]).events] == [1]


# ----------------------------------------------------------------------------------------------------------------
# loaded: the command line's options override a config's fields


def test_options_override_a_configs_pp_microbatches_vpp_and_memory_limit() -> None:
    """The config says interleaved-1f1b, pp 2, 4 micro-batches, vpp 2; the options say pp 4, 8 micro-batches,
    vpp 3 and a memory limit of 3: the schedule is built from the options (4 * 3 = 12 stages); an option of
    None leaves the field alone."""
    cfg = {"schedule": "interleaved-1f1b", "pp": 2, "microbatches": 4, "vpp": 2}
    s = load_data(cfg, "c.yaml", pp=4, microbatches=8, vpp=3, memory_limit=3.0).schedule
    assert s is not None and s.config is not None
    assert (s.pp, s.microbatches, s.num_stages) == (4, 8, 12)
    assert (s.config.vpp, s.config.memory_limit) == (3, 3.0)
    s = load_data(cfg, "c.yaml", pp=None, microbatches=None, vpp=None, memory_limit=None).schedule
    assert s is not None and s.config is not None
    assert (s.pp, s.microbatches, s.num_stages, s.config.memory_limit) == (2, 4, 4, None)


def test_a_folder_of_traces_named_in_capitals_reads_as_the_same_folder_in_lower_case(tmp_path: Path) -> None:
    """A folder of per-rank traces takes ``RANK3.JSON.GZ`` as it takes ``rank3.json.gz`` (load_any reads one such
    file by the name without case): the recorded 1F1B run on 12 gloo ranks, renamed, gives the same events."""
    import shutil

    from pptl.formats.loader import load_any

    src = Path(__file__).resolve().parent.parent / "fixtures" / "traces_cpu_gloo" / "Schedule1F1B"
    upper = tmp_path / "up"
    upper.mkdir()
    for f in sorted(src.glob("rank*.json.gz")):
        shutil.copy(f, upper / f.name.upper())
    want, got = load_any(src).timeline, load_any(upper).timeline
    assert want is not None and got is not None
    assert len({e.rank for e in got.events}) == 12
    assert sorted((e.rank, e.kind, e.start) for e in got.events) == sorted((e.rank, e.kind, e.start) for e in want.events)
