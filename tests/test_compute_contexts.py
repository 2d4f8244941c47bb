"""Costs.beside: compute ops at another rate beside a side-lane op (an all-to-all's copy kernel)."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pptl.config import config_from_mapping, costs_from_mapping
from pptl.contexts import Span, compute_context_durations, measure_compute_contexts
from pptl.errors import InputError
from pptl.planning import rank_scale_of
from pptl.schedules import build_schedule
from pptl.schedules._moe_metrics import exposure
from pptl.simulate import simulate
from pptl.timeline import Event, Timeline

# two members of stage 0: rank 0 computes "mlp" in 0.9 alone, rank 1 in 1.1 (mean 1.0); beside a
# copy both take 1.2
ALONE = {0: 0.9, 1: 1.1}
BESIDE = 1.2


def _synthetic() -> list[Span]:
    spans: list[Span] = []
    for r, a in ALONE.items():
        t = 0.0
        for _ in range(3):  # alone
            spans.append(Span(r, "compute", "MLP", t, t + a))
            t += a + 0.1
        for _ in range(2):  # a copy beside it all along (issued a little before, waiting)
            spans.append(Span(r, "comm", "A2A", t - 0.05, t + BESIDE + 0.02))
            spans.append(Span(r, "compute", "MLP", t, t + BESIDE))
            t += BESIDE + 0.1
        # a copy for its first 0.6: half the work at the beside rate, the rest alone
        spans.append(Span(r, "comm", "A2A", t, t + 0.6))
        spans.append(Span(r, "compute", "MLP", t, t + 0.6 + 0.5 * a))
        t += 2.0
        spans.append(Span(r, "send", "SEND", t, t + 5.0))  # a message does not slow compute
        spans.append(Span(r, "compute", "MLP", t, t + a))
    return spans


def test_alone_rates_rank_factors_and_beside_rates_are_recovered():
    spans = _synthetic()
    keys = ["mlp" if s.lane == "compute" else None for s in spans]
    found = measure_compute_contexts(spans, keys, [0] * len(spans))
    assert found.alone == {0: {"mlp": pytest.approx(1.0)}}
    assert found.rank_scale == pytest.approx(ALONE)
    assert found.beside == {0: {"mlp": pytest.approx(BESIDE)}}
    # planning reads the same factors off a timeline, by kind
    events = [Event(op=f"{i}", rank=s.rank, lane=s.lane, start=s.start, end=s.end, kind=s.kind, stage=0)
              for i, s in enumerate(spans)]
    assert rank_scale_of(Timeline(events=events)) == pytest.approx(ALONE)


def test_a_compute_op_progresses_at_the_rate_of_what_runs_beside_it():
    # alone 1.0, beside 2.0; a copy from 0.5 to 1.0 on its rank and one on another rank
    spans = [Span(0, "compute", "MLP", 0.0, 1.0), Span(0, "comm", "A2A", 0.5, 1.0),
             Span(0, "d2h", "OFFLOAD", 0.7, 0.9), Span(1, "comm", "A2A", 0.0, 9.0)]
    # 0.5 alone does half; 0.5 beside does a quarter; the last quarter alone: 1.25
    assert compute_context_durations(spans, [1.0] * 4, [(0, 2.0)])[0] == pytest.approx(1.25)
    assert compute_context_durations(spans, [1.0] * 4, [])[0] == 1.0


MOE = {"schedule": "moe-1f1b-overlap", "pp": 2, "vpp": 2, "microbatches": 4,
       "options": {"ep": 2, "layers_per_chunk": 2,
                   "costs": {"attn": 2, "mlp": 1, "attn_b": 2, "mlp_b": 1, "wgrad": 3, "dispatch": 1,
                             "combine": 1}}}


def test_a_member_faster_alone_keeps_pace_with_its_partner_beside_copies():
    s = build_schedule(config_from_mapping(MOE))
    costs = replace(s.config.costs, rank_scale={0: 0.8, 1: 1.2})
    # beside a copy, every compute op of either stage takes its stage cost, whichever rank runs it
    keys = {op.cost_key for op in s.ops if op.lane == "compute"}
    beside = {st: {k: costs.lookup(k, st) for k in keys} for st in range(s.num_stages)}

    def gap(c):
        sim = simulate(s, c)
        exp = exposure(s, sim.start, sim.end)["per_rank"]["exposed_ep"]
        return exp[0] - exp[1], sim

    skew, _ = gap(costs)
    paced, sim = gap(replace(costs, beside=beside))
    assert skew > 1.0  # one factor on all compute: the faster member waits at every all-to-all
    assert paced < 0.7 * skew  # 5.0 against 7.6: it slows to its partner's pace beside each copy
    # the faster member's compute beside a copy ran at the shared rate, alone at its own
    # (a copy holds its GPU from when its own rank's inputs are ready, waiting for its peer included)
    own = {}
    for u, v in s.deps:
        if s.ops[u].rank == s.ops[v].rank:
            own[v] = max(own.get(v, 0.0), sim.end[u])
    comm = [(min(own.get(i, sim.start[i]), sim.start[i]), sim.end[i]) for i, op in enumerate(s.ops)
            if op.rank == 0 and op.lane == "comm"]
    assert any(a < sim.start[i] for (a, _), i in zip(comm, [i for i, op in enumerate(s.ops)
                                                          if op.rank == 0 and op.lane == "comm"]))
    alone = [i for i, op in enumerate(s.ops) if op.rank == 0 and op.lane == "compute"
             and not any(a < sim.end[i] and b > sim.start[i] for a, b in comm)]
    assert alone
    for i in alone:
        op = s.ops[i]
        assert sim.end[i] - sim.start[i] == pytest.approx(0.8 * costs.lookup(op.cost_key, op.stage))


def test_beside_costs_round_trip_and_reject_bad_input():
    c = costs_from_mapping({"F": 1, "beside": {"0": {"mlp": 1.2}}})
    assert c.beside == {0: {"mlp": 1.2}}
    assert costs_from_mapping(json.loads(json.dumps(c.to_dict()))).beside == c.beside
    assert "beside" not in costs_from_mapping({"F": 1}).to_dict()
    for bad, match in [([1], "costs.beside': expected a mapping"), ({"x": {}}, "stage 'x' is not an integer"),
                       ({"0": 3}, r"costs.beside.0': expected a mapping"), ({"0": {"mlp": -1}}, "costs.beside.0.mlp")]:
        with pytest.raises(InputError, match=match):
            costs_from_mapping({"beside": bad})


def test_alone_rates_fitted_from_every_ops_alone_part():
    """Worked by hand: rank 0's ops take 1.0 alone, rank 1's 1.1; one more op of rank 0 ran 0.5 alone and
    1.0 beside an all-to-all (beside 2.0: 0.5/1.0 + 1.0/2.0 = one op's work). The fit gives 1.0 and 1.1
    exactly; a rank with no time alone has no rate; without any time beside, each rank's own mean."""
    from pptl.contexts import _alone_rates

    rows = [(0, 1.0, 0.0), (0, 1.0, 0.0), (1, 1.1, 0.0), (1, 1.1, 0.0), (0, 0.5, 1.0)]
    assert _alone_rates(rows) == {0: pytest.approx(1.0), 1: pytest.approx(1.1)}
    assert _alone_rates(rows + [(2, 0.0, 2.0)]) == {0: pytest.approx(1.0), 1: pytest.approx(1.1)}
    # no time beside: least squares of t0 * x = 1 per rank, x = sum t0 / sum t0^2 (2.0 and 1.0: 1.6)
    assert _alone_rates([(0, 2.0, 0.0), (0, 1.0, 0.0)]) == {0: pytest.approx(5.0 / 3.0)}
