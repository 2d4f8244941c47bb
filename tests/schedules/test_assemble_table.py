"""assemble's table path (large plans: no Op objects) builds exactly what its object path builds:
the same ops in the same places, the same lanes in the same order, the same facts."""
from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

import pytest

import pptl.columns
from pptl.config import Config, config_from_mapping
from pptl.ir import Op, Schedule
from pptl.schedules import assemble, build_schedule
from pptl.schedules._order import Order, interleave, phases

ROOT = Path(__file__).resolve().parents[2]

FAMILY_CASES = [
    ("gpipe", 4, 8, {}), ("gpipe", 4, 3, {"split_backward": True}), ("1f1b", 4, 8, {}), ("1f1b", 6, 2, {}),
    ("1f1b", 4, 6, {"split_backward": True}), ("1f1b", 1, 4, {}),
    ("interleaved-1f1b", 4, 8, {"vpp": 2}), ("interleaved-1f1b", 4, 12, {"vpp": 3, "split_backward": True}),
    ("interleaved-1f1b", 4, 4, {"vpp": 2, "options": {"order": "megatron-pre-2025"}}),
    ("interleaved-1f1b", 4, 10, {"vpp": 2, "group_size": 5}),
    ("zb-h1", 4, 8, {}), ("zb-h2", 4, 10, {}), ("zbv", 4, 8, {}), ("zbv", 4, 3, {}), ("zbv", 1, 2, {}),
    ("dualpipe", 4, 8, {}), ("dualpipe", 8, 20, {}), ("dualpipev", 4, 8, {}), ("dualpipev", 1, 2, {}),
]


def _both(monkeypatch: pytest.MonkeyPatch, make: Any) -> tuple[Schedule, Schedule]:
    """(object path, table path) of the same build."""
    monkeypatch.setattr(pptl.columns, "FORCE", False)
    objects = make()
    monkeypatch.setattr(pptl.columns, "FORCE", True)
    table = make()
    return objects, table


def _assert_same(objects: Schedule, table: Schedule) -> None:
    assert objects.has_ops()
    assert not table.has_ops()  # made from a table, nothing read its ops yet
    assert table.n_ops == len(objects.ops)
    assert table.built_table().ops() == objects.ops
    assert list(table.lanes.items()) == list(objects.lanes.items())  # the same lanes, in the same order
    u, v = table.dep_arrays()
    assert list(zip(u.tolist(), v.tolist())) == sorted(objects.deps)
    assert set(table.deps) == set(objects.deps)
    assert table.ops == objects.ops
    for name in ("family", "pp", "num_stages", "microbatches", "directions", "meta", "config"):
        assert getattr(table, name) == getattr(objects, name), name


@pytest.mark.parametrize("family,pp,m,extra", FAMILY_CASES)
def test_every_family_is_made_from_a_table_exactly_as_from_objects(
        monkeypatch: pytest.MonkeyPatch, family: str, pp: int, m: int, extra: dict) -> None:
    cfg = config_from_mapping({"schedule": family, "pp": pp, "microbatches": m, **extra}, source="t")
    _assert_same(*_both(monkeypatch, lambda: build_schedule(cfg)))


def _random_orders(rnd: random.Random) -> dict[int, list[Op]]:
    """Compute orders no family writes: stages on several ranks, missing and repeated work, FB ops
    with and without a pair, two directions, an empty rank, ranks listed out of order."""
    pp = rnd.randint(1, 4)
    stages = rnd.randint(1, 6)
    ranks = list(range(pp))
    rnd.shuffle(ranks)
    orders: dict[int, list[Op]] = {}
    for r in ranks:
        ops = []
        for _ in range(rnd.choice([0, 3, 8, 15])):
            kind = rnd.choice(["F", "F", "B", "I", "W", "FB"])
            d, s, mb = rnd.randint(0, 1), rnd.randint(0, stages - 1), rnd.randint(0, 3)
            pair = (rnd.randint(0, stages - 1), rnd.randint(0, 3), rnd.randint(0, 1)) \
                if kind == "FB" and rnd.random() < 0.8 else None
            ops.append(Op(kind, r, "compute", s, mb, d, rnd.randint(0, 1), pair))
        orders[r] = ops
    return orders


