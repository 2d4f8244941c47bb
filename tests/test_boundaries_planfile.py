"""Boundaries of the plan file reader, torch's schedule CSV, the quoting of bad values, the names a file may
hold, old weight-update op ids and the simulator, each pinned by numbers worked out by hand: a value exactly
at a reader's limit, an extra dependency naming op 0 or op n, ids and ranks of two digits, stage placement at
the middle and past the end of a V, a quoted file's line numbers. Each test kills a hand-written mutant
(/work/wt/_mutants/wave2_planfile.py) that the rest of the suite let through.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from pptl.config import Costs, config_from_mapping
from pptl.deps import training_deps
from pptl.errors import InputError, InvalidScheduleError
from pptl.formats import torch_csv
from pptl.formats._legacy import bucket_id
from pptl.formats._quote import int_ranges, quoted
from pptl.formats._text import has_control
from pptl.formats.plan import plan_from_dict, plan_to_dict
from pptl.formats.torch_csv import load_csv_text, read_csv
from pptl.ir import Op, Schedule, ScheduleBuilder
from pptl.power import unthrottled
from pptl.schedules import build_schedule
from pptl.simulate import simulate

# ----------------------------------------------------------------------------------------------
# The plan reader


def _plan(kinds: tuple[str, ...] = ("F", "B"), mb: list[int] | None = None, *, version: int = 3,
          microbatches: int = 1) -> dict[str, Any]:
    """A columnar plan: ``kinds`` in order on rank 0's compute lane, all of stage 0 (one stage)."""
    values = list(dict.fromkeys(kinds))
    n = len(kinds)
    cols: dict[str, Any] = {"kind": {"values": values, "index": [values.index(k) for k in kinds]},
                            "stage": [0] * n, "mb": mb if mb is not None else [0] * n}
    return {"format": "pptl-plan", "version": version,
            "schedule": {"family": "x", "pp": 1, "num_stages": 1, "microbatches": microbatches},
            "lanes": [{"rank": 0, "lane": "compute", "count": n}], "ops": cols, "deps": []}


def _v1(ops: list[dict[str, Any]], **over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"format": "pptl-plan", "version": 1,
                         "schedule": {"family": "x", "pp": 1, "num_stages": 1, "microbatches": 1},
                         "lanes": [{"rank": 0, "lane": "compute", "ops": ops}]}
    d.update(over)
    return d


def _read(data: dict[str, Any]) -> Schedule:
    return plan_from_dict(data, source="p.json")[0]


def test_a_schedule_of_exactly_max_ops_units_of_work_is_read() -> None:
    """1 stage x 5,000,000 micro-batches x 1 direction is MAX_OPS (5,000,000) units: the limit, not past it."""
    d = _plan()
    d["schedule"]["microbatches"] = 5_000_000
    assert _read(d).microbatches == 5_000_000
    d["schedule"]["microbatches"] = 5_000_001
    with pytest.raises(InputError, match=r"more than the 5,000,000 units of work"):
        _read(d)


def test_lanes_of_exactly_max_ops_ops_pass_the_count_and_reach_the_columns() -> None:
    """Lanes counting 5,000,000 ops in all are within the limit: the file is then read on to its columns
    (here the missing ``kind`` is what it lacks); 5,000,001 are refused for their number."""
    d = _plan()
    del d["ops"]["kind"]
    d["lanes"] = [{"rank": 0, "lane": "compute", "count": 4_000_000}, {"rank": 0, "lane": "send", "count": 1_000_000}]
    with pytest.raises(InputError, match=r"ops\.kind: required"):
        _read(d)
    d["lanes"][1]["count"] = 1_000_001
    with pytest.raises(InputError, match=r"5,000,001 ops, more than the 5,000,000"):
        _read(d)


@pytest.mark.parametrize("field, value, match", [
    ("version", 0, r"field 'version': got 0, expected an integer >= 1"),
    ("directions", 0, r"field 'schedule\.directions': got 0, expected an integer >= 1"),
], ids=["version-0", "directions-0"])
def test_a_version_or_a_direction_count_of_zero_is_refused(field: str, value: int, match: str) -> None:
    """Versions start at 1 and a schedule runs at least one direction (0 directions is no work at all)."""
    d = _v1([{"kind": "F", "stage": 0, "mb": 0}])
    if field == "version":
        d["version"] = value
    else:
        d["schedule"][field] = value
    with pytest.raises(InputError, match=match):
        _read(d)


