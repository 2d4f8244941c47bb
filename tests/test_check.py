"""The checker: every invalid fixture caught with its code; generated schedules pass; mutations fail."""
from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mutations import drop_one, duplicate_one, lanes_of, move_before_dependency

from pptl.checks import run_checks
from pptl.config import Config
from pptl.errors import InputError
from pptl.formats.loader import load_any
from pptl.schedules import build_schedule

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

INVALID = {
    "deadlock_two_ranks.json": {"PP007"},
    "b_before_f.json": {"PP006", "PP007"},
    "w_before_i.json": {"PP006", "PP007"},
    "duplicate.json": {"PP002"},
    "missing.json": {"PP003"},
    "out_of_range.json": {"PP004"},
    "stage_on_two_ranks.json": {"PP005"},
    "malformed.json": {"PP001"},
    "unmatched_send.json": {"PP008"},
    "over_memory.yaml": {"PP009"},
}


@pytest.mark.parametrize("name, codes", sorted(INVALID.items()), ids=sorted(INVALID))
def test_invalid_fixture_is_caught(name: str, codes: set[str]) -> None:
    loaded = load_any(FIXTURES / "invalid" / name)
    found = {v.code for v in run_checks(loaded.schedule) if v.severity == "error"}
    assert codes <= found, found


@pytest.mark.parametrize("kind", ["F", "B"])
def test_two_different_ops_doing_the_same_work_are_duplicates(kind: str) -> None:
    """Not a copy: the second op differs (a relabelled op on another lane), so only its work repeats."""
    s = build_schedule(Config(schedule="1f1b", pp=2, microbatches=4))
    lanes = lanes_of(s)
    first = next(op for op in lanes[(1, "compute")] if op.kind == kind and op.mb == 2)
    again = dataclasses.replace(first, lane="compute2", label="again")
    lanes[(1, "compute2")] = [again]
    dup = s.with_lanes(lanes)
    found = [v for v in run_checks(dup) if v.code == "PP002"]
    assert found, f"{again.id} repeats {first.id}'s work and no PP002 was reported"
    # two full backwards share both the I-work and the W-work of their unit: one report, as B
    assert [v.message for v in found] == [f"{kind} of stage 1 mb 2 is done twice: by {first.id} and by {again.id}"]
    assert found[0].ops == (first.id, again.id)


def test_deadlock_names_the_cycle_across_two_ranks() -> None:
    s = load_any(FIXTURES / "invalid" / "deadlock_two_ranks.json").schedule
    [v] = [v for v in run_checks(s) if v.code == "PP007"]
    assert v.message.startswith("deadlock across ranks 0, 1: ")
    # every op of the cycle is named, in order, with why each waits on the next
    assert set(v.ops) == {"r0/compute/B s0 mb0", "r0/compute/F s0 mb1", "r1/compute/F s1 mb1", "r1/compute/B s1 mb0"}
    assert "(next on lane)" in v.message and "(needed by)" in v.message
    for op in v.ops:
        assert op in v.message


def test_memory_limit_names_rank_and_moment() -> None:
    s = build_schedule(Config(schedule="1f1b", pp=4, microbatches=8))
    [v] = [v for v in run_checks(s, memory_limit=3) if v.code == "PP009"]
    assert v.message.startswith("rank 0 holds 4 activation units at t=3 ")
    assert "over the limit 3" in v.message
    assert run_checks(s, memory_limit=4) == []


def test_bad_p2p_mode_is_misuse() -> None:
    s = build_schedule(Config(schedule="1f1b", pp=2, microbatches=2))
    with pytest.raises(InputError, match="--p2p: got 'mpi', expected one of nonblocking, nccl, blocking"):
        run_checks(s, p2p="mpi")


# --------------------------------------------------------------------------------------------
# Property tests over configs

FAMILIES = ["gpipe", "1f1b", "interleaved-1f1b"]


