"""Rules PP040-PP044 and properties of moe-1f1b-overlap: every generated schedule passes ``check``
over (pp, vpp, microbatches, G, layers, ep, overlap, offload, costs); mutations are caught."""
from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mutations import drop_one, duplicate_one, error_codes, lanes_of, move_before_dependency

from pptl.checks import run_checks
from pptl.config import Config
from pptl.formats.loader import load_any
from pptl.formats.plan import plan_from_dict, plan_to_dict
from pptl.schedules import build_schedule
from pptl.schedules._moe_metrics import exposed_in_timeline
from pptl.simulate import simulate

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NAME = "moe-1f1b-overlap"

INVALID = {
    "moe_backward_before_onload.json": {"PP040"},
    "moe_onload_without_offload.json": {"PP041"},
    "moe_ep_a2a_order.json": {"PP042"},
    "moe_no_extra_warmup.yaml": {"PP043", "PP007"},
}


codes = error_codes


@pytest.mark.parametrize("name, expected", sorted(INVALID.items()), ids=sorted(INVALID))
def test_invalid_fixture_is_caught(name: str, expected: set[str]) -> None:
    assert codes(load_any(FIXTURES / "invalid" / name).schedule) == expected


def test_backward_before_onload_names_both_ops_and_times() -> None:
    s = load_any(FIXTURES / "invalid" / "moe_backward_before_onload.json").schedule
    [v] = [v for v in run_checks(s) if v.code == "PP040"]
    assert v.message == ("r0/compute/MLP_B MLP s0 mb0 #0 starts at t=12.5, before its onload "
                         "r0/h2d/ONLOAD_B Onload s0 mb0 #0 ends at t=14.5: the backward reads activations still "
                         "being copied back (make it wait on the onload)")


def test_ep_order_mismatch_names_position_and_ranks() -> None:
    s = load_any(FIXTURES / "invalid" / "moe_ep_a2a_order.json").schedule
    [v] = [v for v in run_checks(s) if v.code == "PP042"]
    assert v.message.startswith("EP group [0, 1]: all-to-all #3 of rank 1 is dispatch F s0 mb1 layer 0 "
                                "(r1/comm/A2A_DISPATCH_F EP-D s0 mb1 d1 #0) where rank 0 issues combine B s0 mb0 "
                                "layer 0 (r0/comm/A2A_COMBINE_B EP-C s0 mb0 #0)")
    assert v.message.endswith("or NCCL hangs")


def test_ep_member_missing_an_all_to_all() -> None:
    s = build_schedule(Config(schedule=NAME, pp=1, microbatches=1, options={"ep": 2, "layers_per_chunk": 1}))
    lanes = {k: [s.ops[i] for i in v] for k, v in s.lanes.items()}
    assert lanes[(1, "comm")].pop().kind == "A2A_DISPATCH"
    [v] = [v for v in run_checks(s.with_lanes(lanes)) if v.code == "PP042"]
    assert v.message == ("EP group [0, 1]: rank 1 issues 3 all-to-alls and rank 0 4; rank 0's dispatch B s0 mb0 "
                         "layer 0 (r0/comm/A2A_DISPATCH_B EP-D s0 mb0 #0) has no partner and would wait forever")


def test_offload_without_onload_reads_host_memory() -> None:
    s = build_schedule(Config(schedule=NAME, pp=1, microbatches=2, options={"offload": True}))
    lanes = {k: [s.ops[i] for i in v] for k, v in s.lanes.items()}
    gone = lanes[(0, "h2d")].pop(0)
    [v] = [v for v in run_checks(s.with_lanes(lanes)) if v.code == "PP040"]
    assert f"layer {gone.sub} of stage 0 mb {gone.mb}" in v.message and "no ONLOAD brings it back" in v.message


# ------------------------------------------------------------------------------------------------
# Properties


