"""Stage roles and the learnt duty exponent of ``pptl whatif --from`` (pptl/whatif/roles.py, duty.py),
against GEMM counts and exponents worked out by hand."""
from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.config import Costs
from pptl.errors import InputError
from pptl.whatif.duty import duty_exponent_range, fit_duty_exponent, loss_bounded_range
from pptl.whatif.roles import by_role, gemm_work, layers_from_mapping, role_of, sources
from pptl.whatif.spread import Quantiles, Spread, parse_duty_exponent


@pytest.mark.parametrize("stage,stages,role", [
    (0, 1, "only"), (0, 2, "first"), (1, 2, "last"), (0, 4, "first"), (1, 4, "middle"), (2, 4, "middle"),
    (3, 4, "last"), (9, 10, "last"), (10, 12, "middle"), (11, 12, "last")],
    ids=["one-stage", "2-first", "2-last", "4-first", "4-second", "4-third", "4-last", "10-last",
         "12-two-digit-middle", "12-last"])
def test_role_of(stage, stages, role):
    assert role_of(stage, stages) == role


@pytest.mark.parametrize("kind,role,layers,gemms", [
    ("F", "first", 2, 4.0), ("F", "last", 2, 4.0),           # the loss is no GEMM
    ("B", "first", 2, 7.0), ("B", "middle", 2, 8.0), ("B", "last", 2, 8.0), ("B", "only", 1, 3.0),
    ("I", "first", 1, 1.0), ("I", "middle", 1, 2.0), ("W", "first", 3, 6.0),
    ("FB", "middle", 2, None), ("SEND", "first", 2, None), ("F", "middle", 0, None)],
    ids=["F-first", "F-last", "B-first", "B-middle", "B-last", "B-only-1", "I-first-1", "I-middle-1", "W-first-3",
         "FB-uncounted", "SEND", "no-layers"])
def test_gemm_work(kind, role, layers, gemms):
    assert gemm_work(kind, role, layers) == gemms


def _two(_s: int) -> int:
    return 2


def test_sources_interleaved_from_a_two_stage_run():
    # 1F1B on 2 ranks (first, last) -> interleaved V=2 (first, middle, middle, last): the middles come
    # from the first stage, their B with 8 GEMMs where the first ran 7; F and W unchanged
    srcs = sources(4, [0, 1], plan_layers=_two, run_layers=_two, keys=("F", "B", "I", "W"))
    assert [(s.stage, s.role, s.stages) for s in srcs] == [(0, "first", (0,)), (1, "middle", (0,)),
                                                           (2, "middle", (0,)), (3, "last", (1,))]
    assert srcs[1].work == pytest.approx({"F": 1.0, "B": 8 / 7, "I": 4 / 3, "W": 1.0})
    assert srcs[0].work == pytest.approx({"F": 1.0, "B": 1.0, "I": 1.0, "W": 1.0})
    assert srcs[3].work == pytest.approx({"F": 1.0, "B": 1.0, "I": 1.0, "W": 1.0})


def test_sources_same_stages_keep_their_index_and_scale_by_layers():
    # a plan with as many stages keeps each stage's own costs; 3 blocks where the run had 2: x 3/2
    srcs = sources(3, [0, 1, 2], plan_layers=lambda s: 3 if s == 1 else 2, run_layers=_two, keys=("F", "B"))
    assert [s.stages for s in srcs] == [(0,), (1,), (2,)]
    assert srcs[1].work == pytest.approx({"F": 1.5, "B": 1.5})
    # fewer stages than the run: the plan's middle takes the mean of the run's two middles
    srcs = sources(3, [0, 1, 2, 3], plan_layers=_two, run_layers=_two, keys=("F",))
    assert [s.stages for s in srcs] == [(0,), (1, 2), (3,)]
    assert sources(3, [], plan_layers=_two, run_layers=_two, keys=("F",)) == []


