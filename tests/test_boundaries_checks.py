"""Boundaries of the check rules, against values worked out by hand (never by the code under test).

Each test pins a place where a one-character slip changes the answer and no other test looked: the
last valid rank or direction and the first invalid one, two-digit ranks in a rule's message (rank 10
sorted as text comes before rank 9), ordinals past the teens (21st, not 21th), one violation per pair
of ranks when one rank talks to two peers, a hang whose cycle starts at a rank's very first op, a
single "more" against several, a peak exactly at a family's promise. Unit costs are the defaults:
F = 1, B = 2, no communication time.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pptl.checks import run_checks
from pptl.config import config_from_mapping
from pptl.formats.loader import load_any
from pptl.formats.torch_csv import load_csv_text
from pptl.ir import Op, Schedule, ScheduleBuilder
from pptl.planning import plan
from pptl.schedules import build_schedule

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _errors(vs: list[Any]) -> list[str]:
    return [v.code for v in vs if v.severity == "error"]


def _messages(vs: list[Any], code: str) -> list[str]:
    return [v.message for v in vs if v.code == code]


def _lanes(s: Schedule) -> dict[tuple[int, str], list[Op]]:
    return {k: [s.ops[i] for i in v] for k, v in s.lanes.items()}


def _one_f_one_b(pp: int, m: int) -> Schedule:
    return build_schedule(config_from_mapping({"schedule": "1f1b", "pp": pp, "microbatches": m}))


def _relabelled(s: Schedule, op_id: str, **change: Any) -> Schedule:
    """``s`` with the op ``op_id`` given other field values."""
    lanes = {k: [replace(op, **change) if op.id == op_id else op for op in ops] for k, ops in _lanes(s).items()}
    assert lanes != _lanes(s), op_id
    return s.with_lanes(lanes)


# ----------------------------------------------------------------------------------------------
# PP001 / PP004: the last valid index passes, the next one is out


def test_peer_equal_to_pp_is_malformed_and_the_last_rank_is_not() -> None:
    # pp = 12: peers 0..11. Rank 10's SEND_F to rank 11 (the last rank) is fine; the same SEND
    # aimed at rank 12 is outside the pipeline.
    s = _one_f_one_b(12, 2)
    assert _messages(run_checks(s), "PP001") == []
    bad = _relabelled(s, "r10/send/SEND_F s10 mb0 ->r11", peer=12)
    assert _messages(run_checks(bad), "PP001") == [
        "malformed op r10/send/SEND_F s10 mb0 ->r12: SEND needs flow F or B and a peer rank in 0..11"]


def test_direction_equal_to_directions_is_out_of_range() -> None:
    # 1F1B has one direction (0..0): an F labelled direction 1 is out of range, like stage 2 of 2.
    s = _relabelled(_one_f_one_b(2, 2), "r1/compute/F s1 mb1", direction=1)
    assert _messages(run_checks(s), "PP004") == [
        "r1/compute/F s1 mb1 d1: stage 1, mb 1, direction 1 outside stages 0..1, micro-batches 0..1, directions 0..0"]


# ----------------------------------------------------------------------------------------------
# Two-digit ranks in messages: listed as numbers (2 before 10, 9 before 10)


def test_stage_on_two_ranks_lists_ranks_as_numbers() -> None:
    # Stage 2's F of mb 0 moved onto rank 10 of a 12-rank 1F1B: stage 2 runs on ranks 2 and 10.
    s = _one_f_one_b(12, 2)
    lanes = _lanes(s)
    moved = next(op for op in lanes[(2, "compute")] if (op.kind, op.mb) == ("F", 0))
    lanes[(2, "compute")].remove(moved)
    lanes[(10, "compute")].append(replace(moved, rank=10))
    assert _messages(run_checks(s.with_lanes(lanes)), "PP005") == ["stage 2 runs on ranks r2, r10"]


def test_deadlock_across_ranks_nine_and_ten_lists_them_as_numbers() -> None:
    # 1F1B pp=12 m=2: rank 9 runs F0 F1 B0 B1 (warmup 2), rank 10 F0 F1 B0 B1 (warmup 1). Rank 9 made
    # to run B0 before F1, rank 10 F1 before F0: F s10 mb1 waits for F s9 mb1, which waits (lane) for
    # B s9 mb0, which needs the gradient of rank 10's B mb0, which comes after F s10 mb1: a cycle
    # through ranks 9 and 10 only (rank 11 is not on it).
    s = _one_f_one_b(12, 2)
    lanes = _lanes(s)
    r9, r10 = lanes[(9, "compute")], lanes[(10, "compute")]
    lanes[(9, "compute")] = [r9[0], r9[2], r9[1], r9[3]]
    lanes[(10, "compute")] = [r10[1], r10[0], r10[2], r10[3]]
    assert [op.id for op in lanes[(9, "compute")]] == ["r9/compute/F s9 mb0", "r9/compute/B s9 mb0",
                                                       "r9/compute/F s9 mb1", "r9/compute/B s9 mb1"]
    found = run_checks(s.with_lanes(lanes))
    assert _errors(found) == ["PP007"]
    [msg] = _messages(found, "PP007")
    assert msg.startswith("deadlock across ranks 9, 10: ")


def _over_memory_lines(r: int) -> str:
    # GPipe F=1: F s_r mb k starts at r + k, and no backward ends before every forward ran; rank r
    # reaches 12 units when F s_r mb11 starts, at t = r + 11.
    return (f"rank {r} holds 12 activation units at t={r + 11} (when r{r}/compute/F s{r} mb11 starts), over the "
            "limit 11; peak 12")


def test_memory_violations_of_twelve_ranks_come_in_rank_order() -> None:
    # GPipe pp=12 m=12 holds all 12 micro-batches on every rank: a limit of 11 is passed on each,
    # reported rank 0, 1, ..., 9, 10, 11 (not 0, 1, 10, 11, 2, ... as text would sort them).
    s = build_schedule(config_from_mapping({"schedule": "gpipe", "pp": 12, "microbatches": 12}))
    assert _messages(run_checks(s, memory_limit=11), "PP009") == [_over_memory_lines(r) for r in range(12)]


def test_check_json_lists_twelve_ranks_in_rank_order(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from pptl.cli import app

    cfg = tmp_path / "gpipe12.yaml"
    cfg.write_text("schedule: gpipe\npp: 12\nmicrobatches: 12\nmemory_limit: 11\n")
    result = CliRunner().invoke(app, ["check", str(cfg), "--output", "json"])
    assert result.exit_code == 1, result.output
    [file] = json.loads(result.stdout)["files"]
    assert [v["message"] for v in file["violations"]] == [_over_memory_lines(r) for r in range(12)]


# ----------------------------------------------------------------------------------------------
# An FB paired with itself is PP020's, not also a local-order error


def test_fb_paired_with_itself_is_only_pp020() -> None:
    # F s0 mb0, FB (F s0 mb1 + B s0 mb1), B s0 mb0 on one rank: complete and acyclic (the self-edge
    # is dropped); the FB's F half is the very op its B half needs: PP020 alone. PP006 compares the
    # place of that F (the FB itself) with the FB: equal, not "before".
    s = load_any(FIXTURES / "invalid" / "dualpipe_fb_self_dependency.json").schedule
    assert s is not None
    found = run_checks(s)
    assert _errors(found) == ["PP020"]
    assert found[0].message.endswith("that backward needs it directly, so the pair can never start")


# ----------------------------------------------------------------------------------------------
# P2P rules on torch compute_comms programs


def _program(pp: int, m: int, alternate: frozenset[int] = frozenset(),
             swaps: dict[int, tuple[str, str]] | None = None) -> str:
    """A torch compute_comms CSV: stage r on rank r. A rank posts all its receives of a phase,
    computes, then sends (GPipe); a rank in ``alternate`` runs each micro-batch through (receive,
    F, send, receive, B, send). ``swaps``: rank -> two cells exchanged on its row."""
    rows = []
    for r in range(pp):
        first, last = r == 0, r == pp - 1
        if r in alternate:
            row = []
            for k in range(m):
                row += ([] if first else [f"{r}RECV_F{k}"]) + [f"{r}F{k}"] + ([] if last else [f"{r}SEND_F{k}"])
                row += ([] if last else [f"{r}RECV_B{k}"]) + [f"{r}B{k}"] + ([] if first else [f"{r}SEND_B{k}"])
        else:
            ks = range(m)
            row = ([] if first else [f"{r}RECV_F{k}" for k in ks]) + [f"{r}F{k}" for k in ks] + \
                ([] if last else [f"{r}SEND_F{k}" for k in ks])
            row += ([] if last else [f"{r}RECV_B{k}" for k in ks]) + [f"{r}B{k}" for k in ks] + \
                ([] if first else [f"{r}SEND_B{k}" for k in ks])
        a, b = (swaps or {}).get(r, ("", ""))
        if a:
            i, j = row.index(a), row.index(b)
            row[i], row[j] = row[j], row[i]
        rows.append(",".join(row))
    return "\n".join(rows) + "\n"


def _check_csv(text: str, p2p: str = "nccl") -> list[Any]:
    return run_checks(load_csv_text(text)[0], p2p=p2p)


@pytest.mark.parametrize("p2p", ["nonblocking", "nccl", "blocking"])
def test_the_base_programs_are_valid(p2p: str) -> None:
    # The helper's programs run under every model (each channel posts in one order on both ends).
    assert _check_csv(_program(12, 2), p2p) == []
    assert _check_csv(_program(12, 2, alternate=frozenset(range(12))), p2p) == []


@pytest.mark.parametrize(("k", "ordinal"), [
    (1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th"), (13, "13th"),
    (21, "21st"), (22, "22nd"), (23, "23rd"), (24, "24th"), (101, "101st"), (111, "111th"), (112, "112th"),
])
def test_fifo_mismatch_ordinals(k: int, ordinal: str) -> None:
    # pp=2 m=k+1, rank 1 posts RECV_F of mb k-1 and mb k swapped: its k-th receive from rank 0 is mb k
    # while rank 0's k-th send is mb k-1.
    text = _program(2, k + 1, swaps={1: (f"1RECV_F{k - 1}", f"1RECV_F{k}")})
    assert _messages(_check_csv(text), "PP030") == [
        f"nccl matches P2P in order per pair of ranks: rank 0's {ordinal} send to rank 1 is SEND_F stage 0 mb {k - 1} "
        f"but rank 1's {ordinal} receive from rank 0 is RECV_F stage 1 mb {k}; the data would land in the wrong place "
        "(reorder one side)"]


def test_fifo_mismatch_is_reported_for_each_pair_of_one_sender() -> None:
    # pp=12 m=2: rank 9 posts its receives of gradients (from rank 10) swapped, and rank 11 its
    # receives of activations (from rank 10). Rank 10 sends to two peers; each pair has its own
    # first mismatch, listed by (sender, receiver) as numbers: (10, 9) before (10, 11).
    text = _program(12, 2, swaps={9: ("9RECV_B0", "9RECV_B1"), 11: ("11RECV_F0", "11RECV_F1")})
    tail = "; the data would land in the wrong place (reorder one side)"
    assert _messages(_check_csv(text), "PP030") == [
        "nccl matches P2P in order per pair of ranks: rank 10's 1st send to rank 9 is SEND_B stage 10 mb 0 but rank 9's "
        "1st receive from rank 10 is RECV_B stage 9 mb 1" + tail,
        "nccl matches P2P in order per pair of ranks: rank 10's 1st send to rank 11 is SEND_F stage 10 mb 0 but "
        "rank 11's 1st receive from rank 10 is RECV_F stage 11 mb 1" + tail,
    ]


def test_nccl_hang_across_ranks_nine_and_ten() -> None:
    # Ranks 0..9 post all receives first; ranks 10 and 11 run one micro-batch at a time. On the
    # channel 9 <-> 10, rank 9 posts SEND_F0, SEND_F1, RECV_B0, RECV_B1 and rank 10 RECV_F0,
    # SEND_B0, RECV_F1, SEND_B1: SEND_F1 meets RECV_F1 only after SEND_B0 met RECV_B0 on rank 10's
    # channel, and before it on rank 9's. A hang of ranks 9 and 10 (10 <-> 11 agree).
    found = _check_csv(_program(12, 2, alternate=frozenset({10, 11})))
    assert _errors(found) == ["PP031"]
    [msg] = _messages(found, "PP031")
    assert msg.startswith("hangs under NCCL P2P (a send completes with its receive; per-peer order) across ranks 9, 10: ")


def test_a_receive_posted_after_the_ranks_first_op_waits_for_it() -> None:
    # Rank 1 issues F s1 mb0 first and its RECV_F after it. Under non-blocking P2P the RECV is posted
    # once the compute before it ran, and the F needs the RECV's data: a hang on rank 1 through the
    # very first op of its program.
    found = _check_csv("0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1RECV_F0,1B0,1SEND_B0\n", "nonblocking")
    assert _errors(found) == ["PP031", "PP033"]
    [v] = [v for v in found if v.code == "PP031"]
    assert set(v.ops) == {"r1/compute/F s1 mb0", "r1/recv/RECV_F s1 mb0 <-r0"}
    assert "r1/compute/F s1 mb0 -> (posted after) r1/recv/RECV_F s1 mb0 <-r0" in v.message


# ----------------------------------------------------------------------------------------------
# PP022: one idle value, or a range


def test_formula_warning_gives_the_idle_range_when_ranks_differ() -> None:
    # 1F1B pp=2 m=1, stage 1's F costs 3: F s0 [0,1], F s1 [1,4], B s1 [4,6], B s0 [6,8]. Rank 0
    # busy 3, idle 5; rank 1 busy 5, idle 3. The textbook (p-1)(F+B) = 3 assumes one cost per kind.
    r = plan(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 1,
                                  "costs": {"stages": {1: {"F": 3}}}}))
    assert r.metrics["makespan"] == 8.0
    [w] = [v for v in r.violations if v.code == "PP022"]
    assert w.message.startswith("1f1b: the textbook bubble (p-1)(F+B) = 3 does not apply: ")
    assert w.message.endswith("; simulated idle per rank 3..5")


# ----------------------------------------------------------------------------------------------
# PP023: a peak exactly at the family's promise and bound


def test_v_half_peak_exactly_at_its_promise_is_no_warning() -> None:
    # v-half p=4 m=8 with options.memory 0.75: the promise is 0.75 x 1F1B's 2 * min(4, 8) = 8 chunks
    # = 6, the pattern's bound 2 * ((4+2)//2) = 6, and the plan's peak is 6: at both, over neither.
    r = plan(config_from_mapping({"schedule": "v-half", "pp": 4, "microbatches": 8, "options": {"memory": 0.75}}))
    assert r.metrics["peak_activation"] == 6.0
    assert [v.code for v in r.violations if v.code == "PP023"] == []


# ----------------------------------------------------------------------------------------------
# PP043: "1 more such step", "2 more such steps"


def _self_paired(n: int) -> Schedule:
    # n paired F markers on rank 0, each overlapping F and B of its own micro-batch.
    b = ScheduleBuilder()
    for mb in range(n):
        b.add(Op(kind="F", rank=0, lane="compute", stage=0, mb=mb, pair=(0, mb, 0)))
    return Schedule("custom", 1, 1, n, b.ops, b.lanes)


@pytest.mark.parametrize(("n", "more"), [(1, ""), (2, " (and 1 more such step on this rank)"),
                                         (3, " (and 2 more such steps on this rank)")])
def test_self_paired_steps_are_counted(n: int, more: str) -> None:
    [msg] = _messages(run_checks(_self_paired(n)), "PP043")
    first = _self_paired(n).ops[0].id
    assert msg.startswith(f"rank 0: the paired step {first} overlaps F of stage 0 mb 0 with B of stage 0 mb 0, which "
                          f"needs that forward directly: the pair depends on itself{more}; ")


# ----------------------------------------------------------------------------------------------
# Weight update on 12 ranks: rank lists and rank order, a buffer total exactly at the usable memory


def _update(buckets: int) -> Schedule:
    # pp=12, rank 0 owns every 1 KiB tensor (one bucket each); ranks 1..11 own none.
    tensors = [[1024] * buckets] + [[] for _ in range(11)]
    return build_schedule(config_from_mapping({"schedule": "weight-update", "pp": 12, "microbatches": 1,
                                               "options": {"tensors": tensors, "bucket_size": 1024}}))


@pytest.mark.parametrize(("dropped", "named"), [
    ([11], "rank 11"),
    (list(range(3, 11)), "ranks 3, 4, 5, 6, 7, 8, 9, 10"),  # 8 ranks: all listed
    (list(range(2, 11)), "ranks 2, 3, 4, 5, 6, 7, 8, 9 and 1 more"),  # 9: the first 8, then a count
])
def test_missing_reloads_name_up_to_eight_ranks(dropped: list[int], named: str) -> None:
    s = _update(1)
    lanes = {k: ops for k, ops in _lanes(s).items() if not (k[1] == "compute" and k[0] in dropped)}
    assert _messages(run_checks(s.with_lanes(lanes)), "PP055") == [f"bucket 0 is missing its reload on {named}"]


def test_broadcast_order_reports_ranks_in_number_order() -> None:
    # Buckets 0 and 1, both from rank 0. Ranks 10 and 2 broadcast bucket 1 first; the ten others
    # (the reference) bucket 0. Reported rank 2, then rank 10.
    s = _update(2)
    lanes = _lanes(s)
    for r in (10, 2):
        lanes[(r, "comm")] = lanes[(r, "comm")][::-1]
    tail = "the other ranks broadcast bucket 0 from rank 0 there (a collective must run in the same order on every rank)"
    assert _messages(run_checks(s.with_lanes(lanes)), "PP053") == [
        f"rank {r} broadcasts bucket 1 from rank 0 as its broadcast #0, but {tail}" for r in (2, 10)]


@pytest.mark.parametrize(("free", "over"), [(3414, False), (3413, True)])
def test_buffers_exactly_at_the_usable_memory_fit(free: int, over: bool) -> None:
    # 3 buffers (H2D + two IPC halves) of 1024 bytes need 3072. 90% of 3414 is 3072.6, usable 3072:
    # exactly enough. 90% of 3413 is 3071.7, usable 3071: one byte short.
    s = _update(1)
    wu = s.meta["weight_update"]
    assert (wu["buffers"], wu["bucket_size"]) == (3, 1024)
    s = replace(s, meta={**s.meta, "weight_update": {**wu, "free_memory": free}})
    assert [v.code for v in run_checks(s) if v.code == "PP056"] == (["PP056"] if over else [])


# ----------------------------------------------------------------------------------------------
# Wave 3: a planted slip in a validity rule either rejects a valid plan or accepts an invalid one.
# Each plan below is built by hand; the comment says which rule must fire on which op, and why.

_LETTER = {"compute": "c", "send": "s", "recv": "r"}


def _issued(pp: int, stages: int, directions: int, issue: dict[int, list[Op]]) -> Schedule:
    """A one-micro-batch schedule whose ranks issue ``issue[rank]`` in that order (its lanes are
    those ops in that order, its program order the lanes' letters), with the training facts."""
    from pptl.deps import training_deps

    b = ScheduleBuilder()
    for r in sorted(issue):
        b.extend(issue[r])
    meta = {"program_order": ["".join(_LETTER[op.lane] for op in issue[r]) for r in range(pp)]}
    return Schedule("hand", pp, stages, 1, b.ops, b.lanes, training_deps(b.ops, stages), directions, meta=meta)


def _comp(kind: str, rank: int, stage: int, direction: int) -> Op:
    return Op(kind, rank, "compute", stage, 0, direction=direction)


def _p2p(kind: str, rank: int, stage: int, direction: int, flow: str, peer: int) -> Op:
    return Op(kind, rank, "send" if kind == "SEND" else "recv", stage, 0, direction=direction, peer=peer, flow=flow)


def _two_directions(receives_swapped: bool) -> Schedule:
    # pp=2, two directions that both put stage 0 on rank 0 and stage 1 on rank 1, one micro-batch
    # each. Rank 0 sends the activation of direction 0, then of direction 1; rank 1 receives them
    # in that order, or (swapped) direction 1 first. Nothing of one direction needs the other's
    # data, so nothing hangs; only NCCL's positional matching goes wrong.
    r0 = [_comp("F", 0, 0, 0), _p2p("SEND", 0, 0, 0, "F", 1), _comp("F", 0, 0, 1), _p2p("SEND", 0, 0, 1, "F", 1),
          _p2p("RECV", 0, 0, 0, "B", 1), _p2p("RECV", 0, 0, 1, "B", 1), _comp("B", 0, 0, 0), _comp("B", 0, 0, 1)]
    receives = [_p2p("RECV", 1, 1, 0, "F", 0), _p2p("RECV", 1, 1, 1, "F", 0)]
    if receives_swapped:
        receives.reverse()
    r1 = receives + [_comp("F", 1, 1, 0), _comp("F", 1, 1, 1), _comp("B", 1, 1, 0), _p2p("SEND", 1, 1, 0, "B", 0),
                     _comp("B", 1, 1, 1), _p2p("SEND", 1, 1, 1, "B", 0)]
    return _issued(2, 2, 2, {0: r0, 1: r1})


@pytest.mark.parametrize("p2p", ["nonblocking", "nccl", "blocking"])
def test_two_directions_received_in_send_order_are_valid(p2p: str) -> None:
    assert run_checks(_two_directions(False), p2p=p2p) == []


@pytest.mark.parametrize("p2p", ["nccl", "blocking"])
def test_messages_differing_only_in_direction_are_a_fifo_mismatch(p2p: str) -> None:
    # Rank 0's 1st send to rank 1 is direction 0's activation; rank 1's 1st receive from rank 0
    # expects direction 1's: same flow, same sender stage (0), same mb (0), other direction. NCCL
    # hands direction 0's tensor to direction 1's stage. The message names the direction (else the
    # two sides read alike: "SEND_F stage 0 mb 0" against "RECV_F stage 1 mb 0").
    found = run_checks(_two_directions(True), p2p=p2p)
    assert [v.code for v in found] == ["PP030"]
    assert found[0].ops == ("r0/send/SEND_F s0 mb0 ->r1", "r1/recv/RECV_F s1 mb0 d1 <-r0")
    assert found[0].message == (
        f"{p2p} matches P2P in order per pair of ranks: rank 0's 1st send to rank 1 is SEND_F stage 0 mb 0 but "
        "rank 1's 1st receive from rank 0 is RECV_F stage 1 mb 0 (direction 1); the data would land in the wrong "
        "place (reorder one side)")
    # Under non-blocking P2P a receive matches its send by identity: the swap is harmless.
    assert run_checks(_two_directions(True), p2p="nonblocking") == []


# Stage 1 on rank 0, stages 0 and 2 on rank 1 (a custom placement torch accepts): the channel
# rank 0 -> rank 1 carries both SEND_F s1 (to stage 2) and SEND_B s1 (to stage 0), whose sender
# stage and micro-batch are equal; only the flow tells them apart.
_MIDDLE_ON_RANK_0 = "1RECV_F0,1F0,1SEND_F0,1RECV_B0,1B0,1SEND_B0\n"


def test_messages_differing_only_in_flow_are_a_fifo_mismatch() -> None:
    valid = _MIDDLE_ON_RANK_0 + "0F0,0SEND_F0,2RECV_F0,2F0,2B0,2SEND_B0,0RECV_B0,0B0\n"
    assert _check_csv(valid) == []
    # Rank 1 posts its receive of stage 0's gradient before that of stage 2's input: its 1st
    # receive from rank 0 is RECV_B (sender stage 1, mb 0) while rank 0's 1st send is SEND_F (sender
    # stage 1, mb 0). PP030 names that pair; the order also hangs (PP007 on the recv lane, PP031).
    swapped = _MIDDLE_ON_RANK_0 + "0F0,0SEND_F0,0RECV_B0,2RECV_F0,2F0,2B0,2SEND_B0,0B0\n"
    found = _check_csv(swapped)
    assert _errors(found) == ["PP007", "PP030", "PP031"]
    assert _messages(found, "PP030") == [
        "nccl matches P2P in order per pair of ranks: rank 0's 1st send to rank 1 is SEND_F stage 1 mb 0 but rank 1's "
        "1st receive from rank 0 is RECV_B stage 0 mb 0; the data would land in the wrong place (reorder one side)"]


@pytest.mark.parametrize("p2p", ["nonblocking", "nccl", "blocking"])
def test_two_ranks_that_talk_only_to_a_third_do_not_hang(p2p: str) -> None:
    # Stage 0 on rank 0, stage 1 on rank 2, stage 2 on rank 1: ranks 0 and 1 each talk to rank 2
    # only. Their channels (0 <-> 2 and 1 <-> 2) are distinct: rank 1's first receive must not wait
    # for rank 0's last (that would close F s2 -> B s2 -> B s1 -> B s0's receive -> F s2: a false hang).
    text = ("0F0,0SEND_F0,0RECV_B0,0B0\n2RECV_F0,2F0,2B0,2SEND_B0\n"
            "1RECV_F0,1F0,1SEND_F0,1RECV_B0,1B0,1SEND_B0\n")
    assert _check_csv(text, p2p) == []


@pytest.mark.parametrize("p2p", ["nonblocking", "nccl"])
def test_a_receive_after_rank_zeros_very_first_op_is_reported(p2p: str) -> None:
    # Stage 1 on rank 0 and stage 0 on rank 1: rank 0 issues F s1 mb0 at step 0, then the RECV_F it
    # needs at step 1. The F sits at position 0 of the whole program (rank 0 first): PP033 still
    # names it (a position of 0 is a position, not "none").
    found = _check_csv("1F0,1RECV_F0,1B0,1SEND_B0\n0F0,0SEND_F0,0RECV_B0,0B0\n", p2p)
    assert _errors(found) == ["PP031", "PP033"]
    [v] = [v for v in found if v.code == "PP033"]
    assert v.message == "rank 0 issues RECV_F stage 1 mb 0 at step 1, after r0/compute/F s1 mb0 (step 0) needed its data"
    assert v.ops == ("r0/recv/RECV_F s1 mb0 <-r1", "r0/compute/F s1 mb0")


# ----------------------------------------------------------------------------------------------
# PP008: an op past the last stage (or before the first) is PP004's (PP001's), not a missing SEND


def _with_compute(s: Schedule, rank: int, op: Op) -> Schedule:
    lanes = _lanes(s)
    lanes[(rank, "compute")] = [*lanes[(rank, "compute")], op]
    return s.with_lanes(lanes)


def test_an_f_past_the_last_stage_is_out_of_range_and_nothing_more() -> None:
    # 1F1B pp=2 m=1 (stages 0..1) plus an F of stage 2 on rank 0. The last stage's F (s1, rank 1)
    # sends nothing: there is no stage 2 to feed, the op there is out of range. One error only.
    found = run_checks(_with_compute(_one_f_one_b(2, 1), 0, Op("F", 0, "compute", 2, 0)))
    assert [(v.code, v.ops) for v in found] == [("PP004", ("r0/compute/F s2 mb0",))]


def test_a_b_before_the_first_stage_is_malformed_and_nothing_more() -> None:
    # The same with a B of stage -1 on rank 1: malformed (PP001) and out of range (PP004). Stage 0's
    # B (rank 0) sends no gradient: there is no stage -1 to feed.
    found = run_checks(_with_compute(_one_f_one_b(2, 1), 1, Op("B", 1, "compute", -1, 0)))
    assert [(v.code, v.ops) for v in found] == [("PP001", ("r1/compute/B mb0",)), ("PP004", ("r1/compute/B mb0",))]


def test_unmatched_receives_are_reported_in_op_order() -> None:
    # 1F1B pp=2 m=1 without its two SENDs. Ops are listed rank 0 then rank 1, so rank 0's RECV_B
    # comes before rank 1's RECV_F (though F sorts before B as a key); then the two crossings with
    # no SEND, rank 0's F then rank 1's B.
    s = _one_f_one_b(2, 1)
    lanes = {k: v for k, v in _lanes(s).items() if k[1] != "send"}
    assert _messages(run_checks(s.with_lanes(lanes)), "PP008") == [
        "r0/recv/RECV_B s0 mb0 <-r1 has no matching SEND on rank 1",
        "r1/recv/RECV_F s1 mb0 <-r0 has no matching SEND on rank 0",
        "r0/compute/F s0 mb0 produces data for rank 1 but no SEND_F of stage 0 mb 0 carries it",
        "r1/compute/B s1 mb0 produces data for rank 0 but no SEND_B of stage 1 mb 0 carries it",
    ]


# ----------------------------------------------------------------------------------------------
# PP043: a pair depends on itself only within one direction; "directly" against "through the loss"


def _paired_step(pair: tuple[int, int, int]) -> Schedule:
    # One paired F marker (stage 0, mb 0, direction 0) in a two-direction, two-stage schedule.
    b = ScheduleBuilder()
    b.add(Op(kind="F", rank=0, lane="compute", stage=0, mb=0, pair=pair))
    return Schedule("custom", 1, 2, 1, b.ops, b.lanes, directions=2)


def test_a_pair_with_the_same_mb_of_the_other_direction_is_not_self_dependent() -> None:
    # B of (stage 0, mb 0, direction 1) needs the forwards of mb 0 in direction 1 only: overlapping
    # it with F of mb 0 in direction 0 (DualPipe's pairing) can run.
    assert "PP043" not in [v.code for v in run_checks(_paired_step((0, 0, 1)))]
    assert "PP043" in [v.code for v in run_checks(_paired_step((0, 0, 0)))]


def test_a_pair_with_a_later_stage_depends_on_itself_through_the_loss() -> None:
    # F of stage 0 mb 0 paired with B of stage 1 mb 0: that B needs the loss of mb 0, hence F s0.
    [msg] = _messages(run_checks(_paired_step((1, 0, 0))), "PP043")
    assert msg.startswith("rank 0: the paired step r0/compute/F s0 mb0 +B s1 mb0 overlaps F of stage 0 mb 0 with B of "
                          "stage 1 mb 0, which needs that forward through the loss: the pair depends on itself; ")


# ----------------------------------------------------------------------------------------------
# PP041: ONLOADs in a plan that offloads nothing; PP042: the first all-to-all left without a partner


def _moe(**options: Any) -> Schedule:
    from pptl.config import Config

    return build_schedule(Config(schedule="moe-1f1b-overlap", pp=1, microbatches=1, options=options))


def test_an_onload_in_a_plan_with_no_offload_at_all_is_reported() -> None:
    # pp=1 m=1 with two layers and offloading: layer 0 is offloaded (d2h) and loaded back (h2d);
    # layer 1, used next, is not. Drop the d2h lane: the ONLOAD has nothing on the host to load.
    s = _moe(offload=True, layers_per_chunk=2)
    lanes = _lanes(s)
    assert [op.kind for op in lanes[(0, "d2h")]] == ["OFFLOAD"]
    del lanes[(0, "d2h")]
    found = run_checks(s.with_lanes(lanes))
    assert _errors(found) == ["PP041"]
    assert found[0].ops == ("r0/h2d/ONLOAD_B Onload s0 mb0 #0",)
    assert found[0].message == ("r0/h2d/ONLOAD_B Onload s0 mb0 #0 loads layer 0 of stage 0 mb 0 back, but rank 0 "
                                "never offloads it (no OFFLOAD of that layer)")


def test_an_ep_member_short_of_two_all_to_alls_names_the_first_left_alone() -> None:
    # pp=1, ep=2, one layer: each member issues dispatch F, combine F, combine B, dispatch B. Rank 1
    # loses its last two: rank 0's 3rd (combine B) is the first with no partner.
    s = _moe(ep=2, layers_per_chunk=1)
    lanes = _lanes(s)
    del lanes[(1, "comm")][2:]
    assert _messages(run_checks(s.with_lanes(lanes)), "PP042") == [
        "EP group [0, 1]: rank 1 issues 2 all-to-alls and rank 0 4; rank 0's combine B s0 mb0 layer 0 "
        "(r0/comm/A2A_COMBINE_B EP-C s0 mb0 #0) has no partner and would wait forever"]


# ----------------------------------------------------------------------------------------------
# The runner: errors before warnings; an empty selection runs no rule


def test_errors_come_before_warnings() -> None:
    # 1F1B pp=2 m=1, stage 1's F costs 3 (PP022 warns: the textbook bubble assumes one F cost), and
    # a memory limit of 0.5 activation units: each rank holds 1 unit once its F starts (PP009 x2).
    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 1,
                                            "costs": {"stages": {1: {"F": 3}}}}))
    found = run_checks(s, memory_limit=0.5)
    assert [(v.code, v.severity) for v in found] == [("PP009", "error"), ("PP009", "error"), ("PP022", "warning")]


