"""Boundaries of the schedule families' builders and formulas, against values worked out by hand.

Each test pins a place where a one-character slip in ``pptl/schedules`` (DualPipe, ZB-V, ZB-H1,
interleaved ZB, looped BFS, the assembler, the op-count bound) changes what a user reads and no earlier
test looked (the rows of /work/wt/_mutants/wave3_schedules.py name the slips): a micro-batch count
exactly at pp, a single rank, a tie between two suggested sizes, an op count exactly at the bound, the
order of two receives one op needs, ranks of two digits.
Costs are F = I = W = 1 and B = I + W = 2 with no communication time unless a test says otherwise.
"""
from __future__ import annotations

from typing import Any

import pytest

import pptl.schedules
from pptl.checks import run_checks
from pptl.config import Config, Costs
from pptl.errors import InputError
from pptl.ir import Op, Schedule
from pptl.planning import plan
from pptl.schedules import build_schedule, get_family
from pptl.schedules._common import span_idle
from pptl.schedules._size import estimate_ops
from pptl.simulate import simulate


def _cfg(name: str, pp: int, m: int, vpp: int = 1, **costs: float) -> Config:
    base = {"F": 1.0, "I": 1.0, "W": 1.0}
    base.update(costs)
    base.setdefault("B", base["I"] + base["W"])
    return Config(schedule=name, pp=pp, microbatches=m, vpp=vpp, costs=Costs(base=base))


def _idle(s: Schedule) -> list[float]:
    return [r.idle for r in simulate(s).ranks]


def _messages(vs: list[Any], code: str) -> list[str]:
    return [v.message for v in vs if v.code == code]


def _recv(op: Op) -> str:
    """A RECV as flow (F activation, B gradient), direction, stage, micro-batch and sender."""
    return f"{op.flow}{op.direction} s{op.stage} mb{op.mb} <{op.peer}"


# --------------------------------------------------------------------------------------------
# DualPipe and DualPipeV


def test_dualpipe_two_ranks_rank_zero_by_hand() -> None:
    """DualPipe pp=2, m=4: rank 0 holds stage 0 of direction 0 (its chunk 0) and stage 1 of direction
    1 (chunk 1: direction 1 enters at rank 1). h=0, H=1, one main step, which on the middle rank runs
    F0 then a full B1: F0 F1 | F0 B1 F1&B0 | B1 I0 | W (step 6 with h even: B0's second half an I,
    whose W runs last)."""
    s = build_schedule(_cfg("dualpipe", 2, 4))
    got = [f"{o.kind} d{o.direction} s{o.stage} mb{o.mb} c{o.chunk}" + (f" + B d{o.pair[2]} s{o.pair[0]} mb{o.pair[1]}"
                                                                         if o.pair else "")
           for o in s.lane_ops(0, "compute")]
    assert got == ["F d0 s0 mb0 c0", "F d1 s1 mb0 c1", "F d0 s0 mb1 c0", "B d1 s1 mb0 c1",
                   "FB d1 s1 mb1 c1 + B d0 s0 mb0", "B d1 s1 mb1 c1", "I d0 s0 mb1 c0", "W d0 s0 mb1 c0"]


def test_dualpipe_two_ranks_receive_an_fb_s_activation_before_its_gradient() -> None:
    """DualPipe pp=2, 4 micro-batches (2 a direction), H=1, h=0 on both ranks, one main step; rank 0's
    table is F0 F1 | F0 B1 (the middle rank's first main step, not overlapped) F1&B0 | B1 I0 | W. Phase 0
    is direction 0 at stage 0, phase 1 direction 1 at its stage 1 (its last). Rank 0 needs from rank 1:
    the activation of d1 mb0 at its 2nd op (F1), both the activation of d1 mb1 and the gradient of d0
    mb0 at its 5th (F1&B0: the activation first), the gradient of d0 mb1 at its 7th (I0). Rank 1 is
    the mirror image."""
    s = build_schedule(_cfg("dualpipe", 2, 4))
    assert [_recv(op) for op in s.lane_ops(0, "recv")] == ["F1 s1 mb0 <1", "F1 s1 mb1 <1", "B0 s0 mb0 <1",
                                                           "B0 s0 mb1 <1"]
    assert [_recv(op) for op in s.lane_ops(1, "recv")] == ["F0 s1 mb0 <0", "F0 s1 mb1 <0", "B1 s0 mb0 <0",
                                                           "B1 s0 mb1 <0"]