def test_by_role_rekeys_costs_and_spread_with_the_duty_of_the_rank_that_runs_it():
    costs = Costs(base={"F": 9.0, "B": 9.0}, stages={0: {"F": 1.6, "B": 3.5}, 1: {"F": 1.8, "B": 4.0}})
    q0, q1 = Quantiles.of([0.9, 1.1]), Quantiles.of([0.8, 1.2])
    spread = Spread(stages={(0, "F"): q0, (1, "F"): q1}, source="m.json", pp=2, duty={0: 0.5, 1: 0.8},
                    duty_exponent=0.5)
    srcs = sources(4, [0, 1], plan_layers=_two, run_layers=_two, keys=("F", "B"))
    c, s = by_role(costs, spread, srcs, plan_rank={0: 0, 1: 1, 2: 0, 3: 1}, run_rank={0: 0, 1: 1})
    # stage 1 runs on rank 1 (run duty 0.8) from stage 0 of rank 0 (0.5): x (0.8 / 0.5) ** 0.5
    up = math.sqrt(0.8 / 0.5)
    assert dict(c.stages[0]) == pytest.approx({"F": 1.6, "B": 3.5})
    assert dict(c.stages[1]) == pytest.approx({"F": 1.6 * up, "B": 3.5 * 8 / 7 * up})
    assert dict(c.stages[2]) == pytest.approx({"F": 1.6, "B": 4.0})
    assert dict(c.stages[3]) == pytest.approx({"F": 1.8, "B": 4.0})
    assert s.stages == {(0, "F"): q0, (1, "F"): q0, (2, "F"): q0, (3, "F"): q1}
    # only stage 1 moved rank: its log duty ratio, what a sample's own alpha scales
    assert dict(s.duty_moves) == pytest.approx({1: math.log(0.8 / 0.5)})
    # without the duty model nothing moves
    _, s0 = by_role(costs, Spread(stages=spread.stages, source="m.json", pp=2, duty={0: 0.5, 1: 0.8}), srcs,
                    plan_rank={0: 0, 1: 1, 2: 0, 3: 1}, run_rank={0: 0, 1: 1})
    assert dict(s0.duty_moves) == {}


def test_fit_duty_exponent_recovers_alpha_and_separates_role_from_duty():
    # F on ranks busy 0.5 and 1.0 with the same work: alpha 0.3 exactly
    assert fit_duty_exponent({(0, "F"): 1.0, (1, "F"): 2 ** 0.3}, {0: 0, 1: 1}, {0: 0.5, 1: 1.0},
                             _two) == pytest.approx(0.3)
    # B on a first stage runs 7 GEMMs, on the last 8: the 8 / 7 is work, not duty (alpha 0.3 again)
    times = {(0, "B"): 7.0, (1, "B"): 8.0 * 2 ** 0.3, (0, "F"): 4.0, (1, "F"): 4.0 * 2 ** 0.3}
    assert fit_duty_exponent(times, {0: 0, 1: 1}, {0: 0.5, 1: 1.0}, _two) == pytest.approx(0.3)


@pytest.mark.parametrize("times,duty,alpha", [
    ({(0, "F"): 1.0, (1, "F"): 2.0}, {0: 0.80, 1: 0.839}, None),         # duty spread 1.049 < 1.05
    ({(0, "F"): 1.0, (1, "F"): 1.1}, {0: 0.80, 1: 0.84}, 1.0),           # at 1.05: fitted, clipped to 1
    ({(0, "F"): 1.0, (1, "F"): 0.5}, {0: 0.5, 1: 1.0}, 0.0),             # faster when busier: clipped to 0
    ({(0, "FB"): 1.0, (1, "FB"): 2.0}, {0: 0.5, 1: 1.0}, None),          # no GEMM count for FB
    ({(0, "F"): 1.0}, {0: 0.5}, None), ({}, {}, None)],
    ids=["below-spread", "at-spread-clipped", "negative-clipped", "uncounted-kind", "one-stage", "empty"])
def test_fit_duty_exponent_edges(times, duty, alpha):
    got = fit_duty_exponent(times, {0: 0, 1: 1}, duty, _two)
    assert got == (pytest.approx(alpha) if alpha is not None else None)


