"""PP006, PP008 and PP030-PP033 on a table-made schedule (numpy columns, no ``Op`` objects) report
exactly what they report on the same schedule's ``Op`` list, and build no ``Op`` when valid.

Each rule runs on a fresh context of a :func:`tests.table_copy.table_made` copy with
``pptl.columns.FORCE = True`` and on the object schedule with ``FORCE = False``: same violations,
messages, op ids and order. Schedules: every CSV fixture and its mutants (``_schedules``), the
plan and config fixtures, every family on a small config, and hand-broken copies per rule.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pptl import columns
from pptl.checks import Context, comm, order, p2p, run_checks
from pptl.config import Config
from pptl.formats.loader import load_any
from pptl.ir import Schedule
from pptl.schedules import FAMILIES, build_schedule
from tests.table_copy import table_made
from tests.test_check_arrays import MODES, SCHEDULES

ROOT = Path(__file__).resolve().parent.parent
RULES = {"PP006": order.local_order, "PP008": comm.unmatched_p2p, "PP030": p2p.fifo_order,
         "PP031": p2p.p2p_deadlock, "PP032": p2p.send_before_data, "PP033": p2p.recv_after_use}


@pytest.fixture(autouse=True)
def _reset_force():
    yield
    columns.FORCE = None


def _both(s: Schedule, mode: str) -> dict[str, tuple[list, list, bool]]:
    """Per rule: (plain violations, array violations, whether the table copy built its ops)."""
    out = {}
    for code, fn in RULES.items():
        columns.FORCE = False
        plain = fn(Context(s, p2p=mode))
        columns.FORCE = True
        t = table_made(s)
        ctx = Context(t, p2p=mode)
        assert ctx.table is not None
        arrays = fn(ctx)
        out[code] = (plain, arrays, t.has_ops())
    columns.FORCE = None
    return out


def _assert_same(s: Schedule, mode: str) -> dict[str, list]:
    got = {}
    for code, (plain, arrays, built) in _both(s, mode).items():
        assert arrays == plain, code
        if not plain:
            assert not built, f"{code} built the ops of a schedule it found valid"
        got[code] = plain
    # All six on one context, as `pptl check` runs them (they share cached arrays).
    columns.FORCE = True
    t = table_made(s)
    together = run_checks(t, p2p=mode, select=set(RULES))
    if not any(got.values()):
        assert not t.has_ops()
    columns.FORCE = False
    assert together == run_checks(s, p2p=mode, select=set(RULES))
    return got


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,schedule", SCHEDULES, ids=[n for n, _ in SCHEDULES])
def test_csv_fixtures_and_mutants(name: str, schedule: Schedule, mode: str) -> None:
    _assert_same(schedule, mode)


PLANS = sorted(p for p in [*ROOT.glob("fixtures/*.json"), *ROOT.glob("fixtures/invalid/*.json"),
                           *ROOT.glob("fixtures/*.yaml")])


@pytest.mark.parametrize("path", PLANS, ids=[p.name for p in PLANS])
def test_plan_fixtures(path: Path) -> None:
    s = load_any(path).schedule
    if s is None:
        pytest.skip("a timeline")
    _assert_same(s, "nccl")


def _family_config(family: str) -> Config:
    extra = {"vpp": 2} if family in ("interleaved-1f1b", "moe-1f1b-overlap", "looped-bfs", "interleaved-zb") else {}
    return Config(schedule=family, pp=4, microbatches=8, **extra)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_is_valid_on_both_paths(family: str) -> None:
    s = build_schedule(_family_config(family))
    for mode in MODES:
        got = _assert_same(s, mode)
        assert not got["PP006"] and not got["PP008"], family


# --- hand-broken schedules ----------------------------------------------------------------------


def _relaned(s: Schedule, key: tuple[int, str], reorder) -> Schedule:
    lanes = {k: [s.ops[i] for i in v] for k, v in s.lanes.items()}
    lanes[key] = reorder(lanes[key])
    return s.with_lanes(lanes)


def _first_index(ops, pred) -> int:
    return next(k for k, op in enumerate(ops) if pred(op))


def test_backward_before_forward_is_found_on_both_paths() -> None:
    s = build_schedule(Config(schedule="1f1b", pp=4, microbatches=8))

    def b_first(ops):
        b = _first_index(ops, lambda o: o.kind == "B")
        return [ops[b]] + ops[:b] + ops[b + 1:]

    broken = _relaned(s, (2, "compute"), b_first)
    assert [v.code for v in _assert_same(broken, "nccl")["PP006"]] == ["PP006"]


def test_w_before_i_and_an_fb_before_its_forward_are_found() -> None:
    s = build_schedule(Config(schedule="zb-h1", pp=4, microbatches=8))

    def w_first(ops):
        w = _first_index(ops, lambda o: o.kind == "W")
        return [ops[w]] + ops[:w] + ops[w + 1:]

    got = _assert_same(_relaned(s, (1, "compute"), w_first), "nccl")["PP006"]
    assert got and "weight gradient" in got[0].message
    d = build_schedule(Config(schedule="dualpipe", pp=4, microbatches=8))
    ranks = [k for k, v in d.lanes.items() if k[1] == "compute" and any(d.ops[i].kind == "FB" for i in v)]

    def fb_first(ops):
        fb = _first_index(ops, lambda o: o.kind == "FB")
        return [ops[fb]] + ops[:fb] + ops[fb + 1:]

    got = _assert_same(_relaned(d, ranks[0], fb_first), "nccl")["PP006"]
    assert got and "backward needs its forward" in got[0].message


def test_every_backward_before_every_forward_keeps_the_plain_order() -> None:
    s = build_schedule(Config(schedule="interleaved-1f1b", pp=4, vpp=2, microbatches=8))
    broken = s
    for r in range(4):
        broken = _relaned(broken, (r, "compute"), lambda ops: sorted(ops, key=lambda o: o.kind != "B"))
    got = _assert_same(broken, "nccl")["PP006"]
    assert len(got) > 8


def test_repeated_work_takes_the_first_listing() -> None:
    s = build_schedule(Config(schedule="1f1b", pp=2, microbatches=4))
    # A second copy of rank 0's first F, listed after its B: the first copy still comes first.
    lanes = {k: [s.ops[i] for i in v] for k, v in s.lanes.items()}
    ops = lanes[(0, "compute")]
    lanes[(0, "compute")] = ops + [ops[0]]
    _assert_same(s.with_lanes(lanes), "nccl")


def _without(s: Schedule, pred) -> Schedule:
    lanes = {k: [s.ops[i] for i in v if not pred(s.ops[i])] for k, v in s.lanes.items()}
    return s.with_lanes(lanes)


def test_a_missing_recv_and_a_missing_pair_are_found() -> None:
    s = build_schedule(Config(schedule="1f1b", pp=4, microbatches=8))
    assert any(op.kind == "SEND" for op in s.ops)
    no_recv = _without(s, lambda o: o.kind == "RECV" and o.mb == 3 and o.flow == "F" and o.stage == 2)
    got = _assert_same(no_recv, "nccl")["PP008"]
    assert any("has no matching RECV" in v.message for v in got)
    no_pair = _without(s, lambda o: o.kind in ("SEND", "RECV") and o.mb == 5 and o.flow == "B")
    got = _assert_same(no_pair, "nccl")["PP008"]
    assert any("produces data for rank" in v.message for v in got)


def test_a_pair_whose_ranks_disagree_is_found() -> None:
    s = build_schedule(Config(schedule="1f1b", pp=4, microbatches=8))
    lanes = {k: [s.ops[i] for i in v] for k, v in s.lanes.items()}
    key = next(k for k, v in lanes.items() if any(o.kind == "RECV" for o in v))
    k = _first_index(lanes[key], lambda o: o.kind == "RECV")
    lanes[key][k] = dataclasses.replace(lanes[key][k], peer=(lanes[key][k].peer + 2) % 4)
    got = _assert_same(s.with_lanes(lanes), "nccl")["PP008"]
    assert any("disagree on their ranks" in v.message for v in got)


def test_a_schedule_without_p2p_ops_has_nothing_to_match() -> None:
    s = build_schedule(Config(schedule="1f1b", pp=4, microbatches=8))
    compute_only = _without(s, lambda o: o.kind in ("SEND", "RECV"))
    assert _assert_same(compute_only, "nccl")["PP008"] == []


def test_p2p_fixtures_report_on_the_array_path() -> None:
    # Each fixture's own rule fires on the table copy, with the plain path's message.
    for name, code, mode in [("p2p_nccl_reordered.csv", "PP030", "nccl"), ("p2p_nccl_hang.csv", "PP031", "nccl"),
                             ("p2p_blocking_ring.csv", "PP031", "blocking"),
                             ("p2p_send_before_data.csv", "PP032", "nccl"),
                             ("p2p_recv_after_use.csv", "PP033", "nccl")]:
        s = load_any(ROOT / "fixtures/invalid" / name, report_problems=True).schedule
        got = _assert_same(s, mode)[code]
        assert [v.code for v in got] == [code], name


def test_a_plan_without_an_issue_order_builds_no_ops() -> None:
    s = build_schedule(Config(schedule="interleaved-1f1b", pp=4, vpp=2, microbatches=8))
    columns.FORCE = True
    t = table_made(s)
    assert run_checks(t, select=set(RULES)) == []
    assert not t.has_ops()
