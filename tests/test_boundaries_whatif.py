"""Boundaries of ``pptl whatif``, ``pptl compare`` and ``pptl explain`` that hand-written mutants
(``/work/wt/_mutants/whatif.py``) showed no test held: the op that ends last being op 0, a plan of one
micro-batch, the last of two step offsets, the last stage's duty move, the critical-op list's ties
and zero shares, the report's number format at 1e4 and 1e9, a straggler at its bounds, a step
record at its size limit, the run's spread of two step times, roles at their bounds, compare's ties
and display unit, a SEND of two producers moved onto the compute lane, and explain's zero-length ops,
tie on the critical path and late-input order.

Every expected value is worked out by hand in the test's comments, from the semantics the module
docstrings state, not read off the code's output.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from pptl.compare import compare_timelines, comparison_lines
from pptl.config import Costs
from pptl.explain import explain, explanation_lines
from pptl.ir import Op, Schedule
from pptl.simulate import simulate
from pptl.timeline import Event, Timeline, TimelineMeta
from pptl.whatif import spread as spread_mod
from pptl.whatif.lanes import sends_on_compute
from pptl.whatif.montecarlo import monte_carlo
from pptl.whatif.report import report_dict, report_lines
from pptl.whatif.roles import by_role, layers_from_mapping, sources
from pptl.whatif.spread import Quantiles, Spread, Straggler, parse_straggler, spread_from_timeline
from pptl.whatif.study import PlanOutcome, study


def _graph(ops: list[Op], deps: list[tuple[int, int]], pp: int = 1) -> Schedule:
    """A hand-made plan: ``ops`` in list order on their lanes, ``deps`` the data facts."""
    lanes: dict[tuple[int, str], list[int]] = {}
    for i, op in enumerate(ops):
        lanes.setdefault((op.rank, op.lane), []).append(i)
    return Schedule(family="hand", pp=pp, num_stages=pp, microbatches=1, ops=ops, lanes=lanes, deps=deps)


def _op(cost: str, rank: int = 0, mb: int = 0, kind: str = "F") -> Op:
    return Op(kind, rank, "compute", stage=rank, mb=mb, cost=cost)


# ----------------------------------------------------------------------------------------------
# montecarlo


def test_the_op_that_ends_last_is_critical_even_when_it_is_op_zero() -> None:
    """Two independent ops: op 0 (5) on rank 0 and op 1 (3) on rank 1. The step ends with op 0, so every
    sample's critical path is op 0 alone: criticality [1, 0]. A plan of one op: that op, 1."""
    s = _graph([_op("x"), _op("y", rank=1)], [], pp=2)
    out = monte_carlo(s, Costs(base={"x": 5.0, "y": 3.0}), samples=4)
    assert out.makespan.tolist() == [5.0] * 4
    assert out.critical.tolist() == [1.0, 0.0]
    one = monte_carlo(_graph([_op("x")], []), Costs(base={"x": 5.0}), samples=3)
    assert one.critical.tolist() == [1.0]


def test_a_straggler_on_micro_batch_zero_of_a_one_micro_batch_plan() -> None:
    """F then B of micro-batch 0 (1 and 2): 3 as planned. A hiccup of +2 on each of rank 0's ops of
    micro-batch 0 (the plan's only one, so it is in the plan): 1 + 2 + 2 + 2 = 7."""
    s = _graph([_op("f"), _op("b", kind="B")], [(0, 1)])
    spread = Spread(stragglers=(Straggler(0, delay=2.0, mb=0),))
    out = monte_carlo(s, Costs(base={"f": 1.0, "b": 2.0}), spread, samples=3)
    assert out.planned == 3.0
    assert out.makespan.tolist() == [7.0, 7.0, 7.0]


def test_each_sample_draws_one_of_the_measured_offsets_the_last_one_included() -> None:
    """A chain of 3 and the run's two step offsets 0 and 10: each sample's step is 3 or 13, each about
    half the time (200 draws: both appear; seed 0 draws the same every time)."""
    s = _graph([_op("f"), _op("b", kind="B")], [(0, 1)])
    out = monte_carlo(s, Costs(base={"f": 1.0, "b": 2.0}), Spread(offset=(0.0, 10.0)), samples=200, seed=0)
    values = sorted(set(out.makespan.tolist()))
    assert values == [3.0, 13.0]
    assert 60 <= int((out.makespan == 13.0).sum()) <= 140


