"""Behaviour that the sampled mutation run (`make mutate-sample`, docs/testing.md) found no test pinning.

Each test names the mutant it was written against; it fails with that mutant applied and passes on
the tree as it is.
"""
from __future__ import annotations

import dataclasses

import pytest

from pptl.checks import run_checks
from pptl.checks.base import Violation
from pptl.config import Config, Costs, config_from_mapping
from pptl.errors import InputError, InvalidScheduleError
from pptl.formats.torch_csv import load_csv_text
from pptl.ir import Op, Schedule, ScheduleBuilder
from pptl.schedules import build_schedule
from pptl.simulate import durations, held_spans, simulate

# ---------------------------------------------------------------- pptl/checks


def test_violation_json_uses_the_documented_keys() -> None:
    # checks.base to_dict 5: "severity" spelt otherwise
    v = Violation("PP001", "m", ("a",), severity="warning", line=3)
    assert v.to_dict() == {"code": "PP001", "severity": "warning", "message": "m", "ops": ["a"], "line": 3}
    assert "line" not in Violation("PP001", "m").to_dict()


def test_gradient_of_stage_1_without_its_send_is_reported() -> None:
    # checks.comm unmatched_p2p 102: a G of stage 1 (`st > 1`) no longer needs a SEND to stage 0
    text = ("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
            "1RECV_F0,1RECV_F1,1F0,1F1,1B0,1B1,1SEND_B1\n")
    messages = [v.message for v in run_checks(load_csv_text(text)[0]) if v.code == "PP008"]
    assert "r1/compute/B s1 mb0 produces data for rank 0 but no SEND_B of stage 1 mb 0 carries it" in messages


def test_nonblocking_hang_names_each_edge_of_the_cycle() -> None:
    # checks.p2p _edges 12, 35: the "needed by" / "posted after" labels of the printed cycle
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "fixtures/invalid/p2p_recv_after_use.csv").read_text()
    [v] = [v for v in run_checks(load_csv_text(text)[0]) if v.code == "PP031"]
    pair = "[r1/send/SEND_B s1 mb0 ->r0 = r0/recv/RECV_B s0 mb0 <-r1]"
    assert v.message == ("hangs under NCCL P2P (a send completes with its receive; per-peer order) across ranks 0, 1: "
                         f"{pair} -> (needed by) r0/compute/B s0 mb0 -> (posted after) {pair}")


def _zb(pp: int = 2, mb: int = 2) -> Schedule:
    return build_schedule(Config(schedule="zb-h1", pp=pp, microbatches=mb))


def _lanes(s: Schedule) -> dict[tuple[int, str], list[Op]]:
    return {k: [s.ops[i] for i in v] for k, v in s.lanes.items()}


@pytest.mark.parametrize("repeated", [False, True], ids=["unique", "repeated-work"])
def test_backward_and_weight_gradient_before_their_inputs(repeated: bool) -> None:
    # checks.order local_order 19 ("I" never a backward) and 69 (`g is None`): the path taken when
    # some work is listed twice must report what the unique path reports
    s = _zb()
    lanes = _lanes(s)
    rank0 = lanes[(0, "compute")]
    i1 = next(op for op in rank0 if op.kind == "I" and op.mb == 1)
    w0 = next(op for op in rank0 if op.kind == "W" and op.mb == 0)
    rank0.remove(i1)
    rank0.remove(w0)
    rank0[:0] = [w0, i1]
    if repeated:
        rank0.append(rank0[-1])
    got = sorted(v.message for v in run_checks(s.with_lanes(lanes)) if v.code == "PP006")
    assert got == ["r0/compute/I s0 mb1 comes before r0/compute/F s0 mb1 on rank 0, but a backward needs its forward",
                   "r0/compute/W s0 mb0 comes before r0/compute/I s0 mb0 on rank 0, but a weight gradient needs its "
                   "input gradient"]


def test_ep_order_mismatch_points_at_both_all_to_alls() -> None:
    # checks.moe ep_a2a_order 45: the violation's ops
    s = build_schedule(Config(schedule="moe-1f1b-overlap", pp=1, microbatches=2, options={"ep": 2, "layers_per_chunk": 1}))
    lanes = _lanes(s)
    comm = lanes[(1, "comm")]
    comm[0], comm[1] = comm[1], comm[0]
    [v] = [v for v in run_checks(s.with_lanes(lanes)) if v.code == "PP042"]
    assert v.ops == (comm[0].id, lanes[(0, "comm")][0].id)


def test_layer_missing_three_sub_ops_lists_them_all() -> None:
    # checks.moe incomplete_layers 79 (" and 0 more" at exactly 3) and 85 (the violation's ops)
    s = build_schedule(Config(schedule="moe-1f1b-overlap", pp=1, microbatches=1, options={"ep": 1, "layers_per_chunk": 1}))
    lanes = _lanes(s)
    lanes[(0, "compute")] = [op for op in lanes[(0, "compute")]
                             if not (op.kind in ("MLP", "ATTN", "WGRAD") and op.flow == "B")]
    [v] = [v for v in run_checks(s.with_lanes(lanes)) if v.code == "PP044"]
    assert v.message == ("rank 0: the backward of stage 0 mb 0 lacks MLP of layer 0, ATTN of layer 0, WGRAD of "
                         "layer 0 (its layer needs every sub-op)")
    assert v.ops == ("r0/comm/A2A_COMBINE_B EP-C s0 mb0 #0",)  # the first op left of that backward


def _update(pp: int) -> Schedule:
    opts = {"bucket_size": "1MiB", "h2d_bandwidth": "1MiB/s", "d2d_bandwidth": "1MiB/s", "bcast_bandwidth": "1MiB/s",
            "reload_rate": "1MiB/s", "tensors": [["1MiB"] for _ in range(pp)]}
    return build_schedule(config_from_mapping({"schedule": "weight-update", "pp": pp, "microbatches": 1,
                                               "options": opts}))


@pytest.mark.parametrize("dropped,what", [("BCAST", "broadcast"), ("RELOAD", "reload")])
def test_update_missing_one_kind_is_still_an_update(dropped: str, what: str) -> None:
    # checks.weight_update _is_update 6 (no BCAST) and 2 (no RELOAD): a plan with only one of the two
    # kinds is still checked as an update, and the missing ranks are plural
    s = _update(2)
    lanes = {k: [op for op in v if op.kind != dropped] for k, v in _lanes(s).items()}
    assert [(v.code, v.message) for v in run_checks(s.with_lanes(lanes))] == [
        ("PP055", f"bucket 0 is missing its {what} on ranks 0, 1"),
        ("PP055", f"bucket 1 is missing its {what} on ranks 0, 1")]


def test_broadcast_from_the_wrong_rank_is_pp055() -> None:
    # checks.weight_update incomplete_update 112, 116, 122: code, message and source rank
    s = _update(3)
    ops = [dataclasses.replace(op, peer=2) if op.kind == "BCAST" and op.bucket == 0 and op.rank == 1 else op
           for op in s.ops]
    v = [v for v in run_checks(dataclasses.replace(s, ops=ops)) if v.code == "PP055"]
    assert [(x.message, x.ops) for x in v] == [
        ("bucket 0 belongs to rank 0 but r1/comm/BCAST Broadcast (dst) bucket0 half0 broadcasts it from rank 2",
         ("r1/comm/BCAST Broadcast (dst) bucket0 half0",))]


def test_forward_crossing_ranks_without_its_send_is_reported() -> None:
    # checks.comm unmatched_p2p 88: an F whose activations go to the next rank with no SEND_F
    text = ("0F0,0SEND_F0,0F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
            "1RECV_F0,1F0,1F1,1B0,1SEND_B0,1B1,1SEND_B1\n")
    assert [(v.code, v.message) for v in run_checks(load_csv_text(text)[0])] == [
        ("PP008", "r0/compute/F s0 mb1 produces data for rank 1 but no SEND_F of stage 0 mb 1 carries it")]


def test_forward_missing_four_sub_ops_names_three_and_counts_the_rest() -> None:
    # checks.moe incomplete_layers 71 (the pass named "backward" for a forward) and 78 (" and N more")
    s = build_schedule(Config(schedule="moe-1f1b-overlap", pp=1, microbatches=1,
                              options={"ep": 1, "layers_per_chunk": 2}))
    lanes = {k: [op for op in v if not (op.kind in ("ATTN", "MLP") and op.flow == "F")] for k, v in _lanes(s).items()}
    assert [v.message for v in run_checks(s.with_lanes(lanes)) if v.code == "PP044"] == [
        "rank 0: the forward of stage 0 mb 0 lacks ATTN of layer 0, MLP of layer 0, ATTN of layer 1 and 1 more "
        "(each of its 2 layers needs every sub-op)"]


