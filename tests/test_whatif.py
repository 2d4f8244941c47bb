"""pptl whatif: Monte Carlo over a plan's graph against answers worked out by hand.

The quantiles of a chain (a sum of normals) and of a fork-join (the max of two normals, its CDF the
product of theirs) are computed here in closed form; the samples must land within a few standard
errors of them. A spread that draws every factor as 1 must give the simulator's makespan exactly.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hand_graphs import hand_graph as _graph
from hand_graphs import hand_op as _op
from typer.testing import CliRunner

from pptl.cli import app
from pptl.config import Config, Costs
from pptl.errors import InputError
from pptl.ir import Schedule
from pptl.schedules import build_schedule
from pptl.simulate import simulate
from pptl.timeline import Event, Timeline, TimelineMeta
from pptl.whatif import Jitter, Spread, Straggler, makespan_quantiles, monte_carlo, parse_jitter, parse_straggler
from pptl.whatif.lanes import sends_on_compute
from pptl.whatif.spread import QUANTILE_POINTS, Quantiles, spread_from_timeline


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _inverse(cdf, q: float, lo: float, hi: float) -> float:
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < q else (lo, mid)
    return (lo + hi) / 2




# --- a chain: the sum of normals -----------------------------------------------------------------

CHAIN = [4.0, 1.0, 2.5, 3.0, 0.5]


def test_chain_quantiles_are_those_of_a_sum_of_normals():
    s = _graph([_op(f"c{i}", mb=i) for i in range(len(CHAIN))], [])
    costs = Costs(base={f"c{i}": d for i, d in enumerate(CHAIN)})
    n, sd = 20_000, 0.05
    out = monte_carlo(s, costs, Spread(jitter=Jitter(sd)), samples=n, seed=7)
    mean, sigma = sum(CHAIN), sd * math.sqrt(sum(d * d for d in CHAIN))  # 11.0, 0.2711
    assert out.planned == 11.0
    assert float(out.makespan.mean()) == pytest.approx(mean, abs=4 * sigma / math.sqrt(n))
    assert float(out.makespan.std()) == pytest.approx(sigma, rel=0.03)
    for q in (0.5, 0.95, 0.99):
        z = _inverse(_phi, q, -10, 10)  # 0, 1.645, 2.326
        se = math.sqrt(q * (1 - q) / n) / (math.exp(-z * z / 2) / math.sqrt(2 * math.pi)) * sigma
        assert float(np.quantile(out.makespan, q)) == pytest.approx(mean + z * sigma, abs=4 * se)
    # one lane, every op on the one path
    assert out.critical.tolist() == [1.0] * len(CHAIN)
    assert out.busy.shape == (1, n) and np.allclose(out.busy[0], out.span)


# --- a fork-join: the max of two normals ---------------------------------------------------------

def _fork_join() -> tuple[Schedule, Costs]:
    # A (rank 0) -> X1 (rank 0) and X2 (rank 1) -> C (rank 0); A and C take no time.
    ops = [_op("a"), _op("x1", mb=1), _op("x2", rank=1, mb=1), _op("c", mb=2)]
    return _graph(ops, [(0, 2), (2, 3)], pp=2), Costs(base={"a": 0.0, "x1": 10.0, "x2": 11.0, "c": 0.0})


def test_fork_join_quantiles_are_those_of_the_max_of_two_normals():
    s, costs = _fork_join()
    n, sd = 20_000, 0.1  # X1 ~ N(10, 1), X2 ~ N(11, 1.1)
    out = monte_carlo(s, costs, Spread(jitter=Jitter(sd)), samples=n, seed=3)

    def cdf(t: float) -> float:
        return _phi((t - 10.0) / 1.0) * _phi((t - 11.0) / 1.1)

    # E[max] by numeric integration of 1 - F over [0, 30] (F is 0 below 0 to 1e-20)
    grid = np.linspace(0.0, 30.0, 30_001)
    expected_mean = float(np.trapezoid([1 - cdf(t) for t in grid], grid))
    assert 11.0 < expected_mean < 11.6
    assert float(out.makespan.mean()) == pytest.approx(expected_mean, abs=0.03)
    for q in (0.5, 0.95, 0.99):
        t = _inverse(cdf, q, 0.0, 30.0)
        dens = (cdf(t + 1e-4) - cdf(t - 1e-4)) / 2e-4
        se = math.sqrt(q * (1 - q) / n) / dens
        assert float(np.quantile(out.makespan, q)) == pytest.approx(t, abs=4 * se), q
    # criticality: X1 is on the path when X1 > X2: P = Phi((10 - 11) / sqrt(1 + 1.21)) = 0.2506
    p1 = _phi(-1.0 / math.sqrt(1.0 + 1.21))
    assert p1 == pytest.approx(0.2506, abs=1e-4)
    se = math.sqrt(p1 * (1 - p1) / n)
    assert out.critical[1] == pytest.approx(p1, abs=4 * se)
    assert out.critical[2] == pytest.approx(1 - p1, abs=4 * se)
    assert out.critical[0] == out.critical[3] == 1.0


def test_criticality_without_spread_marks_the_one_longest_path():
    # two chains joined at the end; the one through rank 1 is longer (5 + 1 against 2 + 3)
    ops = [_op("p"), _op("q", mb=1), _op("r", rank=1), _op("s", rank=1, mb=1), _op("end", mb=2)]
    s = _graph(ops, [(3, 4)], pp=2)
    costs = Costs(base={"p": 2.0, "q": 3.0, "r": 5.0, "s": 1.0, "end": 1.0})
    out = monte_carlo(s, costs, samples=5)
    assert out.makespan.tolist() == [7.0] * 5
    assert out.critical.tolist() == [0.0, 0.0, 1.0, 1.0, 1.0]


# --- the simulator's answer, exactly -------------------------------------------------------------

FAMILIES = [("1f1b", 1, 8), ("interleaved-1f1b", 2, 8), ("zb-h1", 1, 6), ("zbv", 2, 7)]


@pytest.mark.parametrize("family,vpp,m", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_no_spread_gives_the_simulators_makespan(family, vpp, m):
    s = build_schedule(Config(schedule=family, pp=4, microbatches=m, vpp=vpp))
    costs = Costs(base={"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}, stages={3: {"F": 1.5}}, comm_latency=0.25)
    sim = simulate(s, costs)
    out = monte_carlo(s, costs, samples=3)
    assert out.makespan.tolist() == [sim.makespan] * 3
    busy = {r.rank: r.busy for r in sim.ranks}
    assert out.busy[:, 0].tolist() == pytest.approx([busy[r] for r in range(4)])
    # the simulator's critical path is one of the walked paths: every op on it has criticality 1
    assert all(out.critical[i] == 1.0 for i in sim.critical_path)


def test_straggler_factor_is_the_simulators_rank_scale():
    s = build_schedule(Config(schedule="1f1b", pp=4, microbatches=8))
    costs = Costs(base={"F": 1.0, "B": 2.0}, comm_latency=0.1)
    slow = simulate(s, Costs(base={"F": 1.0, "B": 2.0}, comm_latency=0.1, rank_scale={2: 1.3}))
    out = monte_carlo(s, costs, Spread(stragglers=(Straggler(2, 1.3),)), samples=2)
    assert out.makespan.tolist() == pytest.approx([slow.makespan] * 2)


def test_straggler_delay_at_one_microbatch_on_a_chain():
    s = _graph([_op(f"c{i}", mb=i) for i in range(len(CHAIN))], [])
    costs = Costs(base={f"c{i}": d for i, d in enumerate(CHAIN)})
    out = monte_carlo(s, costs, Spread(stragglers=parse_straggler("rank=0,+2@mb3")), samples=2)
    assert out.makespan.tolist() == [13.0, 13.0]  # 11 + 2, on the op of micro-batch 3 only
    both = Spread(stragglers=parse_straggler("rank=0,x2,+1"))
    assert monte_carlo(s, costs, both, samples=1).makespan.tolist() == [2 * 11.0 + 5 * 1.0]


def test_seed_gives_the_same_numbers_and_another_seed_others():
    s = build_schedule(Config(schedule="1f1b", pp=4, microbatches=8))
    spread = Spread(jitter=Jitter(0.1))
    a = monte_carlo(s, None, spread, samples=200, seed=11)
    b = monte_carlo(s, None, spread, samples=200, seed=11)
    c = monte_carlo(s, None, spread, samples=200, seed=12)
    assert np.array_equal(a.makespan, b.makespan) and np.array_equal(a.critical, b.critical)
    assert not np.array_equal(a.makespan, c.makespan)
    assert makespan_quantiles(s, None, spread, samples=200, seed=11) == a.quantiles()


# --- measured spreads ----------------------------------------------------------------------------

def _measured(step_ops: dict | None = None, **extra) -> Timeline:
    ev = [Event("r0/compute/F s0 mb0", 0, "compute", 0.0, 1.0, "F", stage=0, mb=0),
          Event("r0/compute/F s0 mb1", 0, "compute", 1.0, 3.0, "F", stage=0, mb=1),
          Event("r1/compute/F s1 mb0", 1, "compute", 1.0, 4.0, "F", stage=1, mb=0)]
    if step_ops is not None:
        extra["step_ops"] = step_ops
    return Timeline(ev, TimelineMeta(source="measured", units="ms", family="1f1b", pp=2, extra=extra))


def test_spread_from_steps_separates_the_step_factor():
    # step 2 is twice step 1 everywhere: the step factor takes it all, each op's own factor is 1
    rec = {"span_ms": [2.0, 4.0], "ms": {"r0/compute/F s0 mb0": [1.0, 2.0], "r0/compute/F s0 mb1": [1.0, 2.0],
                                         "r1/compute/F s1 mb0": [3.0, 6.0]}}
    sp = spread_from_timeline(_measured(rec, step_ms=[2.5, 4.5]), "m.json")
    assert sp.step is not None and sp.step.values[0] == pytest.approx(2 / 3) and sp.step.values[-1] == pytest.approx(4 / 3)
    assert sp.step.mean == pytest.approx(1.0)
    assert sp.stages[(0, "F")].values == pytest.approx((1.0,) * QUANTILE_POINTS)
    assert sp.offset == pytest.approx((0.5, 0.5))
    assert sp.pp == 2 and sp.units == "ms"


def test_spread_from_one_step_is_each_ops_share_of_its_groups_mean():
    # rank 0's first op of the step (2.5) is kept apart: 1 longer than the others of its group (1 and
    # 2, mean 1.5: factors 2/3 and 4/3); rank 1's only F is its group's mean (no extra)
    ev = [Event("r0/compute/F s0 mb0", 0, "compute", 0.0, 2.5, "F", stage=0, mb=0),
          Event("r0/compute/F s0 mb1", 0, "compute", 2.5, 3.5, "F", stage=0, mb=1),
          Event("r0/compute/F s0 mb2", 0, "compute", 3.5, 5.5, "F", stage=0, mb=2),
          Event("r1/compute/F s1 mb0", 1, "compute", 2.5, 5.5, "F", stage=1, mb=0)]
    sp = spread_from_timeline(Timeline(ev, TimelineMeta(source="measured", units="ms", family="1f1b", pp=2)), "m.json")
    q = sp.stages[(0, "F")]
    assert (q.values[0], q.values[-1]) == pytest.approx((2 / 3, 4 / 3)) and q.count == 2
    assert sp.stages[(1, "F")].values == pytest.approx((1.0,) * QUANTILE_POINTS)
    assert dict(sp.first) == pytest.approx({0: 1.0})
    assert sp.step is None


def test_first_op_of_each_rank_takes_the_runs_extra():
    # a chain of 5 ops on one rank, first op 2 longer than its group in the run: the plan's first
    # op on the rank (whatever its stage or kind) carries it, once a step
    s = _graph([_op(f"c{i}", mb=i) for i in range(len(CHAIN))], [])
    costs = Costs(base={f"c{i}": d for i, d in enumerate(CHAIN)})
    out = monte_carlo(s, costs, Spread(first={0: 2.0}), samples=3)
    assert out.makespan.tolist() == pytest.approx([13.0] * 3)
    assert out.planned == pytest.approx(11.0)  # the simulator's makespan, as planned
    assert out.planned_end.max() == pytest.approx(13.0) and out.planned_end[0] == pytest.approx(6.0)
    # a rank the plan lacks adds nothing
    assert monte_carlo(s, costs, Spread(first={1: 2.0}), samples=2).makespan.tolist() == pytest.approx([11.0] * 2)


@pytest.mark.parametrize("record,field", [
    ({"span_ms": [1.0], "ms": {"r0/compute/F s0 mb0": [1.0, 2.0]}}, "step_ops.ms['r0/compute/F s0 mb0']"),
    ({"span_ms": [], "ms": {}}, "step_ops.span_ms"),
    ({"span_ms": [1.0, float("nan")], "ms": {}}, "step_ops.span_ms"),
    ({"ms": []}, "step_ops'"),
], ids=["short-row", "no-steps", "nan", "not-a-mapping"])
def test_malformed_step_record_is_one_line_naming_the_field(record, field):
    with pytest.raises(InputError, match=f"m.json: field 'meta.extra.{re_escape(field)}"):
        spread_from_timeline(_measured(record), "m.json")


def re_escape(s: str) -> str:
    import re

    return re.escape(s)


def test_measured_spread_of_another_plan_is_refused():
    sp = spread_from_timeline(_measured(), "m.json")
    four = build_schedule(Config(schedule="1f1b", pp=4, microbatches=4))
    with pytest.raises(InputError, match=r"^m.json: the run had 2 ranks, the plan \(1f1b\) 4"):
        monte_carlo(four, None, sp, samples=2)
    zb = build_schedule(Config(schedule="zb-h1", pp=2, microbatches=4))
    with pytest.raises(InputError, match=r"^m.json: the run has no I on stage 0 or rank 0, which the plan \(zb-h1\)"):
        monte_carlo(zb, None, sp, samples=2)


def test_quantile_table_draws_follow_it():
    # 1, 1, 1, 5: the quantile function is 1 up to u = 2/3, then rises linearly to 5 (np.quantile's
    # interpolation), mean 2/3 + (1 + 5) / 2 / 3 = 5/3; scaled to mean 1: 0.6 ... 3.0
    q = Quantiles.of([1.0, 1.0, 1.0, 5.0])
    assert q.values[0] == pytest.approx(0.6, abs=2e-3) and q.values[-1] == pytest.approx(3.0, abs=1e-2)
    assert q.mean == pytest.approx(1.0, abs=1e-12) and q.count == 4
    draws = monte_carlo(_graph([_op("x")], []), Costs(base={"x": 2.0}),
                        Spread(stages={(0, "F"): q}, source="m.json", pp=1), samples=40_000, seed=5).makespan
    assert float(draws.mean()) == pytest.approx(2.0, rel=0.01)  # the cost is the mean: the factor averages 1
    assert float(draws.min()) >= 2 * q.values[0] - 1e-12 and float(draws.max()) <= 2 * q.values[-1] + 1e-12


# --- parsing: one line each ----------------------------------------------------------------------

@pytest.mark.parametrize("text,sd", [("5%", 0.05), ("0.05", 0.05), ("0%", 0.0), ("99.5%", 0.995), (" 12 % ", 0.12)])
def test_jitter_parses(text, sd):
    assert parse_jitter(text).sd == pytest.approx(sd)


@pytest.mark.parametrize("text,msg", [
    ("5x", "expected a share such as 5% or 0.05"), ("-5%", "expected a share"), ("100%", "expected 0% up to"),
    ("1.0", "expected 0% up to"), ("", "expected a share")])
def test_bad_jitter_is_refused(text, msg):
    with pytest.raises(InputError, match=f"^--jitter: got '{re_escape(text)}', {msg}"):
        parse_jitter(text)


@pytest.mark.parametrize("text,want", [
    ("rank=2,x1.3", (Straggler(2, 1.3),)), ("rank=1,+2ms@mb7", (Straggler(1, 1.0, 2.0, "ms", 7),)),
    ("rank=10,+0.5", (Straggler(10, 1.0, 0.5, "", None),)),
    ("rank=0,x1.1,+3us", (Straggler(0, 1.1, 3.0, "us", None),)),
    # the parts of one spec combine as repeated flags do: factors multiply, delays add, each @mb its own
    ("rank=1,x2,x1.5", (Straggler(1, 3.0),)), ("rank=1,+1,+1", (Straggler(1, 1.0, 2.0),)),
    ("rank=1,+1@mb2,+1@mb3", (Straggler(1, 1.0, 1.0, "", 2), Straggler(1, 1.0, 1.0, "", 3))),
    ("rank=1,+1@mb2,+0.5@mb2", (Straggler(1, 1.0, 1.5, "", 2),)),
    ("rank=0,x2,+1ms,+500us,+1@mb0", (Straggler(0, 2.0, 1.0, "ms"), Straggler(0, 1.0, 500.0, "us"),
                                      Straggler(0, 1.0, 1.0, "", 0)))])
def test_straggler_parses(text, want):
    assert parse_straggler(text) == want


@pytest.mark.parametrize("text,msg", [
    ("2,x1.3", "expected rank=R,xFACTOR"), ("rank=-1,x2", "expected a rank 0 or more"),
    ("rank=1", "(no effect)"), ("rank=1,x0", "expected x above 0"), ("rank=1,*2", "got '\\*2'"),
    ("rank=1,+2h", "got '\\+2h'"), ("rank=1,xinf", "got 'xinf'"),
    # 1e400 reads as inf: not "not above 0" but not finite; 1e16 is finite and past the bound
    ("rank=1,x1e400", "expected a finite factor \\(x1.3\\)$"), ("rank=1,x2e6", "at most x1e\\+06"),
    ("rank=1,x1000,x1001", "multiply to x1.001e\\+06"),
    ("rank=1,+1e400", "expected a finite time"), ("rank=1,+1e16", "expected a time in 0..1e15 \\(\\+2ms\\)$")])
def test_bad_straggler_is_refused(text, msg):
    with pytest.raises(InputError, match=f"^--straggler: .*{msg}"):
        parse_straggler(text)


def test_straggler_outside_the_plan_and_time_unit_on_cost_units_are_refused():
    s = build_schedule(Config(schedule="1f1b", pp=2, microbatches=2))
    with pytest.raises(InputError, match=r"rank 2 is not in the plan \(ranks 0-1\)"):
        monte_carlo(s, None, Spread(stragglers=(Straggler(2, 1.5),)), samples=1)
    with pytest.raises(InputError, match=r"the plan is in 'unit' \(cost-model units\), not time; give the delay "
                                         r"without a unit \(\+2\)"):
        monte_carlo(s, None, Spread(stragglers=parse_straggler("rank=1,+2ms")), samples=1)


# --- the lanes a sync-send run executed ----------------------------------------------------------

def test_a_send_on_the_compute_lane_holds_it_only_as_long_as_measured():
    # 1F1B, 2 ranks, 2 micro-batches, F 2, B 4, a message 1 from SEND start to data, SENDs on the
    # compute lane. Held the whole message: r1 runs F0 3-5, B0 5-9, SEND 9-10, F1 10-12, B1 12-16,
    # SEND 16-17, r0's B1 17-21. Held 0.25 (the rest on the RECV): r1's F1 starts at 9.25, 0.75
    # earlier, its last SEND starts at 15.25 and its data is there at 16.25, r0's B1 ends at 20.25
    s = sends_on_compute(build_schedule(Config(schedule="1f1b", pp=2, microbatches=2)))
    costs = Costs(base={"F": 2.0, "B": 4.0}, comm_latency=1.0)
    assert monte_carlo(s, costs, Spread(), samples=2).makespan.tolist() == pytest.approx([21.0] * 2)
    held = monte_carlo(s, costs, Spread(send_hold=0.25), samples=2)
    assert held.makespan.tolist() == pytest.approx([20.25] * 2)
    assert held.planned == pytest.approx(21.0)  # the simulator's, which holds the lane for the message
    # a plan whose SENDs keep their own lane is left as it is
    plain = build_schedule(Config(schedule="1f1b", pp=2, microbatches=2))
    assert (monte_carlo(plain, costs, Spread(send_hold=0.25), samples=1).makespan.tolist()
            == pytest.approx(monte_carlo(plain, costs, Spread(), samples=1).makespan.tolist()))



def test_sends_move_onto_the_compute_lane_after_their_producer():
    s = build_schedule(Config(schedule="1f1b", pp=2, microbatches=2))
    t = sends_on_compute(s)
    ids = {k: [t.ops[i].id for i in v] for k, v in t.lanes.items()}
    assert ids[(0, "compute")] == ["r0/compute/F s0 mb0", "r0/send/SEND_F s0 mb0 ->r1", "r0/compute/F s0 mb1",
                                   "r0/send/SEND_F s0 mb1 ->r1", "r0/compute/B s0 mb0", "r0/compute/B s0 mb1"]
    assert ids[(1, "compute")][2] == "r1/send/SEND_B s1 mb0 ->r0"
    assert (0, "send") not in t.lanes and (1, "send") not in t.lanes
    # each send now holds the compute lane: 1F1B pp 2 m 2, F 1, B 2, message 0.5 (hand-timed):
    # r0 F0 0-1, S 1-1.5, F1 1.5-2.5, S 2.5-3; r1 F0 1.5-2.5, B0 2.5-4.5, S 4.5-5, F1 5-6 (its RECV
    # ended 3), B1 6-8, S 8-8.5; r0 B0 5-7, B1 8.5-10.5. As planned (sends beside compute): r0 F0 0-1,
    # F1 1-2; r1 F0 1.5-2.5, B0 2.5-4.5 (send 4.5-5), F1 4.5-5.5, B1 5.5-7.5 (send 7.5-8); r0 B0 5-7, B1 8-10
    costs = Costs(base={"F": 1.0, "B": 2.0}, comm_latency=0.5)
    assert simulate(t, costs).makespan == 10.5
    assert simulate(s, costs).makespan == 10.0


# --- the command line ----------------------------------------------------------------------------

def _write_run(path: Path, pp: int = 2) -> None:
    """A measured 1F1B run (pp 2, 2 micro-batches) with two steps, F 1 / B 2 ms, step 2 10% slower."""
    s = build_schedule(Config(schedule="1f1b", pp=pp, microbatches=2))
    tl = simulate(s, Costs(base={"F": 1.0, "B": 2.0})).timeline()
    ops = {e.op: e.duration for e in tl.events if e.lane == "compute"}
    extra = {"step_ms": [tl.makespan + 0.2, 1.1 * tl.makespan + 0.2],
             "step_ops": {"span_ms": [tl.makespan, 1.1 * tl.makespan], "ms": {k: [d, 1.1 * d] for k, d in ops.items()}}}
    meta = TimelineMeta(source="measured", units="ms", family="1f1b", pp=pp, microbatches=2, extra=extra)
    path.write_text(json.dumps(Timeline(tl.events, meta).to_dict()))


def test_cli_compares_plans_side_by_side(tmp_path):
    r = CliRunner()
    for fam in ("1f1b", "gpipe"):
        assert r.invoke(app, ["plan", "-s", fam, "--pp", "2", "-m", "2", "-o", str(tmp_path / f"{fam}.json")]).exit_code == 0
    _write_run(tmp_path / "m.json")
    res = r.invoke(app, ["whatif", str(tmp_path / "1f1b.json"), str(tmp_path / "gpipe.json"), "--from",
                         str(tmp_path / "m.json"), "-n", "400", "--seed", "1", "--output", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert [p["family"] for p in data["plans"]] == ["1f1b", "gpipe"]
    one = data["plans"][0]
    # the timeline's costs (F 1, B 2 ms): 1F1B pp 2 m 2 takes 3 * 3 = 9 ms; the steps' factor is 1 and 1.1
    # over their mean 1.05, a table rising linearly from 0.952 to 1.048 (op factors all 1); offset 0.2 ms
    assert one["planned"] == 9.0
    assert one["makespan"]["p50"] == pytest.approx(9.0 + 0.2, abs=0.05)
    assert 9 / 1.05 + 0.2 - 1e-9 <= one["makespan"]["p25"] < one["makespan"]["p75"] <= 9 * 1.1 / 1.05 + 0.2 + 1e-9
    res2 = r.invoke(app, ["whatif", str(tmp_path / "1f1b.json"), str(tmp_path / "gpipe.json"), "--from",
                          str(tmp_path / "m.json"), "-n", "400", "--seed", "1", "--output", "json"])
    assert res2.stdout == res.stdout  # --seed: the same numbers


def test_cli_text_report_and_figure(tmp_path):
    r = CliRunner()
    assert r.invoke(app, ["plan", "-s", "1f1b", "--pp", "2", "-m", "4", "-o", str(tmp_path / "a.json")]).exit_code == 0
    res = r.invoke(app, ["whatif", str(tmp_path / "a.json"), "--jitter", "5%", "--straggler", "rank=1,x1.5",
                         "-n", "300", "-o", str(tmp_path / "f.png"), "--top", "2"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "300 samples, seed 0; spread: jitter 5%; rank 1 x1.5"
    assert lines[1].split()[:6] == ["plan", "planned", "mean", "p50", "p95", "p99"]
    assert lines[2].split()[1] == "15"  # (m + p - 1)(F + B) = 5 * 3: 1F1B pp 2 m 4, F 1 B 2, free messages
    assert any(line.startswith(f"{tmp_path / 'a.json'}: idle per rank") for line in lines)
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args,msg", [
    (["--jitter", "abc"], "error: --jitter: got 'abc', expected a share such as 5% or 0.05"),
    (["--straggler", "rank=x"], "error: --straggler: got rank 'x' in 'rank=x', expected a rank 0 or more"),
    (["--straggler", "rank=9,x2"], "error: --straggler: rank 9 is not in PLAN (ranks 0-3)"),
    (["--straggler", "rank=1,+2@mb4"], "error: --straggler: micro-batch 4 is not in PLAN (micro-batches 0-3)"),
    (["--from", "RUN"], "error: RUN: the run had 2 ranks, the plan PLAN (1f1b) 4: measure a run with the plan's "
                        "ranks"),
    (["--from", "PLAN"], "error: PLAN is a plan, not a measured run; --from takes a 'pptl run -o' timeline (or a "
                         "profiler trace)"),
    (["--seed", "-1"], "error: --seed: got -1, expected an integer >= 0"),
], ids=["jitter", "straggler", "straggler-rank", "straggler-mb", "other-plan", "plan-as-run", "negative-seed"])
def test_cli_errors_are_one_line_exit_2(tmp_path, args, msg):
    r = CliRunner()
    plan = tmp_path / "p4.json"
    assert r.invoke(app, ["plan", "-s", "1f1b", "--pp", "4", "-m", "4", "-o", str(plan)]).exit_code == 0
    _write_run(tmp_path / "m.json")
    args = [str(tmp_path / "m.json") if a == "RUN" else str(plan) if a == "PLAN" else a for a in args]
    res = r.invoke(app, ["whatif", str(plan), *args, "-n", "10"])
    assert res.exit_code == 2, res.output
    assert not isinstance(res.exception, Exception)  # an exit code, not an error escaping the CLI
    assert res.stderr.strip().splitlines() == [msg.replace("RUN", str(tmp_path / "m.json")).replace("PLAN", str(plan))]


def test_compare_prints_the_measured_median_against_the_predicted_band(tmp_path):
    from pptl.formats.loader import load_any
    from pptl.whatif.band import step_band

    _write_run(tmp_path / "m.json")
    r = CliRunner()
    plan = tmp_path / "cal.json"
    res = r.invoke(app, ["plan", "-s", "1f1b", "--pp", "2", "-m", "2", "--costs-from", str(tmp_path / "m.json"),
                         "-o", str(plan)])
    assert res.exit_code == 0, res.output
    m = load_any(tmp_path / "m.json").timeline
    band = step_band(load_any(plan).schedule, m, "m.json", samples=4000)
    # steps 9.2 and 10.1 ms (median 9.65); predicted 9 c + 0.2 with c from 0.952 to 1.048 (see above):
    # p50 9.2, and every predicted step below 9.65
    assert band is not None and band.steps == 2 and band.measured_median == pytest.approx(9.65)
    assert band.p50 == pytest.approx(9.2, abs=0.02) and band.percentile == 1.0
    out = r.invoke(app, ["compare", str(plan), str(tmp_path / "m.json")])
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines()[2].startswith("step time: measured median 9.65 ms over 2 steps, at percentile 100 "
                                                 "of the plan under this run's spread (p5 ")
    # a plan in cost units has no band (its times are scaled to the run's for shapes only)
    s = build_schedule(Config(schedule="1f1b", pp=2, microbatches=2))
    assert step_band(s, m, "m.json") is None


# --- what pptl run records for it ----------------------------------------------------------------

def test_run_keeps_every_timed_steps_compute_op_times():
    from pptl.run.results import build_timeline

    s = build_schedule(Config(schedule="1f1b", pp=2, microbatches=1))
    ids = [op.id for op in s.ops]
    comp = [i for i, op in enumerate(s.ops) if op.lane == "compute"]  # F0, B0 on each rank

    def rec(rank: int, step: int, timed: bool, scale: float) -> dict:
        # op k (over both ranks) runs from 1 + 2k s to 1 + (2k + 1) s: 1 ms long at scale 1
        ev = [[i, 1.0 + k * 2 * scale, 1.0 + (k * 2 + 1) * scale] for k, i in enumerate(comp) if s.ops[i].rank == rank]
        return {"step": step, "timed": timed, "step_ms": 10.0 * scale, "wall_ms": 11.0, "loss": None,
                "events": ev if timed else [], "started": []}

    payloads = [{"rank": r, "steps": [rec(r, 1, True, 1.0), rec(r, 2, False, 1.0), rec(r, 3, True, 2.0)], "info": {}}
                for r in (0, 1)]
    tl = build_timeline(s, payloads)
    got = tl.meta.extra["step_ops"]
    # each op lasts 1 ms in step 1 and 2 ms in step 3 (the untimed step 2 has no events); the span runs
    # from the first start (1.0) to the last op's end (k = 3): 1 + 7 = 8 and 1 + 14 = 15
    assert len(comp) == 4
    assert got["span_ms"] == [7.0, 14.0]
    assert got["ms"] == {ids[i]: [1.0, 2.0] for i in comp}
    assert tl.meta.extra["step_ms"] == [10.0, 20.0]


@pytest.mark.parametrize("kw,msg", [({"slow_rank": -1}, "--slow-rank: got -1, expected a rank 0 or more"),
                                    ({"slow_factor": 0.5}, "--slow-factor: got 0.5, expected 1 to 100"),
                                    ({"slow_factor": 101.0}, "--slow-factor: got 101.0, expected 1 to 100")])
def test_slow_rank_options_are_checked(kw, msg):
    from pptl.run.options import Job, PlanJob

    with pytest.raises(InputError, match=f"^{re_escape(msg)}"):
        Job(plans=(PlanJob("p.json"),), **kw).validate()


def test_slow_rank_spins_its_share_on_cpu():
    import time

    pytest.importorskip("torch")
    from pptl.run.slow import Stretch

    t = time.perf_counter()
    Stretch(1.5).cpu(20.0)  # 0.5 x 20 ms
    assert 0.0099 <= time.perf_counter() - t < 0.5
    t = time.perf_counter()
    Stretch(1.0).cpu(20.0)
    assert time.perf_counter() - t < 0.005


def test_whatif_loads_neither_torch_nor_plotly():
    import subprocess
    import sys

    code = ("import sys; from pptl.whatif.study import study_plans; from pptl.whatif.report import report_lines; "
            "from pptl.whatif.band import step_band; from pptl.whatif import monte_carlo, Spread, Jitter; "
            "from pptl.config import Config; from pptl.schedules import build_schedule; "
            "monte_carlo(build_schedule(Config(schedule='1f1b', pp=2, microbatches=2)), None, Spread(jitter=Jitter(.1)), "
            "samples=10); print(sorted(m for m in ('torch', 'plotly') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_from_an_imported_profiler_trace():
    # one profiled step of torch's 1F1B on 4 H200s (tests/data/README.md): one step, so no step factor
    data = Path(__file__).parent / "data"
    res = CliRunner().invoke(app, ["whatif", str(data / "runs" / "1f1b_plan.json"), "--from",
                                   str(data / "traces" / "Schedule1F1B"), "-n", "200"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    # the trace's 115 ms step opens fast on every rank, most on ranks 2 and 3 (3%; pptl.whatif.opening)
    assert lines[0] == (f"200 samples, seed 0; spread: measured {data / 'traces' / 'Schedule1F1B'} (8 stage x kind "
                        f"spreads); step opening 0.991/1.009, 0.991/1.012, 0.969/1.034, 0.975/1.027 per rank (op "
                        f"time over its mean, first/second half of the rank's work in a step)")
    assert lines[1].endswith("(makespan, us)")
    planned = float(lines[2].split()[1])
    assert 1e5 < planned < 1.3e5  # the trace's step: about 115 ms


# --- the duty model ------------------------------------------------------------------------------

def test_duty_exponent_scales_a_busier_rank_by_its_duty_ratio():
    # one rank, one lane: busy the whole step (duty 1), measured where it was busy half of it: with
    # alpha 0.5 every op takes (1 / 0.5) ** 0.5 = sqrt(2) of the run's time
    s = _graph([_op(f"c{i}", mb=i) for i in range(len(CHAIN))], [])
    costs = Costs(base={f"c{i}": d for i, d in enumerate(CHAIN)})
    one = Quantiles.of([1.0])
    spread = Spread(stages={(0, "F"): one}, source="m.json", pp=1, duty={0: 0.5}, duty_exponent=0.5)
    out = monte_carlo(s, costs, spread, samples=3)
    assert out.makespan.tolist() == pytest.approx([11.0 * math.sqrt(2.0)] * 3)
    assert out.planned == pytest.approx(11.0 * math.sqrt(2.0))
    # a straggler's factor is no work: the rank's duty stays 1 / 1.3 ... of a longer step, so the
    # duty model sees the rank busy 1 / 1.3 of it and speeds it up: (1 / 1.3 / 0.5) ** 0.5
    slow = monte_carlo(s, costs, Spread(stages={(0, "F"): one}, source="m.json", pp=1, duty={0: 0.5},
                                        duty_exponent=0.5, stragglers=(Straggler(0, 1.3),)), samples=1)
    assert slow.makespan.tolist() == pytest.approx([11.0 * 1.3 * math.sqrt(1 / 1.3 / 0.5)])


def test_duty_range_draws_each_samples_alpha_uniformly():
    # the chain above, busy the whole step, measured at duty 0.5: a sample of alpha a takes
    # 11 * 2 ** a; with alpha drawn uniformly in 0..1 the step's quantile q is 11 * 2 ** q
    s = _graph([_op(f"c{i}", mb=i) for i in range(len(CHAIN))], [])
    costs = Costs(base={f"c{i}": d for i, d in enumerate(CHAIN)})
    one = Quantiles.of([1.0])
    spread = Spread(stages={(0, "F"): one}, source="m.json", pp=1, duty={0: 0.5}, duty_exponent=0.5,
                    duty_range=(0.0, 1.0))
    out = monte_carlo(s, costs, spread, samples=20000, seed=3)
    got = np.quantile(out.makespan, (0.05, 0.25, 0.5, 0.75, 0.95))
    assert got.tolist() == pytest.approx([11.0 * 2 ** q for q in (0.05, 0.25, 0.5, 0.75, 0.95)], rel=0.004)
    assert out.makespan.min() >= 11.0 - 1e-9 and out.makespan.max() <= 22.0 + 1e-9
    assert out.planned == pytest.approx(11.0 * math.sqrt(2.0))  # the mean durations keep the point alpha
    # a range of one point, or a rank at the run's duty, draws nothing: every sample at the point alpha
    point = monte_carlo(s, costs, Spread(stages={(0, "F"): one}, source="m.json", pp=1, duty={0: 0.5},
                                         duty_exponent=0.5, duty_range=(0.5, 0.5)), samples=4)
    assert point.makespan.tolist() == pytest.approx([11.0 * math.sqrt(2.0)] * 4)
    same = monte_carlo(s, costs, Spread(stages={(0, "F"): one}, source="m.json", pp=1, duty={0: 1.0},
                                        duty_exponent=0.5, duty_range=(0.0, 1.0)), samples=4)
    assert same.makespan.tolist() == pytest.approx([11.0] * 4)


def test_duty_exponent_leaves_the_measured_plan_as_measured(tmp_path):
    r = CliRunner()
    plan = tmp_path / "p.json"
    assert r.invoke(app, ["plan", "-s", "1f1b", "--pp", "2", "-m", "2", "-o", str(plan)]).exit_code == 0
    _write_run(tmp_path / "m.json")  # the plan's own simulated timeline: its duty is the plan's
    a = r.invoke(app, ["whatif", str(plan), "--from", str(tmp_path / "m.json"), "-n", "50", "--output", "json"])
    b = r.invoke(app, ["whatif", str(plan), "--from", str(tmp_path / "m.json"), "-n", "50", "--output", "json",
                       "--duty-exponent", "0.3"])
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    pa, pb = json.loads(a.stdout)["plans"][0], json.loads(b.stdout)["plans"][0]
    assert pb["planned"] == pytest.approx(pa["planned"], rel=1e-9) == 9.0
    assert pb["makespan"]["p50"] == pytest.approx(pa["makespan"]["p50"], rel=1e-9)


@pytest.mark.parametrize("args,msg", [
    (["--duty-exponent", "0.3"], "error: --duty-exponent: needs --from a measured run (the duty its op times were "
                                 "measured at)"),
    (["--duty-exponent", "-0.1"], "error: --duty-exponent: got -0.1, expected 0 (off) to 1 (pptl tune fitted "
                                  "0.25-0.29 on H200s, docs/tune.md)")], ids=["no-run", "negative"])
def test_duty_exponent_errors(tmp_path, args, msg):
    r = CliRunner()
    plan = tmp_path / "p.json"
    assert r.invoke(app, ["plan", "-s", "1f1b", "--pp", "2", "-m", "2", "-o", str(plan)]).exit_code == 0
    res = r.invoke(app, ["whatif", str(plan), *args, "-n", "5"])
    assert res.exit_code == 2 and not isinstance(res.exception, Exception), res.output
    assert res.stderr.strip().splitlines() == [msg]