def test_the_last_stages_duty_move_is_drawn_with_each_samples_alpha() -> None:
    """Stage 0 (rank 0, 4) then stage 1 (rank 1, 6): the plan's duty 0.4 and 0.6 is the run's, so the mean
    durations stay. Stage 1's cost came from a rank of half its duty (move log 2), taken at alpha 0.5; a
    sample of alpha a takes 6 * 2 ** (a - 0.5) for it. a uniform in 0..1: the step's quantile q is
    4 + 6 * 2 ** (q - 0.5): p50 10, from 4 + 6 / sqrt 2 (8.243) to 4 + 6 sqrt 2 (12.485)."""
    s = _graph([_op("a"), _op("b", rank=1)], [(0, 1)], pp=2)
    spread = Spread(duty={0: 0.4, 1: 0.6}, duty_exponent=0.5, duty_range=(0.0, 1.0), duty_moves={1: math.log(2.0)})
    out = monte_carlo(s, Costs(base={"a": 4.0, "b": 6.0}), spread, samples=20000, seed=1)
    assert out.planned == pytest.approx(10.0)
    got = np.quantile(out.makespan, (0.05, 0.5, 0.95)).tolist()
    assert got == pytest.approx([4 + 6 * 2 ** (q - 0.5) for q in (0.05, 0.5, 0.95)], rel=0.003)
    assert out.makespan.min() >= 4 + 6 / math.sqrt(2) - 1e-9 and out.makespan.max() <= 4 + 6 * math.sqrt(2) + 1e-9


# ----------------------------------------------------------------------------------------------
# study: the ops most often on the critical path


def test_top_critical_ties_are_in_op_order() -> None:
    """Rank 1 runs 3 ops of 1, rank 0 20 ops of 1, independent: rank 0 ends last (20), each of its ops is
    on every sample's path (share 1), rank 1's on none. The first five of 20 tied ops, in op order, are
    rank 0's micro-batches 0-4 (ops 3-7)."""
    ops = [_op("s", rank=1, mb=k) for k in range(3)] + [_op("l", mb=k) for k in range(20)]
    o = study(_graph(ops, [], pp=2), "p.json", Spread(), costs=Costs(base={"s": 1.0, "l": 1.0}), samples=2)
    assert o.top_critical(5) == [(f"r0/compute/F s0 mb{k}", 1.0) for k in range(5)]


def test_top_critical_leaves_out_ops_of_no_time_and_ops_never_on_the_path() -> None:
    """A (0 long) forks to X1 (10, rank 0) and X2 (11, rank 1), which join at C (0 long). The path is
    A, X2, C; A and C take no time (on the path only as its shadow), X1 is never on it. Asked for 5: X2."""
    ops = [_op("a"), _op("x1", mb=1), _op("x2", rank=1, mb=1), _op("c", mb=2)]
    costs = Costs(base={"a": 0.0, "x1": 10.0, "x2": 11.0, "c": 0.0})
    o = study(_graph(ops, [(0, 2), (2, 3)], pp=2), "fj.json", Spread(), costs=costs, samples=3)
    assert o.top_critical(5) == [("r1/compute/F s1 mb1", 1.0)]


# ----------------------------------------------------------------------------------------------
# report


def _chain_outcome(a: float, b: float, name: str = "c.json") -> PlanOutcome:
    s = _graph([_op("a"), _op("b", mb=1)], [])
    return study(s, name, Spread(), costs=Costs(base={"a": a, "b": b}), samples=3)


def _table_row(lines: list[str], name: str) -> list[str]:
    return next(ln for ln in lines if ln.startswith(name) and not ln.startswith(f"{name}:")).split()


@pytest.mark.parametrize(("a", "b", "cell"), [
    (4000.0, 6000.0, "10000"),  # 4 + 6 thousand: 10000, no exponent from 1e4 up (".4g" would print 1e+04)
    (3000.0, 6999.0, "9999"),
    (4e8, 6e8, "1e+09"),  # 1e9 and up: "1000000000" would fill the 10-wide column and run into the next
    (4e8, 6e8 - 1.0, "999999999"),
])
def test_report_numbers_without_an_exponent_from_1e4_up_to_1e9(a: float, b: float, cell: str) -> None:
    row = _table_row(report_lines([_chain_outcome(a, b)], Spread()), "c.json")
    assert row == ["c.json"] + [cell] * 5 + ["1.000"]


def test_report_of_a_plan_of_no_time_has_a_spread_ratio_of_one() -> None:
    """Every op 0 long: p50 0, and p95 / p50 is read as 1 (no spread), not a division by zero."""
    assert _table_row(report_lines([_chain_outcome(0.0, 0.0)], Spread()), "c.json") == ["c.json"] + ["0"] * 5 + ["1.000"]