@pytest.mark.parametrize("listed_twice", [False, True], ids=["unique-work", "work-listed-twice"])
def test_overlapped_f_and_b_before_the_forward_of_its_backward(listed_twice: bool) -> None:
    # checks.order _local_order_unique 31 (unique work) and local_order 34 (the path taken when some
    # work repeats): an FB's backward half needs the forward of its pair
    s = build_schedule(Config(schedule="dualpipe", pp=4, microbatches=8))
    lanes = _lanes(s)
    rank0 = lanes[(0, "compute")]
    fb = next(op for op in rank0 if op.kind == "FB")
    ps, pm, pd = fb.pair
    f = next(op for op in rank0 if op.kind == "F" and (op.direction, op.stage, op.mb) == (pd, ps, pm))
    rank0.remove(f)
    rank0.insert(rank0.index(fb) + 1, f)
    if listed_twice:
        rank0.append(rank0[-1])
    assert [v.message for v in run_checks(s.with_lanes(lanes)) if v.code == "PP006"] == [
        f"{fb.id} comes before {f.id} on rank 0, but a backward needs its forward"]


def test_missing_input_gradient_is_named_i() -> None:
    # checks.structure missing_work 50: G missing while W is there is "missing I"
    s = _zb(2, 2)
    lanes = {k: [op for op in v if not (op.kind == "I" and op.stage == 0 and op.mb == 1)] for k, v in _lanes(s).items()}
    assert [v.message for v in run_checks(s.with_lanes(lanes)) if v.code == "PP003"] == ["missing I for stage 0 mb 1"]


def _update_buckets(pp: int, buckets: int) -> Schedule:
    opts = {"bucket_size": "1MiB", "h2d_bandwidth": "1MiB/s", "d2d_bandwidth": "1MiB/s", "bcast_bandwidth": "1MiB/s",
            "reload_rate": "1MiB/s", "tensors": [["1MiB"] * buckets for _ in range(pp)]}
    return build_schedule(config_from_mapping({"schedule": "weight-update", "pp": pp, "microbatches": 1,
                                               "options": opts}))


def test_rank_that_stops_broadcasting_early_is_pp053() -> None:
    # checks.weight_update broadcast_order 60: a rank whose broadcasts are a prefix of the others'
    # has no op at the differing position (the mutant indexed past its list)
    s = _update_buckets(3, 2)
    lanes = _lanes(s)
    comm = lanes[(2, "comm")]
    comm.remove([op for op in comm if op.kind == "BCAST"][-1])
    assert [(v.message, v.ops) for v in run_checks(s.with_lanes(lanes)) if v.code == "PP053"] == [
        ("rank 2 broadcasts nothing as its broadcast #5, but the other ranks broadcast bucket 5 from rank 2 there "
         "(a collective must run in the same order on every rank)", ())]


def test_missing_ipc_copy_is_found_without_the_h2d_buffer_field() -> None:
    # checks.weight_update incomplete_update 43: a plan whose meta does not say h2d_buffer uses one
    # when it has COPY ops, so a bucket without its COPY is incomplete
    s = _update_buckets(2, 2)
    meta = {**s.meta, "weight_update": {k: v for k, v in s.meta["weight_update"].items() if k != "h2d_buffer"}}
    lanes = {k: [op for op in v if not (op.kind == "COPY" and op.bucket == 1)] for k, v in _lanes(s).items()}
    broken = dataclasses.replace(s.with_lanes(lanes), meta=meta)
    assert [(v.code, v.message) for v in run_checks(broken)] == [("PP055", "bucket 1 is missing its IPC copy on owner "
                                                                   "rank 1")]


def test_ipc_half_rewritten_counts_the_other_early_write() -> None:
    # checks.weight_update ipc_reuse_before_release 77: two early writes of a bucket (the owner's
    # COPY and the other rank's broadcast) say "and 1 more"
    s = _update_buckets(2, 2)
    first = run_checks(_one_half(s), select={"PP050"})[0].message
    assert first.startswith("IPC half 0 is rewritten with bucket 1 by r1/ipc/COPY IPC bucket1 half0 at t=1000 (and 1 "
                            "more writes) before r0/compute/RELOAD Reload weights bucket0 half0 released bucket 0 from "
                            "it at t=4000")


def test_missing_work_of_the_second_direction_names_it() -> None:
    # checks.structure _dir 1: DualPipe's reverse direction is named in the message
    s = build_schedule(Config(schedule="dualpipe", pp=4, microbatches=8))
    lanes = _lanes(s)
    victim = next(op for op in lanes[(0, "compute")] if op.kind == "F" and op.direction == 1)
    lanes = {k: [op for op in v if op is not victim] for k, v in lanes.items()}
    assert [v.message for v in run_checks(s.with_lanes(lanes)) if v.code == "PP003"] == [
        f"missing F for stage {victim.stage} mb {victim.mb} (direction 1)"]


def test_send_to_a_rank_that_does_not_exist_is_malformed() -> None:
    # checks.structure malformed_ops 40: a SEND's peer outside the ranks
    s = load_csv_text("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n")[0]
    ops = [dataclasses.replace(op, peer=5) if op.kind == "SEND" and op.rank == 0 else op for op in s.ops]
    assert [v.message for v in run_checks(dataclasses.replace(s, ops=ops)) if v.code == "PP001"] == [
        "malformed op r0/send/SEND_F s0 mb0 ->r5: SEND needs flow F or B and a peer rank in 0..1"]


def _one_half(s: Schedule) -> Schedule:
    return dataclasses.replace(s, ops=[dataclasses.replace(op, half=0) if op.half >= 0 else op for op in s.ops])


@pytest.mark.parametrize("h2d_buffer", [True, False], ids=["copy-writes", "h2d-writes"])
def test_ipc_half_writes_are_the_copies_and_the_received_broadcasts(h2d_buffer: bool) -> None:
    # checks.weight_update _writes_half 9 ("h2d": an H2D straight into the half is no write) and 14 (the
    # broadcast's source counted as a write instead of its destinations): every bucket in half 0 on
    # 3 ranks; a bucket is written by its owner's COPY (or H2D) and the 2 other ranks' broadcasts
    opts = {"bucket_size": "1MiB", "h2d_bandwidth": "1MiB/s", "d2d_bandwidth": "1MiB/s", "bcast_bandwidth": "1MiB/s",
            "reload_rate": "1MiB/s", "tensors": [["1MiB"] * 2 for _ in range(3)], "h2d_buffer": h2d_buffer}
    s = _one_half(build_schedule(config_from_mapping({"schedule": "weight-update", "pp": 3, "microbatches": 1,
                                                      "options": opts})))
    write = "ipc/COPY IPC" if h2d_buffer else "h2d/H2D H2D"
    times = (1000, 4000, 5000, 7000, 8000) if h2d_buffer else (0, 3000, 4000, 6000, 7000)
    more = " (and 2 more writes)"
    got = [v.message.split(" before ")[0] for v in run_checks(s, select={"PP050"})]
    assert got == [f"IPC half 0 is rewritten with bucket {b} by r{b % 3}/{write} bucket{b} half0 at t={t}"
                   f"{more if b % 2 else ''}" for b, t in zip(range(1, 6), times)]


@pytest.mark.parametrize(("buckets", "got"), [([{"bytes": 1 << 20}] * 4, "{'bytes': 1048576}"), (["x"], "x")],
                         ids=["no-owner", "not-objects"])
def test_update_checks_refuse_hostile_bucket_records(buckets: object, got: str) -> None:
    # a plan file is input from elsewhere: a bucket record that is not one is one line naming it
    s = _update_buckets(2, 2)
    wu = {**s.meta["weight_update"], "buckets": buckets}
    with pytest.raises(InputError) as e:
        run_checks(dataclasses.replace(s, meta={**s.meta, "weight_update": wu}))
    assert str(e.value) == (f"field 'meta.weight_update.buckets[0]': got {got}, expected an object with owner, round, "
                            "bytes, tensors, largest, half")


def test_update_checks_without_bucket_records_take_the_owners_from_the_ops() -> None:
    # checks.weight_update tensor_over_bucket (no records: nothing to enumerate) and incomplete_update
    # (the owner of each bucket from its H2D)
    s = _update_buckets(2, 2)
    wu = {k: v for k, v in s.meta["weight_update"].items() if k != "buckets"}
    assert run_checks(dataclasses.replace(s, meta={**s.meta, "weight_update": wu})) == []