def test_an_empty_kind_no_op_uses_is_harmless_and_one_an_op_uses_is_refused() -> None:
    """The kind table F, B, "" with indices 0, 1: no op is of the empty kind; index 2 makes op 1 one."""
    d = _plan()
    d["ops"]["kind"]["values"] = ["F", "B", ""]
    assert [op.kind for op in _read(d).ops] == ["F", "B"]
    d["ops"]["kind"]["index"] = [0, 2]
    with pytest.raises(InputError, match=r"ops\.kind: got an empty kind"):
        _read(d)


def test_a_lane_of_rank_ten_million_is_read() -> None:
    """A rank's limit is 10,000,000 in either sign, as every index in a plan file."""
    d = _plan()
    d["lanes"][0]["rank"] = 10_000_000
    assert _read(d).ops[0].id == "r10000000/compute/F s0 mb0"
    d["lanes"][0]["rank"] = -10_000_001
    with pytest.raises(InputError, match=r"lanes\[0\]\.rank: got -10000001"):
        _read(d)


def test_a_lane_of_no_ops_is_a_lane() -> None:
    """A count of 0 is an empty lane (a rank that sends nothing), not a malformed entry."""
    d = _plan()
    d["lanes"].append({"rank": 0, "lane": "send", "count": 0})
    s = _read(d)
    assert s.lanes == {(0, "compute"): [0, 1], (0, "send"): []}
    d["lanes"][1]["count"] = -1
    with pytest.raises(InputError, match=r"lanes\[1\]\.count: got -1, expected an integer >= 0"):
        _read(d)


def test_indices_of_ten_million_in_pairs_and_columns_are_read() -> None:
    """-10,000,000 in an integer column and 10,000,000 in a pair are at the limit (abs <= 10,000,000)."""
    d = _plan()
    d["ops"]["mb"] = [-10_000_000, -10_000_000]
    d["ops"]["pair"] = [None, [10_000_000, -10_000_000, 0]]
    s = _read(d)
    assert s.ops[1].mb == -10_000_000 and s.ops[1].pair == (10_000_000, -10_000_000, 0)
    d["ops"]["pair"] = [None, [10_000_001, 0, 0]]
    with pytest.raises(InputError, match=r"ops\.pair: got \[10000001, 0, 0\]"):
        _read(d)


def test_a_version_1_op_index_of_ten_million_is_read() -> None:
    s = _read(_v1([{"kind": "F", "stage": 0, "mb": 10_000_000}]))
    assert s.ops[0].mb == 10_000_000
    with pytest.raises(InputError, match=r"ops\[0\]\.mb: got 10000001, expected an integer"):
        _read(_v1([{"kind": "F", "stage": 0, "mb": 10_000_001}]))


@pytest.mark.parametrize("deps", [[0, 2], [2, 0], [0, 1, 1]], ids=["consumer-n", "producer-n", "odd-length"])
def test_extra_dependencies_naming_op_n_or_of_odd_length_are_refused(deps: list[int]) -> None:
    """Two ops: positions 0 and 1. Position 2 is one past the last; three numbers are no list of pairs."""
    d = _plan()
    d["deps"] = deps
    with pytest.raises(InputError, match=r"field 'deps': expected an even-length list of op positions in 0\.\.1"):
        _read(d)


