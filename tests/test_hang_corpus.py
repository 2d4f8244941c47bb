"""bench/hang_corpus.py's kinds are well-formed without a GPU: each rank's calls hold exactly the fault the
kind names (counted by hand from the plans: GPipe and 1F1B of pp 2 send one activation and one gradient per
micro-batch each way; interleaved 1F1B with vpp 2 sends three each way per micro-batch)."""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from hang_corpus import KINDS, PLANS  # noqa: E402


@pytest.mark.parametrize("kind, r0, r1", [
    ("mb_count", {("send", 1): 4, ("recv", 1): 4, ("all_reduce", -1): 1},
     {("recv", 0): 3, ("send", 0): 3, ("all_reduce", -1): 1}),
    ("schedule_vpp", {("send", 1): 12, ("recv", 1): 12, ("all_reduce", -1): 1},
     {("recv", 0): 4, ("send", 0): 4, ("all_reduce", -1): 1}),
    ("schedule_family", {("send", 1): 4, ("recv", 1): 4, ("all_reduce", -1): 1},
     {("recv", 0): 4, ("send", 0): 4, ("all_reduce", -1): 1}),
    ("rank_exits", {("send", 1): 4, ("recv", 1): 4, ("all_reduce", -1): 1},
     {("recv", 0): 2, ("raise", -1): 1, ("all_reduce", -1): 1}),  # the all_reduce is never reached
    ("rank_stalls", {("send", 1): 4, ("recv", 1): 4, ("all_reduce", -1): 1},
     {("recv", 0): 2, ("stall", -1): 1, ("all_reduce", -1): 1}),
    ("collective_one_rank", {("send", 1): 2, ("recv", 1): 2, ("all_reduce", -1): 2},
     {("recv", 0): 2, ("send", 0): 2, ("all_reduce", -1): 1}),
])
def test_transfer_counts(kind: str, r0: dict, r1: dict) -> None:
    for rank, want in ((0, r0), (1, r1)):
        got: Counter[tuple[str, int]] = Counter()
        for c in KINDS[kind](rank):
            if c.what != "compute":
                got[(c.what, c.peer)] += 1
        assert dict(got) == want, (kind, rank)


def test_the_faults_are_where_the_kinds_say() -> None:
    # a stall or raise ends rank 1's list before its third receive, whatever came after in the plan
    for kind in ("rank_exits", "rank_stalls"):
        calls = KINDS[kind](1)
        stop = [k for k, c in enumerate(calls) if c.what in ("raise", "stall")]
        assert stop == [len(calls) - 2] and calls[stop[0]].label == "r1/recv/RECV_F s1 mb2 <-r0"
    assert {c.hidden_div for c in KINDS["p2p_size"](1) if c.what in ("send", "recv")} == {2}
    assert {c.hidden_div for c in KINDS["p2p_size"](0) if c.what in ("send", "recv")} == {1}
    assert [c.what for c in KINDS["collective_kind"](1)][-2:] == ["broadcast", "all_reduce"]
    assert [c.numel_extra for c in KINDS["collective_size"](0) if c.what == "all_reduce"] == [1024]
    assert [c.group for c in KINDS["collective_order"](1)] == ["ep_dispatch", "ep_combine", "ep_combine",
                                                               "ep_dispatch"]
    # p2p_order: rank 0 receives B mb0 before it sends F mb1; rank 1 keeps the plan's order
    labels = [c.label for c in KINDS["p2p_order"](0)]
    assert labels.index("r0/recv/RECV_B s0 mb0 <-r1") < labels.index("r0/send/SEND_F s0 mb1 ->r1")


def test_every_kind_with_a_plan_writes_rank_0s_plan() -> None:
    for kind, make in PLANS.items():
        s = make()
        sends = sum(op.kind == "SEND" and op.rank == 0 for op in s.ops)
        assert sends == sum(c.what == "send" for c in KINDS[kind](0)), kind
