"""The data facts (pptl/deps.py) on hand-made op lists, including the broken ones the checker reads:
a missing op, a SEND without its RECV, a stage beyond the last, a stage split across ranks."""
from __future__ import annotations

from pptl.deps import training_deps
from pptl.ir import Op


def F(rank: int, s: int, mb: int = 0) -> Op:
    return Op(kind="F", rank=rank, lane="compute", stage=s, mb=mb)


def B(rank: int, s: int, mb: int = 0) -> Op:
    return Op(kind="B", rank=rank, lane="compute", stage=s, mb=mb)


def SEND(rank: int, flow: str, s: int, peer: int, mb: int = 0) -> Op:
    return Op(kind="SEND", rank=rank, lane="send", stage=s, mb=mb, peer=peer, flow=flow)


def RECV(rank: int, flow: str, s: int, peer: int, mb: int = 0) -> Op:
    return Op(kind="RECV", rank=rank, lane="recv", stage=s, mb=mb, peer=peer, flow=flow)


def _edges(ops: list[Op], num_stages: int) -> set[tuple[str, str]]:
    return {(ops[u].id, ops[v].id) for u, v in training_deps(ops, num_stages)}


def _two_ranks() -> list[Op]:
    """One micro-batch over two ranks with its four messages."""
    return [F(0, 0), SEND(0, "F", 0, 1), RECV(1, "F", 1, 0), F(1, 1), B(1, 1), SEND(1, "B", 1, 0),
            RECV(0, "B", 0, 1), B(0, 0)]


def test_messages_sit_between_producer_and_consumer() -> None:
    ops = _two_ranks()
    i = {op.id: op.id for op in ops}
    e = _edges(ops, 2)
    f0, sf, rf, f1, b1, sb, rb, b0 = (op.id for op in ops)
    assert e == {(f0, sf), (sf, rf), (rf, f1), (f1, b1), (b1, sb), (sb, rb), (rb, b0), (f0, b0)}, i


def test_compute_only_crossings_are_direct() -> None:
    ops = [F(0, 0), F(1, 1), B(1, 1), B(0, 0)]
    f0, f1, b1, b0 = (op.id for op in ops)
    assert _edges(ops, 2) == {(f0, f1), (f1, b1), (b1, b0), (f0, b0)}


def test_a_missing_recv_leaves_no_direct_edge() -> None:
    """Without RECV_F the data never reaches F s1: F s1 does not wait on F s0 directly (as if the
    message were implicit); the SEND still follows its producer."""
    ops = [op for op in _two_ranks() if not (op.kind == "RECV" and op.flow == "F")]
    e = _edges(ops, 2)
    assert ("r0/compute/F s0 mb0", "r1/compute/F s1 mb0") not in e
    assert ("r0/compute/F s0 mb0", "r0/send/SEND_F s0 mb0 ->r1") in e


def test_messages_without_their_consumer_still_hang_off_the_producer() -> None:
    """F s1 and B s0 dropped: each SEND still follows the op that makes its data, each RECV its SEND."""
    ops = [op for op in _two_ranks() if op.id not in ("r1/compute/F s1 mb0", "r0/compute/B s0 mb0")]
    e = _edges(ops, 2)
    assert ("r0/compute/F s0 mb0", "r0/send/SEND_F s0 mb0 ->r1") in e
    assert ("r0/send/SEND_F s0 mb0 ->r1", "r1/recv/RECV_F s1 mb0 <-r0") in e
    assert ("r1/compute/B s1 mb0", "r1/send/SEND_B s1 mb0 ->r0") in e  # the gradient, not the forward
    assert ("r1/send/SEND_B s1 mb0 ->r0", "r0/recv/RECV_B s0 mb0 <-r1") in e


def test_the_last_stage_starts_from_the_loss_even_beside_an_out_of_range_stage() -> None:
    """With 2 stages, B s1 needs no gradient, even from a B s2 that a broken schedule lists (PP004)."""
    ops = [F(0, 0), F(0, 1), F(0, 2), B(0, 2), B(0, 1), B(0, 0)]
    e = _edges(ops, 2)
    assert ("r0/compute/B s2 mb0", "r0/compute/B s1 mb0") not in e
    assert ("r0/compute/B s1 mb0", "r0/compute/B s0 mb0") in e


def test_a_missing_forward_does_not_hide_the_gradient_edge() -> None:
    """B s0 without its F still needs B s1's gradient."""
    ops = [F(0, 1), B(0, 1), B(0, 0)]
    e = _edges(ops, 2)
    assert ("r0/compute/B s1 mb0", "r0/compute/B s0 mb0") in e


def test_a_stage_split_over_two_ranks_keeps_f_before_its_b() -> None:
    """F s0 on rank 0, B s0 on rank 1 (PP005): B s0 needs F s0's activations, not the RECV of stage 1."""
    ops = [F(0, 0), SEND(0, "F", 0, 1), RECV(1, "F", 1, 0), F(1, 1), B(1, 1), B(1, 0)]
    e = _edges(ops, 2)
    assert ("r0/compute/F s0 mb0", "r1/compute/B s0 mb0") in e
    assert ("r1/recv/RECV_F s1 mb0 <-r0", "r1/compute/B s0 mb0") not in e


def test_an_out_of_range_forward_half_does_not_hide_the_backward_halfs_needs() -> None:
    """FB whose F half is at stage 3 of 2 (PP004): its B half (stage 1) still needs F s1."""
    fb = Op(kind="FB", rank=0, lane="compute", stage=3, mb=1, pair=(1, 0, 0))
    ops = [F(0, 0), F(0, 1), fb, B(0, 0)]
    assert ("r0/compute/F s1 mb0", fb.id) in _edges(ops, 2)


def test_a_weight_gradient_on_another_rank_still_follows_its_input_gradient() -> None:
    """W s1 on rank 0, I s1 on rank 1 (PP005): W needs I directly, not the RECV of stage 0's gradient."""
    i1 = Op(kind="I", rank=1, lane="compute", stage=1, mb=0)
    w1 = Op(kind="W", rank=0, lane="compute", stage=1, mb=0)
    ops = [F(0, 0), SEND(0, "F", 0, 1), RECV(1, "F", 1, 0), F(1, 1), i1, SEND(1, "B", 1, 0), RECV(0, "B", 0, 1),
           B(0, 0), w1]
    e = _edges(ops, 2)
    assert (i1.id, w1.id) in e
    assert ("r0/recv/RECV_B s0 mb0 <-r1", w1.id) not in e


def test_an_overlapped_op_needs_the_forward_below_and_its_backward_halfs_inputs() -> None:
    """FB = F s1 mb1 beside B s1 mb0: it needs F s0 mb1 (its F half) and F s1 mb0 (its B half)."""
    fb = Op(kind="FB", rank=0, lane="compute", stage=1, mb=1, pair=(1, 0, 0))
    ops = [F(0, 0, 0), F(0, 1, 0), F(0, 0, 1), fb, B(0, 1, 1), B(0, 0, 0), B(0, 0, 1)]
    e = _edges(ops, 2)
    assert ("r0/compute/F s0 mb1", fb.id) in e
    assert ("r0/compute/F s1 mb0", fb.id) in e


def test_an_overlapped_op_without_its_pair_adds_no_edge() -> None:
    """A malformed FB (no pair, PP001) must not stop the facts of the other ops from being read."""
    ops = [F(0, 0), Op(kind="FB", rank=0, lane="compute", stage=0, mb=0), B(0, 0)]
    assert _edges(ops, 1) == {("r0/compute/F s0 mb0", "r0/compute/B s0 mb0")}