def test_a_version_1_rank_or_pair_past_ten_million_is_an_input_error() -> None:
    """Version 1 reads ranks and pairs to the same limit as version 2 (abs <= 10,000,000): a rank or a
    pair stage of 10**30 was an OverflowError traceback when the op table took it as int64 (a real bug)."""
    assert _read(_v1([{"kind": "F", "stage": 0, "mb": 0}], lanes=[
        {"rank": 10_000_000, "lane": "compute", "ops": [{"kind": "F", "stage": 0, "mb": 0}]}])).ops[0].rank == 10_000_000
    with pytest.raises(InputError, match=r"lanes\[0\]\.rank: got 1(0{30}), expected an integer"):
        _read(_v1([], lanes=[{"rank": 10**30, "lane": "compute", "ops": [{"kind": "F", "stage": 0, "mb": 0}]}]))
    with pytest.raises(InputError, match=r"lanes\[0\]\.rank: got -10000001, expected an integer"):
        _read(_v1([], lanes=[{"rank": -10_000_001, "lane": "compute", "ops": [{"kind": "F", "stage": 0, "mb": 0}]}]))
    fb = {"kind": "FB", "stage": 0, "mb": 1, "pair": [10_000_000, 0, 0]}
    assert _read(_v1([fb])).ops[0].pair == (10_000_000, 0, 0)
    with pytest.raises(InputError, match=r"ops\[0\]\.pair: got \[1(0{30}), 0, 0\], expected \[stage, mb, direction\]"):
        _read(_v1([{**fb, "pair": [10**30, 0, 0]}]))


def test_a_version_1_dependency_naming_op_n_is_refused() -> None:
    ops = [{"kind": "F", "stage": 0, "mb": 0}, {"kind": "B", "stage": 0, "mb": 0}]
    with pytest.raises(InputError, match=r"deps\[0\]: got \[1, 2\], expected \[producer, consumer\] positions in 0\.\.1"):
        _read(_v1(ops, deps=[[1, 2]]))


def test_stored_times_of_exactly_minus_max_time_are_read() -> None:
    """MAX_TIME is 1e18 either side of 0: -1e18 is a time, the next float below it is not."""
    d = _plan()
    d["timeline"] = {"meta": {}, "start": [-1e18, 0], "end": [0, 1]}
    timeline = plan_from_dict(d)[1]
    assert timeline is not None and [(e.start, e.end) for e in timeline.events] == [(-1e18, 0.0), (0.0, 1.0)]
    below = math.nextafter(-1e18, -math.inf)
    d["timeline"] = {"meta": {}, "start": [below, 0], "end": [0, 1]}
    with pytest.raises(InputError, match=rf"timeline\.start: got {re.escape(repr(below))}, expected a finite number"):
        plan_from_dict(d)[1]


def test_a_topological_position_of_exactly_two_to_the_62_is_read() -> None:
    d = _plan()
    d["order"] = [0, 2**62]
    assert _read(d).ops[1].kind == "B"
    d["order"] = [0, 2**62 + 1]
    with pytest.raises(InputError, match=r"field 'order': expected a list of 2 integers in 0\.\.4611686018427387904"):
        _read(d)


def test_a_payload_is_written_when_it_is_the_only_field_off_its_default() -> None:
    """An OFFLOAD built through the library (no label, no cost key, no sub) that moves 0.5 activation
    units off the GPU: the written plan keeps the 0.5 (the memory the copy frees at its end), though every
    other rarely used field is at its default and left out."""
    b = ScheduleBuilder()
    b.add(Op(kind="F", rank=0, lane="compute", stage=0, mb=0))
    b.add(Op(kind="B", rank=0, lane="compute", stage=0, mb=0))
    b.add(Op(kind="OFFLOAD", rank=0, lane="copy", stage=0, mb=0, payload=0.5))
    s = Schedule("custom", 1, 1, 1, b.ops, b.lanes, training_deps(b.ops, 1) + [(0, 2)])
    back, _ = plan_from_dict(plan_to_dict(s))
    assert [(op.kind, op.payload) for op in back.ops] == [("F", 0.0), ("B", 0.0), ("OFFLOAD", 0.5)]


# ----------------------------------------------------------------------------------------------
# torch's schedule CSV


def test_stages_times_micro_batches_of_exactly_max_ops_is_read() -> None:
    """2 stages x 2,500,000 micro-batches (asked with --microbatches) is MAX_OPS (5,000,000) units of work,
    the limit; 2 x 2,500,001 is past it."""
    s = load_csv_text("0F0,0B0\n1F0,1B0\n", microbatches=2_500_000)[0]
    assert (s.num_stages, s.microbatches) == (2, 2_500_000)
    with pytest.raises(InputError, match=r"2 stages \(highest stage index 1\) x 2500001 micro-batches is more than"):
        load_csv_text("0F0,0B0\n1F0,1B0\n", microbatches=2_500_001)