def _v_order(s: Schedule, rank: int) -> list[str]:
    """kind, stage, micro-batch and chunk; an FB adds its B half's stage and micro-batch."""
    return [f"{o.kind}{o.stage}.{o.mb}c{o.chunk}" + (f"+B{o.pair[0]}.{o.pair[1]}" if o.pair else "")
            for o in s.lane_ops(rank, "compute")]


def test_dualpipev_two_ranks_by_hand_with_vpp_two_given() -> None:
    """DualPipeV pp=2, m=4 = 2pp (its fewest), vpp=2 written out: rank r holds stage r (chunk 0, phase
    0) and stage 3-r (chunk 1, phase 1); h = r, H = 2, m-2N+r+1 = r+1 main steps.
    Rank 0 (h=0): 2 F0 | F0 F1 | I1 W F1 | F0&B1 F1&B0 | B1 F1&B0 | B1 I0 (h even: I from B0) | W I0 | W.
    Rank 1 (h=1, the last: its first main step F0, B1 is not overlapped): F0 F1 F0 F1 | F0 B1 F1&B0
    F0&B1 F1&B0 | B1 B0 I1 I0 (h odd: I from the second B1) | W W."""
    s = build_schedule(_cfg("dualpipev", 2, 4, vpp=2))
    assert s.num_stages == 4
    assert _v_order(s, 0) == ["F0.0c0", "F0.1c0", "F0.2c0", "F3.0c1", "I3.0c1", "W3.0c1", "F3.1c1",
                              "FB0.3c0+B3.1", "FB3.2c1+B0.0", "B3.2c1", "FB3.3c1+B0.1", "B3.3c1",
                              "I0.2c0", "W0.2c0", "I0.3c0", "W0.3c0"]
    assert _v_order(s, 1) == ["F1.0c0", "F2.0c1", "F1.1c0", "F2.1c1", "F1.2c0", "B2.0c1",
                              "FB2.2c1+B1.0", "FB1.3c0+B2.1", "FB2.3c1+B1.1", "B2.2c1", "B1.2c0",
                              "I2.3c1", "I1.3c0", "W2.3c1", "W1.3c0"]


@pytest.mark.parametrize("costs,idle,message", [
    # pp=8 (H=4), I=2 > F=1, W=1 (B=3, F&B=F+B=4), 24 micro-batches: the formula (H-1)(F&B+B-3W) =
    # 3*(4+3-3) = 12 over-estimates by min((H-1)(I-F), F) = min(3*1, 1) = 1, so every rank idles 11; the
    # warning gives 1, not the uncapped 3.
    ({"I": 2}, 11.0,
     "dualpipe: the textbook bubble (p/2-1)(F&B+B-3W) = 12 does not apply: I=2 > F=1: the formula over-estimates "
     "by min((H-1)(I-F), F) = 1 (exact only when I = F); simulated idle per rank 11"),
    # pp=8 (H-1 = 3), F=1, I=0.5, W=2 (B=2.5, F&B=3.5): the formula 3*(3.5+2.5-3*2) = 0; each rank
    # idles (H-1)((F-I)+max(0, W-I)) = 3*(0.5+1.5) = 6 more, and simulates 6.
    ({"I": 0.5, "W": 2}, 6.0,
     "dualpipe: the textbook bubble (p/2-1)(F&B+B-3W) = 0 does not apply: I=0.5 < F=1: each rank idles "
     "(H-1)((F-I)+max(0,W-I)) = 6 more than the formula; simulated idle per rank 6"),
    # pp=8, F=I=1, W=2 (B=3, F&B=4): the formula 3*(4+3-6) = 3; W longer than I by 1 costs each of
    # the H-1 = 3 hops 1, so every rank idles 3 + 3 = 6.
    ({"W": 2}, 6.0,
     "dualpipe: the textbook bubble (p/2-1)(F&B+B-3W) = 3 does not apply: W=2 > I=1: each rank idles "
     "(H-1)(W-I) = 3 more than the formula; simulated idle per rank 6"),
], ids=["i-above-f-capped-at-one-forward", "i-below-f-adds-the-longer-w", "w-above-i-counts-every-hop"])
def test_dualpipe_warning_says_how_far_the_textbook_bubble_is_off(costs: dict[str, float], idle: float,
                                                                  message: str) -> None:
    s = build_schedule(_cfg("dualpipe", 8, 24, **costs))
    assert _idle(s) == [idle] * 8
    assert _messages(run_checks(s), "PP022") == [message]