@st.composite
def moe_configs(draw: st.DrawFn, small: bool = False) -> Config:
    p = draw(st.integers(1, 2 if small else 4))
    opts = {"layers_per_chunk": draw(st.integers(1, 2)), "overlap": draw(st.booleans()),
            "offload": draw(st.booleans()), "ep": draw(st.integers(1, 2)),
            "costs": {"dispatch": draw(st.sampled_from([0.0, 0.5, 3.0])), "combine": 0.5,
                      "offload_bandwidth": draw(st.sampled_from([0.05, 1.0]))}}
    if p == 1:
        return Config(schedule=NAME, pp=1, microbatches=draw(st.integers(1, 4 if small else 6)), options=opts)
    v = draw(st.integers(2, 2 if small else 3))
    g = draw(st.integers(p, 2 * p))
    # A last group shorter than pp is refused (Megatron-Core's rule, tests/schedules/test_interleaved.py),
    # so m is a multiple of G here.
    m = g * draw(st.integers(1, 1 if small else 2))
    return Config(schedule=NAME, pp=p, vpp=v, microbatches=m, group_size=g, options=opts)


_SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(_SETTINGS, max_examples=80)
@given(moe_configs())
def test_generated_schedules_pass(cfg: Config) -> None:
    s = build_schedule(cfg)
    assert codes(s) == set()
    sim = simulate(s)
    tl = sim.timeline(with_waits=False)
    total, exposed = exposed_in_timeline(tl, frozenset({"A2A_DISPATCH", "A2A_COMBINE"}))
    assert all(0 <= exposed[r] <= total[r] + 1e-9 for r in total)
    if not cfg.options["offload"]:
        assert not any(op.kind in ("OFFLOAD", "ONLOAD") for op in s.ops)


@_SETTINGS
@given(moe_configs(small=True))
def test_plan_file_round_trip_keeps_the_sub_op_facts(cfg: Config) -> None:
    s = build_schedule(cfg)
    back, _ = plan_from_dict(plan_to_dict(s))
    assert len(back.deps) == len(s.deps) and simulate(back).makespan == simulate(s).makespan


_EXPECTED_WHEN_DROPPED = {"SEND": "PP008", "RECV": "PP008", "F": "PP003", "I": "PP003", "W": "PP003",
                          "OFFLOAD": "PP041", "ONLOAD": "PP040"}


@_SETTINGS
@given(moe_configs(small=True), st.randoms(use_true_random=False))
def test_dropped_op_is_caught(cfg: Config, rnd: random.Random) -> None:
    mutant, victim = drop_one(build_schedule(cfg), rnd)
    expected = _EXPECTED_WHEN_DROPPED.get(victim.kind, "PP044")  # a layer sub-op
    assert expected in codes(mutant), victim.id


@_SETTINGS
@given(moe_configs(small=True), st.randoms(use_true_random=False))
def test_duplicated_op_is_caught(cfg: Config, rnd: random.Random) -> None:
    assert "PP002" in codes(duplicate_one(build_schedule(cfg), rnd))


@_SETTINGS
@given(moe_configs(small=True), st.randoms(use_true_random=False))
def test_op_moved_before_its_dependency_is_caught(cfg: Config, rnd: random.Random) -> None:
    moved = move_before_dependency(build_schedule(cfg), rnd, tries=40)
    assert moved is not None, "no op with an earlier dependency on its lane was sampled (the test would be vacuous)"
    mutant, op = moved
    assert codes(mutant) & {"PP006", "PP007"}, op.id


@_SETTINGS
@given(moe_configs(small=True), st.randoms(use_true_random=False))
def test_swapped_all_to_alls_of_one_ep_member_are_caught(cfg: Config, rnd: random.Random) -> None:
    cfg = replace(cfg, options={**cfg.options, "ep": 2})
    s = build_schedule(cfg)
    lanes = lanes_of(s)
    rank = rnd.choice([g[1] for g in s.meta["ep_groups"]])
    comm = lanes[(rank, "comm")]
    a2a = [k for k, op in enumerate(comm) if op.kind.startswith("A2A")]
    pairs = [(a, b) for a, b in zip(a2a, a2a[1:]) if (comm[a].kind, comm[a].flow, comm[a].mb, comm[a].sub)
             != (comm[b].kind, comm[b].flow, comm[b].mb, comm[b].sub)]
    a, b = rnd.choice(pairs)
    comm[a], comm[b] = comm[b], comm[a]
    assert "PP042" in codes(s.with_lanes(lanes))