def test_report_json_quartiles_of_the_makespan() -> None:
    """Steps 0, 1, ..., 100: quantile q of 101 evenly spaced values is 100 q."""
    o = _chain_outcome(1.0, 2.0)
    o = replace(o, samples=replace(o.samples, makespan=np.arange(101.0)))
    ms = report_dict([o], Spread())["plans"][0]["makespan"]
    assert (ms["p25"], ms["p50"], ms["p75"], ms["p95"], ms["p99"]) == (25.0, 50.0, 75.0, 95.0, 99.0)
    assert ms["mean"] == 50.0


def test_report_note_names_the_send_hold_of_any_plan_that_sent_on_the_compute_lane() -> None:
    """A run sent on the compute stream: a plan with no message (one stage) keeps its lanes and no
    hold; a plan of two stages holds each SEND 0.07 long. Listed first, the one-stage plan must not
    hide the hold from the note."""
    one = _chain_outcome(1.0, 2.0, "one.json")
    two = _chain_outcome(1.0, 2.0, "two.json")
    two = replace(two, sends_on_compute=True, spread=replace(two.spread, send_hold=0.07))
    lines = report_lines([one, two], Spread())
    assert lines[1] == ("note: the run sent on the compute stream (sync-send): each SEND holds its rank's compute "
                        "lane for 0.07 unit (the rest of the message is its RECV's), as it ran")


# ----------------------------------------------------------------------------------------------
# spread: --straggler at its bounds, the run's step record


@pytest.mark.parametrize(("text", "want"), [
    ("rank=1000000,x2", (Straggler(1_000_000, 2.0),)),  # seven digits: the largest rank taken
    ("rank=0,+1e15", (Straggler(0, 1.0, 1e15),)),  # a delay of exactly the largest number
    ("rank=0,+5e14,+5e14", (Straggler(0, 1.0, 1e15),)),  # two delays that add up to exactly it
    ("rank=2,x1", (Straggler(2),)),  # a factor of 1 alone: the one effect, "rank 2 as planned"
])
def test_straggler_specs_at_their_bounds_are_taken(text: str, want: tuple[Straggler, ...]) -> None:
    assert parse_straggler(text) == want


def test_describe_names_the_step_factors_p5_and_p95() -> None:
    """A step table rising 0, 0.01, ..., 1 over its 101 points: p5 is point 5 (0.05), p95 point 95 (0.95)."""
    step = Quantiles(tuple(i / 100 for i in range(101)), 5)
    assert Spread(source="m.json", step=step).describe() == \
        "measured m.json (0 stage x kind spreads, step factor p5-p95 0.050-0.950)"


def _two_ops(extra: dict[str, Any]) -> Timeline:
    ev = [Event("a", 0, "compute", 0.0, 1.0, "F", stage=0, mb=0), Event("b", 0, "compute", 1.0, 3.0, "B", stage=0, mb=0)]
    return Timeline(ev, TimelineMeta(source="measured", units="ms", pp=1, extra=extra))


def test_two_step_times_give_a_step_factor_without_a_per_step_record() -> None:
    """One step of ops (a profiler trace) and step times 10 and 12 ms: the step factor is their table, 10
    to 12 over its mean 11: 0.909 to 1.091, 1 in the middle."""
    s = spread_from_timeline(_two_ops({"step_ms": [10.0, 12.0]}), "m.json")
    assert s.step is not None
    assert (s.step.values[0], s.step.values[50], s.step.values[-1]) == pytest.approx((10 / 11, 1.0, 12 / 11))


def test_a_step_record_with_an_op_of_zero_ms_and_a_step_shorter_than_its_span() -> None:
    """Per-step record: a takes 0 then 2 ms (0 is a duration, >= 0), b 2 and 2; spans 3 and 3, step times
    2.5 and 4. Group means a 1, b 2 (3 a step): step factors 2/3 and 4/3 (table 0.667-1.333). Offsets,
    step minus span, never below 0: 0 (2.5 - 3 clipped) and 1."""
    extra = {"step_ms": [2.5, 4.0], "step_ops": {"span_ms": [3.0, 3.0], "ms": {"a": [0.0, 2.0], "b": [2.0, 2.0]}}}
    s = spread_from_timeline(_two_ops(extra), "m.json")
    assert s.offset == (0.0, 1.0)
    assert s.step is not None
    assert (s.step.values[0], s.step.values[-1]) == pytest.approx((2 / 3, 4 / 3))