# --------------------------------------------------------------------------------------------
# ZB-H1, ZB-H2 and ZB-V


def test_zb_h1_twelve_ranks_at_its_fewest_micro_batches_by_hand() -> None:
    """ZB-H1 pp=12 at m = (pp-1)+1 = 12, its fewest: stage i warms up with p-1-i forwards, ramps i x
    (F I), runs m-(p-1) = 1 x (F I W), drains p-1-i x (I W) and ends with i x W (the paper's table).
    Rank 0: 11 F, then F11 I0 W0, then I_k W_k for k = 1..11. Rank 10: F0, F1 I0 .. F10 I9, F11 I10 W0,
    I11 W1, W2..W11. Rank 11: F_k I_k for k = 0..10, F11 I11 W0, W1..W11."""
    s = build_schedule(_cfg("zb-h1", 12, 12))

    def order(rank: int) -> list[str]:
        return [f"{o.kind}{o.mb}" for o in s.lane_ops(rank, "compute")]

    assert order(0) == [f"F{k}" for k in range(11)] + ["F11", "I0", "W0"] + [x for k in range(1, 12)
                                                                              for x in (f"I{k}", f"W{k}")]
    assert order(10) == (["F0"] + [x for k in range(1, 11) for x in (f"F{k}", f"I{k - 1}")] + ["F11", "I10", "W0"]
                         + ["I11", "W1"] + [f"W{k}" for k in range(2, 12)])
    assert order(11) == ([x for k in range(11) for x in (f"F{k}", f"I{k}")] + ["F11", "I11", "W0"]
                         + [f"W{k}" for k in range(1, 12)])


def test_zb_h1_on_one_rank_has_no_bubble_to_warn_about() -> None:
    """pp=1: no pipeline, so (p-1)(F+B-2W) = 0 and a W of 2 longer than F = I = 1 adds (p-1)(W-min) = 0;
    the one rank never idles and the checker has nothing to say."""
    s = build_schedule(_cfg("zb-h1", 1, 3, W=2))
    assert _idle(s) == [0.0]
    assert run_checks(s) == []


def test_zb_h2_with_a_shorter_w_claims_no_zero_bubble() -> None:
    """ZB-H2 pp=2, m=3, F = I = 1, W = 0.5. Rank 0: F0 F1 | F2 I0 W0 | I1 W1 I2 W2; rank 1: F0 I0 F1
    I1 | F2 I2 W0 | W1 W2. Rank 1 runs 1..8.5 without a gap and sends I_k at 3, 5, 7; rank 0 runs I0
    at 3, W0 to 4.5, then waits 0.5 for I1 (5..6), W1 to 6.5, waits 0.5 for I2: 1 idle in its span.
    Zero bubble needs F = I = W, so the formula is None, not 0."""
    cfg = _cfg("zb-h2", 2, 3, W=0.5)
    s = build_schedule(cfg)
    sim = simulate(s)
    assert span_idle(s, sim.start, sim.end) == {0: 1.0, 1: 0.0}
    assert get_family("zb-h2").bubble(cfg) is None