def test_a_file_of_exactly_the_action_limit_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cell-by-cell reader (a leading space sends the file there) counts actions against MAX_OPS, here
    lowered to 4: 4 actions are read, a fifth on the next row is refused on that row's line."""
    monkeypatch.setattr(torch_csv, "MAX_OPS", 4)
    assert len(load_csv_text(" 0F0,0F1,0B0,0B1\n")[0].ops) == 4
    with pytest.raises(InputError, match=r"^<csv>:2: more than the 4 actions pptl accepts"):
        load_csv_text(" 0F0,0F1,0B0,0B1\n 1F0\n")


def test_v_placement_puts_stage_pp_on_the_last_rank_as_its_second_chunk() -> None:
    """V over 4 ranks: stages 0-3 on ranks 0-3 (chunk 0), stage 4 = pp back on rank 3 (2pp - 1 - 4) as its
    chunk 1, ... stage 7 on rank 0."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    s = load_csv_text((fixtures / "csv/zbv_pp4_m8.csv").read_text())[0]
    assert {(op.stage, op.rank, op.chunk) for op in s.ops if op.kind == "F"} == \
        {(0, 0, 0), (1, 1, 0), (2, 2, 0), (3, 3, 0), (4, 3, 1), (5, 2, 1), (6, 1, 1), (7, 0, 1)}


def test_a_stage_past_the_v_is_counted_and_not_placed_on_rank_minus_one() -> None:
    """pp 2 asked as V: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2, as the file runs them; it also
    runs stage 4 (= 2pp) on rank 0, so it has 5 stages, not 4. The V places stage 4 on no rank: no
    placement mismatch is reported for it (not 'puts it on rank -1')."""
    text = "0F0,3F0,4F0,4B0,3B0,0B0\n1F0,2F0,2B0,1B0\n"
    s, _, problems, _ = load_csv_text(text, placement="v", report_problems=True)
    assert (s.meta["placement"], s.num_stages) == ("v", 5)
    assert problems == []


def test_a_custom_placement_numbers_chunks_by_stage_number_not_text() -> None:
    """Rank 0 runs stages 2 and 10 (neither loop nor V over 2 ranks: custom): stage 2 is its chunk 0 and
    stage 10 its chunk 1, though "10" sorts before "2" as text."""
    s = load_csv_text("2F0,10F0,10B0,2B0\n0F0,0B0\n")[0]
    assert s.meta["placement"] == "custom"
    assert {op.stage: op.chunk for op in s.ops} == {2: 0, 10: 1, 0: 0}


def test_ops_on_ranks_ten_and_up_are_located_on_their_own_row(tmp_path: Path) -> None:
    """A 13-rank file, one row per rank: rank 12's ops are on line 13, rank 1's on line 2."""
    path = tmp_path / "s.csv"
    path.write_text("".join(f"{r}F0,{r}B0\n" for r in range(13)))
    loaded = read_csv(path)
    assert loaded.locate is not None
    assert loaded.locate("r12/compute/F s12 mb0") == 13 and loaded.locate("r1/compute/F s1 mb0") == 2


def test_an_overlap_reads_the_same_with_its_b_first_cell_by_cell() -> None:
    """(0B0;0F1)OVERLAP_F_B is (0F1;0B0)OVERLAP_F_B: one FB whose F half is mb 1 and B half (pair) mb 0.
    The leading space sends both files through the cell-by-cell reader."""
    f_first = load_csv_text(" 0F0,(0F1;0B0)OVERLAP_F_B,0B1\n")[0]
    b_first = load_csv_text(" 0F0,(0B0;0F1)OVERLAP_F_B,0B1\n")[0]
    fb = b_first.ops[1]
    assert (fb.kind, fb.stage, fb.mb, fb.pair) == ("FB", 0, 1, (0, 0, 0))
    assert b_first.ops == f_first.ops


def test_zero_micro_batches_asked_are_refused() -> None:
    with pytest.raises(InputError, match=r"^--microbatches: got 0, expected an integer >= 1$"):
        load_csv_text("0F0,0B0\n", microbatches=0)


# ----------------------------------------------------------------------------------------------
# Quoting a bad value, names without control characters, old weight-update ids


def test_a_string_of_exactly_the_quote_limit_is_quoted_whole() -> None:
    """60 characters is the limit: its repr (62 with the quotes) is shown; 61 are cut after 60."""
    assert quoted("x" * 60) == "'" + "x" * 60 + "'"
    assert quoted("x" * 61) == "'" + "x" * 60 + "... (61 characters)"
    assert quoted("\x00" * 15) == "'" + "\\x00" * 15 + "'"  # 15 escapes of 4: repr 62 long, the limit + 2


def test_an_integer_of_sixty_digits_is_quoted_and_one_of_61_named() -> None:
    assert quoted(10**60 - 1) == "9" * 60
    assert quoted(10**60) == "an integer of more than 60 digits"


def test_a_list_of_eight_short_values_or_a_repr_of_sixty_characters_is_spelled_out() -> None:
    """Eight items are still spelled out, nine are counted; a list whose repr is exactly 60 characters
    (['x...x'] with 56 x: 56 + 4) is shown, one of 61 counted."""
    assert quoted(list(range(8))) == "[0, 1, 2, 3, 4, 5, 6, 7]"
    assert quoted(list(range(9))) == "a list of 9 items"
    assert quoted(["x" * 56]) == "['" + "x" * 56 + "']"
    assert quoted(["x" * 57]) == "a list of 1 item"


def test_int_ranges_count_the_runs_left_in_the_singular_and_none_when_all_shown() -> None:
    """1, 3, 5 are three runs: two shown and '1 more run'; with room for three, nothing is said to be left."""
    assert int_ranges([1, 3, 5], most=2) == "1, 3 and 1 more run"
    assert int_ranges([1, 3, 5], most=3) == "1, 3, 5"


@pytest.mark.parametrize("ch, control", [("\x00", True), ("\x1f", True), (" ", False), ("~", False), ("\x7f", True),
                                         ("\x80", True), ("\x9f", True), ("\xa0", False), ("é", False)])
def test_control_characters_are_c0_del_and_c1_exactly(ch: str, control: bool) -> None:
    """C0 is U+0000-U+001F, DEL U+007F, C1 U+0080-U+009F: each end of each range is a control; space,
    '~', the no-break space U+00A0 and 'é' are text."""
    assert has_control(f"lane{ch}x") is control


def test_a_plan_lane_holding_the_last_c1_control_is_refused() -> None:
    d = _plan()
    d["lanes"][0]["lane"] = "compute\x9f"
    with pytest.raises(InputError, match=r"lanes\[0\]\.lane: got 'compute\\x9f', expected text without control"):
        _read(d)


@pytest.mark.parametrize("old, new", [("r12/ipc/COPY IPC mb13 #10", "r12/ipc/COPY IPC bucket13 half10"),
                                      ("r0/ipc/COPY mb2 #0", "r0/ipc/COPY bucket2 half0"),
                                      ("r10/h2d/H2D mb11", "r10/h2d/H2D bucket11"),
                                      ("r0/ipc/BCAST " + "L" * 200 + " mb3 #1", "r0/ipc/BCAST " + "L" * 200 + " bucket3 half1")],
                         ids=["two-digit-rank-bucket-half", "half-zero", "h2d-no-half", "long-label"])
def test_old_weight_update_ids_move_to_bucket_and_half(old: str, new: str) -> None:
    """``mb`` was the bucket and ``#`` the half: every digit of each, half 0 kept, a label of 200 characters
    (an id under the 1,000 characters the pattern is tried on)."""
    assert bucket_id(old) == new


def test_a_clock_record_whose_mhz_is_a_flag_prints_no_clock() -> None:
    """``sm_mhz: true`` is no clock: rank 0 is said to be held in 10% of its samples, with no 'at 1 MHz'
    (True formatted as a number); rank 1's 1410.4 MHz prints as 1410."""
    gpu = {"0": {"slowed": 0.1, "sm_mhz": True}, "1": {"slowed": 0, "sm_mhz": 1410.4}}
    assert unthrottled(gpu, 2) == "rank 0, held in 10% of samples; rank 1 at 1410 MHz, held in 0% of samples"


