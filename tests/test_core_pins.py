"""Hand-worked pins on the pure core at its boundaries (pp 1, m = pp, vpp > 2, the last rank,
w_activation, message latency, split remainders): each expected value is worked out by hand in
the comment beside it, so a planted off-by-one, flipped comparison or dropped branch shows."""
from __future__ import annotations

import pytest

from pptl.config import Config, Costs
from pptl.errors import InvalidScheduleError
from pptl.schedules import build_schedule, get_family
from pptl.simulate import simulate
from pptl.tune.model import LayerCost, ModelDesc
from pptl.tune.split import balanced_split, even_split, rank_balanced_split, stage_costs


def _order(s, rank: int) -> list[str]:
    out = []
    for o in s.ops:
        if o.rank == rank and o.lane == "compute":
            t = f"{o.kind}{o.mb}"
            if s.config.vpp > 1 or o.chunk:
                t += f"c{o.chunk}"
            out.append(t)
    return out


def _plan(family: str, pp: int, m: int, **kw):
    s = build_schedule(Config(schedule=family, pp=pp, microbatches=m, **kw))
    return s, simulate(s)


def _peaks(sim) -> list[float]:
    return [r.peak_activation for r in sim.ranks]


# ---- families at their boundaries ---------------------------------------------------------------

def test_gpipe_one_rank_holds_every_microbatch() -> None:
    # pp 1: all F then all B; F=1, B=2: 3 + 6 = 9; GPipe holds all m = 3 activations.
    s, sim = _plan("gpipe", 1, 3)
    assert _order(s, 0) == ["F0", "F1", "F2", "B0", "B1", "B2"]
    assert sim.makespan == 9.0 and _peaks(sim) == [3.0]


def test_1f1b_one_rank_alternates_and_holds_one() -> None:
    # pp 1: no warmup (pp - 1 - r = 0), F B F B; peak 1 activation.
    s, sim = _plan("1f1b", 1, 2)
    assert _order(s, 0) == ["F0", "B0", "F1", "B1"]
    assert sim.makespan == 6.0 and _peaks(sim) == [1.0]


def test_1f1b_warmup_per_rank_and_makespan() -> None:
    # Rank r warms up with pp-1-r forwards; (m + pp - 1)(F + B) = 9 * 3 = 27; rank r holds pp - r.
    s, sim = _plan("1f1b", 4, 6)
    assert _order(s, 0) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5".split()
    assert _order(s, 2) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5".split()
    assert _order(s, 3) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5".split()
    assert sim.makespan == 27.0
    assert _peaks(sim) == [4.0, 3.0, 2.0, 1.0]
    assert [r.busy for r in sim.ranks] == [18.0] * 4


def test_1f1b_message_latency_on_the_critical_path() -> None:
    # pp 2, m 2, latency 0.5 per message. r0 F0 0-1, r1 F0 1.5-2.5, B0 2.5-4.5; r0 F1 1-2;
    # r0 B0 waits 4.5+0.5 -> 5-7; r1 F1 4.5-5.5, B1 5.5-7.5; r0 B1 8-10.
    s, sim = _plan("1f1b", 2, 2, costs=Costs(comm_latency=0.5))
    assert sim.makespan == 10.0
    end = {(o.rank, o.kind, o.mb): sim.end[i] for i, o in enumerate(s.ops) if o.lane == "compute"}
    start = {(o.rank, o.kind, o.mb): sim.start[i] for i, o in enumerate(s.ops) if o.lane == "compute"}
    assert start[(1, "F", 0)] == 1.5 and start[(0, "B", 0)] == 5.0 and start[(1, "F", 1)] == 4.5
    assert end[(0, "B", 1)] == 10.0
    # bandwidth: 4 bytes at 8 bytes/unit is 0.5 more per message (latency 0 + 4/8)
    _, sim2 = _plan("1f1b", 2, 2, costs=Costs(comm_bandwidth=8.0, comm_bytes=4.0))
    assert sim2.makespan == 10.0