@st.composite
def configs(draw: st.DrawFn) -> Config:
    name = draw(st.sampled_from(FAMILIES))
    p = draw(st.integers(1, 6))
    if name == "interleaved-1f1b":
        v = draw(st.integers(2, 3))
        g = draw(st.integers(p, 2 * p))
        # A last group shorter than pp is refused (Megatron-Core's rule; some of those orders deadlock,
        # see test_interleaved_short_last_group_is_refused_before_it_can_deadlock).
        m = g * draw(st.integers(1, 3))
        return Config(schedule=name, pp=p, vpp=v, microbatches=m, group_size=g,
                      split_backward=draw(st.booleans()))
    m = draw(st.integers(1, 12))
    return Config(schedule=name, pp=p, microbatches=m, split_backward=draw(st.booleans()))


_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(configs())
def test_generated_schedules_pass(cfg: Config) -> None:
    assert run_checks(build_schedule(cfg)) == []


@_SETTINGS
@given(configs(), st.randoms(use_true_random=False))
def test_dropped_op_is_caught(cfg: Config, rnd: random.Random) -> None:
    mutant, victim = drop_one(build_schedule(cfg), rnd)
    codes = {v.code for v in run_checks(mutant)}
    expected = "PP008" if victim.kind in ("SEND", "RECV") else "PP003"
    assert expected in codes, (victim.id, codes)


@_SETTINGS
@given(configs(), st.randoms(use_true_random=False))
def test_duplicated_op_is_caught(cfg: Config, rnd: random.Random) -> None:
    assert "PP002" in {v.code for v in run_checks(duplicate_one(build_schedule(cfg), rnd))}


@_SETTINGS
@given(configs(), st.randoms(use_true_random=False))
def test_op_moved_before_its_dependency_is_caught(cfg: Config, rnd: random.Random) -> None:
    """Move an op to an earlier position, ahead of an op on its lane that it (transitively) needs."""
    moved = move_before_dependency(build_schedule(cfg), rnd)
    assert moved is not None  # every schedule has a backward after its forward on one lane
    mutant, op = moved
    codes = {v.code for v in run_checks(mutant)}
    assert codes & {"PP006", "PP007"}, (op.id, codes)


def test_move_mutation_has_candidates() -> None:
    """The move test above is not vacuous for ordinary configs."""
    s = build_schedule(Config(schedule="1f1b", pp=2, microbatches=2))
    b = s.lanes[(0, "compute")]
    assert [s.ops[i].kind for i in b] == ["F", "F", "B", "B"]


def test_interleaved_short_last_group_is_refused_before_it_can_deadlock() -> None:
    """pp=4, vpp=3, m=9, G=4: the last group holds one micro-batch. Megatron-Core refuses it, and
    so does pptl (its order would have rank 0 run F s8 mb8 before B s8 mb4 while rank 3 runs
    B s7 mb4 before F s7 mb8: a deadlock)."""
    with pytest.raises(InputError, match="last group of 9 mod 4 = 1 micro-batch, fewer than pp=4 "
                                         "\\(Megatron-Core's last-group rule"):
        build_schedule(Config(schedule="interleaved-1f1b", pp=4, vpp=3, microbatches=9))


def test_a_repeated_send_or_recv_is_a_duplicate_op() -> None:
    # PP002 compares messages whole only when two share (kind, flow, direction, stage, mb).
    from pptl.config import config_from_mapping
    from pptl.schedules import build_schedule

    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 4, "microbatches": 8}))
    assert not [v for v in run_checks(s) if v.code == "PP002"]
    for lane in ("send", "recv"):
        lanes = {k: [s.ops[i] for i in v] for k, v in s.lanes.items()}
        lanes[(1, lane)].append(lanes[(1, lane)][2])
        got = [v.message for v in run_checks(s.with_lanes(lanes)) if v.code == "PP002"]
        assert got == [f"duplicate op {lanes[(1, lane)][2].id}"], got
