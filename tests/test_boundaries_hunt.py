"""Boundaries of planning and checking, against numbers worked out by hand (never by the code under test).

Each test pins a value at a limit: a memory limit equal to the peak and one unit under it, the
smallest micro-batch count a family takes, m = p, m < p, pp = 1, two-digit ranks, stages and
micro-batches (pp = 12, m = 12, where ids sorted as text or parsed as "s1" would go wrong), and
activations given in a tiny unit (where an absolute rounding tolerance reads them as nothing).
Unit costs are the defaults: F = 1, B = 2, I = W = 1, FB = F + B = 3, no communication time.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from pptl.checks import run_checks
from pptl.config import config_from_mapping
from pptl.errors import InputError
from pptl.ir import Schedule
from pptl.op import Op
from pptl.planning import PlanResult, plan
from pptl.schedules import build_schedule


def _plan(**cfg: Any) -> PlanResult:
    return plan(config_from_mapping(cfg))


def _peaks(r: PlanResult) -> list[float]:
    return [x["peak_activation"] for x in r.metrics["ranks"]]


def _idle(r: PlanResult) -> list[float]:
    return [x["idle"] for x in r.metrics["ranks"]]


def _errors(r: PlanResult | list[Any]) -> list[str]:
    vs = r.violations if isinstance(r, PlanResult) else r
    return [v.code for v in vs if v.severity == "error"]


# ----------------------------------------------------------------------------------------------
# Defect: memory counted with an absolute rounding tolerance (1e-12 for the peak, 1e-9 for the
# limit), so activations in a large unit counted as nothing and any limit passed.


def test_peak_counts_activations_of_a_tiny_unit() -> None:
    # 1F1B pp=4 m=8 holds min(p - r, m) = 4, 3, 2, 1 micro-batches; at 1e-13 per micro-batch that
    # is 4e-13 .. 1e-13 (the old absolute 1e-12 step reported 0 on every rank).
    r = _plan(schedule="1f1b", pp=4, microbatches=8, activation=1e-13)
    assert _peaks(r) == pytest.approx([4e-13, 3e-13, 2e-13, 1e-13], rel=1e-9, abs=0)


def test_memory_limit_one_micro_batch_under_a_tiny_peak_fails() -> None:
    # Peak on rank 0: 4 x 1e-9 = 4e-9. A limit of 3e-9 is one micro-batch under it: PP009 on rank 0
    # (rank 1 holds 3e-9, exactly at the limit: fine). A limit of 4e-9 passes. The old absolute
    # 1e-9 slack let 4e-9 through a 3e-9 limit.
    bad = _plan(schedule="1f1b", pp=4, microbatches=8, activation=1e-9, memory_limit=3e-9)
    assert _errors(bad) == ["PP009"]
    assert bad.violations[0].message.startswith("rank 0 holds 4e-09 activation units at t=3")
    ok = _plan(schedule="1f1b", pp=4, microbatches=8, activation=1e-9, memory_limit=4e-9)
    assert _errors(ok) == []


def test_memory_limit_rounding_at_the_limit_is_the_limit() -> None:
    # 0.1 + 0.1 + 0.1 is 0.30000000000000004 in floats: three micro-batches of 0.1 (1F1B pp=3,
    # rank 0 holds min(3, 6) = 3) are at a limit of 0.3, not over it.
    r = _plan(schedule="1f1b", pp=3, microbatches=6, activation=0.1, memory_limit=0.3)
    assert _errors(r) == []
    r = _plan(schedule="1f1b", pp=3, microbatches=6, activation=0.1, memory_limit=0.2999)
    assert _errors(r) == ["PP009"]


def test_memory_formula_warning_in_a_tiny_unit() -> None:
    # v-min pp=2 m=12: any V order holds both chunks of a micro-batch on rank 0 (2 chunks), while
    # v-min promises 0.4 x 1F1B's 2 * min(2, 12) = 4 chunks = 1.6. At 1e-10 per chunk: peak 2e-10
    # over 1.6e-10, the same PP023 warning as in unit activations (the absolute 1e-9 hid it).
    unit = _plan(schedule="v-min", pp=2, microbatches=12)
    tiny = _plan(schedule="v-min", pp=2, microbatches=12, activation=1e-10)
    assert [v.code for v in unit.violations if v.code == "PP023"] == ["PP023"]
    [w] = [v for v in tiny.violations if v.code == "PP023"]
    assert "simulated peak activation 2e-10 on rank 0 is above the family's 1.6e-10" in w.message


def test_memory_formula_bound_warning_in_a_tiny_unit() -> None:
    # The formula's bound (not only the family's promise) in a large unit. v-min pp=4 m=8, options.memory
    # "pattern" (the paper's block), costs F=1 I=1 W=1 B=2, w_activation 1: the formula is
    # 2 * ((p + 4) // 3) = 2 * (8 // 3) = 4 chunks, the promise 0.4 x 1F1B's 2 * min(4, 8) = 8 chunks = 3.2.
    # Rank 0's chunk-0 forwards moved to the front of its lane (they depend on nothing: the order stays
    # valid) hold all 8 micro-batches' chunk 0 and one chunk 1 before the first backward: 9 chunks. At
    # 1e-10 per chunk: peak 9e-10 over the bound 4e-10 and the promise 3.2e-10, two PP023 warnings, as in
    # unit activations (tests/schedules/test_v_shape.py); an absolute 1e-9 slack would hide both
    # (9e-10 < 4e-10 + 1e-9).
    cfg = config_from_mapping({"schedule": "v-min", "pp": 4, "microbatches": 8, "activation": 1e-10,
                               "w_activation": 1.0, "costs": {"F": 1, "I": 1, "W": 1, "B": 2},
                               "options": {"memory": "pattern"}})
    s = build_schedule(cfg)
    lane = s.lanes[(0, "compute")]
    f0 = [i for i in lane if s.ops[i].kind == "F" and s.ops[i].stage == 0]
    edited = replace(s, lanes={**s.lanes, (0, "compute"): f0 + [i for i in lane if i not in f0]})
    found = [v for v in run_checks(edited) if v.code == "PP023"]
    assert [v.severity for v in found] == ["warning", "warning"]
    promise, bound = (v.message for v in found)
    assert promise.startswith("v-min: simulated peak activation 9e-10 on rank 0 is above the family's 3.2e-10")
    assert bound.startswith("v-min: simulated peak activation 9e-10 on rank 0 is above the formula's 4e-10")
    assert bound.endswith("; 1 rank(s) over")


# ----------------------------------------------------------------------------------------------
# Memory limit exactly at the peak, two-digit ranks


def test_memory_limit_at_the_peak_of_a_twelve_rank_1f1b() -> None:
    # 1F1B pp=12 m=12: rank r holds min(12 - r, 12) = 12 - r. Limit 12 = rank 0's peak: valid.
    # Limit 11: rank 0 alone is over (rank 1 holds 11, at the limit); it reaches 12 when its 12th
    # forward (F s0 mb11, unit costs) starts at t=11.
    ok = _plan(schedule="1f1b", pp=12, microbatches=12, memory_limit=12)
    assert _errors(ok) == []
    bad = _plan(schedule="1f1b", pp=12, microbatches=12, memory_limit=11)
    assert [(v.code, v.message) for v in bad.violations] == [
        ("PP009", "rank 0 holds 12 activation units at t=11 (when r0/compute/F s0 mb11 starts), over the limit 11; "
                  "peak 12")]


# ----------------------------------------------------------------------------------------------
# Metrics against textbook formulas, at boundaries


def test_gpipe_and_1f1b_at_twelve_ranks_and_micro_batches() -> None:
    # p = m = 12, F=1, B=2: makespan (m + p - 1)(F + B) = 23 * 3 = 69; bubble (p-1)/(m+p-1) = 11/23;
    # every rank idles (p-1)(F+B) = 33. Ops: 2pm compute + 4(p-1)m SEND/RECV = 288 + 528 = 816.
    # Peaks: GPipe m = 12 on every rank; 1F1B min(p - r, m) = 12, 11, ..., 1.
    for fam, peaks in (("gpipe", [12.0] * 12), ("1f1b", [float(12 - r) for r in range(12)])):
        r = _plan(schedule=fam, pp=12, microbatches=12)
        assert r.metrics["makespan"] == 69.0
        assert r.metrics["bubble_fraction"] == pytest.approx(11 / 23)
        assert _idle(r) == [33.0] * 12
        assert r.metrics["ops"] == 816
        assert _peaks(r) == peaks
        assert _errors(r) == []


@pytest.mark.parametrize("fam", ["gpipe", "1f1b"])
def test_fewer_micro_batches_than_ranks_and_one_rank(fam: str) -> None:
    # m = 1 < p = 4: makespan (1 + 3) * 3 = 12, bubble 3/4, every rank holds its one micro-batch.
    r = _plan(schedule=fam, pp=4, microbatches=1)
    assert (r.metrics["makespan"], r.metrics["bubble_fraction"], _peaks(r)) == (12.0, 0.75, [1.0] * 4)
    # pp = 1, m = 3: no bubble, makespan 3 * 3 = 9, 6 compute ops and no messages; GPipe holds all
    # 3 micro-batches, 1F1B (warmup p - 1 - r = 0) one at a time.
    r = _plan(schedule=fam, pp=1, microbatches=3)
    assert (r.metrics["makespan"], r.metrics["bubble_fraction"], r.metrics["ops"]) == (9.0, 0.0, 6)
    assert _peaks(r) == [3.0 if fam == "gpipe" else 1.0]


def test_zero_bubble_h1_at_m_equal_p_twelve() -> None:
    # ZB-H1 p = m = 12 (its least m), F=I=W=1: busy 3m = 36, idle (p-1)(F+B-2W) = 11 on every rank,
    # makespan 47; peak min(p - r, m) = 12 - r (as 1F1B); ops 3pm + 4(p-1)m = 432 + 528 = 960.
    r = _plan(schedule="zb-h1", pp=12, microbatches=12, split_backward=True)
    assert r.metrics["makespan"] == 47.0 and _idle(r) == [11.0] * 12
    assert _peaks(r) == [float(12 - r) for r in range(12)]
    assert r.metrics["ops"] == 960 and _errors(r) == []


def test_zero_bubble_h2_at_its_least_micro_batches() -> None:
    # ZB-H2 p=4, m = 2p - 1 = 7: no idle inside a rank's span, makespan 3m + (p-1) = 24, rank r
    # holds 2(p - r) - 1 = 7, 5, 3, 1.
    r = _plan(schedule="zb-h2", pp=4, microbatches=7)
    assert r.metrics["makespan"] == 24.0 and r.metrics["span_idle"] == [0.0] * 4
    assert _peaks(r) == [7.0, 5.0, 3.0, 1.0]


@pytest.mark.parametrize(("vpp", "m", "makespan", "peaks"), [
    # p=4, G=4, F=1, B=2 per chunk: makespan 3mV + 3(p-1); peak on rank r
    # min(2(p-r-1) + (V-1)G + 1, mV).
    (3, 4, 45.0, [12.0, 12.0, 11.0, 9.0]),   # m = p: 2*3+8+1 = 15 > mV = 12 on rank 0
    (3, 8, 81.0, [15.0, 13.0, 11.0, 9.0]),   # 2(3-r) + 8 + 1
    (4, 12, 153.0, [19.0, 17.0, 15.0, 13.0]),  # 2(3-r) + 12 + 1; mV = 48
])
def test_interleaved_vpp_above_two(vpp: int, m: int, makespan: float, peaks: list[float]) -> None:
    r = _plan(schedule="interleaved-1f1b", pp=4, vpp=vpp, microbatches=m)
    assert r.metrics["makespan"] == makespan and _peaks(r) == peaks and _idle(r) == [9.0] * 4


def test_interleaved_twelve_ranks_m_equal_p() -> None:
    # p = m = 12, V = 2: makespan 3 * 12 * 2 + 3 * 11 = 105; rank 0 holds min(22 + 12 + 1, 24) = 24,
    # rank 11 min(0 + 12 + 1, 24) = 13.
    r = _plan(schedule="interleaved-1f1b", pp=12, vpp=2, microbatches=12)
    assert r.metrics["makespan"] == 105.0
    assert _peaks(r)[0] == 24.0 and _peaks(r)[11] == 13.0


def test_dualpipe_and_dualpipev_at_twelve_ranks() -> None:
    # DualPipe p=12, m=24 (= 2p, its least): idle (p/2-1)(FB+B-3W) = 5 * (3+2-3) = 10 per rank,
    # busy m(F+B) = 72, makespan 82, peak p+1 = 13.
    r = _plan(schedule="dualpipe", pp=12, microbatches=24)
    assert r.metrics["makespan"] == 82.0 and _idle(r) == [10.0] * 12 and r.metrics["peak_activation"] == 13.0
    # DualPipeV p=12 (24 stages), m=24: idle (p-1)(FB+B-3W) = 22, peak 2p+1 = 25.
    r = _plan(schedule="dualpipev", pp=12, microbatches=24)
    assert _idle(r) == [22.0] * 12 and r.metrics["peak_activation"] == 25.0


@pytest.mark.parametrize(("schedule", "pp", "ok", "refused"), [
    ("zb-h1", 12, 12, 11),       # m >= (p-1) + 1
    ("zb-h2", 12, 23, 22),       # m >= 2(p-1) + 1
    ("dualpipe", 12, 24, 22),    # m even and >= 2p
    ("dualpipev", 12, 24, 23),   # m >= 2p
])
def test_least_micro_batches_each_family_takes(schedule: str, pp: int, ok: int, refused: int) -> None:
    s = build_schedule(config_from_mapping({"schedule": schedule, "pp": pp, "microbatches": ok}))
    assert s.microbatches * s.directions == ok  # DualPipe: half of them in each direction
    with pytest.raises(InputError, match=f"got {refused}, expected"):
        build_schedule(config_from_mapping({"schedule": schedule, "pp": pp, "microbatches": refused}))


def test_interleaved_last_group_exactly_pp_long() -> None:
    # p=4, G=5: m=9 leaves 9 mod 5 = 4 = p (accepted, Megatron's ">= pp"); m=8 leaves 3 (refused).
    # m=9 plans as its flush formula says: 3 * 9 * 2 + 3 * 3 = 63.
    r = _plan(schedule="interleaved-1f1b", pp=4, vpp=2, microbatches=9, group_size=5)
    assert r.metrics["makespan"] == 63.0
    with pytest.raises(InputError, match="last group of 8 mod 5 = 3 micro-batches, fewer than pp=4"):
        build_schedule(config_from_mapping({"schedule": "interleaved-1f1b", "pp": 4, "vpp": 2, "microbatches": 8,
                                            "group_size": 5}))


def test_v_half_memory_share_exactly_the_patterns() -> None:
    # v-half p=4, m=8: the pattern holds 2 * ((4+2)//2) = 6 chunks, 1F1B 2 * min(4, 8) = 8: a share
    # of 6/8 = 0.75. options.memory 0.75 keeps the pattern (peak 6, inclusive); 0.74 caps it at
    # int(0.74 * 8) = 5 chunks.
    r = _plan(schedule="v-half", pp=4, microbatches=8, options={"memory": 0.75})
    assert r.metrics["peak_activation"] == 6.0
    r = _plan(schedule="v-half", pp=4, microbatches=8, options={"memory": 0.74})
    assert r.metrics["peak_activation"] == 5.0


def test_weight_update_bucket_filled_exactly() -> None:
    # bucket_size 1024: 512 + 512 fill one bucket exactly (no PP051), the third 512 starts another;
    # owner 1's 1024-byte tensor fills a bucket alone. A 1025-byte tensor (aligned to 1280) is over.
    from pptl.schedules.weight_update import plan_buckets, spec_from_config

    cfg = config_from_mapping({"schedule": "weight-update", "pp": 2, "microbatches": 1,
                               "options": {"tensors": [[512, 512, 512], [1024]], "bucket_size": 1024}})
    assert [(b.owner, b.nbytes) for b in plan_buckets(spec_from_config(cfg))] == [(0, 1024), (1, 1024), (0, 512)]
    assert plan(cfg).violations == []
    over = plan(replace(cfg, options={"tensors": [[1024], [1025]], "bucket_size": 1024}))
    assert sorted(_errors(over)) == ["PP051", "PP052"]


# ----------------------------------------------------------------------------------------------
# Hand-broken plans with two-digit ranks and micro-batches


def _lanes(s: Schedule) -> dict[tuple[int, str], list[Op]]:
    return {k: [s.ops[i] for i in v] for k, v in s.lanes.items()}


def _swapped(s: Schedule, key: tuple[int, str], a: tuple[str, int], b: tuple[str, int]) -> Schedule:
    lanes = _lanes(s)
    ops = list(lanes[key])
    i = next(k for k, op in enumerate(ops) if (op.kind, op.mb) == a)
    j = next(k for k, op in enumerate(ops) if (op.kind, op.mb) == b)
    ops[i], ops[j] = ops[j], ops[i]
    return s.with_lanes({**lanes, key: ops})


def test_twelve_rank_plan_broken_by_hand() -> None:
    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 12, "microbatches": 12}))
    assert run_checks(s) == []
    # B s10 mb10 listed before its own F on rank 10: PP006 names both two-digit ids, and the lane
    # order closes a cycle (PP007).
    bad = run_checks(_swapped(s, (10, "compute"), ("F", 10), ("B", 10)))
    assert _errors(bad) == ["PP006", "PP007"]
    assert bad[0].message == ("r10/compute/B s10 mb10 comes before r10/compute/F s10 mb10 on rank 10, but a "
                              "backward needs its forward")
    # Rank 11's first op moved to rank 12 of a 12-rank plan: outside 0..11 (rank 11 itself is fine).
    lanes = _lanes(s)
    first, *rest = lanes[(11, "compute")]
    moved = s.with_lanes({**lanes, (11, "compute"): rest, (12, "compute"): [replace(first, rank=12)]})
    out = run_checks(moved)
    assert "PP001" in _errors(out)
    assert [v.message for v in out if v.code == "PP001"] == ["malformed op r12/compute/F s11 mb0: rank 12 is outside 0..11"]
    # A 13th micro-batch (mb 12) in a 12-micro-batch plan: out of range.
    lanes = _lanes(s)
    extra = replace(lanes[(10, "compute")][0], mb=12)
    out = run_checks(s.with_lanes({**lanes, (10, "compute"): lanes[(10, "compute")] + [extra]}))
    assert [v.message for v in out if v.code == "PP004"] == [
        "r10/compute/F s10 mb12: stage 10, mb 12, direction 0 outside stages 0..11, micro-batches 0..11, directions 0..0"]


def test_w_fifo_order_with_two_digit_micro_batches() -> None:
    # ZB-H1 p = m = 12: on rank 11 (last stage: I right after F) swapping W mb10 and W mb11 pops the
    # FIFO out of order; mb10 and mb11 sort as numbers, so the first out-of-order W is W mb11.
    s = build_schedule(config_from_mapping({"schedule": "zb-h1", "pp": 12, "microbatches": 12}))
    out = run_checks(_swapped(s, (11, "compute"), ("W", 10), ("W", 11)))
    assert _errors(out) == ["PP021"]
    assert out[0].message.startswith("r11/compute/W s11 mb11 pops the weight-gradient FIFO of rank 11, stage 11 "
                                     "before r11/compute/W s11 mb10")
