"""Boundaries of the check rules and the schedule families, against values worked out by hand.

Each test pins a place where a one-character slip in ``pptl/checks`` or ``pptl/schedules`` changes what
a user reads and no earlier test looked (the rows of /work/wt/_mutants/wave2_rules.py name the slips):
the peak a memory message reports past the moment it crossed the limit, the rank a formula warning
names when several ranks are over, shares of 1F1B's memory with fewer micro-batches than stages,
formulas whose name is two words, a warm-up at exactly pp micro-batches, a group size at its limits.
Unit costs are the defaults unless a test says otherwise: F = 1, B = 2, no communication time.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from pptl.checks import run_checks
from pptl.checks.measured import measured_violations, measurement_line
from pptl.config import config_from_mapping
from pptl.errors import InputError
from pptl.ir import Op, Schedule, ScheduleBuilder
from pptl.planning import plan
from pptl.schedules import build_schedule, get_family
from pptl.schedules.weight_update import GiB, auto_bucket_size, spec_from_options
from pptl.timeline import Event, Timeline, TimelineMeta


def _build(**fields: Any) -> Schedule:
    return build_schedule(config_from_mapping(fields))


def _messages(vs: list[Any], code: str) -> list[str]:
    return [v.message for v in vs if v.code == code]


def _first_on_lane(s: Schedule, key: tuple[int, str], pick: Any) -> Schedule:
    """``s`` with the ops of lane ``key`` that ``pick`` selects moved to the front, in their order."""
    lane = s.lanes[key]
    front = [i for i in lane if pick(s.ops[i])]
    return replace(s, lanes={**s.lanes, key: front + [i for i in lane if i not in front]})


# ----------------------------------------------------------------------------------------------
# PP009: the peak the message gives is the rank's peak, not what it held when it crossed the limit


def test_memory_limit_message_gives_the_peak_past_the_crossing() -> None:
    # 1F1B pp=4 m=8: rank r warms up with 3-r forwards, then its 4-r-th forward starts before the
    # first backward frees one: rank 0 peaks at 4, rank 1 at 3, rank 2 at 2, rank 3 at 1. Limit 2:
    # rank 0 crosses it at the start of its third forward (3 held), and goes on to 4; rank 1 crosses
    # it at its third forward too (3 held) and that is its peak. Rank 2 holds 2: at the limit, valid.
    s = _build(schedule="1f1b", pp=4, microbatches=8)
    found = _messages(run_checks(s, memory_limit=2), "PP009")
    assert len(found) == 2
    r0, r1 = found
    assert r0.startswith("rank 0 holds 3 activation units at t=2 (when r0/compute/F s0 mb2 starts)")
    assert r0.endswith("over the limit 2; peak 4")
    assert r1.startswith("rank 1 holds 3 activation units")
    assert r1.endswith("over the limit 2; peak 3")


# ----------------------------------------------------------------------------------------------
# PP023: the rank named is the one with the largest peak; the share of 1F1B's with m < pp


def test_memory_formula_warning_names_the_worst_rank_not_the_first_over() -> None:
    # inference pp=3 m=4: the bound is min(2, mV) = 2 outputs per rank. Zero-time messages; an output
    # is held from its forward's start to its SEND's end. Rank 0's send lane reordered to send mb2
    # first: its SENDs wait for F mb2 (ends t=3), so rank 0 holds mb0, mb1, mb2 at t=2..3 (3), and mb3
    # alone after (sent at t=4). Rank 1 receives mb0-mb2 at t=3 and mb3 at t=4, runs F mb k at t=3+k;
    # its send lane reordered to send mb3 first: nothing leaves before F mb3 ends (t=7), so it holds
    # all 4 at t=6. The last rank sends nothing: 1. Ranks 0 and 1 are over (3 and 4); the worst is 1.
    s = _build(schedule="inference", pp=3, microbatches=4)
    s = _first_on_lane(s, (0, "send"), lambda op: op.mb == 2)
    s = _first_on_lane(s, (1, "send"), lambda op: op.mb == 3)
    [w] = _messages(run_checks(s), "PP023")
    assert w.startswith("inference: simulated peak activation 4 on rank 1 is above the formula's 2: ")
    assert w.endswith("; 2 rank(s) over")


def test_v_memory_share_counts_1f1b_at_min_of_pp_and_microbatches() -> None:
    # v-half pp=4 m=2: 1F1B on the same model holds min(4, 2) = 2 micro-batches of a whole stage = 4
    # chunks; the default share 0.55 x 4 = 2.2 allows 2 chunks (the bound; the pattern's 4 is over
    # it). Rank 0's two chunk-0 forwards moved to the front of its lane (they depend on nothing):
    # before its first I it holds F s0 mb0, F s0 mb1 and F s7 mb0: 3 chunks. Shares: 3 / 4 = 0.75 of
    # 1F1B's, against 2 / 4 = 0.50 (with max(p, m) = 4 micro-batches they would read 0.38 and 0.25).
    s = _build(schedule="v-half", pp=4, microbatches=2, w_activation=1.0,
               costs={"F": 1, "I": 1, "W": 1, "B": 2})
    s = _first_on_lane(s, (0, "compute"), lambda op: op.kind == "F" and op.stage == 0)
    found = _messages(run_checks(s), "PP023")
    assert len(found) == 2
    assert found[0].startswith("v-half: simulated peak activation 3 on rank 0 is above the family's 2.2 ")
    assert found[1].startswith("v-half: simulated peak activation 3 on rank 0 is above the formula's 2 "
                               "(0.75 of 1F1B's, against 0.50): ")


# ----------------------------------------------------------------------------------------------
# PP022: a formula named in two words ("about 3pF") keeps both


def test_formula_warning_quotes_an_approximate_formula_in_full() -> None:
    # v-half's formula reads "about 3pF per rank ...": the warning quotes "about 3pF" (no value: the
    # squeezed order has no closed form). m = 2 < pp = 4 is one failed assumption.
    s = _build(schedule="v-half", pp=4, microbatches=2, costs={"F": 1, "I": 1, "W": 1, "B": 2})
    found = _messages(run_checks(s), "PP022")
    assert found[0].startswith("v-half: the textbook bubble about 3pF does not apply: microbatches=2 < pp=4: ")


# ----------------------------------------------------------------------------------------------
# PP020: an F half paired with the backward of an earlier stage needs it through the loss


def test_fb_paired_with_an_earlier_stages_backward_needs_it_through_the_loss() -> None:
    # One rank, stages 0 and 1. The FB runs F s1 mb1 with B s0 mb1: that backward needs B s1 mb1's
    # gradient, which needs the loss of mb1, which needs F s1 mb1 itself: "through the loss", not
    # "directly" (that is B s1 mb1 paired with F s1 mb1, the same stage).
    b = ScheduleBuilder()
    for op in (Op("F", 0, "compute", 0, 0), Op("F", 0, "compute", 1, 0), Op("B", 0, "compute", 1, 0),
               Op("B", 0, "compute", 0, 0), Op("F", 0, "compute", 0, 1),
               Op("FB", 0, "compute", 1, 1, pair=(0, 1, 0)), Op("B", 0, "compute", 1, 1)):
        b.add(op)
    s = Schedule("custom", 1, 2, 2, b.ops, b.lanes)
    [w] = _messages(run_checks(s), "PP020")
    assert "overlaps F of stage 1 mb 1 with B of stage 0 of the same micro-batch" in w
    assert w.endswith("that backward needs it through the loss, so the pair can never start")


# ----------------------------------------------------------------------------------------------
# PP021: one report per FIFO, at its first out-of-order W


def test_weight_gradient_fifo_reversed_is_reported_once() -> None:
    # One rank, one stage: I mb0, I mb1, I mb2 push the FIFO; W mb2, W mb1, W mb0 pop it backwards.
    # W mb2 is the first out of order (the head is mb0's); W mb1 is out of order too (the head is
    # still mb0's), but the rule reports the first per FIFO: one violation, naming W mb2 and I mb0.
    b = ScheduleBuilder()
    for kind, mb in (("F", 0), ("F", 1), ("F", 2), ("I", 0), ("I", 1), ("I", 2), ("W", 2), ("W", 1), ("W", 0)):
        b.add(Op(kind, 0, "compute", 0, mb))
    found = [v for v in run_checks(Schedule("custom", 1, 1, 3, b.ops, b.lanes)) if v.code == "PP021"]
    assert [v.ops for v in found] == [("r0/compute/W s0 mb2", "r0/compute/I s0 mb0")]
    assert found[0].message.startswith("r0/compute/W s0 mb2 pops the weight-gradient FIFO of rank 0, stage 0 "
                                       "before r0/compute/W s0 mb0")


# ----------------------------------------------------------------------------------------------
# The weight update: a tensor exactly a third of the usable memory, a flat list sharded by start


def test_a_tensor_of_exactly_a_third_of_usable_memory_keeps_the_h2d_buffer() -> None:
    # free 30 GiB: usable int(0.9 x 30 GiB) = 27 GiB; two IPC halves and the H2D buffer take a third
    # each, 9 GiB (a multiple of 256 bytes). A 9 GiB tensor fits one exactly: the bucket is
    # min(max(8 GiB, 9 GiB), 9 GiB) = 9 GiB, with the H2D buffer. 256 bytes more and it does not:
    # two buffers, half of 27 GiB each.
    assert auto_bucket_size(largest_tensor=9 * GiB, free_memory=30 * GiB) == (9 * GiB, True)
    assert auto_bucket_size(largest_tensor=9 * GiB + 256, free_memory=30 * GiB) == (9 * GiB + 256, False)
    # The same sizes given by hand: three 9 GiB buffers in 27 GiB fit, so auto keeps the H2D buffer.
    spec = spec_from_options({"bucket_size": "9GiB", "free_memory": "30GiB", "tensor_size": "1GiB"}, pp=2)
    assert spec.h2d_buffer is True


def test_a_flat_tensor_list_goes_to_the_rank_whose_share_it_starts_in() -> None:
    # Three 1 MiB tensors over 2 ranks: 3 MiB, a share of 1.5 MiB each. The tensors start at 0, 1 and
    # 2 MiB: the first two start in rank 0's share [0, 1.5), the third in rank 1's. Rank 0 holds 2 MiB.
    spec = spec_from_options({"tensors": ["1MiB", "1MiB", "1MiB"]}, pp=2)
    assert [len(t) for t in spec.owners] == [2, 1]


def test_a_plan_without_its_bucket_list_checks_its_last_bucket_too() -> None:
    # pp=2, rank 0 owns two 1 KiB tensors, one bucket each: buckets 0 and 1. A plan without the bucket
    # list (hand-written or imported) counts its buckets from the ops: the largest id, 1, plus one =
    # 2. Rank 1's reload of bucket 1 (the last) dropped: PP055 names it.
    s = _build(schedule="weight-update", pp=2, microbatches=1,
               options={"tensors": [[1024, 1024], []], "bucket_size": 1024})
    lanes = {k: [s.ops[i] for i in v if not (s.ops[i].kind == "RELOAD" and s.ops[i].rank == 1 and s.ops[i].bucket == 1)]
             for k, v in s.lanes.items()}
    t = s.with_lanes(lanes)
    update = {k: v for k, v in t.meta["weight_update"].items() if k != "buckets"}
    t = replace(t, meta={**t.meta, "weight_update": update})
    assert _messages(run_checks(t), "PP055") == ["bucket 1 is missing its reload on rank 1"]


def test_broadcast_order_takes_the_majority_even_when_rank_0_differs() -> None:
    # pp=3, rank 0 owns two 1 KiB tensors: buckets 0 and 1, both broadcast from rank 0. Rank 0 itself
    # broadcasts bucket 1 first; ranks 1 and 2 (two of three: the reference) bucket 0 first. One
    # report, on rank 0; ranks 1 and 2 are right, whatever rank 0 does.
    s = _build(schedule="weight-update", pp=3, microbatches=1,
               options={"tensors": [[1024, 1024], [], []], "bucket_size": 1024})
    lanes = {k: [s.ops[i] for i in v] for k, v in s.lanes.items()}
    lanes[(0, "comm")] = lanes[(0, "comm")][::-1]
    assert _messages(run_checks(s.with_lanes(lanes)), "PP053") == [
        "rank 0 broadcasts bucket 1 from rank 0 as its broadcast #0, but the other ranks broadcast bucket 0 from "
        "rank 0 there (a collective must run in the same order on every rank)"]


def test_a_broadcast_from_the_wrong_rank_names_three_of_its_ops() -> None:
    # pp=4, rank 0 owns the one bucket; every rank's BCAST relabelled to come from rank 1. All four are
    # wrong: the message names the first (rank 0's) and the violation carries the first three ops
    # (ranks 0, 1, 2), as many as a reader can follow.
    s = _build(schedule="weight-update", pp=4, microbatches=1,
               options={"tensors": [[1024], [], [], []], "bucket_size": 1024})
    lanes = {k: [replace(s.ops[i], peer=1) if s.ops[i].kind == "BCAST" else s.ops[i] for i in v]
             for k, v in s.lanes.items()}
    [v] = [v for v in run_checks(s.with_lanes(lanes)) if v.code == "PP055"]
    assert v.message == ("bucket 0 belongs to rank 0 but r0/comm/BCAST Broadcast (src) bucket0 half0 broadcasts it "
                         "from rank 1")
    assert [op.split("/")[0] for op in v.ops] == ["r0", "r1", "r2"]


# ----------------------------------------------------------------------------------------------
# Interleaved 1F1B: the group sizes a refusal suggests


def test_a_short_last_group_suggests_the_four_smallest_sizes_that_fit_and_m() -> None:
    # pp=2 m=13 G=4: 13 mod 4 = 1 < pp, refused. G in 2..12 fits when 13 mod G is 0 or >= 2:
    # 2 (1) no, 3 (1) no, 4 (1) no, 5 (3) yes, 6 (1) no, 7 (6) yes, 8 (5) yes, 9 (4) yes, 10 (3) yes,
    # 11 (2) yes, 12 (1) no. The four smallest, 5 7 8 9, then G = m = 13 (always fits).
    with pytest.raises(InputError, match=r"group sizes that fit: 5, 7, 8, 9, 13 for schedule 'interleaved-1f1b'$"):
        _build(schedule="interleaved-1f1b", pp=2, vpp=2, microbatches=13, group_size=4)


# ----------------------------------------------------------------------------------------------
# Measured timelines (PP090): RECVs matched in time order whatever order the file lists them in


def _send_recv(send_start: float, recv_start: float, recv_end: float, suffix: str = "") -> tuple[Event, Event]:
    """A SEND of stage 0 mb 0 from rank 0 (0.5 long) and a RECV of it on rank 1, matched by key."""
    send = Event("r0/send/SEND_F s0 mb0 ->r1" + suffix, 0, "send", send_start, send_start + 0.5, "SEND", stage=0,
                 mb=0, peer=1, flow="F")
    recv = Event("r1/recv/RECV_F s1 mb0 <-r0" + suffix, 1, "recv", recv_start, recv_end, "RECV", stage=1, mb=0,
                 peer=0, flow="F")
    return send, recv


def _measured(events: list[Event]) -> Timeline:
    return Timeline(events, TimelineMeta(source="measured", units="ms", extra={}))


def test_receives_listed_out_of_time_order_take_the_sends_in_time_order() -> None:
    # One key sent twice (a plan that sends stage 0 mb 0 twice): SENDs start at 1.0 and 3.0, RECVs run
    # 1.0-1.6 and 3.1-3.6. In time, first to first and second to second: each RECV ends after its SEND
    # starts, no error. The file lists the later RECV first; matched in listing order, the RECV ending
    # at 1.6 would take the SEND starting at 3.0 and read as 1.4 ms early (PP090).
    a_send, a_recv = _send_recv(1.0, 1.0, 1.6)
    b_send, b_recv = _send_recv(3.0, 3.1, 3.6, "#2")
    assert measured_violations(_measured([a_send, b_send, b_recv, a_recv])) == []


def test_measurement_line_counts_two_pairs_in_the_plural() -> None:
    # Two RECVs end 0.5 ms before their SENDs start (stages 0 and 2): "2 event pairs".
    first = _send_recv(1.0, 0.0, 0.5)
    second = (replace(first[0], op=first[0].op + "#2", stage=2), replace(first[1], op=first[1].op + "#2", stage=3))
    found = measured_violations(_measured([*first, *second]))
    assert [v.code for v in found] == ["PP090", "PP090"]
    line = measurement_line(found)
    assert line is not None and line.startswith("measurement error (PP090): 2 event pairs out of causal order")


def test_a_last_group_of_one_micro_batch_is_named_in_the_singular() -> None:
    # pp=2 m=13 G=4: the last group is 13 mod 4 = 1 micro-batch; pp=3 m=14 G=4: 14 mod 4 = 2 micro-batches.
    with pytest.raises(InputError, match=r"which leaves a last group of 13 mod 4 = 1 micro-batch, fewer than pp=2 "):
        _build(schedule="interleaved-1f1b", pp=2, vpp=2, microbatches=13, group_size=4)
    with pytest.raises(InputError, match=r"which leaves a last group of 14 mod 4 = 2 micro-batches, fewer than pp=3 "):
        _build(schedule="interleaved-1f1b", pp=3, vpp=2, microbatches=14, group_size=4)


# ----------------------------------------------------------------------------------------------
# Family formulas exactly at the sizes where they start to hold


def _family_cfg(**fields: Any) -> tuple[Any, Any]:
    cfg = config_from_mapping(fields)
    return get_family(cfg.schedule), cfg


_EQUAL = {"F": 1, "I": 1, "W": 1, "B": 2}


def test_inference_of_one_micro_batch_over_two_chunks_holds_two_outputs_within_its_formula() -> None:
    # pp=1 vpp=2 m=1: F s0 mb0 then F s1 mb0 on the one rank; the first output is held until the next
    # chunk's forward has it (its end): 2 held while F s1 runs. The formula is min(2, mV) = min(2, 2) = 2:
    # no PP023 (with min(2, m) = 1 every such plan would be "over").
    fam, cfg = _family_cfg(schedule="inference", pp=1, vpp=2, microbatches=1)
    assert fam.memory(cfg) == 2.0
    result = plan(cfg)
    assert result.simulation is not None
    assert [r.peak_activation for r in result.simulation.ranks] == [2.0]
    assert [v.code for v in result.violations] == []


def test_zero_bubble_needs_exactly_2p_minus_1_micro_batches() -> None:
    # pp=3: 2p-1 = 5 micro-batches is enough for ZB-H2 and ZB-V: with F = I = W, B = I + W and no
    # message time, no assumption fails, and ZB-V's bubble is 0 (not None).
    for name in ("zb-h2", "zbv"):
        fam, cfg = _family_cfg(schedule=name, pp=3, microbatches=5, costs=_EQUAL)
        assert fam.assumptions(cfg) == [], name
    fam, cfg = _family_cfg(schedule="zbv", pp=3, microbatches=5, costs=_EQUAL)
    assert fam.bubble(cfg) == 0.0


def test_looped_families_at_exactly_pp_micro_batches_keep_their_formulas() -> None:
    # m = pp = 4 is "m >= p": interleaved-zb's bubble is (p-1)(F+I-W) = 3 x (1+1-1) = 3 per chunk, and
    # neither it nor looped-bfs warns that the fill is not covered.
    fam, cfg = _family_cfg(schedule="interleaved-zb", pp=4, vpp=2, microbatches=4, costs=_EQUAL)
    assert fam.bubble(cfg) == 3.0
    assert fam.assumptions(cfg) == []
    fam, cfg = _family_cfg(schedule="looped-bfs", pp=4, vpp=2, microbatches=4)
    assert fam.assumptions(cfg) == []
    # v-half at m = pp reaches its steady state (only the memory cap is named).
    fam, cfg = _family_cfg(schedule="v-half", pp=4, microbatches=4, costs=_EQUAL)
    assert not any("steady state" in why for why in fam.assumptions(cfg))


def test_dualpipe_w_longer_than_i_equal_to_f_is_named() -> None:
    # DualPipe pp=4 (H = 2), I = F = 1 < W = 2: each rank idles (H-1)(W-I) = 1 x 1 = 1 more than
    # (H-1)(F&B+B-3W); I = F, so only the W line (F&B = 4 = F+B).
    fam, cfg = _family_cfg(schedule="dualpipe", pp=4, microbatches=8, costs={"F": 1, "I": 1, "W": 2, "B": 3, "FB": 4})
    assert fam.assumptions(cfg) == ["W=2 > I=1: each rank idles (H-1)(W-I) = 1 more than the formula"]
