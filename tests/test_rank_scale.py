"""Costs.rank_scale: ranks that share a stage (EP members) at their own compute speed."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.config import config_from_mapping, costs_from_mapping
from pptl.errors import InputError
from pptl.planning import costs_from_timeline, rank_scale_of
from pptl.schedules import build_schedule
from pptl.schedules._moe_metrics import exposure
from pptl.simulate import durations, simulate

MOE = {"schedule": "moe-1f1b-overlap", "pp": 2, "vpp": 2, "microbatches": 4,
       "options": {"ep": 2, "layers_per_chunk": 2,
                   "costs": {"attn": 2, "mlp": 1, "attn_b": 2, "mlp_b": 1, "wgrad": 3, "dispatch": 0.2,
                             "combine": 0.3}}}
# ranks 0 and 1 are the two EP members of pipeline rank 0; rank 0's GPU runs 10% faster
TRUTH = {0: 0.9, 1: 1.1}


def _moe():
    return build_schedule(config_from_mapping(MOE))


def _as_run(s, costs):
    """The plan simulated under ``costs`` as ``pptl run`` records it: a side-lane op from when its own
    rank's inputs were ready (its kernel holds the GPU from then, waiting for its peer included; a
    plan's timeline starts an all-to-all at its last member's start)."""
    sim = simulate(s, costs)
    own: dict[int, float] = {}
    for u, v in s.deps:
        if s.ops[u].rank == s.ops[v].rank:
            own[v] = max(own.get(v, 0.0), sim.end[u])
    tl = sim.timeline()
    index = {op.id: i for i, op in enumerate(s.ops)}
    events = [replace(e, start=min(own.get(index[e.op], e.start), e.start))
              if s.ops[index[e.op]].lane in ("comm", "d2h", "h2d") else e for e in tl.events]
    return replace(tl, events=events)


def test_a_faster_member_gets_its_factor_and_ranks_alone_on_a_stage_none():
    s = _moe()
    # each member's compute alone at its own speed, beside an all-to-all at the shared one (the model
    # the factor is fitted under: every op's alone part counts, not only the ops with nothing beside)
    keys = {op.cost_key for op in s.ops if op.lane == "compute"}
    beside = {st: {k: 1.5 * s.config.costs.lookup(k, st) for k in keys} for st in range(s.num_stages)}
    measured = _as_run(s, replace(s.config.costs, rank_scale=TRUTH, beside=beside))
    scale = rank_scale_of(measured)
    assert scale == pytest.approx({0: 0.9, 1: 1.1, 2: 1.0, 3: 1.0}, rel=1e-3)
    assert costs_from_timeline(measured)["rank_scale"] == pytest.approx(scale)
    # plain PP: each stage on one rank, whose stage costs are its own
    pp = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 4, "microbatches": 8,
                                             "costs": {"F": 1, "B": 2}, }))
    skewed = simulate(pp, replace(pp.config.costs, rank_scale={0: 0.5, 3: 2.0})).timeline()
    assert rank_scale_of(skewed) == {}
    assert "rank_scale" not in costs_from_timeline(skewed)


def test_the_plan_exposes_the_faster_members_wait_at_each_all_to_all():
    s = _moe()
    even = exposure(s, *_times(simulate(s)))["per_rank"]["exposed_ep"]
    assert even[0] == pytest.approx(even[1])
    sim = simulate(s, replace(s.config.costs, rank_scale=TRUTH))
    skew = exposure(s, *_times(sim))["per_rank"]["exposed_ep"]
    # the faster member waits for the slower one with its compute idle; the slower one does not
    assert skew[0] > even[0] + 1.0
    assert skew[1] < skew[0] - 1.0
    # each all-to-all copy starts no earlier than its twin on the other member is ready
    ops = s.ops
    twin = {(op.kind, op.flow, op.stage, op.mb, op.sub): i for i, op in enumerate(ops)
            if op.rank == 1 and op.kind.startswith("A2A")}
    ready1 = {v: max((sim.end[u] for u, w in s.deps if w == v and ops[u].rank == 1), default=0.0)
              for v in twin.values()}
    for i, op in enumerate(ops):
        if op.rank == 0 and op.kind.startswith("A2A"):
            assert sim.start[i] >= ready1[twin[(op.kind, op.flow, op.stage, op.mb, op.sub)]] - 1e-9


def _times(sim):
    return list(sim.start), list(sim.end)


def test_compute_lanes_only_and_nothing_when_empty():
    s = _moe()
    plain = durations(s, s.config.costs)
    scaled = durations(s, replace(s.config.costs, rank_scale={0: 2.0}))
    for op, a, b in zip(s.ops, plain, scaled):
        assert b == (2.0 * a if op.rank == 0 and op.lane == "compute" else a), op.id


def test_rank_scale_round_trips_and_rejects_bad_input():
    c = costs_from_mapping({"F": 1, "rank_scale": {"0": 0.95, 1: 1.05}})
    assert c.rank_scale == {0: 0.95, 1: 1.05}
    assert costs_from_mapping(json.loads(json.dumps(c.to_dict()))).rank_scale == c.rank_scale
    assert "rank_scale" not in costs_from_mapping({"F": 1}).to_dict()
    for bad, match in [([1], "costs.rank_scale': got a list"), ({"x": 1}, "rank 'x' is not an integer"),
                       ({"-1": 1}, "rank '-1' is not an integer"), ({0: 0}, r"rank_scale.0': got 0, expected"),
                       ({0: float("inf")}, "expected a finite number > 0"), ({0: "fast"}, "expected a number")]:
        with pytest.raises(InputError, match=match):
            costs_from_mapping({"rank_scale": bad})


def test_a_bad_rank_scale_in_a_config_is_one_line_and_exit_2(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"schedule": "1f1b", "pp": 2, "microbatches": 4, "costs": {"rank_scale": {"0": -2}}}))
    result = CliRunner().invoke(app, ["plan", str(cfg)])
    assert result.exit_code == 2, result.output
    assert "costs.rank_scale.0" in result.output and "expected a finite number > 0" in result.output
    assert len(result.output.strip().splitlines()) == 1
    cfg.write_text(json.dumps({"schedule": "1f1b", "pp": 2, "microbatches": 4,
                               "costs": {"F": 1, "B": 2, "rank_scale": {"1": 2}}}))
    ok = CliRunner().invoke(app, ["plan", str(cfg), "--output", "json"])
    assert ok.exit_code == 0, ok.output
    ranks = json.loads(ok.output)["ranks"]
    assert ranks[1]["busy"] == pytest.approx(2 * ranks[0]["busy"])