def test_send_without_its_receive_points_at_the_send() -> None:
    # checks.comm unmatched_p2p 46: the violation's ops (what `pptl check` annotates)
    s = load_csv_text("0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1B0,1SEND_B0\n")[0]
    assert [(v.code, v.message, v.ops) for v in run_checks(s)] == [
        ("PP008", "r0/send/SEND_F s0 mb0 ->r1 has no matching RECV on rank 1", ("r0/send/SEND_F s0 mb0 ->r1",))]


def test_op_on_rank_pp_is_outside_the_ranks() -> None:
    # checks.structure malformed_ops 13 (`<= pp`): ranks are 0..pp-1
    s = _zb(2, 2)
    ops = list(s.ops)
    ops[0] = dataclasses.replace(ops[0], rank=2)
    assert [v.message for v in run_checks(dataclasses.replace(s, ops=ops)) if v.code == "PP001"] == [
        f"malformed op {ops[0].id}: rank 2 is outside 0..1"]


def test_stage_on_two_ranks_points_at_one_op_on_each() -> None:
    # checks.structure stage_on_two_ranks 31: the violation's ops
    s = load_csv_text("0F0,0B0\n0F1,0B1\n")[0]
    [v] = [v for v in run_checks(s) if v.code == "PP005"]
    assert (v.message, v.ops) == ("stage 0 runs on ranks r0, r1", ("r0/compute/F s0 mb0", "r1/compute/F s0 mb1"))


def test_nccl_hang_names_the_ranks_of_each_channel() -> None:
    # checks.p2p _why 8: "between ranks 1 and 0"
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "fixtures/invalid/p2p_nccl_hang.csv").read_text()
    [v] = [v for v in run_checks(load_csv_text(text)[0]) if v.code == "PP031"]
    b0 = "[r1/send/SEND_B s1 mb0 ->r0 = r0/recv/RECV_B s0 mb0 <-r1]"
    f1 = "[r0/send/SEND_F s0 mb1 ->r1 = r1/recv/RECV_F s1 mb1 <-r0]"
    assert v.message == ("hangs under NCCL P2P (a send completes with its receive; per-peer order) across ranks 0, 1: "
                         f"{b0} -> (next P2P between ranks 1 and 0) {f1} -> (next P2P between ranks 0 and 1) {b0}")


def test_buffer_check_reads_only_numbers_from_the_plans_record() -> None:
    # checks.weight_update buffers_over_memory 13 (`and`): a plan file whose record gives sizes as
    # text is refused in one line (the mutant crashed on it); numbers are checked
    s = _update_buckets(2, 1)
    wu = s.meta["weight_update"]
    as_text = dataclasses.replace(s, meta={**s.meta, "weight_update": {**wu, "bucket_size": "1MiB"}})
    with pytest.raises(InputError, match=r"^field 'meta\.weight_update\.bucket_size': got 1MiB, expected an integer"):
        run_checks(as_text)
    small = dataclasses.replace(s, meta={**s.meta, "weight_update": {**wu, "free_memory": 1 << 20}})
    assert [v.code for v in run_checks(small)] == ["PP056"]


# ---------------------------------------------------------------- pptl/simulate.py


def _copies(*ops: Op) -> Schedule:
    b = ScheduleBuilder()
    for op in ops:
        b.add(op)
    return Schedule("custom", 1, 1, len(ops), b.ops, b.lanes)


@pytest.mark.parametrize("kind", ["OFFLOAD", "ONLOAD", "H2D", "COPY"])
def test_a_copy_without_a_cost_takes_its_payload_over_the_bandwidth(kind: str) -> None:
    # simulate durations 27 (`not in`), 33 ("h2d"): copies are timed from their bytes
    s = _copies(Op(kind=kind, rank=0, lane="h2d", mb=0, payload=250.0))
    assert durations(s, Costs(copy_bandwidth=100.0)) == [2.5]


def test_compute_without_a_cost_is_refused() -> None:
    s = _copies(Op(kind="ATTN_F", rank=0, lane="compute", mb=0, payload=250.0))
    with pytest.raises(InvalidScheduleError, match="no cost for 'ATTN_F'"):
        durations(s, Costs(copy_bandwidth=100.0))


def test_copies_of_different_sizes_take_different_times() -> None:
    # durations cached a copy's time by (cost key, stage), so a second copy of another size took the
    # first one's time; an explicit cost still wins over the payload, for every copy of that key
    s = _copies(Op(kind="H2D", rank=0, lane="h2d", bucket=0, payload=100.0),
                Op(kind="H2D", rank=0, lane="h2d", bucket=1, payload=300.0),
                Op(kind="H2D", rank=0, lane="h2d", bucket=2, payload=100.0),
                Op(kind="COPY", rank=0, lane="h2d", bucket=0, payload=50.0),
                Op(kind="COPY", rank=0, lane="h2d", bucket=1, payload=500.0))
    assert durations(s, Costs(copy_bandwidth=100.0)) == [1.0, 3.0, 1.0, 0.5, 5.0]
    assert durations(s, Costs(base={"H2D": 7.0}, copy_bandwidth=100.0)) == [7.0, 7.0, 7.0, 0.5, 5.0]


def test_simulated_copies_of_different_sizes_end_at_their_own_times() -> None:
    # the same bug seen through simulate: two copies in a row on one lane end at 1 and 1 + 3
    s = _copies(Op(kind="OFFLOAD", rank=0, lane="d2h", mb=0, payload=100.0),
                Op(kind="OFFLOAD", rank=0, lane="d2h", mb=1, payload=300.0))
    sim = simulate(s, Costs(copy_bandwidth=100.0))
    assert (sim.end, sim.makespan) == ([1.0, 4.0], 4.0)


@pytest.mark.parametrize("item", [[0, 0, 1, 1], 7, "0 0 1 1 1"])
def test_malformed_held_entry_is_one_input_error(item: object) -> None:
    # simulate held_spans 14: an entry that is not a 5-list is named, not unpacked
    s = _zb(2, 2)
    s = dataclasses.replace(s, meta={**s.meta, "held": [item]})
    with pytest.raises(InputError, match=r"field 'meta\.held\[0\]'"):
        held_spans(s)


def test_schedule_without_config_keeps_no_weight_activation() -> None:
    # simulate simulate 18: with no config, W holds nothing (w_activation 0), so I frees it all
    s = _zb(2, 4)
    costs = s.config.costs
    bare = dataclasses.replace(s, config=None)
    peaks = [r.peak_activation for r in simulate(bare, costs).ranks]
    assert peaks == [r.peak_activation for r in simulate(bare, costs, w_activation=0.0).ranks]
    assert peaks != [r.peak_activation for r in simulate(bare, costs, w_activation=1.0).ranks]


def test_malformed_held_entry_message_says_what_is_expected() -> None:
    # simulate held_spans 54: the whole one-line message
    s = _zb(2, 2)
    s = dataclasses.replace(s, meta={**s.meta, "held": [[0, 0, 1]]})
    with pytest.raises(InputError) as e:
        held_spans(s)
    assert str(e.value) == ("field 'meta.held[0]': got [0, 0, 1], expected [op index, 0|1, op index on the same rank, "
                            "0|1, amount >= 0]")


def test_peak_without_copies_drops_exactly_the_spans_that_touch_them() -> None:
    # simulate memory_events_of (a span touching a skipped op dropped, not the others): leaving the
    # copies out is the same as a plan whose held spans never named them
    from pptl.simulate import peak_memory

    s = build_schedule(config_from_mapping({
        "schedule": "moe-1f1b-overlap", "pp": 2, "vpp": 2, "microbatches": 4, "activation": 10,
        "options": {"ep": 1, "layers_per_chunk": 2, "offload": True,
                    "costs": {"offload_bytes": 2, "hidden_bytes": 0.5}}}))
    sim = simulate(s)
    copies = frozenset({"OFFLOAD", "ONLOAD"})
    kept = [sp for sp in s.meta["held"] if s.ops[sp[0]].kind not in copies and s.ops[sp[2]].kind not in copies]
    assert len(kept) < len(s.meta["held"])
    by_hand = dataclasses.replace(s, meta={**s.meta, "held": kept})
    peaks = peak_memory(s, sim.start, sim.end, 10, 0, copies)
    assert peaks == peak_memory(by_hand, sim.start, sim.end, 10, 0, copies)
    assert peaks[0] != peak_memory(s, sim.start, sim.end, 10, 0)[0]


def test_peak_time_is_when_each_rank_first_reaches_its_peak() -> None:
    # simulate simulate 170 (peak_time dropped): GPipe pp=2, F=1: rank 0 holds 2 from F mb1's start
    # at 1, rank 1 from its F mb1's start at 2
    sim = simulate(build_schedule(Config(schedule="gpipe", pp=2, microbatches=2)))
    assert [r.peak_activation for r in sim.ranks] == [2.0, 2.0]
    assert sim.peak_time == {0: 1.0, 1: 2.0}


