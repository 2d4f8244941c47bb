"""The structure rules (PP001-PP005) on op columns give what they give on ``Op`` objects.

Every schedule below goes through each rule twice: as objects with the plain path
(``columns.FORCE = False``) and as a table-made copy (no ``Op`` objects) with the array path
(``FORCE = True``); the violations must be identical, in order. A valid table-made schedule must
still have no ``Op`` objects after the rules ran.
"""
from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mutations import drop_one, duplicate_one, lanes_of, move_before_dependency
from table_copy import table_made

from pptl import columns
from pptl.checks.base import Context, Violation
from pptl.checks.structure import duplicate_ops, index_out_of_range, malformed_ops, missing_work, stage_on_two_ranks
from pptl.checks.work_arrays import group_ids, work_arrays
from pptl.config import Config
from pptl.formats.loader import load_any
from pptl.formats.torch_csv import load_csv_text
from pptl.ir import Op, Schedule, ScheduleBuilder
from pptl.optable import OpTable
from pptl.schedules import build_schedule

ROOT = Path(__file__).resolve().parent.parent
RULES = [malformed_ops, duplicate_ops, missing_work, index_out_of_range, stage_on_two_ranks]
FAMILY_CONFIGS = [
    Config(schedule="gpipe", pp=3, microbatches=5),
    Config(schedule="1f1b", pp=4, microbatches=8),
    Config(schedule="1f1b", pp=3, microbatches=5, split_backward=True),
    Config(schedule="interleaved-1f1b", pp=4, vpp=2, microbatches=8),
    Config(schedule="zb-h1", pp=4, microbatches=8),
    Config(schedule="zb-h2", pp=4, microbatches=8),
    Config(schedule="zbv", pp=4, microbatches=8),
    Config(schedule="dualpipe", pp=4, microbatches=8),
    Config(schedule="dualpipev", pp=4, microbatches=8),
]
FILES = sorted([*ROOT.glob("fixtures/*.yaml"), *ROOT.glob("fixtures/*.toml"), *ROOT.glob("fixtures/invalid/*.json"),
                *ROOT.glob("fixtures/invalid/*.yaml"), *ROOT.glob("fixtures/csv/*.csv"),
                *ROOT.glob("fixtures/csv/invalid/*.csv"), *ROOT.glob("fixtures/invalid/p2p_*.csv")])


@pytest.fixture(autouse=True)
def _reset_force():
    yield
    columns.FORCE = None


def _file(path: Path) -> Schedule:
    if path.suffix == ".csv":
        return load_csv_text(path.read_text(), report_problems=True)[0]
    s = load_any(path).schedule
    assert s is not None, path
    return s


def _make(pp: int, ops: list[Op], *, stages: int = 2, mbs: int = 2, directions: int = 1) -> Schedule:
    b = ScheduleBuilder()
    b.extend(ops)
    return Schedule("hand", pp, stages, mbs, b.ops, b.lanes, [], directions)


def _full(pp: int = 2, mbs: int = 2, skip: tuple[str, int, int] | None = None) -> list[Op]:
    """F and B of every stage (stage s on rank s) and mb, but ``skip`` (kind, stage, mb)."""
    return [Op(k, st, "compute", st, mb) for st in range(pp) for mb in range(mbs) for k in ("F", "B")
            if (k, st, mb) != skip]