# ----------------------------------------------------------------------------------------------
# The simulator


def _one_rank(*ops: tuple[str, int], lane: str = "compute") -> ScheduleBuilder:
    b = ScheduleBuilder()
    for kind, mb in ops:
        b.add(Op(kind=kind, rank=0, lane=lane, stage=0, mb=mb))
    return b


def test_a_peak_a_ten_thousandth_above_the_last_is_a_new_peak() -> None:
    """One rank runs F0 I0 F1 W0 I1 W1, each taking 1: [0,1] [1,2] [2,3] [3,4] [4,5] [5,6]. With W holding
    1e-4 of an activation, I frees 0.9999 at its end and W 0.0001. Memory: 1 from t = 0; 0.0001 when I0
    ends at 2, then F1 adds 1 at the same instant (frees first): 1.0001, the peak, reached at t = 2. Only a
    1e-12 share of the largest event (1) is rounding; 1e-4 is memory."""
    b = _one_rank(("F", 0), ("I", 0), ("F", 1), ("W", 0), ("I", 1), ("W", 1))
    s = Schedule("custom", 1, 1, 2, b.ops, b.lanes, training_deps(b.ops, 1))
    sim = simulate(s, Costs(base={"F": 1.0, "I": 1.0, "W": 1.0}), activation=1.0, w_activation=1e-4)
    assert sim.end == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert sim.ranks[0].peak_activation == pytest.approx(1.0001, rel=1e-12)
    assert sim.peak_time == {0: 2.0}
    assert (sim.ranks[0].busy, sim.ranks[0].idle, sim.metrics()["bubble_fraction"]) == (6.0, 0.0, 0.0)  # pp = 1