def test_schedule_with_no_ops_simulates_to_nothing() -> None:
    # simulate simulate 89 (`min(start, default=None)`)
    sim = simulate(Schedule("custom", 1, 1, 1, [], {}))
    assert (sim.makespan, sim.start, sim.critical_path) == (0.0, [], [])


def test_saved_in_held_spans_counts_no_markers() -> None:
    # simulate peak_memory 11: meta held_saved (the layers' spans hold the activations) with no spans
    # left: the F/B markers hold nothing
    from pptl.simulate import peak_memory

    s = build_schedule(Config(schedule="1f1b", pp=2, microbatches=4))
    saved = dataclasses.replace(s, meta={**s.meta, "held_saved": True})
    sim = simulate(s)
    assert peak_memory(s, sim.start, sim.end, 1.0, 0.0)[0] == {0: 2.0, 1: 1.0}
    assert peak_memory(saved, sim.start, sim.end, 1.0, 0.0)[0] == {}


def test_a_rank_without_compute_and_the_copies_count() -> None:
    # simulate _busy 16 (no minlength: a last rank with no compute op dropped from the ranks) and
    # _peaks 40 (a family kind's memory read off no op): the peaks are the event walk's
    from pptl.simulate import memory_events_of

    idle_rank = Schedule("custom", 2, 1, 1, [Op(kind="F", rank=0, lane="compute", stage=0, mb=0)],
                         {(0, "compute"): [0]})
    offload = build_schedule(config_from_mapping({
        "schedule": "moe-1f1b-overlap", "pp": 2, "vpp": 2, "microbatches": 4, "activation": 10,
        "options": {"ep": 1, "layers_per_chunk": 2, "offload": True, "costs": {"offload_bytes": 2}}}))
    assert "held" not in offload.meta  # no held spans: the array pass takes it
    sim = simulate(offload)
    walked: dict[int, float] = {}
    ev = memory_events_of(offload, sim.start, sim.end, 10.0, 0.0)
    cur: dict[int, float] = {}
    for r, delta in zip(ev.rank.tolist(), ev.delta.tolist()):
        cur[r] = cur.get(r, 0.0) + delta
        walked[r] = max(walked.get(r, 0.0), cur[r])
    assert {r.rank: r.peak_activation for r in sim.ranks} == walked
    assert any(op.kind == "OFFLOAD" for op in offload.ops)
    assert [(r.rank, r.busy) for r in simulate(idle_rank).ranks] == [(0, 1.0), (1, 0.0)]


def test_makespan_overflowing_a_float_is_one_input_error() -> None:
    # simulate simulate 98 (the message dropped): what is out of scale and what works
    s = build_schedule(Config(schedule="gpipe", pp=2, microbatches=2))
    with pytest.raises(InputError) as e:
        simulate(s, Costs(base={"F": 1e308, "B": 1e308}))
    assert str(e.value) == ("the timed schedule overflows a float (makespan inf): a cost, comm.bytes or a bandwidth "
                            "is out of scale; costs up to 1e15 and bandwidths that keep bytes / bandwidth finite work")


def test_each_send_takes_its_own_payload_over_the_link() -> None:
    # simulate durations 7 (every SEND charged the default comm_bytes): latency + payload / bandwidth,
    # comm_bytes only for a SEND that names no payload
    s = _copies(Op(kind="SEND", rank=0, lane="send", mb=0, peer=1, flow="F", payload=100.0),
                Op(kind="SEND", rank=0, lane="send", mb=1, peer=1, flow="F", payload=300.0),
                Op(kind="SEND", rank=0, lane="send", mb=2, peer=1, flow="F"),
                Op(kind="RECV", rank=0, lane="recv", mb=0, peer=1, flow="B", payload=100.0))
    costs = Costs(comm_latency=0.5, comm_bandwidth=100.0, comm_bytes=50.0)
    assert durations(s, costs) == [1.5, 3.5, 1.0, 0.0]


def test_peak_pass_applies_the_tolerance() -> None:
    # simulate _peaks 115 (`>=`): a running sum that rises exactly the tolerance (1e-12 of the
    # rank's largest event) above the peak is no new peak. The tolerance is relative: activations
    # of 1e-12 units on their own are memory (an absolute 1e-12 once reported them as peak 0).
    from pptl.schedules._moe_meta import MoEMeta
    from pptl.simulate import peak_memory

    s = build_schedule(Config(schedule="inference", pp=1, microbatches=2))
    # F mb0 runs over [0, 1], F mb1 over [1, 2]: 1 unit held from F mb0's start to F mb1's end,
    # and 1e-12 more from F mb1's start: the sum 1 + 1e-12 is the tolerance above the peak 1.
    s.meta.update(MoEMeta(held=((0, 0, 1, 1, 1.0), (1, 0, 1, 1, 1e-12)), held_saved=True).to_meta())
    sim = simulate(s)
    assert peak_memory(s, sim.start, sim.end, 1.0, 0.0) == ({0: 1.0}, {0: 0.0})
    g = build_schedule(Config(schedule="gpipe", pp=2, microbatches=1))
    sim = simulate(g)
    assert peak_memory(g, sim.start, sim.end, 1e-12, 0.0)[0] == {0: 1e-12, 1: 1e-12}


# ---------------------------------------------------------------- pptl/deps.py


def test_a_large_plan_has_the_oracle_s_edges() -> None:
    # deps facts_of_table (num_stages dropped): what the plan-file reader derives
    from deps_oracle import training_deps_loop

    s = build_schedule(Config(schedule="1f1b", pp=2, microbatches=2501))
    assert s.deps == training_deps_loop(s.ops, s.num_stages)


def test_facts_are_reused_only_for_the_same_table() -> None:
    # deps facts_of_table's cache (`is`): another table of the same ops and stages is derived anew
    from pptl.deps import facts_of_table, training_deps
    from pptl.optable import OpTable

    ops = _zb(2, 2).ops
    other = list(reversed(ops))
    want = training_deps(list(other), 2)
    assert training_deps(ops, 2) != want
    t = OpTable.from_ops(other)
    first = facts_of_table(t, 2)
    assert facts_of_table(t, 2) is first and list(zip(*(a.tolist() for a in first))) == want
    assert facts_of_table(OpTable.from_ops(other), 2) is not first


def test_roles_of_each_compute_kind() -> None:
    # deps roles 9 ("b": B produces nothing) and 28 (an FB with a pair read as one without)
    from pptl.deps import roles

    def op(kind: str, pair: tuple[int, int, int] | None = None) -> Op:
        return Op(kind=kind, rank=0, lane="compute", stage=2, mb=3, direction=1, pair=pair)

    assert roles(op("F")) == [("F", 1, 2, 3)]
    assert roles(op("B")) == [("G", 1, 2, 3), ("W", 1, 2, 3)]
    assert roles(op("I")) == [("G", 1, 2, 3)]
    assert roles(op("W")) == [("W", 1, 2, 3)]
    assert roles(op("FB", pair=(5, 0, 0))) == [("F", 1, 2, 3), ("G", 0, 5, 0), ("W", 0, 5, 0)]
    assert roles(op("FB")) == []  # no pair: PP001 reports it; it produces nothing
    assert roles(op("SEND")) == []


# ---------------------------------------------------------------- pptl/schedules


def _moe(**costs: float) -> Config:
    return Config(schedule="moe-1f1b-overlap", pp=2, vpp=2, microbatches=4,
                  options={"costs": {"attn": 1, "mlp": 1, **costs}})


def test_moe_overlap_blames_all_to_alls_only_when_they_take_time() -> None:
    # schedules.moe_overlap _assumptions 6 (`>= 0`)
    from pptl.schedules.moe_overlap import _assumptions

    assert _assumptions(_moe(dispatch=0, combine=0)) == []
    assert _assumptions(_moe(dispatch=0.5, combine=0))[0].startswith("all-to-alls take time")


def test_weight_update_plan_records_each_buckets_bytes() -> None:
    # schedules.weight_update _meta 27: the plan file's bucket size field
    assert [b["bytes"] for b in _update(2).meta["weight_update"]["buckets"]] == [1 << 20, 1 << 20]


def test_weight_update_without_tensors_says_what_it_needs() -> None:
    # schedules.weight_update spec_from_options 33
    with pytest.raises(InputError, match=r"field 'options.tensors': got \[\], expected at least one tensor"):
        build_schedule(config_from_mapping({"schedule": "weight-update", "pp": 2, "microbatches": 1,
                                            "options": {"tensors": [[], []]}}))


