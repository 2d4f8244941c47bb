"""Property tests for zb-h1, zb-h2, zbv, dualpipe and dualpipev: every generated schedule passes
``check``, and each mutation (drop, duplicate, move earlier, break the W FIFO, pair an F&B with
its own dependency) is caught with its code. Also the invalid fixtures of PP020 and PP021."""
from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mutations import drop_one, duplicate_one, lanes_of, move_before_dependency
from mutations import error_codes as _errors

from pptl.checks import run_checks
from pptl.config import Config, Costs
from pptl.formats.loader import load_any
from pptl.schedules import build_schedule

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
_SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def configs(draw: st.DrawFn) -> Config:
    name = draw(st.sampled_from(["zb-h1", "zb-h2", "zbv", "dualpipe", "dualpipev"]))
    if name == "dualpipe":
        p = 2 * draw(st.integers(1, 4))
        m = 2 * draw(st.integers(p, 2 * p))
    else:
        p = draw(st.integers(1, 5))
        lo = {"zb-h1": p, "zb-h2": 2 * p - 1, "zbv": 1, "dualpipev": 2 * p}[name]
        m = draw(st.integers(lo, lo + 2 * p + 2))
    cost = st.sampled_from([0.5, 1.0, 2.0, 3.0])
    f, i, w = draw(cost), draw(cost), draw(cost)
    return Config(schedule=name, pp=p, microbatches=m, costs=Costs(base={"F": f, "I": i, "W": w, "B": i + w}))


@_SETTINGS
@given(configs())
def test_generated_schedules_pass(cfg: Config) -> None:
    violations = run_checks(build_schedule(cfg))
    assert [v for v in violations if v.severity == "error"] == []
    assert {v.code for v in violations} <= {"PP022"}  # warnings only: a formula's assumption


@_SETTINGS
@given(configs(), st.randoms(use_true_random=False))
def test_dropped_op_is_caught(cfg: Config, rnd: random.Random) -> None:
    mutant, victim = drop_one(build_schedule(cfg), rnd)
    expected = "PP008" if victim.kind in ("SEND", "RECV") else "PP003"
    assert expected in _errors(mutant), victim.id


@_SETTINGS
@given(configs(), st.randoms(use_true_random=False))
def test_duplicated_op_is_caught(cfg: Config, rnd: random.Random) -> None:
    assert "PP002" in _errors(duplicate_one(build_schedule(cfg), rnd))


@_SETTINGS
@given(configs(), st.randoms(use_true_random=False))
def test_op_moved_before_its_dependency_is_caught(cfg: Config, rnd: random.Random) -> None:
    """Move an op ahead of an op on its lane that it needs (directly or through other ranks)."""
    moved = move_before_dependency(build_schedule(cfg), rnd)
    assert moved is not None  # every family has a backward after its forward on some lane
    mutant, op = moved
    assert _errors(mutant) & {"PP006", "PP007"}, op.id


def _fifo_swaps(s) -> list[tuple[tuple[int, str], int, int]]:
    """(lane, j, k): moving the W at j to position k (before another W of the same FIFO whose I
    ran earlier) keeps every data fact but breaks the FIFO."""
    per_rank = s.meta.get("weight_grad_store") == "rank"
    out = []
    for key, order in s.lanes.items():
        ops = [s.ops[i] for i in order]
        i_pos = {(o.direction, o.stage, o.mb): n for n, o in enumerate(ops) if o.kind == "I"}
        ws = [(n, o) for n, o in enumerate(ops) if o.kind == "W"]
        for a, (ka, wa) in enumerate(ws):
            for kb, wb in ws[a + 1:]:
                same = per_rank or (wa.direction, wa.stage) == (wb.direction, wb.stage)
                if same and i_pos[(wb.direction, wb.stage, wb.mb)] < ka:
                    out.append((key, kb, ka))
                    break
    return out


@_SETTINGS
@given(configs(), st.randoms(use_true_random=False))
def test_w_moved_ahead_in_its_fifo_is_caught(cfg: Config, rnd: random.Random) -> None:
    s = build_schedule(cfg)
    swaps = _fifo_swaps(s)
    if not swaps:  # one micro-batch per FIFO in flight at a time (e.g. pp=1): nothing to reorder
        return
    key, j, k = rnd.choice(swaps)
    lanes = lanes_of(s)
    op = lanes[key].pop(j)
    lanes[key].insert(k, op)
    assert _errors(s.with_lanes(lanes)) == {"PP021"}, op.id


