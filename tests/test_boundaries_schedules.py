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
# DualPipe


def test_dualpipe_warning_gives_the_overestimate_capped_at_one_forward() -> None:
    """pp=8 (H=4), I=2 > F=1, W=1 (B=3, F&B=F+B=4), 24 micro-batches: the formula (H-1)(F&B+B-3W) =
    3*(4+3-3) = 12 over-estimates by min((H-1)(I-F), F) = min(3*1, 1) = 1, so every rank idles 11; the
    warning gives 1, not the uncapped 3."""
    s = build_schedule(_cfg("dualpipe", 8, 24, I=2))
    assert _idle(s) == [11.0] * 8
    assert _messages(run_checks(s), "PP022") == [
        "dualpipe: the textbook bubble (p/2-1)(F&B+B-3W) = 12 does not apply: I=2 > F=1: the formula over-estimates "
        "by min((H-1)(I-F), F) = 1 (exact only when I = F); simulated idle per rank 11"]


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


# --------------------------------------------------------------------------------------------
# ZB-H1 and ZB-V


def test_zb_h1_on_one_rank_has_no_bubble_to_warn_about() -> None:
    """pp=1: no pipeline, so (p-1)(F+B-2W) = 0 and a W of 2 longer than F = I = 1 adds (p-1)(W-min) = 0;
    the one rank never idles and the checker has nothing to say."""
    s = build_schedule(_cfg("zb-h1", 1, 3, W=2))
    assert _idle(s) == [0.0]
    assert run_checks(s) == []


def test_zbv_ignores_a_b_cost_it_never_runs() -> None:
    """ZB-V always splits B into I and W, so a B of 3 that is not I + W = 2 changes nothing: pp=2 with
    2p-1 = 3 micro-batches and F = I = W still has no idle time within a rank's span, and no warning."""
    s = build_schedule(_cfg("zbv", 2, 3, B=3))
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


# --------------------------------------------------------------------------------------------
# The op-count bound (pptl.schedules._size and build_schedule)


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