def _hand_made() -> list[tuple[str, Schedule]]:
    F = _full()
    return [
        ("unknown-kind", _make(2, [*F, Op("ZZZ", 0, "compute")])),
        ("negative-rank", _make(2, [*F, Op("F", -1, "compute", 0, 0)])),
        ("rank-too-large", _make(2, [Op("W", 5, "compute", 1, 1), *F])),
        ("no-lane", _make(2, [*F, Op("F", 0, "", 0, 1)])),
        ("b-without-stage", _make(2, [*F, Op("B", 0, "compute", -1, 1)])),
        ("fb-without-pair", _make(2, [*F, Op("FB", 0, "compute", 0, 1)])),
        ("fb-without-pair-twice", _make(2, [*F, Op("FB", 0, "compute", 0, 1), Op("FB", 0, "compute", 0, 1)])),
        ("send-bad-flow", _make(2, [*F, Op("SEND", 0, "send", 0, 0, peer=1, flow="X")])),
        ("recv-peer-out", _make(2, [*F, Op("RECV", 1, "recv", 1, 0, peer=7, flow="F")])),
        ("send-to-self", _make(2, [*F, Op("SEND", 0, "send", 0, 0, peer=0, flow="F")])),
        ("same-op-twice", _make(2, [*F, F[3]])),
        ("same-send-twice", _make(2, [*F, *[Op("SEND", 0, "send", 0, 0, peer=1, flow="F")] * 2])),
        ("same-recv-key-other-op", _make(2, [*F, Op("RECV", 1, "recv", 1, 0, peer=0, flow="F"),
                                             Op("RECV", 1, "recv", 1, 0, peer=0, flow="F", label="x")])),
        ("same-unknown-twice", _make(2, [*F, Op("H2D", 0, "h2d", payload=2.0), Op("H2D", 0, "h2d", payload=2.0),
                                         Op("H2D", 0, "h2d", payload=3.0)])),
        ("payload-signed-zero", _make(2, [*F, Op("H2D", 0, "h2d", payload=0.0), Op("H2D", 0, "h2d", payload=-0.0)])),
        ("work-twice-relabelled", _make(2, [*F, dataclasses.replace(F[0], label="again"),
                                            dataclasses.replace(F[1], lane="compute2")])),
        ("split-and-whole-backward", _make(2, [*F, Op("I", 1, "compute", 1, 0), Op("W", 1, "compute", 1, 0),
                                               Op("W", 1, "compute", 1, 0)])),
        ("fb-repeats-a-b", _make(2, [*_full(skip=("F", 0, 1)), Op("FB", 0, "compute", 0, 1, pair=(0, 0, 0))])),
        ("missing-f", _make(2, _full(skip=("F", 1, 0)))),
        ("missing-b", _make(2, _full(skip=("B", 0, 1)))),
        ("missing-w", _make(2, [*_full(skip=("B", 1, 1)), Op("I", 1, "compute", 1, 1)])),
        ("missing-i", _make(2, [*_full(skip=("B", 1, 1)), Op("W", 1, "compute", 1, 1)])),
        ("missing-direction-1", _make(2, _full(), directions=2)),
        ("empty", _make(2, [])),
        ("only-family-kinds", _make(2, [Op("H2D", 0, "h2d"), Op("BCAST", 1, "comm", peer=0)])),
        ("stage-out", _make(2, [*F, Op("F", 0, "compute", 2, 0)])),
        ("mb-out", _make(2, [*F, Op("B", 1, "compute", 1, 9)])),
        ("direction-out", _make(2, [*F, Op("W", 1, "compute", 1, 0, direction=3)])),
        ("fb-pair-out", _make(2, [*F, Op("FB", 0, "compute", 0, 1, pair=(5, 0, 0)),
                                  Op("FB", 1, "compute", 4, 1, pair=(0, 9, 0))])),
        ("no-stages", _make(2, F, stages=0)),
        ("stage-on-two-ranks", _make(3, [*F, Op("F", 1, "compute", 0, 1), Op("W", 2, "compute", 0, 0),
                                         Op("F", 0, "compute", 1, 1)])),
        ("stage-on-two-ranks-direction-1", _make(2, [*F, *[Op(k, 1 - st, "compute", st, mb, direction=1)
                                                          for st in range(2) for mb in range(2) for k in ("F", "B")],
                                                     Op("B", 0, "compute", 0, 0, direction=1)], directions=2)),
    ]


def _mutants() -> list[tuple[str, Schedule]]:
    out: list[tuple[str, Schedule]] = []
    for k, cfg in enumerate(FAMILY_CONFIGS):
        s = build_schedule(cfg)
        rnd = random.Random(k)
        out.append((f"{cfg.schedule}-drop", drop_one(s, rnd)[0]))
        out.append((f"{cfg.schedule}-duplicate", duplicate_one(s, rnd)))
        moved = move_before_dependency(s, rnd)
        if moved is not None:
            out.append((f"{cfg.schedule}-move", moved[0]))
        lanes = lanes_of(s)
        key = rnd.choice(sorted(k for k in lanes if k[1] == "compute"))
        lanes[key] = [dataclasses.replace(op, rank=(op.rank + 1) % s.pp) if i == 0 else op
                      for i, op in enumerate(lanes[key])]
        out.append((f"{cfg.schedule}-other-rank", s.with_lanes(lanes)))
    return out


def _cases() -> list[tuple[str, Schedule]]:
    out = [(p.relative_to(ROOT).as_posix(), _file(p)) for p in FILES]
    out += [(f"{c.schedule}-{c.pp}x{c.microbatches}", build_schedule(c)) for c in FAMILY_CONFIGS]
    return out + _mutants() + _hand_made()


CASES = _cases()


def _both(rule, s: Schedule) -> tuple[list[Violation], list[Violation], Schedule]:
    columns.FORCE = False
    ctx = Context(s)
    assert ctx.table is None
    plain = rule(ctx)
    columns.FORCE = True
    t = table_made(s)
    ctx = Context(t)
    assert ctx.table is not None and not t.has_ops()
    return plain, rule(ctx), t


def test_the_cases_cover_every_rule_and_family() -> None:
    names = {s.family for _, s in CASES}
    assert {"dualpipe", "dualpipev", "zbv", "moe-1f1b-overlap", "weight-update", "interleaved-1f1b"} <= names
    columns.FORCE = False
    for rule in RULES:
        assert sum(bool(rule(Context(s))) for _, s in CASES) >= 3, rule.__name__


@pytest.mark.parametrize("rule", RULES, ids=[r.__name__ for r in RULES])
@pytest.mark.parametrize("name,schedule", CASES, ids=[n for n, _ in CASES])
def test_arrays_report_what_objects_report(name: str, schedule: Schedule, rule) -> None:
    plain, arrays, t = _both(rule, schedule)
    assert arrays == plain
    if not plain:
        assert not t.has_ops(), f"{rule.__name__} built Op objects with nothing to report"