@pytest.mark.parametrize("seed", range(40))
def test_any_compute_orders_are_assembled_alike_on_both_paths(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rnd = random.Random(seed)
    orders = _random_orders(rnd)
    stages = 1 + max((op.stage for ops in orders.values() for op in ops), default=0)
    comm = rnd.random() < 0.8
    cfg = Config(schedule="1f1b", pp=len(orders), microbatches=4)

    def make() -> Schedule:
        return assemble(cfg, "x", orders, num_stages=stages, microbatches=4, directions=2, comm=comm)

    objects, table = _both(monkeypatch, make)
    _assert_same(objects, table)


def test_orders_as_columns_and_as_ops_give_one_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = random.Random(7)
    orders = _random_orders(rnd)
    columns = {r: Order.of_rows([(o.kind, o.stage, o.mb, o.direction, o.chunk, o.pair) for o in ops])
               for r, ops in orders.items()}
    cfg = Config(schedule="1f1b", pp=len(orders), microbatches=4)
    monkeypatch.setattr(pptl.columns, "FORCE", True)
    a = assemble(cfg, "x", orders, num_stages=6, microbatches=4)
    b = assemble(cfg, "x", columns, num_stages=6, microbatches=4)
    assert not b.has_ops()
    assert b.ops == a.ops and b.lanes == a.lanes and b.deps == a.deps


def test_data_no_op_needs_is_received_last() -> None:
    # Rank 1 runs F of mb 1 only: the activations of mb 0 that rank 0 sends reach no op there.
    orders = {0: [Op("F", 0, "compute", 0, 0), Op("F", 0, "compute", 0, 1)], 1: [Op("F", 1, "compute", 1, 1)]}
    pptl.columns.FORCE = True
    try:
        s = assemble(Config(schedule="1f1b", pp=2, microbatches=2), "x", orders, num_stages=2, microbatches=2)
    finally:
        pptl.columns.FORCE = None
    assert not s.has_ops()
    assert [s.ops[i].id for i in s.lanes[(1, "recv")]] == ["r1/recv/RECV_F s1 mb1 <-r0", "r1/recv/RECV_F s1 mb0 <-r0"]


def test_ops_filed_under_another_rank_take_the_object_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # The object path files each op under its own (rank, lane); the table path only takes a rank's
    # order as that rank's compute lane, so it hands this one back.
    orders = {0: [Op("F", 1, "compute", 0, 0)], 1: [Op("F", 1, "compute", 1, 0)]}
    monkeypatch.setattr(pptl.columns, "FORCE", True)
    s = assemble(Config(schedule="1f1b", pp=2, microbatches=2), "x", orders, num_stages=2, microbatches=1)
    assert s.has_ops()
    assert s.lanes[(1, "compute")] == [0, 1] and (0, "compute") not in s.lanes


def test_a_large_plan_is_built_without_ops() -> None:
    s = build_schedule(Config(schedule="interleaved-1f1b", pp=64, vpp=2, microbatches=512))
    assert not s.has_ops()
    assert s.n_ops == 391_168
    u, v = s.dep_arrays()
    assert u.size == v.size > 0 and not s.has_ops()


@pytest.mark.parametrize("family", ["interleaved-1f1b", "1f1b", "zbv", "dualpipe"])
def test_a_small_plan_is_built_from_objects_without_numpy(family: str) -> None:
    # numpy's import costs more than a small plan takes to build (pptl.columns)
    code = ("import sys; from pptl.config import Config; from pptl.schedules import build_schedule; "
            f"s = build_schedule(Config(schedule={family!r}, pp=4, vpp=2 if {family!r} in ('interleaved-1f1b', 'zbv') "
            "else 1, microbatches=8)); print(s.has_ops(), s.built_table() is None, 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True", "False"]


def test_phases_lay_out_warmup_steady_and_cooldown() -> None:
    f = ["F0", "F1", "F2", "F3"]
    i = ["I0", "I1", "I2", "I3"]
    w = ["W0", "W1", "W2", "W3"]
    assert phases(f, [i, w], 2) == ["F0", "F1", "F2", "I0", "W0", "F3", "I1", "W1", "I2", "W2", "I3", "W3"]
    assert phases(f, [i], 4) == f + i  # all forwards first: GPipe
    assert phases(f, [i], 0) == ["F0", "I0", "F1", "I1", "F2", "I2", "F3", "I3"]
    assert interleave([1], [[2, 3], [4, 5]], [[6]], None) == [1, 2, 4, 3, 5, 6]


def test_order_rows_become_columns() -> None:
    rows: Sequence[tuple] = [("F", 0, 0, 0, 0, None), ("FB", 1, 2, 0, 1, (3, 4, 1))]
    o = Order.of_rows(rows)
    assert len(o) == 2
    assert o.ops(5) == [Op("F", 5, "compute", 0, 0, 0, 0), Op("FB", 5, "compute", 1, 2, 0, 1, (3, 4, 1))]
    assert Order.of_rows([]).ops(0) == []