def test_duty_exponent_range_is_the_kinds_fitted_alone():
    # F says 0.6, W (no GEMM skipped on a first stage) 0.2, on ranks busy 0.5 and 1.0: the pooled
    # fit is their mean (same duty points), the range the two
    times = {(0, "F"): 4.0, (1, "F"): 4.0 * 2 ** 0.6, (0, "W"): 4.0, (1, "W"): 4.0 * 2 ** 0.2}
    args = ({0: 0, 1: 1}, {0: 0.5, 1: 1.0}, _two)
    assert fit_duty_exponent(times, *args) == pytest.approx(0.4)
    assert duty_exponent_range(times, *args) == pytest.approx((0.2, 0.6))
    # B's 7 against 8 GEMMs is work: B at alpha 0.6 exactly agrees with F, a range of one point
    same = {(0, "F"): 4.0, (1, "F"): 4.0 * 2 ** 0.6, (0, "B"): 7.0, (1, "B"): 8.0 * 2 ** 0.6}
    assert duty_exponent_range(same, *args) == pytest.approx((0.6, 0.6))
    # each kind clipped alone: F 1.5 -> 1, W -0.5 -> 0
    wide = {(0, "F"): 1.0, (1, "F"): 2 ** 1.5, (0, "W"): 1.0, (1, "W"): 2 ** -0.5}
    assert duty_exponent_range(wide, *args) == pytest.approx((0.0, 1.0))
    # what fit_duty_exponent refuses, so does the range: duty spread 1.049 < 1.05, one stage
    assert duty_exponent_range({(0, "F"): 1.0, (1, "F"): 2.0}, {0: 0, 1: 1}, {0: 0.80, 1: 0.839}, _two) is None
    assert duty_exponent_range({(0, "F"): 1.0}, {0: 0}, {0: 0.5}, _two) is None


def _one(_s: int) -> int:
    """One MLP block a stage: F 2 GEMMs, B 3 on a first stage and 4 on the last."""
    return 1


_R2 = 2 ** 0.5  # rho of alpha 0.5 between ranks busy 0.5 and 1.0


def test_loss_bounded_range_holds_alpha_between_the_losses_bounds():
    # alpha 0.5 between ranks busy 0.5 and 1.0 (rho = 2 ** 0.5); per GEMM F 0.5, B 1.0 on rank 0;
    # the last stage's loss L = 0.2 on top of both its F and B (lam = 1): the low end is alpha
    # exactly. r_F = (2 ** 0.5 + 0.2) / 1.0 = 1.6142, r_B = ((4 * 2 ** 0.5 + 0.2) / 4) / 1.0 = 1.4642,
    # k = F' / B' = 1.0 / (3.0 * 4 / 3) = 0.25: (r_B - k r_F) / (1 - k) = 2 ** 0.5; the high end is
    # B alone: log2(1.4642) = 0.5501
    args = ({0: 0, 1: 1}, {0: 0.5, 1: 1.0}, _one)
    both = {(0, "F"): 1.0, (1, "F"): _R2 + 0.2, (0, "B"): 3.0, (1, "B"): 4 * _R2 + 0.2}
    lo, hi = loss_bounded_range(both, *args)
    assert lo == pytest.approx(0.5) and hi == pytest.approx(math.log2(_R2 + 0.05))
    assert hi == pytest.approx(0.55013, abs=1e-5)
    # the loss in F alone (lam = 0): B's own fit is alpha, the high end; the low end takes B's
    # share of the loss as F's: ((2 ** 0.5) - 0.25 * 1.6142) / 0.75 = 1.34755, log2 0.43034
    f_only = {**both, (1, "B"): 4 * _R2}
    assert loss_bounded_range(f_only, *args) == pytest.approx((0.43034, 0.5), abs=1e-5)
    # no loss at all: one point, alpha
    none = {**f_only, (1, "F"): _R2}
    assert loss_bounded_range(none, *args) == pytest.approx((0.5, 0.5))