def test_interleaved_vpp3_megatron_order_and_warmup() -> None:
    # Megatron: virtual mb k -> chunk (k // pp) % v, mb (k // (pp v)) pp + k % pp; backward chunk
    # v-1-(k // pp) % v. Warmup (pp-r-1)*2 + (v-1)*pp: rank 0 six, rank 1 four; peak = warmup + 1.
    s, sim = _plan("interleaved-1f1b", 2, 4, vpp=3)
    assert _order(s, 0) == ("F0c0 F1c0 F0c1 F1c1 F0c2 F1c2 F2c0 B0c2 F3c0 B1c2 F2c1 B0c1 F3c1 B1c1 F2c2 B0c0 "
                            "F3c2 B1c0 B2c2 B3c2 B2c1 B3c1 B2c0 B3c0").split()
    assert _order(s, 1) == ("F0c0 F1c0 F0c1 F1c1 F0c2 B0c2 F1c2 B1c2 F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 "
                            "F2c2 B2c2 F3c2 B3c2 B2c1 B3c1 B2c0 B3c0").split()
    assert _peaks(sim) == [7.0, 5.0]


def test_looped_bfs_reverses_microbatches_in_backward() -> None:
    # torch LoopedBFS: every mb of a chunk, chunk by chunk; backward last chunk first, mbs reversed.
    # Timeline by hand (F=1, B=2, stage s on rank s % 2): the last B (stage 0, mb 0) ends at 21.
    s, sim = _plan("looped-bfs", 2, 3, vpp=2)
    want = "F0c0 F1c0 F2c0 F0c1 F1c1 F2c1 B2c1 B1c1 B0c1 B2c0 B1c0 B0c0".split()
    assert _order(s, 0) == want and _order(s, 1) == want
    assert sim.makespan == 21.0 and _peaks(sim) == [6.0, 6.0]


def test_zb_h1_last_rank_order_and_w_activation_peak() -> None:
    # pp 3, m = pp: last rank runs F I per mb, then every W; F = I = W = 1 -> makespan 11 (worked slot
    # by slot: the last W's on every rank end at 11).
    s, sim = _plan("zb-h1", 3, 3, split_backward=True)
    assert _order(s, 2) == "F0 I0 F1 I1 F2 I2 W0 W1 W2".split()
    assert _order(s, 1) == "F0 F1 I0 F2 I1 W0 I2 W1 W2".split()
    assert _order(s, 0) == "F0 F1 F2 I0 W0 I1 W1 I2 W2".split()
    assert sim.makespan == 11.0 and _peaks(sim) == [3.0, 2.0, 1.0]
    # w_activation 0.5: I frees half. Rank 1: F0 F1 = 2, I0 -> 1.5, F2 -> 2.5. Rank 2: F0 1, I0 .5,
    # F1 1.5, I1 1, F2 2 (peak), I2 1.5, then the W's. Rank 0: 3 before any I.
    _, sim = _plan("zb-h1", 3, 3, split_backward=True, w_activation=0.5)
    assert _peaks(sim) == [3.0, 2.5, 2.0]


def test_interleaved_zb_bubble_below_pp_is_not_given() -> None:
    # m < pp: the fill is not covered: no closed form, and the assumptions say why.
    fam = get_family("interleaved-zb")
    small = Config(schedule="interleaved-zb", pp=4, microbatches=3, vpp=2, split_backward=True)
    assert fam.bubble(small) is None
    assert any("microbatches=3 < pp=4" in a for a in fam.assumptions(small))
    # m = pp: (p-1)(F+I-W) = 3 * (1 + 1 - 1) = 3
    ok = Config(schedule="interleaved-zb", pp=4, microbatches=4, vpp=2, split_backward=True)
    assert fam.bubble(ok) == 3.0
    assert not any("<" in a for a in fam.assumptions(ok))


def test_looped_bfs_assumption_below_pp_only() -> None:
    fam = get_family("looped-bfs")
    assert any("microbatches=1 < pp=2" in a for a in fam.assumptions(Config(schedule="looped-bfs", pp=2,
                                                                            microbatches=1, vpp=2)))
    assert fam.assumptions(Config(schedule="looped-bfs", pp=2, microbatches=2, vpp=2)) == []


# ---- simulate: costs ------------------------------------------------------------------------------