def test_fifo_mutation_has_candidates() -> None:
    """The FIFO test above is not vacuous: every family offers W ops to reorder."""
    for name, p, m in [("zb-h1", 4, 8), ("zb-h2", 4, 8), ("zbv", 4, 8), ("dualpipe", 4, 8), ("dualpipev", 4, 8)]:
        assert _fifo_swaps(build_schedule(Config(schedule=name, pp=p, microbatches=m))), name


@_SETTINGS
@given(st.sampled_from([("dualpipe", 4, 8), ("dualpipe", 8, 20), ("dualpipev", 3, 8), ("dualpipev", 4, 10)]),
       st.randoms(use_true_random=False))
def test_fb_paired_with_its_own_dependency_is_caught(case: tuple, rnd: random.Random) -> None:
    """Give an F&B the backward of its own F's micro-batch (same stage and direction), taken from
    the op on its rank that held it (a B or another F&B), which takes the F&B's old backward: the
    same work, but one op now pairs a forward with a backward that needs it."""
    name, p, m = case
    s = build_schedule(Config(schedule=name, pp=p, microbatches=m))
    lanes = lanes_of(s)
    swaps = []
    for key, ops in lanes.items():
        for a, op in enumerate(ops):
            if op.kind != "FB":
                continue
            own = (op.stage, op.mb, op.direction)
            for b, other in enumerate(ops):
                if (other.kind == "FB" and other.pair == own) or (
                        other.kind == "B" and (other.stage, other.mb, other.direction) == own):
                    swaps.append((key, a, b))
    assert swaps
    key, a, b = rnd.choice(swaps)
    ops = lanes[key]
    fb, other = ops[a], ops[b]
    ps, pm, pd = fb.pair
    ops[a] = replace(fb, pair=(fb.stage, fb.mb, fb.direction))
    if other.kind == "FB":
        ops[b] = replace(other, pair=fb.pair)
    else:  # the plain B now does the F&B's old backward (its stage and chunk on this rank)
        chunk = next(o.chunk for o in ops if o.kind in ("F", "B", "I") and (o.stage, o.direction) == (ps, pd))
        ops[b] = replace(other, stage=ps, mb=pm, direction=pd, chunk=chunk)
    assert "PP020" in _errors(s.with_lanes(lanes)), ops[a].id


@pytest.mark.parametrize("name, code, text", [
    ("dualpipe_fb_self_dependency.json", "PP020",
     "r0/compute/FB s0 mb1 +B s0 mb1 overlaps F of stage 0 mb 1 with B of stage 0 of the same micro-batch; "
     "that backward needs it directly, so the pair can never start"),
    ("zb_w_fifo.json", "PP021",
     "r0/compute/W s0 mb1 pops the weight-gradient FIFO of rank 0, stage 0 before r0/compute/W s0 mb0: "
     "its I ran after r0/compute/I s0 mb0, and W drains in the order of its I"),
], ids=["fb-self-dependency", "w-fifo"])
def test_invalid_fixtures(name: str, code: str, text: str) -> None:
    violations = run_checks(load_any(FIXTURES / "invalid" / name).schedule)
    assert [(v.code, v.message) for v in violations] == [(code, text)]


def test_dualpipe_fifo_is_one_per_rank() -> None:
    """DualPipe's W ops pop one FIFO shared by both directions: moving a W of one direction ahead
    of a W of the other is caught, though each direction's own order is kept."""
    s = build_schedule(Config(schedule="dualpipe", pp=4, microbatches=8))
    lanes = lanes_of(s)
    ops = lanes[(0, "compute")]
    ws = [n for n, o in enumerate(ops) if o.kind == "W"]
    cross = next((a, b) for a, b in zip(ws, ws[1:]) if ops[a].direction != ops[b].direction)
    a, b = cross
    ops[a], ops[b] = ops[b], ops[a]
    [v] = [v for v in run_checks(s.with_lanes(lanes)) if v.code == "PP021"]
    assert "FIFO of rank 0 before" in v.message
