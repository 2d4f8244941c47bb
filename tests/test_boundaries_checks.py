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