def test_zbv_plan_records_its_v_placement() -> None:
    # schedules.zbv build 32: "v" is the placement name readers and the CSV writer match on
    from pptl.formats.torch_csv import PLACEMENTS

    placement = build_schedule(Config(schedule="zbv", pp=2, microbatches=4)).meta["placement"]
    assert placement == "v" and placement in PLACEMENTS


def test_zb_h1_formula_notes_per_stage_input_gradient_costs() -> None:
    # schedules.zero_bubble assumptions_h1 11: "I" among the keys whose per-stage costs break the formula
    from pptl.schedules.zero_bubble import assumptions_h1

    cfg = Config(schedule="zb-h1", pp=2, microbatches=4)
    cfg = dataclasses.replace(cfg, costs=dataclasses.replace(cfg.costs, stages={1: {"I": 3.0}}))
    assert "per-stage costs for I (the formula assumes one value per kind)" in assumptions_h1(cfg)


def test_moe_metrics_per_rank_peaks_are_the_simulators() -> None:
    # schedules._moe_metrics moe_metrics 76: the per-rank key the JSON output documents
    from pptl.schedules._moe_metrics import moe_metrics

    s = build_schedule(_moe(dispatch=0.5, combine=0.5))
    sim = simulate(s)
    per_rank = moe_metrics(s, sim)["moe"]["per_rank"]
    assert per_rank["peak_activation"] == [round(r.peak_activation, 9) for r in sim.ranks]


def test_dualpipe_notes_an_input_gradient_shorter_than_the_forward() -> None:
    # schedules.dualpipe assumptions 42: the reason a line says, not None
    from pptl.schedules.dualpipe import assumptions

    cfg = Config(schedule="dualpipe", pp=4, microbatches=8, split_backward=True)
    cfg = dataclasses.replace(cfg, costs=dataclasses.replace(cfg.costs, base={"F": 1.0, "B": 1.5, "I": 0.5, "W": 1.0}))
    assert assumptions(cfg) == ["I=0.5 < F=1: each rank idles (H-1)((F-I)+max(0,W-I)) = 1 more than the formula"]


def test_moe_plan_too_large_names_the_options_to_reduce() -> None:
    # schedules.moe_overlap validate 64: the fix in the message names the options in the file's spelling
    # (11 x 8 + 7) ops per layer chunk x 2 x 2 x 2000 x 8 = 6,080,000, more than MAX_OPS (5,000,000)
    cfg = config_from_mapping({"schedule": "moe-1f1b-overlap", "pp": 2, "vpp": 2, "microbatches": 2000,
                               "options": {"ep": 8, "layers_per_chunk": 8}})
    with pytest.raises(InputError, match=r"about 6,080,000 ops, .* \(reduce microbatches, options\.layers_per_chunk "
                       r"or options\.ep\)"):
        build_schedule(cfg)


def test_human_bytes_uses_binary_units() -> None:
    # schedules.weight_update human_bytes 5 (a TiB of 3**40)
    from pptl.schedules.weight_update import human_bytes

    assert [human_bytes(n) for n in (2**40, 3 * 2**40, 8 * 2**30, 1536, 100)] == [
        "1 TiB", "3 TiB", "8 GiB", "1.5 KiB", "100 B"]


def test_update_metrics_only_for_updates_and_without_the_plans_record() -> None:
    # schedules.weight_update update_metrics 3 (a training plan given update metrics) and 80 (a plan
    # file without meta.weight_update: the metrics still come from its ops)
    from pptl.schedules.weight_update import update_metrics

    train = _zb(2, 2)
    assert update_metrics(train, simulate(train)) == {}
    s = _update(2)
    bare = dataclasses.replace(s, meta={k: v for k, v in s.meta.items() if k != "weight_update"})
    sim = simulate(bare)
    got = update_metrics(bare, sim)["weight_update"]
    assert (got["update_time"], got["buckets"], got["bucket_size"]) == (sim.makespan, 0, None)
    assert got["stages"] == update_metrics(s, simulate(s))["weight_update"]["stages"]


def test_overlap_metrics_of_a_plan_without_compute_ops() -> None:
    # schedules._common overlap_metrics 55 (`max` of no spans raises): a plan file is input from
    # elsewhere; one of a zero-bubble family with no compute op reports no idle time, not a traceback
    from pptl.schedules._common import overlap_metrics

    s = Schedule("zb-h1", 2, 2, 1, [], {})
    got = overlap_metrics(s, simulate(s))
    assert (got["span_idle"], got["stages_per_rank"]) == ([0.0, 0.0], 0)
    assert got["report"][0] == "idle within each rank's own span (first op to last op): max 0"


def test_interleaved_with_one_chunk_names_the_vpp_field() -> None:
    # schedules.interleaved validate 13
    with pytest.raises(InputError) as e:
        build_schedule(Config(schedule="interleaved-1f1b", pp=2, microbatches=4, vpp=1))
    assert str(e.value) == ("<flags>: field 'vpp': got 1, expected at least 2 chunks per rank (use 1f1b for one) for "
                            "schedule 'interleaved-1f1b'")


def test_all_to_all_on_a_rank_without_compute_is_all_exposed() -> None:
    # schedules._moe_metrics exposed_time 40 (no default for a rank with no compute interval): a
    # measured timeline may lack a rank's compute events
    from pptl.schedules._moe_metrics import EP_KINDS, exposed_time

    spans = [(0, "compute", "ATTN", 0.0, 2.0), (0, "comm", "A2A_DISPATCH", 1.0, 3.0),
             (1, "comm", "A2A_DISPATCH", 1.0, 3.0)]
    assert exposed_time(spans, EP_KINDS) == ({0: 2.0, 1: 2.0}, {0: 1.0, 1: 2.0})


def test_fast_estimate_equals_simulation_with_sub_millisecond_stages() -> None:
    # schedules.weight_update_estimate fast_update_time 128 (the first reload waits for t=1): with the
    # default bandwidths a MiB moves in well under a millisecond
    from pptl.schedules.weight_update import spec_from_config
    from pptl.schedules.weight_update_estimate import fast_update_time

    cfg = config_from_mapping({"schedule": "weight-update", "pp": 2, "microbatches": 1,
                               "options": {"tensors": [["1MiB", "2MiB"], ["1MiB"]], "bucket_size": "1MiB"}})
    sim = simulate(build_schedule(cfg))
    assert sim.makespan < 1.0 and sim.schedule.meta["units"] == "ms"
    assert fast_update_time(spec_from_config(cfg))["update_time"] == pytest.approx(sim.makespan)


def test_dualpipe_notes_a_backward_that_is_not_i_plus_w() -> None:
    # schedules.dualpipe assumptions 16 (B left out of the keys the formula reads)
    from pptl.schedules.dualpipe import assumptions

    cfg = Config(schedule="dualpipe", pp=4, microbatches=8)
    cfg = dataclasses.replace(cfg, costs=dataclasses.replace(cfg.costs, base={"F": 1.0, "B": 3.0, "I": 1.0, "W": 1.0}))
    assert assumptions(cfg) == ["B=3 is not I+W=2"]


def test_weight_update_report_lines() -> None:
    # schedules.weight_update update_metrics 175: the report `pptl plan` prints, at 1 MiB/s per stage
    from pptl.schedules.weight_update import update_metrics

    s = _update(2)
    assert update_metrics(s, simulate(s))["report"] == [
        "weight update: 2 buckets of at most 1 MiB (H2D buffer, 2 IPC halves) · update time 5000 ms",
        "stage busy on the busiest rank: H2D 1000 · IPC copy 1000 · broadcast 2000 · reload 2000 ms",
        "hidden behind broadcast: H2D 0% · IPC copy 0% · reload 50% · exposed 3000 ms"]


# ---------------------------------------------------------------- pptl/formats/torch_csv.py

TWO_RANKS = "0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n"


def test_compute_only_csv_names_its_form() -> None:
    # torch_csv schedule_from_rows 165
    s, notes, _, _ = load_csv_text(TWO_RANKS)
    assert s.meta["csv_format"] == "compute_only"
    assert notes[0] == "torch CSV (compute_only): 2 ranks, 8 actions"


def test_microbatches_are_counted_from_forwards_only() -> None:
    # torch_csv schedule_from_rows 101: a backward of a micro-batch with no forward is not a forward
    s, _, _, _ = load_csv_text("0F0,0F1,0B0,0B1,0B2\n")
    assert s.microbatches == 2


def test_one_microbatch_can_be_asked_for(tmp_path) -> None:
    # torch_csv load_csv_text 12 (`<= 1` refuses 1) and read_csv 16 (the count not passed on)
    from pptl.formats.torch_csv import read_csv

    assert load_csv_text("0F0,0B0\n", microbatches=1)[0].microbatches == 1
    path = tmp_path / "s.csv"
    path.write_text(TWO_RANKS)
    assert read_csv(path, microbatches=3).schedule.microbatches == 3


