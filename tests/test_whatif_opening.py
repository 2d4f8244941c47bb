"""The step's opening (pptl.whatif.opening): fitted on a run's ops, applied to a plan's, by hand."""
from __future__ import annotations

import pytest

from pptl.config import Costs
from pptl.ir import Op, Schedule
from pptl.timeline import Event, Timeline, TimelineMeta
from pptl.whatif import Spread, Straggler, monte_carlo
from pptl.whatif.opening import Opening, fit_opening, opening_factors
from pptl.whatif.spread import Quantiles, spread_from_timeline


def test_a_step_of_three_ops_splits_at_an_ops_start():
    # the lead (2.25, kept apart) and two more: work 8, half 4; the second op starts after 2.25 (early:
    # 1.75 over its mean 2.0), the third exactly at 2.25 + 1.75 = 4, the boundary: late (4.0 / 3.2)
    assert fit_opening([(2.25, 2.0, True), (1.75, 2.0, False), (4.0, 3.2, False)]) == Opening(8.0, 0.875, 1.25)


def test_an_op_started_just_under_half_the_work_is_early():
    # the third op 0.5 longer: work 8.5, half 4.25, it starts at 4.0, early; no op is late, nothing fitted
    assert fit_opening([(2.25, 2.0, True), (1.75, 2.0, False), (4.5, 3.2, False)]) is None
    # a fourth op makes a late half: work 9.5, half 4.75; early (1.75 + 4.5) / (2.0 + 3.2), late 1.0 / 0.8
    got = fit_opening([(2.25, 2.0, True), (1.75, 2.0, False), (4.5, 3.2, False), (1.0, 0.8, False)])
    assert got == Opening(9.5, pytest.approx(6.25 / 5.2), pytest.approx(1.25))


def test_the_lead_counts_as_work_but_not_in_a_factor():
    # lead 1 (its mean 1): work 3, half 1.5; the others start after 1 (early, 0.9) and 1.9 (late, 1.1)
    assert fit_opening([(1.0, 1.0, True), (0.9, 1.0, False), (1.1, 1.0, False)]) == \
        Opening(3.0, pytest.approx(0.9), pytest.approx(1.1))
    # a lead three times its mean is in neither factor, but moves the boundary: work 8, half 4; the ops
    # start after 3 and 3.9 (early: 2.0 / 2.0) and 5 (late: 3.0 / 3.0)
    assert fit_opening([(3.0, 1.0, True), (0.9, 1.0, False), (1.1, 1.0, False), (3.0, 3.0, False)]) == \
        Opening(8.0, pytest.approx(1.0), pytest.approx(1.0))
    # a lead of 6 (work 10, half 5) leaves both others late: no early half, nothing fitted
    assert fit_opening([(6.0, 2.0, True), (1.0, 1.0, False), (3.0, 2.0, False)]) is None


@pytest.mark.parametrize("before,factor", [(0.0, 0.875), (3.999, 0.875), (4.0, 1.25), (7.999, 1.25), (8.0, 1.0),
                                           (20.0, 1.0)], ids=["open", "under-half", "at-half", "under-work",
                                                             "at-work", "past-work"])
def test_factor_by_the_work_before_an_op(before, factor):
    assert Opening(8.0, 0.875, 1.25).factor(before) == factor


def test_factors_of_a_plans_rank_count_the_work_as_predicted():
    o = Opening(8.0, 0.75, 1.25)
    # lead 2 (factor 1); the second starts after 2 (early: 1.5), the third after 3.5 (early: 0.75), the
    # fourth after 4.25 (late)
    assert opening_factors([2.0, 2.0, 1.0, 3.0], o) == [1.0, 0.75, 0.75, 1.25]
    # the lead's extra of the step counts as work: the third op now starts after 2.5 + 1.5 = 4, at the boundary
    assert opening_factors([2.0, 2.0, 1.0, 3.0], o, lead_extra=0.5) == [1.0, 0.75, 1.25, 1.25]
    # a longer step than the run's: past its work 8 the ops keep their means (4 + 5 = 9 >= 8)
    assert opening_factors([4.0, 4.0, 4.0, 4.0], o) == [1.0, 1.25, 1.0, 1.0]