def test_a_step_record_of_exactly_the_durations_read_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the bound at 4: one op over 4 steps is 4 durations, and each list (4 spans, 4 step times)
    4 long: all read. Every step alike: factor 1, offset 3.5 - 3 = 0.5 each."""
    monkeypatch.setattr(spread_mod, "MAX_STEP_RECORDS", 4)
    extra = {"step_ms": [3.5] * 4, "step_ops": {"span_ms": [3.0] * 4, "ms": {"a": [1.0] * 4}}}
    s = spread_from_timeline(_two_ops(extra), "m.json")
    assert s.offset == (0.5,) * 4
    assert s.step is not None and s.step.values == pytest.approx([1.0] * 101)


# ----------------------------------------------------------------------------------------------
# roles


def test_layers_up_to_their_bound_are_kept() -> None:
    """100,000 blocks a stage is in range (1..100,000): kept, not read as the default 1."""
    assert layers_from_mapping({"layers_per_stage": 100_000})(3) == 100_000
    uneven = layers_from_mapping({"stage_layers": [2, 100_000]})
    assert (uneven(0), uneven(1), uneven(2)) == (2, 100_000, 1)


def test_a_plan_stage_of_two_sources_takes_the_first_ones_spread() -> None:
    """A run of 4 stages (F 1, 2, 4, 8), a plan of 3: its middle stage takes the run's middle stages 1 and
    2 (F their mean, 3) and stage 1's measured factors (its first source), not stage 2's."""
    srcs = sources(3, [0, 1, 2, 3], plan_layers=lambda s: 1, run_layers=lambda s: 1, keys=("F",))
    assert [src.stages for src in srcs] == [(0,), (1, 2), (3,)]
    tables = {s: Quantiles((0.5 + 0.1 * s,) * 101, 2) for s in range(4)}
    costs, spread = by_role(Costs(stages={s: {"F": 2.0 ** s} for s in range(4)}),
                            Spread(stages={(s, "F"): q for s, q in tables.items()}), srcs,
                            plan_rank={0: 0, 1: 1, 2: 2}, run_rank={s: s for s in range(4)})
    assert {s: dict(row) for s, row in costs.stages.items()} == {0: {"F": 1.0}, 1: {"F": 3.0}, 2: {"F": 8.0}}
    assert dict(spread.stages) == {(0, "F"): tables[0], (1, "F"): tables[1], (2, "F"): tables[3]}


# ----------------------------------------------------------------------------------------------
# lanes: a run that sent on the compute stream


def test_a_send_of_two_producers_goes_after_the_later_one() -> None:
    """Rank 0's SEND needs both its forwards (mb 0 then mb 1 on its lane): on the compute lane it goes right
    after the later, F mb 1 (after F mb 0 it would wait for F mb 1, which waits for it: a cycle). F 1,
    message 0.5: r0 F 0-1, F 1-2, SEND 2-2.5; r1's F, after its RECV, 2.5-3.5."""
    ops = [_op("F"), _op("F", mb=1), Op("SEND", 0, "send", stage=0, mb=1, peer=1, cost="SEND"),
           Op("RECV", 1, "recv", stage=1, mb=1, peer=0, cost="RECV"), _op("F", rank=1, mb=1)]
    s = replace(_graph(ops, [(0, 2), (1, 2), (2, 3), (3, 4)], pp=2), microbatches=2)
    t = sends_on_compute(s)
    assert t.lanes[(0, "compute")] == [0, 1, 2] and (0, "send") not in t.lanes
    assert simulate(t, Costs(base={"F": 1.0}, comm_latency=0.5)).makespan == 3.5


# ----------------------------------------------------------------------------------------------
# compare


def _ev(rank: int, mb: int, start: float, end: float, kind: str = "F") -> Event:
    return Event(f"r{rank}/compute/{kind} s{rank} mb{mb}", rank, "compute", start, end, kind, stage=rank, mb=mb)


def _tl(events: list[Event], source: str, units: str = "ms", pp: int = 2, m: int = 1) -> Timeline:
    return Timeline(events, TimelineMeta(source=source, units=units, pp=pp, microbatches=m))


def test_worst_ops_of_equal_error_either_sign_are_in_op_order() -> None:
    """Rank 1's F planned to end at 2 ends at 1 (+1), rank 0's ends at 3 (-1): one size of error, so
    by op id: r0 first, whatever order the plan lists them in."""
    planned = _tl([_ev(1, 0, 0, 2), _ev(0, 0, 0, 2)], "planned")
    measured = _tl([_ev(1, 0, 0, 1), _ev(0, 0, 0, 3)], "measured")
    worst = compare_timelines(planned, measured).worst_ops(2)
    assert [(o.op, o.end_error) for o in worst] == [("r0/compute/F s0 mb0", -1.0), ("r1/compute/F s1 mb0", 1.0)]