def test_a_copy_of_no_payload_and_no_cost_is_a_missing_cost() -> None:
    """A copy with no cost of its own takes payload / copy_bandwidth: 3 units at 2 per unit of time take
    1.5 ([1, 2.5] after the F it follows). A payload of 0 says nothing about the copy, so its cost is
    missing (not 0)."""
    def offload(payload: float) -> Schedule:
        b = _one_rank(("F", 0), ("B", 0))
        b.add(Op(kind="OFFLOAD", rank=0, lane="copy", stage=0, mb=0, payload=payload))
        return Schedule("custom", 1, 1, 1, b.ops, b.lanes, training_deps(b.ops, 1) + [(0, 2)])

    costs = Costs(base={"F": 1.0, "B": 2.0}, copy_bandwidth=2.0)
    sim = simulate(offload(3.0), costs)
    assert (sim.start, sim.end) == ([0.0, 1.0, 1.0], [1.0, 3.0, 2.5])
    with pytest.raises(InvalidScheduleError, match=r"no cost for 'OFFLOAD' \(op r0/copy/OFFLOAD s0 mb0\)"):
        simulate(offload(0.0), costs)


def test_a_ranks_busy_time_is_its_compute_lane_only() -> None:
    """GPipe over 2 ranks, 1 micro-batch, F = 1, B = 2, a message 0.5: F s0 [0, 1], its SEND [1, 1.5],
    F s1 [1.5, 2.5], B s1 [2.5, 4.5], the gradient's SEND [4.5, 5], B s0 [5, 7]. Each rank computes for
    3 of the 7 (its SEND, on its own lane, is no compute): idle 4, bubble 4/7."""
    s = build_schedule(config_from_mapping({"schedule": "gpipe", "pp": 2, "microbatches": 1,
                                            "costs": {"F": 1, "B": 2, "comm": {"latency": 0.5}}}))
    sim = simulate(s)
    assert sim.makespan == 7.0
    assert [(r.rank, r.busy, r.idle) for r in sim.ranks] == [(0, 3.0, 4.0), (1, 3.0, 4.0)]
    assert sim.metrics()["bubble_fraction"] == pytest.approx(4 / 7, rel=1e-12)