@pytest.mark.parametrize("times,duty,stage_rank", [
    ({(0, "F"): 1.0, (1, "F"): 1.2, (0, "B"): 3.0, (1, "B"): 4.4}, {0: 0.80, 1: 0.839}, {0: 0, 1: 1}),
    ({(0, "F"): 1.0, (1, "F"): 1.2, (0, "B"): 3.0}, {0: 0.5, 1: 1.0}, {0: 0, 1: 1}),
    ({(0, "F"): 1.0, (1, "F"): 1.2, (2, "F"): 1.3, (0, "B"): 3.0, (1, "B"): 4.4, (2, "B"): 4.6},
     {0: 0.5, 1: 0.7, 2: 1.0}, {0: 0, 1: 1, 2: 2}),
    # B's share of a loss larger than F's whole excess: rho at lam = 1 below 0
    ({(0, "F"): 1.0, (1, "F"): 6.0, (0, "B"): 3.0, (1, "B"): 4.4}, {0: 0.5, 1: 1.0}, {0: 0, 1: 1})],
    ids=["duty-spread-1.049", "no-B-on-the-last-stage", "three-stages", "no-positive-rho"])
def test_loss_bounded_range_refuses(times, duty, stage_rank):
    assert loss_bounded_range(times, stage_rank, duty, _one) is None


def test_loss_bounded_range_at_the_duty_spread_limit():
    # ranks busy 0.80 and 0.84 (spread 1.05 exactly) are fitted: with no loss, alpha 0.5 both ends
    rho = 1.05 ** 0.5
    got = loss_bounded_range({(0, "F"): 1.0, (1, "F"): rho, (0, "B"): 3.0, (1, "B"): 4 * rho},
                             {0: 0, 1: 1}, {0: 0.80, 1: 0.84}, _one)
    assert got == pytest.approx((0.5, 0.5))


def test_a_first_and_a_middle_stage_tell_the_duty_without_the_loss():
    # 3 stages on ranks busy 0.5, 1.0, 1.0: F first 4.0, middle 4.0 * 2 ** 0.3 (alpha 0.3), the last
    # 4.0 * 2 ** 0.3 * 1.5 (its loss): the first and the middle say 0.3, and the last stage is left out
    stage_rank, duty = {0: 0, 1: 1, 2: 1}, {0: 0.5, 1: 1.0}
    times = {(0, "F"): 4.0, (1, "F"): 4.0 * 2 ** 0.3, (2, "F"): 4.0 * 2 ** 0.3 * 1.5}
    assert fit_duty_exponent(times, stage_rank, duty, _two) == pytest.approx(0.3)
    # first and middle on ranks of the same duty: only the last stage's rank differs, so it is fitted
    # with the loss in: the first at 0.5 and the rest at 1.0, log(2 ** 0.3 * 1.5 / 1) / log 2 for F
    same = {0: 0, 1: 0, 2: 1}
    times = {(0, "F"): 4.0, (1, "F"): 4.0, (2, "F"): 4.0 * 2 ** 0.3 * 1.5}
    assert fit_duty_exponent(times, same, duty, _two) == pytest.approx(min(1.0, 0.3 + math.log2(1.5)))


def test_layers_from_mapping_is_bounded():
    f = layers_from_mapping({"layers_per_stage": 3, "stage_layers": [5, 4]})
    assert (f(0), f(1), f(2)) == (5, 4, 3)
    g = layers_from_mapping({"layers_per_stage": True, "stage_layers": [0, "x"]})
    assert (g(0), g(7)) == (1, 1)


def test_parse_duty_exponent_learn_and_errors():
    assert parse_duty_exponent("learn") is None and parse_duty_exponent(" LEARN ") is None
    assert parse_duty_exponent("0.25") == 0.25 and parse_duty_exponent("1") == 1.0
    with pytest.raises(InputError, match=r"^--duty-exponent: got 'fit', expected 'learn' or a number 0 \(off\) to 1$"):
        parse_duty_exponent("fit")


def test_duty_exponent_learn_needs_a_run(tmp_path):
    r = CliRunner()
    plan = tmp_path / "p.json"
    assert r.invoke(app, ["plan", "-s", "1f1b", "--pp", "2", "-m", "2", "-o", str(plan)]).exit_code == 0
    res = r.invoke(app, ["whatif", str(plan), "--duty-exponent", "learn", "-n", "5"])
    assert res.exit_code == 2 and not isinstance(res.exception, Exception), res.output
    assert res.stderr.strip().splitlines() == ["error: --duty-exponent learn: needs --from a measured run (it is "
                                               "learnt from the run's ranks)"]