def test_compare_shows_a_run_in_us_in_ms() -> None:
    """Plan and run in us: F 2000 and B 1000 planned, B 1500 measured: makespans 3 and 3.5 ms, error
    (3 - 3.5) / 3.5 = -14.3%."""
    planned = _tl([_ev(0, 0, 0, 2000), _ev(0, 1, 2000, 3000, "B")], "planned", "us", pp=1, m=2)
    measured = _tl([_ev(0, 0, 0, 2000), _ev(0, 1, 2000, 3500, "B")], "measured", "us", pp=1, m=2)
    lines = comparison_lines(compare_timelines(planned, measured))
    assert lines[0] == "makespan: planned 3 ms, measured 3.5 ms (error -14.3%)"
    assert lines[2].endswith("(mean duration, ms)")
    assert lines[4].split() == ["B", "1", "1", "1.5", "-33.3%"]


def test_a_plan_of_no_time_in_cost_units_is_compared_unscaled() -> None:
    """A plan whose ops all take 0 (cost-model units) has no makespan to fit the run's to: scale 1."""
    planned = _tl([_ev(0, 0, 0, 0), _ev(0, 1, 0, 0, "B")], "planned", "unit", pp=1, m=2)
    measured = _tl([_ev(0, 0, 0, 2), _ev(0, 1, 2, 3.5, "B")], "measured", pp=1, m=2)
    c = compare_timelines(planned, measured)
    assert (c.scale, c.shapes_only, c.makespan_planned, c.makespan_measured) == (1.0, True, 0.0, 3.5)


# ----------------------------------------------------------------------------------------------
# explain


def test_a_zero_length_compute_op_neither_occupies_the_lane_nor_ends_a_gap() -> None:
    """Rank 0's F (0-5) feeds rank 1's (5-10); rank 1 also has an UNSHARD of no time at 2. Its idle, 0-5, is
    one gap before its F, all schedule bubble (the replay at the mean F, 5, starts it at 5 too): not a
    host gap of 2 before the UNSHARD and 3 of bubble after it."""
    unshard = Event("r1/compute/UNSHARD s1", 1, "compute", 2.0, 2.0, "UNSHARD", stage=1)
    x = explain(_tl([_ev(0, 0, 0, 5), unshard, _ev(1, 0, 5, 10)], "measured"))
    r1 = x.ranks[1]
    assert (r1.busy, r1.idle, r1.bubble, r1.host, r1.late_input, r1.imbalance) == (5.0, 5.0, 5.0, 0.0, 0.0, 0.0)


def _late_twice() -> Timeline:
    """pp 2, forwards only, every op 1 long; rank 0 starts mb 1 and mb 2 2 and 3 late (host gaps)."""
    return _tl([_ev(0, 0, 0, 1), _ev(0, 1, 3, 4), _ev(0, 2, 7, 8), _ev(1, 0, 1, 2), _ev(1, 1, 4, 5), _ev(1, 2, 8, 9)],
               "measured", m=3)


def test_late_inputs_are_listed_longest_first() -> None:
    """Rank 1's F mb 1 waits 2 (2-4) and its F mb 2 waits 3 (5-8) beyond the replay (no gap before either):
    late inputs, listed mb 2 (3) then mb 1 (2); the header counts what it lists of how many."""
    x = explain(_late_twice())
    assert [(li.op, li.waited) for li in x.late] == [("r1/compute/F s1 mb2", 3.0), ("r1/compute/F s1 mb1", 2.0)]
    lines = explanation_lines(x, top=8)
    assert "late inputs (2 of 2, longest first):" in lines
    assert "late inputs (1 of 2, longest first):" in explanation_lines(x, top=1)


def test_critical_path_follows_the_data_where_it_ties_with_the_lane() -> None:
    """Rank 1's F mb 1 (2-3) has its lane predecessor (F mb 0) and its input (rank 0's F mb 1) both ending
    at 2: the path goes back through the input, the pipeline's dependency, then rank 0's lane."""
    x = explain(_tl([_ev(0, 0, 0, 1), _ev(0, 1, 1, 2), _ev(1, 0, 1, 2), _ev(1, 1, 2, 3)], "measured", m=2))
    assert [(s.op, s.via) for s in x.path] == [("r0/compute/F s0 mb0", ""), ("r0/compute/F s0 mb1", "lane"),
                                               ("r1/compute/F s1 mb1", "data")]