def _chain(n: int) -> Schedule:
    ops = [Op("F", 0, "compute", stage=0, mb=i, cost=f"c{i}") for i in range(n)]
    return Schedule(family="hand", pp=1, num_stages=1, microbatches=n, ops=ops,
                    lanes={(0, "compute"): list(range(n))}, deps=[])


def test_monte_carlo_scales_each_op_by_the_work_before_it():
    # three ops of 2 on one rank, the run's work 6 opening at 0.5, late 1.5: 2 (lead), 1 (after 2), 3
    # (after 3, exactly half: late)
    s, costs = _chain(3), Costs(base={f"c{i}": 2.0 for i in range(3)})
    one = {(0, "F"): Quantiles.of([1.0])}
    spread = Spread(stages=one, source="m.json", pp=1, opening={0: Opening(6.0, 0.5, 1.5)})
    out = monte_carlo(s, costs, spread, samples=2)
    assert out.makespan.tolist() == pytest.approx([6.0, 6.0])
    assert out.planned == pytest.approx(6.0)  # the simulator's, as planned (3 x 2)
    # a straggler's hold is no work: the same factors, each op twice as long
    slow = monte_carlo(s, costs, Spread(stages=one, source="m.json", pp=1, opening={0: Opening(6.0, 0.5, 1.5)},
                                        stragglers=(Straggler(0, 2.0),)), samples=1)
    assert slow.makespan.tolist() == pytest.approx([12.0])
    # the lead's extra (1) is work: the second op starts after 3 (late: 3), the third after 6, the run's
    # work, and keeps its mean (2): 3 + 3 + 2
    led = monte_carlo(s, costs, Spread(stages=one, source="m.json", pp=1, opening={0: Opening(6.0, 0.5, 1.5)},
                                       first={0: 1.0}), samples=1)
    assert led.makespan.tolist() == pytest.approx([8.0])
    # a rank the run did not open keeps its means
    other = Spread(stages=one, source="m.json", pp=1, opening={1: Opening(6.0, 0.5, 1.5)})
    assert monte_carlo(s, costs, other, samples=1).makespan.tolist() == pytest.approx([6.0])


def test_spread_from_a_run_fits_each_ranks_opening_over_its_timed_steps():
    # rank 0 ran F (lead), F, B, B; over its two timed steps 2.0, 1.5, 4.0, 4.5 on average: work 12, half
    # 6; the ops start at 0, 2, 3.5 (early) and 7.5 (late). F's mean (lead apart) 1.5, B's 4.25: early
    # (1.5 + 4.0) / (1.5 + 4.25), late 4.5 / 4.25. Rank 1 ran its lead alone: nothing to fit
    ev = [Event("r0/compute/F s0 mb0", 0, "compute", 0.0, 2.0, "F", stage=0, mb=0),
          Event("r0/compute/F s0 mb1", 0, "compute", 2.0, 3.5, "F", stage=0, mb=1),
          Event("r0/compute/B s0 mb0", 0, "compute", 3.5, 7.5, "B", stage=0, mb=0),
          Event("r0/compute/B s0 mb1", 0, "compute", 7.5, 12.0, "B", stage=0, mb=1),
          Event("r1/compute/F s1 mb0", 1, "compute", 2.0, 4.0, "F", stage=1, mb=0)]
    rec = {"span_ms": [12.0, 12.0], "ms": {"r0/compute/F s0 mb0": [1.8, 2.2], "r0/compute/F s0 mb1": [1.4, 1.6],
                                           "r0/compute/B s0 mb0": [3.9, 4.1], "r0/compute/B s0 mb1": [4.4, 4.6],
                                           "r1/compute/F s1 mb0": [2.0, 2.0]}}
    tl = Timeline(ev, TimelineMeta(source="measured", units="ms", family="1f1b", pp=2, extra={"step_ops": rec}))
    sp = spread_from_timeline(tl, "m.json")
    assert list(sp.opening) == [0]
    assert sp.opening[0] == Opening(pytest.approx(12.0), pytest.approx(5.5 / 5.75), pytest.approx(4.5 / 4.25))
    assert "step opening 0.957/1.059 per rank" in sp.describe()