def test_missing_cost_names_the_key() -> None:
    s = build_schedule(Config(schedule="1f1b", pp=2, microbatches=2))
    with pytest.raises(InvalidScheduleError, match=r"no cost for 'B'"):
        simulate(s, Costs(base={"F": 1.0}))


def test_rank_scale_slows_only_its_rank() -> None:
    # pp 1 gpipe m 2: busy 2*(1+2) = 6; rank 0 at 1.5x: 9.
    s = build_schedule(Config(schedule="gpipe", pp=1, microbatches=2))
    assert simulate(s, Costs(rank_scale={0: 1.5})).makespan == 9.0
    assert simulate(s, Costs(rank_scale={1: 1.5})).makespan == 6.0


# ---- tune: splits -------------------------------------------------------------------------------

def test_even_split_remainder_goes_to_the_middle() -> None:
    assert even_split(10, 4) == (2, 3, 3, 2)   # extra 2: stages 1, 2 (0.5 from the centre 1.5)
    assert even_split(7, 5) == (1, 2, 2, 1, 1)  # centre 2, then 1 before 3
    assert even_split(3, 4) == (1, 1, 1, 0)     # 1, 2, then stage 0 before 3 on the tie
    assert even_split(8, 4) == (2, 2, 2, 2)


def test_balanced_split_worked_example() -> None:
    # layer F+B = 3, embedding 3, head 6, 8 layers on 4 stages: the least bottleneck is 9 with room
    # for (2, 3, 3, 1) = 9 layers; one too many comes off the heaviest, the last on ties: stage 2.
    model = ModelDesc(layers=8, layer=LayerCost(F=1.0, B=2.0), embedding=LayerCost(F=1.0, B=2.0),
                      head=LayerCost(F=2.0, B=4.0))
    assert balanced_split(model, 4) == (2, 3, 2, 1)
    costs = stage_costs(model, (2, 3, 2, 1))
    assert costs[0]["F"] == 3.0 and costs[3]["F"] == 3.0 and costs[1]["B"] == 6.0 and costs[3]["B"] == 6.0


def test_rank_balanced_split_free_layers_stay() -> None:
    # Free layers (F + B = 0) move nothing, even with an embedding that makes rank 0 the heavier.
    model = ModelDesc(layers=4, layer=LayerCost(F=0.0, B=0.0), embedding=LayerCost(F=1.0, B=2.0))
    assert rank_balanced_split(model, (3, 1), (0, 1)) == (3, 1)
    # Layers of 3 and an embedding of 3 on rank 0: (3, 1) is 12 vs 3; move one: 9 vs 6 (gap 3 <= c).
    model = ModelDesc(layers=4, layer=LayerCost(F=1.0, B=2.0), embedding=LayerCost(F=1.0, B=2.0))
    assert rank_balanced_split(model, (3, 1), (0, 1)) == (2, 2)


def test_v_placement_last_stage_folds_back() -> None:
    # Rank r holds stages r and 2pp-1-r: with pp 2, stage 2 (the first past the fold) is rank 1's chunk 1.
    from pptl.schedules._common import v_rank

    assert [v_rank(s, 2) for s in range(4)] == [(0, 0), (1, 0), (1, 1), (0, 1)]
    s, _ = _plan("zbv", 2, 3)
    assert {(o.rank, o.stage, o.chunk) for o in s.ops if o.lane == "compute"} == {
        (0, 0, 0), (0, 3, 1), (1, 1, 0), (1, 2, 1)}


def test_memory_events_split_backward_free_exactly_what_f_allocated() -> None:
    # pp 1, m 1, w_activation 0.25: +1 at F's start (t 0), I frees 0.75 at its end (t 2), W the held
    # 0.25 at its end (t 3); the events sum to zero.
    from pptl.simulate import memory_events_of

    s, sim = _plan("zb-h1", 1, 1, split_backward=True)
    ev = memory_events_of(s, sim.start, sim.end, 1.0, 0.25)
    assert ev.delta.tolist() == [1.0, -0.75, -0.25] and ev.time.tolist() == [0.0, 2.0, 3.0]