def test_fsdp_action_keeps_its_stage_chunk_and_is_left_out_of_compute_only() -> None:
    # torch_csv _to_op 83 (chunk None) and to_rows 36 (`break` drops the rest of the row)
    from pptl.formats.torch_csv import to_rows

    s, _, _, _ = load_csv_text("0UNSHARD,1UNSHARD,0F0,1F0,1B0,0B0\n")
    assert [(op.kind, op.stage, op.chunk) for op in s.ops[:2]] == [("UNSHARD", 0, 0), ("UNSHARD", 1, 1)]
    rows, notes = to_rows(s)
    assert rows == [["0F0", "1F0", "1B0", "0B0"]]
    assert notes == ["compute_only leaves out 2 UNSHARD (torch's runtime adds them when it lowers a compute_only "
                     "schedule)"]


def test_compute_only_plan_gets_its_sends_and_receives_added() -> None:
    # torch_csv with_comms 11, 15, 28 and to_rows 88 (the note on where SEND/RECV go)
    from pptl.formats.torch_csv import to_rows, with_comms

    s, _, _, _ = load_csv_text(TWO_RANKS)
    for plan in (s, dataclasses.replace(s, config=None)):
        w = with_comms(plan)
        assert w.microbatches == 2
        assert sorted(op.id for op in w.ops if op.kind in ("SEND", "RECV")) == [
            "r0/recv/RECV_B s0 mb0 <-r1", "r0/recv/RECV_B s0 mb1 <-r1", "r0/send/SEND_F s0 mb0 ->r1",
            "r0/send/SEND_F s0 mb1 ->r1", "r1/recv/RECV_F s1 mb0 <-r0", "r1/recv/RECV_F s1 mb1 <-r0",
            "r1/send/SEND_B s1 mb0 ->r0", "r1/send/SEND_B s1 mb1 ->r0"]
    where = "SEND right after the op that produces its data"
    assert any(n.startswith(where) for n in to_rows(s, comms=True)[1])
    listed, _, _, _ = load_csv_text("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n")
    assert not any(n.startswith(where) for n in to_rows(listed, comms=True)[1])


def test_csv_files_are_read_by_the_torch_csv_reader(tmp_path) -> None:
    # torch_csv _register 5 (".csv" registered under another suffix) and read_csv 28 (the line of
    # an op whose rank the file does not have)
    from pptl.formats.loader import load_any

    path = tmp_path / "s.csv"
    path.write_text(TWO_RANKS)
    loaded = load_any(path)
    assert (loaded.kind, loaded.schedule.pp) == ("torch-csv", 2)
    assert loaded.locate is not None
    assert [loaded.locate(i) for i in ("r1/compute/F s1 mb0", "r7/compute/F s1 mb0", "not an op")] == [2, None, None]


def test_bad_cell_raises_naming_the_file_and_its_line(tmp_path) -> None:
    # torch_csv read_csv 1 (report_problems on by default: no error) and 24 (the source named "None")
    from pptl.formats.torch_csv import read_csv

    path = tmp_path / "bad.csv"
    path.write_text("0F0,0X1\n")
    with pytest.raises(InputError) as e:
        read_csv(path)
    assert str(e.value).startswith(f"{path}:1: rank 0, step 1: '0X1' is not an action")


def test_overlap_of_two_forwards_is_refused_with_an_example() -> None:
    # torch_csv parse_action 33: the example in the message is torch's spelling
    from pptl.formats.torch_csv import parse_action

    with pytest.raises(ValueError) as e:
        parse_action("(0F7;1F3)OVERLAP_F_B")
    assert str(e.value) == ("'(0F7;1F3)OVERLAP_F_B': OVERLAP_F_B must overlap one F and one B (pptl's FB op), such as "
                            "(0F7;7B3)OVERLAP_F_B")


def test_fsdp_actions_of_a_csv_take_no_time() -> None:
    # torch_csv _schedule 264 (the schedule built without its config): the CSV's config gives the
    # FSDP kinds zero cost, so F 1 and B 2 on two ranks end at 6
    s, _, _, _ = load_csv_text("0UNSHARD,0F0,0B0\n1UNSHARD,1F0,1B0\n")
    assert s.config is not None and (s.config.pp, s.config.microbatches) == (2, 1)
    assert simulate(s).makespan == 6.0


def test_added_comms_keep_the_plans_config() -> None:
    # torch_csv with_comms 45: the copy with SEND/RECV keeps the plan's own config (its costs and
    # source), and a plan without one stays without: the stand-in config is only for building the copy
    from pptl.formats.torch_csv import with_comms

    s, _, _, _ = load_csv_text("0UNSHARD,0F0,0B0\n1UNSHARD,1F0,1B0\n")
    w = with_comms(s)
    assert w.config == s.config
    assert simulate(w).makespan == 6.0
    assert with_comms(dataclasses.replace(s, config=None)).config is None


# ---------------------------------------------------------------- pptl/schedules: MoE layers and assemble


def _index(s: Schedule) -> dict[tuple[str, int, int, int], int]:
    """(kind_flow, stage, mb, layer) -> op index; layer -1 for the F/I/W markers."""
    return {(f"{op.kind}_{op.flow}" if op.sub >= 0 else op.kind, op.stage, op.mb, op.sub): i
            for i, op in enumerate(s.ops) if op.kind not in ("SEND", "RECV")}


START, END = 0, 1


def test_moe_layer_held_spans_one_by_one() -> None:
    # schedules._moe_layers _Builder.held 327 (B.dispatch's dh_e dropped) and every other span: one
    # stage, two layers, one micro-batch, layer 0 offloaded (the last is kept: its backward is next).
    # Written from held()'s docstring (pptl run's layer), in units of one tokens x hidden tensor.
    s = build_schedule(config_from_mapping({
        "schedule": "moe-1f1b-overlap", "pp": 1, "microbatches": 1,
        "options": {"ep": 1, "layers_per_chunk": 2, "offload": True,
                    "costs": {"hidden_bytes": 1, "offload_bytes": 0.5}}}))
    at = _index(s)

    def op(kind: str, layer: int) -> int:
        return at[(kind, 0, 0, layer)]

    want = [
        # forward, layer 0: h and m until Combine; x (made outside the step: not counted) and u_a, r, u_e until WGrad
        (op("ATTN_F", 0), START, op("A2A_COMBINE_F", 0), END, 2.0),
        (op("ATTN_F", 0), START, op("WGRAD_B", 0), END, 2.0),
        (op("A2A_DISPATCH_F", 0), START, op("WGRAD_B", 0), END, 1.0),
        (op("MLP_F", 0), START, op("WGRAD_B", 0), END, 1.0),
        (op("A2A_COMBINE_F", 0), END, op("ATTN_F", 1), START, 1.0),  # y, until the next layer takes it
        # forward, layer 1: x counted now; its output is the loss's input: the loss gradient lives to B.attn
        (op("ATTN_F", 1), START, op("A2A_COMBINE_F", 1), END, 2.0),
        (op("ATTN_F", 1), START, op("WGRAD_B", 1), END, 3.0),
        (op("A2A_DISPATCH_F", 1), START, op("WGRAD_B", 1), END, 1.0),
        (op("MLP_F", 1), START, op("WGRAD_B", 1), END, 1.0),
        (op("A2A_COMBINE_F", 1), END, op("ATTN_B", 1), END, 1.0),
    ]
    for j in (1, 0):  # backward: dm, du_e until WGrad; dr to B.dispatch; dh_e to B.attn; dh, du_a until WGrad
        want += [(op("A2A_COMBINE_B", j), START, op("WGRAD_B", j), END, 1.0),
                 (op("MLP_B", j), START, op("A2A_DISPATCH_B", j), END, 1.0),
                 (op("MLP_B", j), START, op("WGRAD_B", j), END, 1.0),
                 (op("A2A_DISPATCH_B", j), START, op("ATTN_B", j), END, 1.0),
                 (op("ATTN_B", j), START, op("WGRAD_B", j), END, 3.0)]
    want += [(op("ATTN_B", 1), END, op("ATTN_B", 0), END, 1.0),  # dy of layer 0
             (op("ONLOAD_B", 0), START, op("ONLOAD_B", 0), END, 0.5)]  # the Onload's destination, from its start
    got = sorted(tuple(sp) for sp in held_spans(s))
    names = lambda spans: [(s.ops[a].id, ea, s.ops[b].id, eb, n) for a, ea, b, eb, n in spans]  # noqa: E731
    assert names(got) == names(sorted(want))