def test_zbv_last_of_eleven_ranks_by_hand_with_vpp_two_given() -> None:
    """ZB-V pp=11, m = 2p-1 = 21, vpp=2 written out. Rank 10 holds stage 10 (chunk 0) and stage
    2p-1-10 = 11 (chunk 1). Its table: warmup 1 2(p-r)-1 = 1 F0; warmup 2 r = 10 x F1 F0; warmup 3
    p-r = 1 x F1 I1 W1; steady F0 I0 W0 F1 I1 W1 until F0 has run all 21 (10 rounds); cooldown 1
    10 x I0 I1; cooldown 2 1 x I0 W0; tail the 10 W1 left, then the 10 W0 left."""
    s = build_schedule(_cfg("zbv", 11, 21, vpp=2))

    def op(kind: str, chunk: int, mb: int) -> str:
        return f"{kind}{(10, 11)[chunk]}.{mb}c{chunk}"

    expected = [op("F", 0, 0)]
    for k in range(10):
        expected += [op("F", 1, k), op("F", 0, k + 1)]
    expected += [op("F", 1, 10), op("I", 1, 0), op("W", 1, 0)]
    for k in range(10):
        expected += [op("F", 0, 11 + k), op("I", 0, k), op("W", 0, k), op("F", 1, 11 + k), op("I", 1, 1 + k),
                     op("W", 1, 1 + k)]
    for k in range(10):
        expected += [op("I", 0, 10 + k), op("I", 1, 11 + k)]
    expected += [op("I", 0, 20), op("W", 0, 10)]
    expected += [op("W", 1, 11 + k) for k in range(10)] + [op("W", 0, 11 + k) for k in range(10)]
    assert _v_order(s, 10) == expected
    assert s.num_stages == 22


def test_zbv_ignores_a_b_cost_it_never_runs() -> None:
    """ZB-V always splits B into I and W, so a B of 3 that is not I + W = 2 changes nothing: pp=2 with
    2p-1 = 3 micro-batches and F = I = W still has no idle time within a rank's span, and no warning."""
    s = build_schedule(_cfg("zbv", 2, 3, B=3))
    sim = simulate(s)
    assert list(span_idle(s, sim.start, sim.end).values()) == [0.0, 0.0]
    assert run_checks(s) == []


def test_zbv_ignores_per_stage_costs_of_a_b_it_never_runs() -> None:
    """A per-stage B (stage 1: B=5) is a cost ZB-V never looks up: F, I, W are one value each, so
    the zero-bubble claim holds (pp=2, m=3) and the checker names no per-stage cost."""
    cfg = Config(schedule="zbv", pp=2, microbatches=3,
                 costs=Costs(base={"F": 1.0, "I": 1.0, "W": 1.0, "B": 2.0}, stages={1: {"B": 5.0}}))
    s = build_schedule(cfg)
    sim = simulate(s)
    assert list(span_idle(s, sim.start, sim.end).values()) == [0.0, 0.0]
    assert run_checks(s) == []