#: The cases the structure rules find nothing in (decided on the plain path, below the array size).
VALID = [(n, s) for n, s in CASES if not any(rule(Context(s)) for rule in RULES)]


@pytest.mark.parametrize("name,schedule", VALID, ids=[n for n, _ in VALID])
def test_all_five_rules_on_a_valid_table_build_no_op(name: str, schedule: Schedule) -> None:
    columns.FORCE = True
    t = table_made(schedule)
    ctx = Context(t)
    assert not any(rule(ctx) for rule in RULES)
    assert not t.has_ops()


def test_hand_made_cases_report_what_they_are_named_for() -> None:
    """The hand-made cases are not vacuous: each triggers its rule (checked on the plain path)."""
    columns.FORCE = False
    want = {"unknown-kind": "PP001", "negative-rank": "PP001", "no-lane": "PP001", "fb-without-pair": "PP001",
            "same-op-twice": "PP002", "same-send-twice": "PP002", "same-unknown-twice": "PP002",
            "payload-signed-zero": "PP002", "work-twice-relabelled": "PP002", "fb-repeats-a-b": "PP002",
            "missing-f": "PP003", "missing-w": "PP003", "missing-direction-1": "PP003", "stage-out": "PP004",
            "fb-pair-out": "PP004", "stage-on-two-ranks": "PP005", "stage-on-two-ranks-direction-1": "PP005"}
    cases = dict(_hand_made())
    for name, code in want.items():
        ctx = Context(cases[name])
        assert code in {v.code for rule in RULES for v in rule(ctx)}, name


def test_two_stage_reports_name_every_rank_in_order() -> None:
    """A spot check of the exact output (the differential tests compare the two paths)."""
    s = dict(_hand_made())["stage-on-two-ranks"]
    _, got, _ = _both(stage_on_two_ranks, s)
    assert [(v.message, v.ops) for v in got] == [
        ("stage 0 runs on ranks r0, r1, r2", ("r0/compute/F s0 mb0", "r1/compute/F s0 mb1", "r2/compute/W s0 mb0")),
        ("stage 1 runs on ranks r0, r1", ("r1/compute/F s1 mb0", "r0/compute/F s1 mb1"))]


def test_names_that_repeat_in_a_table_are_one_value() -> None:
    """A reader's table may list a label twice: ops that differ only in which copy are equal."""
    base = _make(2, [*_full(), Op("H2D", 0, "h2d", label="x"), Op("H2D", 0, "h2d", label="x")])
    t = OpTable.from_ops(base.ops)
    label = t.label.copy()
    label[-1] = len(t.label_names)
    t2 = dataclasses.replace(t, label=label, label_names=(*t.label_names, "x"))
    made = Schedule.from_table(family="hand", pp=2, num_stages=2, microbatches=2, table=t2, lanes=dict(base.lanes),
                               dep_arrays=(np.zeros(0, np.int64), np.zeros(0, np.int64)))
    columns.FORCE = True
    got = duplicate_ops(Context(made))
    assert [v.message for v in got] == ["duplicate op r0/h2d/H2D x"]


def test_work_arrays_list_what_the_work_index_lists() -> None:
    for _, s in CASES:
        columns.FORCE = False
        items = Context(s).work.items
        w = work_arrays(OpTable.from_ops(s.ops))
        roles = ["FGW"[r] for r in w.role.tolist()]
        assert list(zip(w.op.tolist(), roles, w.direction.tolist(), w.stage.tolist(), w.mb.tolist())) == items


_wide = st.integers(-(2**62), 2**62)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 5), st.one_of(st.integers(-2, 2), _wide)),
                min_size=1, max_size=30))
def test_group_ids_are_equal_exactly_where_rows_are(rows: list[tuple[int, int, int]]) -> None:
    cols = [np.array(c, dtype=np.int64) for c in zip(*rows)]
    ids, size = group_ids(*cols)
    assert ids.min() >= 0 and ids.max() < size
    for a in range(len(rows)):
        for b in range(len(rows)):
            assert (ids[a] == ids[b]) == (rows[a] == rows[b])


def test_ops_with_a_nan_payload_are_never_equal() -> None:
    """NaN is unequal to itself, so two such ops read from a file are two ops (as the plain path
    finds on the same table-made schedule once its ops are built)."""
    base = _make(2, [*_full(), Op("H2D", 0, "h2d", payload=float("nan")), Op("H2D", 0, "h2d", payload=float("nan")),
                     Op("H2D", 0, "h2d", payload=1.0), Op("H2D", 0, "h2d", payload=1.0)])
    columns.FORCE = True
    arrays = duplicate_ops(Context(table_made(base)))
    columns.FORCE = False
    built = table_made(base)
    built.ops  # noqa: B018 (builds fresh Op objects, each with its own NaN)
    assert arrays == duplicate_ops(Context(built)) == [
        Violation("PP002", "duplicate op r0/h2d/H2D", ("r0/h2d/H2D",))]