def test_moe_layer_held_spans_across_ranks() -> None:
    # the spans that end or start at a PP transfer: a received input until its Attn, the last layer's
    # output until its SEND, an output gradient from its RECV until B.attn, and the first layer's input
    # gradient until its SEND; one of each per (stage, micro-batch) that has the transfer
    s = build_schedule(config_from_mapping({
        "schedule": "moe-1f1b-overlap", "pp": 2, "vpp": 2, "microbatches": 2,
        "options": {"ep": 2, "layers_per_chunk": 2, "costs": {"hidden_bytes": 1}}}))
    at = {(op.kind, op.flow, op.direction, op.stage, op.mb, op.sub): i for i, op in enumerate(s.ops)}
    want = set()
    for i, op in enumerate(s.ops):
        d, st, mb = op.direction, op.stage, op.mb
        if op.kind == "RECV" and op.flow == "F":
            want.add((i, START, at[("ATTN", "F", d, st, mb, 0)], START, 1.0))
        elif op.kind == "SEND" and op.flow == "F":
            want.add((at[("A2A_COMBINE", "F", d, st, mb, 1)], END, i, END, 1.0))
        elif op.kind == "RECV":
            want.add((i, START, at[("ATTN", "B", d, st, mb, 1)], END, 1.0))
        elif op.kind == "SEND":
            want.add((at[("ATTN", "B", d, st, mb, 0)], END, i, END, 1.0))
    assert len(want) == 2 * 2 * 2 * 3 * 2  # ep x mb x (3 stage boundaries, each way) x (one end each)
    transfers = {i for i, op in enumerate(s.ops) if op.kind in ("SEND", "RECV")}
    got = {tuple(sp) for sp in held_spans(s) if sp[0] in transfers or sp[2] in transfers}
    assert got == want


def _two_chunks_on_one_rank() -> Schedule:
    # Two stages on one rank (chunk 0 then chunk 1): moe-1f1b-overlap itself refuses vpp > 1 at pp = 1,
    # so the builder is called directly; its chunks then hand data over locally, with no PP transfer.
    from pptl.schedules._moe_layers import build_ops
    from pptl.schedules._moe_meta import MoEMeta

    cfg = Config(schedule="moe-1f1b-overlap", pp=1, vpp=2, microbatches=1)
    steps = [((0, 0), None), ((0, 1), None), (None, (0, 1)), (None, (0, 0))]
    return build_ops(cfg, "moe-1f1b-overlap", {0: steps}, layers=1, ep=1, offload=False, offload_bytes=0.0,
                     delay_wgrad=True, meta=MoEMeta(), hidden_bytes=1.0)


def test_moe_chunks_on_one_rank_hand_over_after_the_combine() -> None:
    # schedules._moe_layers rank_steps 125 (`sf > 1`: the wait for the local input dropped) and 134
    # (`L + 1`: a layer that does not exist): chunk 1's Attn starts when chunk 0's Combine has ended,
    # not when its MLP has; and chunk 0's backward starts when chunk 1's B.attn has ended
    from pptl.schedules._moe_layers import Costs as LayerCosts

    s = _two_chunks_on_one_rank()
    assert not [op for op in s.ops if op.kind in ("SEND", "RECV")]
    at = _index(s)
    sim = simulate(s, Costs(base=LayerCosts().table()))  # attn, mlp 1; dispatch, combine 0.5
    assert sim.end[at[("MLP_F", 0, 0, 0)]] == 2.5
    assert sim.end[at[("A2A_COMBINE_F", 0, 0, 0)]] == 3.0
    assert sim.start[at[("ATTN_F", 1, 0, 0)]] == 3.0
    assert sim.start[at[("A2A_COMBINE_B", 0, 0, 0)]] == sim.end[at[("ATTN_B", 1, 0, 0)]] == 9.0


def test_moe_chunks_on_one_rank_hold_the_handed_over_tensors() -> None:
    # schedules._moe_layers held 100: chunk 0's output is held until chunk 1's first Attn starts
    # (no SEND takes it), and chunk 1's input gradient until chunk 0's B.attn ends
    s = _two_chunks_on_one_rank()
    at = _index(s)
    spans = {tuple(sp) for sp in held_spans(s)}
    assert (at[("A2A_COMBINE_F", 0, 0, 0)], END, at[("ATTN_F", 1, 0, 0)], START, 1.0) in spans
    assert (at[("ATTN_B", 1, 0, 0)], END, at[("ATTN_B", 0, 0, 0)], END, 1.0) in spans


def test_a_receive_no_op_needs_goes_last_on_its_lane() -> None:
    # schedules._common assemble 119 (no default position): rank 1 runs only F of mb 1, so the RECV of
    # mb 0 that rank 0's F mb0 sends has no op waiting for it; it goes after the one that has
    from pptl.formats.torch_csv import with_comms

    s = with_comms(load_csv_text("0F0,0F1\n1F1\n")[0])
    assert [s.ops[i].id for i in s.lanes[(1, "recv")]] == ["r1/recv/RECV_F s1 mb1 <-r0", "r1/recv/RECV_F s1 mb0 <-r0"]


def test_weight_update_free_memory_errors_name_the_field() -> None:
    # schedules.weight_update spec_from_options 87: the error names options.free_memory
    with pytest.raises(InputError, match=r"field 'options\.free_memory': got 'lots', expected a size > 0"):
        build_schedule(config_from_mapping({"schedule": "weight-update", "pp": 2, "microbatches": 1,
                                            "options": {"tensors": [["1MiB"], ["1MiB"]], "free_memory": "lots"}}))


@pytest.mark.parametrize(("family", "store"), [("zb-h1", "stage"), ("zb-h2", "stage"), ("zbv", "stage"),
                                                ("dualpipe", "rank"), ("dualpipev", "rank")])
def test_plan_names_its_weight_gradient_fifo(family: str, store: str) -> None:
    # schedules.zbv build 27: the plan file's weight_grad_store is "stage" (one W FIFO per stage, the
    # zero-bubble runtime) or "rank" (DualPipe's one WeightGradStore per rank); PP021 reads it
    cfg = Config(schedule=family, pp=4, microbatches=8, split_backward=True)
    assert build_schedule(cfg).meta["weight_grad_store"] == store


# ------------------------------------------- sample of the tree with typed PipelineMeta (2026-11-26)


def test_compute_op_without_a_micro_batch_and_a_receive_from_itself_are_pp001() -> None:
    # checks.structure malformed_ops 28 (no reason given: the compute op passed) and 62 (a RECV to its
    # own rank spelt "recv": only SENDs were caught)
    s = _zb(2, 2)
    ops = list(s.ops)
    f = next(k for k, op in enumerate(ops) if op.kind == "F" and op.rank == 1)
    r = next(k for k, op in enumerate(ops) if op.kind == "RECV" and op.rank == 1)
    ops[f] = dataclasses.replace(ops[f], mb=-1)
    ops[r] = dataclasses.replace(ops[r], peer=1)
    got = [(v.message, v.ops) for v in run_checks(dataclasses.replace(s, ops=ops)) if v.code == "PP001"]
    assert got == [("malformed op r1/compute/F s1: F needs a stage and a micro-batch", ("r1/compute/F s1",)),
                   ("malformed op r1/recv/RECV_F s1 mb0 <-r1: RECV to its own rank", ("r1/recv/RECV_F s1 mb0 <-r1",))]


def test_rank_with_an_extra_broadcast_is_told_the_others_broadcast_nothing() -> None:
    # checks.weight_update broadcast_order 52: past the end of the reference sequence the others
    # broadcast "nothing" (the mutant indexed past it)
    s = _update_buckets(3, 2)
    lanes = _lanes(s)
    comm = lanes[(2, "comm")]
    last = [op for op in comm if op.kind == "BCAST"][-1]
    comm.append(last)
    assert [(v.message, v.ops) for v in run_checks(s.with_lanes(lanes)) if v.code == "PP053"] == [
        ("rank 2 broadcasts bucket 5 from rank 2 as its broadcast #6, but the other ranks broadcast nothing there "
         "(a collective must run in the same order on every rank)", (last.id,))]


def test_send_issued_before_the_overlapped_op_that_makes_its_data_is_pp032() -> None:
    # checks.p2p _issue_positions 61: an FB's forward half produces what a SEND_F carries
    ok = ("0F0,0SEND_F0,0RECV_B0,(0F1;0B0)OVERLAP_F_B,0SEND_F1,0RECV_B1,0B1\n"
          "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n")
    early = ok.replace("0F0,0SEND_F0,0RECV_B0,(0F1;0B0)OVERLAP_F_B,0SEND_F1,",
                       "0F0,0SEND_F0,0SEND_F1,0RECV_B0,(0F1;0B0)OVERLAP_F_B,")
    assert run_checks(load_csv_text(ok)[0]) == []
    assert [(v.message, v.ops) for v in run_checks(load_csv_text(early)[0]) if v.code == "PP032"] == [
        ("rank 0 issues SEND_F stage 0 mb 1 at step 2, before r0/compute/FB s0 mb1 +B s0 mb0 (step 4) produces its "
         "data",
         ("r0/send/SEND_F s0 mb1 ->r1", "r0/compute/FB s0 mb1 +B s0 mb0"))]