def test_a_bandwidth_without_a_message_size_costs_no_time_and_no_warning() -> None:
    """comm_bandwidth 100 with comm_bytes 0 (and no latency): a message carries no bytes, so it takes
    0, ZB-V pp=2 m=3 keeps its zero bubble, and the checker does not say communication takes time."""
    cfg = Config(schedule="zbv", pp=2, microbatches=3,
                 costs=Costs(base={"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}, comm_bandwidth=100.0))
    s = build_schedule(cfg)
    sim = simulate(s)
    assert list(span_idle(s, sim.start, sim.end).values()) == [0.0, 0.0]
    assert run_checks(s) == []


# --------------------------------------------------------------------------------------------
# Interleaved zero bubble and looped BFS (vpp = 2)


def test_interleaved_zb_formula_covers_m_equal_to_pp() -> None:
    """pp=4, m=4: the formula holds from m >= pp on, so at m = pp it is (p-1)(F+I-W) = 3, every rank
    idles 3, and the checker gives no 'fill is not covered' warning."""
    cfg = _cfg("interleaved-zb", 4, 4, vpp=2)
    s = build_schedule(cfg)
    assert get_family("interleaved-zb").bubble(cfg) == 3.0
    assert _idle(s) == [3.0] * 4
    assert run_checks(s) == []


def test_interleaved_zb_formula_is_never_negative() -> None:
    """pp=2, W=2.5 > F+I=2: (p-1)(F+I-W) = -0.5, so the textbook bubble reads 0, not a negative time."""
    assert get_family("interleaved-zb").bubble(_cfg("interleaved-zb", 2, 4, vpp=2, W=2.5)) == 0.0


def test_interleaved_zb_memory_with_fewer_micro_batches_than_ranks_is_every_forward() -> None:
    """pp=4, m=2, V=2: R = m // max(1, m // p) = 2, so (V-1)R + p = 6, but only mV = 4 chunk forwards
    exist: the formula is min(6, 4) = 4, and rank 0 holds all 4 at its peak."""
    cfg = _cfg("interleaved-zb", 4, 2, vpp=2)
    assert get_family("interleaved-zb").memory(cfg) == 4.0
    assert simulate(build_schedule(cfg)).ranks[0].peak_activation == 4.0


def test_interleaved_zb_refusal_names_the_smaller_of_two_sizes_as_near_first() -> None:
    """pp=2, m=5: 2 rounds (5 // 2), and 5 is no multiple of 2. 4 (2 rounds of 2) and 6 (3 rounds of 2)
    both fit and are both 1 away: the smaller is named first."""
    with pytest.raises(InputError) as e:
        build_schedule(_cfg("interleaved-zb", 2, 5, vpp=2))
    assert str(e.value).endswith("sizes that fit: 4 or 6 (or any multiple of pp)")


def test_looped_bfs_at_m_equal_to_pp_has_the_gpipe_bubble_and_no_warning() -> None:
    """pp=4, m=4, V=2: chunk 1's first forward on rank 0 comes after its 4 chunk-0 forwards, just when
    the first micro-batch returns from rank 3, so nothing waits: (p-1)(F+B) = 3*3 = 9 per rank, no
    warning that the round trip is not covered."""
    cfg = _cfg("looped-bfs", 4, 4, vpp=2)
    s = build_schedule(cfg)
    assert get_family("looped-bfs").bubble(cfg) == 9.0
    assert _idle(s) == [9.0] * 4
    assert run_checks(s) == []


def test_looped_bfs_names_a_per_stage_backward_cost() -> None:
    """Looped BFS pp=2, m=4, V=2 with B=4 on stage 3 (chunk 1 of rank 1), F=1, B=2 elsewhere. Forwards
    end at 8 (rank 0) and 9 (rank 1, s3 mb3); rank 1's four B of stage 3 run 9..25, rank 0's B of
    stage 2 follow them (13..15, 17..19, 21..23, 25..27), rank 1's B of stage 1 run 25..33 and rank 0's
    of stage 0 27..35. Busy 24 and 32 of 35: idle 11 and 3, not the (p-1)(F+B) = 3 the formula gives
    for one B, and the warning says why."""
    cfg = Config(schedule="looped-bfs", pp=2, microbatches=4, vpp=2,
                 costs=Costs(base={"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}, stages={3: {"B": 4.0}}))
    s = build_schedule(cfg)
    assert _idle(s) == [11.0, 3.0]
    assert _messages(run_checks(s), "PP022") == [
        "looped-bfs: the textbook bubble (p-1)(F+B) = 3 does not apply: per-stage costs for B (the formula "
        "assumes one value per kind); simulated idle per rank 3..11"]


# --------------------------------------------------------------------------------------------
# The op-count bound (pptl.schedules._size and build_schedule) and the plan's report


def test_zb_h1_two_ranks_two_micro_batches_plan_twenty_ops() -> None:
    """ZB-H1 pp=2 m=2: F, I, W of 2 stages x 2 micro-batches = 12 compute ops, and per micro-batch one
    activation (stage 0 -> 1) and one gradient (1 -> 0), each a SEND and a RECV: 8 more, 20 in all. The
    estimate is that count even when the bound is the 4 stage x micro-batch slots themselves."""
    cfg = _cfg("zb-h1", 2, 2)
    assert len(build_schedule(cfg).ops) == 20
    assert estimate_ops(cfg, get_family("zb-h1"), limit=4) == 20


def test_zb_h1_op_count_is_extrapolated_from_the_two_probes() -> None:
    """ZB-H1 pp=2 m=10: 3 x 2 x 10 = 60 compute ops + 4 messages a micro-batch = 100; the probes
    (m = 2: 20 ops and m = 4: 40) give 10 ops a micro-batch past m = 4: 40 + 10 x 6 = 100."""
    cfg = _cfg("zb-h1", 2, 10)
    assert estimate_ops(cfg, get_family("zb-h1"), limit=10_000) == 100 == len(build_schedule(cfg).ops)


def test_a_plan_of_exactly_the_op_bound_is_planned(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound is inclusive: with MAX_PLAN_OPS = 20 the 20-op ZB-H1 pp=2 m=2 plan is built; with 19
    (or 4, its slots) it is refused, naming its 20 ops."""
    cfg = _cfg("zb-h1", 2, 2)
    monkeypatch.setattr(pptl.schedules, "MAX_PLAN_OPS", 20)
    assert len(build_schedule(cfg).ops) == 20
    for bound in (19, 4):
        monkeypatch.setattr(pptl.schedules, "MAX_PLAN_OPS", bound)
        with pytest.raises(InputError, match=rf"would plan about 20 ops, more than the {bound} pptl plans"):
            build_schedule(cfg)


def test_the_op_bound_of_a_deep_dualpipe_counts_at_least_its_messages() -> None:
    """DualPipe pp=46, m=92 (2pp, its fewest): one probe would be 4232 stage x micro-batch slots, past
    the 4000 probed, so the count comes from the rate of pp 4 and 8 at their own fewest (2pp). It
    holds at least the messages, 2 directions x 45 links x 46 micro-batches x (an activation and a
    gradient) x (a SEND and a RECV) = 16560, plus the 92 forwards (alone or in an F&B) of each of 46
    ranks, 4232: 20792; and at least the ops the plan has."""
    cfg = _cfg("dualpipe", 46, 92)
    estimate = estimate_ops(cfg, get_family("dualpipe"), limit=10_000_000)
    assert estimate >= 16560 + 4232
    assert estimate >= len(build_schedule(cfg).ops)


def test_a_probe_of_exactly_the_probed_slots_is_counted() -> None:
    """Looped BFS pp=1000, V=2, m=3: the probes are m=1 and m=2, 2000 and 4000 stage x micro-batch
    slots, the second exactly the 4000 a probe may take, so both are built and counted. Per
    micro-batch: 2000 stages x (F, B) = 4000 compute ops, and each of the 1999 links (stage s on rank
    s % 1000: every link crosses ranks) carries an activation and a gradient, each a SEND and a RECV:
    7996; 11996 a micro-batch, 35988 for 3 (not the shallow pipelines' rate of 6 a slot, 36000)."""
    cfg = Config(schedule="looped-bfs", pp=1000, vpp=2, microbatches=3)
    assert estimate_ops(cfg, get_family("looped-bfs"), limit=10_000_000) == 35988


def test_plan_report_gives_the_largest_idle_within_a_rank_s_span() -> None:
    """ZB-H1 pp=4, m=8, F=1, B=2, I=W=1: every rank idles (p-1)(F+B-2W) = 3 against the makespan.
    Rank r starts at r, so r of those are before its first op; rank 0 starts at 0 and runs the last
    W, so all 3 of its idle are within its span: the report gives the largest, 3 (rank 3's is 0)."""
    result = plan(_cfg("zb-h1", 4, 8))
    assert result.metrics["span_idle"] == [3.0, 2.0, 1.0, 0.0]
    assert result.metrics["report"][0] == "idle within each rank's own span (first op to last op): max 3"


def test_interleaved_zb_warns_when_w_outgrows_the_slot_it_fills() -> None:
    """Interleaved ZB pp=2, m=2, V=2, F = I = 1, W = 2 (orders of test_torch_orders' two-rank case).
    Rank 0: 0F0 0F1 2F0 2F1 2I0 2W0 2I1 2W1 0I0 0W0 0I1 0W1; rank 1: 1F0 1F1 3F0 3I0 3F1 3I1 3W0 1I0
    3W1 1I1 1W0 1W1. Rank 0 waits 4..5 for 3I0 and then runs without a gap to 17 (2I1 at 8 after 3I1
    at 7, 0I0 at 11 after 1I0 at 10, 0I1 at 14 after 1I1 at 13); rank 1 waits 0..1 and runs to 17.
    Busy 4 + 4 + 8 = 16 of 17 on each: idle 1 = (p-1)max(F, I), where (p-1)(F+I-W) says 0, so the
    checker says why (as for ZB-H1, the formula needs W <= min(F, I))."""
    s = build_schedule(_cfg("interleaved-zb", 2, 2, vpp=2, W=2))
    assert simulate(s).makespan == 17.0
    assert _idle(s) == [1.0, 1.0]
    assert _messages(run_checks(s), "PP022") == [
        "interleaved-zb: the textbook bubble (p-1)(F+I-W) = 0 does not apply: W=2 > min(F, I)=1: each rank idles "
        "(p-1)max(F,I) = 1; simulated idle per rank 1"]