def test_an_empty_selection_runs_no_rule() -> None:
    # 1F1B pp=2 m=1 without its SENDs: PP008 (four times) and nothing else is wrong.
    s = _one_f_one_b(2, 1)
    bad = s.with_lanes({k: v for k, v in _lanes(s).items() if k[1] != "send"})
    assert run_checks(bad, select=set()) == []
    assert [v.code for v in run_checks(bad, select={"PP008"})] == ["PP008"] * 4


def test_a_negative_direction_is_out_of_range_and_leaves_its_slot_empty() -> None:
    # 1F1B pp=2 m=1 with F s1 mb0 labelled direction -1: outside directions 0..0 (PP004), so the
    # slot (direction 0, stage 1, mb 0) has no F (PP003). Read as an index, -1 would be the last
    # direction, 0 here: the F would fill that slot and the plan would pass.
    found = run_checks(_relabelled(_one_f_one_b(2, 1), "r1/compute/F s1 mb0", direction=-1))
    assert [(v.code, v.message) for v in found] == [
        ("PP003", "missing F for stage 1 mb 0"),
        ("PP004", "r1/compute/F s1 mb0 d-1: stage 1, mb 0, direction -1 outside stages 0..1, micro-batches 0..0, "
                  "directions 0..0")]


def test_planning_a_torch_csv_checks_p2p_under_nccl_like_check() -> None:
    # `pptl plan --from FILE` has no --p2p flag: it checks under nccl, `pptl check`'s default. Rank
    # 1 of this fixture posts RECV_F of mb 1 first while rank 0 sends mb 0 first: PP030 under nccl
    # (it passes under non-blocking P2P, where a receive matches its send by identity).
    from pptl.planning import plan_from_file

    path = FIXTURES / "invalid" / "p2p_nccl_reordered.csv"
    assert [v.code for v in plan_from_file(path).violations] == ["PP030"]
    assert [v.code for v in _check_csv(path.read_text(), "nonblocking")] == []