def test_wait_graph_defaults_to_the_nccl_model() -> None:
    # checks.p2p wait_edges 2 (default "NCCL", no model): without a mode the graph has NCCL's
    # per-peer edges
    from pptl.checks.p2p import wait_edges
    from pptl.issue_order import given_program

    s = load_csv_text("0F0,0SEND_F0,0RECV_B0,0F1,0SEND_F1,0RECV_B1,0B0,0B1\n"
                      "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n")[0]
    prog = given_program(s)
    assert prog is not None
    edges, merged = wait_edges(s, prog)
    assert (edges, merged) == wait_edges(s, prog, "nccl")
    assert any(why == "next P2P between ranks 0 and 1" for _, _, why in edges)


def test_held_span_across_ranks_message_says_what_is_expected() -> None:
    # simulate held_spans 15: the whole message for an entry whose second op is on another rank
    s = _zb(2, 2)
    other = next(k for k, op in enumerate(s.ops) if op.rank == 1)
    with pytest.raises(InputError) as e:
        held_spans(dataclasses.replace(s, meta={**s.meta, "held": [[0, 1, other, 0, 2]]}))
    assert str(e.value) == (f"field 'meta.held[0]': got [0, 1, {other}, 0, 2], expected [op index, 0|1, op index on "
                            "the same rank, 0|1, amount >= 0]")


def test_simulating_a_cycle_says_to_run_check() -> None:
    # simulate simulate 51: the whole one-line message
    s = _zb(2, 2)
    lanes = _lanes(s)
    rank0 = lanes[(0, "compute")]
    i1 = next(op for op in rank0 if op.kind == "I" and op.mb == 1)
    rank0.remove(i1)
    rank0.insert(0, i1)
    with pytest.raises(InvalidScheduleError) as e:
        simulate(s.with_lanes(lanes))
    assert str(e.value) == "the schedule deadlocks (its DAG has a cycle); run 'pptl check' to see the cycle"


def test_plan_without_paced_compute_is_retimed_at_most_context_passes_times(monkeypatch: pytest.MonkeyPatch) -> None:
    # simulate _retime_in_context 33 (BESIDE_PASSES, the limit for paced compute, taken always): all-to-alls
    # 3x slower beside compute settle in two re-timings here; held to one, the first one's times stay
    import pptl.contexts

    s = build_schedule(Config(schedule="moe-1f1b-overlap", pp=1, microbatches=2,
                              options={"ep": 2, "layers_per_chunk": 1}))
    base = s.config.costs
    costs = dataclasses.replace(base, context={k: {"alone": base.base[k], "busy": 3 * base.base[k]}
                                               for k in ("dispatch", "combine")})
    assert not costs.beside
    assert simulate(s, costs).makespan == pytest.approx(41 / 3)
    monkeypatch.setattr(pptl.contexts, "CONTEXT_PASSES", 1)
    assert simulate(s, costs).makespan == 15.0


@pytest.mark.parametrize(("text", "placement"), [
    ("0F0,0B0\n1F0,2F0,2B0,1B0\n", "V (rank r holds stages r and 3-r)"),
    ("0F0,2F0,2B0,0B0\n1F0,1B0\n", "loop (stage s on rank s % 2, 2 per rank)"),
], ids=["v", "loop"])
def test_placement_counts_the_stage_no_cell_names(text: str, placement: str) -> None:
    # formats.torch_csv _schedule 73 ("loop" read as custom), 82 ("v" read as custom) and 85 (3 stages per
    # rank in a V): stage 3 has no cell, yet both placements hold 2 stages per rank on 2 ranks
    s, notes, problems, _ = load_csv_text(text)
    assert (s.num_stages, s.config.vpp, problems) == (4, 2, [])
    assert f"placement: {placement}, 4 stages (inferred)" in notes


def test_overlapped_op_without_its_backward_has_no_torch_action() -> None:
    # formats.torch_csv action_of 12 (`or`: an FB without pair unpacked None): one line naming the op
    from pptl.formats.torch_csv import action_of

    with pytest.raises(InputError) as e:
        action_of(Op(kind="FB", rank=0, lane="compute", stage=0, mb=0))
    assert str(e.value).startswith("r0/compute/FB s0 mb0: kind FB has no torch CSV action (torch has F, I, B, W, ")


def test_too_many_actions_names_the_line_and_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # formats.torch_csv load_csv_text 85: the whole message (the limit lowered from 5,000,000)
    monkeypatch.setattr("pptl.formats.torch_csv.MAX_OPS", 3)
    with pytest.raises(InputError) as e:
        load_csv_text("0F0,0F1\n1F0,1F1\n", source="x.csv")
    assert str(e.value) == "x.csv:2: more than the 3 actions pptl accepts"


def test_a_file_with_receives_only_keeps_its_own() -> None:
    # formats.torch_csv with_comms 5: a file listing a RECV (and no SEND) lists its messages itself;
    # none are added
    from pptl.formats.torch_csv import with_comms

    s = load_csv_text("0F0\n1RECV_F0,1F0\n")[0]
    assert with_comms(s) is s


def _update_error(options: dict) -> str:
    with pytest.raises(InputError) as e:
        build_schedule(config_from_mapping({"schedule": "weight-update", "pp": 2, "microbatches": 1,
                                            "options": {"tensors": [["1MiB"], ["1MiB"]], **options}}, source="u.yaml"))
    return str(e.value)


def test_weight_update_errors_name_the_file_and_the_field() -> None:
    # schedules.weight_update spec_from_options 91 (max_bucket_size's error without its file) and 141
    # (no room for the buckets: the mutant looked the value up under another key, a KeyError)
    assert _update_error({"max_bucket_size": "lots"}) == (
        "u.yaml: field 'options.max_bucket_size': got 'lots', expected a size > 0 in bytes or with a unit, such as "
        "8GiB for schedule 'weight-update'")
    assert _update_error({"bucket_size": "auto", "free_memory": 2}) == (
        "u.yaml: field 'options.free_memory': got 2, expected room for 3 buckets for schedule 'weight-update'")


@pytest.mark.parametrize(("m", "left"), [(10, "2 micro-batches"), (9, "1 micro-batch")])
def test_interleaved_last_group_names_what_is_left(m: int, left: str) -> None:
    # schedules.interleaved check_groups 73: "micro-batches" for more than one left over
    with pytest.raises(InputError) as e:
        build_schedule(Config(schedule="interleaved", pp=4, vpp=2, microbatches=m, group_size=4))
    assert f"which leaves a last group of {m} mod 4 = {left}, fewer than pp=4 " in str(e.value)


def test_exposure_of_a_timeline_is_the_exposure_of_its_times() -> None:
    # schedules._moe_metrics exposure_of_timeline 18 (reached by no selected test; the mutant dropped the
    # starts): a run's timeline matched by op id gives what the simulated times give
    from pptl.schedules._moe_metrics import exposure, exposure_of_timeline

    s = build_schedule(Config(schedule="moe-1f1b-overlap", pp=1, microbatches=2,
                              options={"ep": 2, "layers_per_chunk": 1}))
    sim = simulate(s)
    got = exposure_of_timeline(s, sim.timeline())
    assert got == exposure(s, sim.start, sim.end)
    assert got


@pytest.mark.parametrize(("iw", "noted"), [(0.9990234375, False), (0.998046875, True), (1.0009765625, False),
                                           (1.001953125, True), (0.999997, False)])
def test_b_counts_as_i_plus_w_within_a_thousandth(iw: float, noted: bool) -> None:
    """B = 1 against I + W 1 -/+ 2**-10 (0.098% off, exact in binary) is taken as I + W; 1 -/+ 2**-9 (0.195%) is
    not. The costs pptl tune writes from a run whose B marked its I part differ by 3e-6 of B (B 0.626858, I + W
    0.626855), which `pptl check` called "B=0.626858 is not I+W=0.626855"."""
    from pptl.schedules.dualpipe import assumptions

    cfg = Config(schedule="dualpipe", pp=4, microbatches=8)
    base = {"F": 1.0, "B": 1.0, "I": iw / 2, "W": iw / 2}
    cfg = dataclasses.replace(cfg, costs=dataclasses.replace(cfg.costs, base=base))
    assert (f"B=1 is not I+W={iw:g}" in assumptions(cfg)) is noted
