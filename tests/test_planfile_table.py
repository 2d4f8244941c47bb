"""Large plan files go through the op table: written from columns, read without an ``Op`` per row,
and the same schedule, bytes and errors as the object path. ``pptl.columns.FORCE`` picks the path
(large plans take the table path by size)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pptl import columns
from pptl.checks import Context, run_checks
from pptl.config import Config
from pptl.errors import InputError
from pptl.formats.plan import PlanTimes, dumps, plan_from_dict, plan_to_dict, read_plan_dict
from pptl.planning import plan, write_plan

FAMILIES = [("1f1b", {}), ("gpipe", {"split_backward": True}), ("interleaved-1f1b", {"vpp": 2}), ("dualpipe", {}),
            ("dualpipev", {}), ("zbv", {}), ("zb-h1", {}), ("moe-1f1b-overlap", {"vpp": 2}), ("weight-update", {})]
IDS = [name for name, _ in FAMILIES]




def _written(result, force, value: bool) -> dict:
    sim = result.simulation
    force(value)
    try:
        return json.loads(dumps(plan_to_dict(result.schedule, times=PlanTimes(sim.start, sim.end, sim.timeline_meta()),
                                             metrics=result.metrics, topo=result.order)))
    finally:
        force(None)


@pytest.mark.parametrize("name, kw", FAMILIES, ids=IDS)
def test_table_writer_writes_what_the_object_writer_writes(name: str, kw: dict, force) -> None:
    result = plan(Config(schedule=name, pp=4, microbatches=8, **kw))
    by_objects = _written(result, force, False)
    by_table = _written(result, force, True)
    order = by_table.pop("order")
    assert "order" not in by_objects  # small plans: no order (the checker sorts them itself)
    assert by_table == by_objects
    # The order is a topological position per op in file order: every edge goes forward in it.
    back, _ = plan_from_dict(by_objects)
    assert sorted(order) == list(range(len(back.ops)))
    edges = list(back.deps) + [(u, v) for lane in back.lanes.values() for u, v in zip(lane, lane[1:])]
    assert all(order[u] < order[v] for u, v in edges)


@pytest.mark.parametrize("name, kw", FAMILIES, ids=IDS)
def test_table_reader_reads_the_schedule_the_object_reader_reads(name: str, kw: dict, force) -> None:
    result = plan(Config(schedule=name, pp=4, microbatches=8, **kw))
    data = _written(result, force, True)
    force(False)
    by_objects, _ = read_plan_dict(data)
    force(True)
    by_table, timeline = read_plan_dict(data)
    assert not by_table.has_ops() and by_table.n_ops == len(by_objects.ops)
    assert by_table.built_table().kinds() == {op.kind for op in by_objects.ops}
    ctx = Context(by_table)
    assert ctx.order is not None and not by_table.has_ops()  # the file's order, verified without building ops
    assert by_table.ops == by_objects.ops and by_table.lanes == by_objects.lanes
    assert by_table.deps == by_objects.deps
    assert by_table.meta == by_objects.meta and by_table.config == by_objects.config
    assert run_checks(by_table) == run_checks(by_objects)
    assert len(timeline().events) == len(by_objects.ops)


def test_a_large_plan_is_read_without_building_ops(tmp_path: Path) -> None:
    result = plan(Config(schedule="interleaved-1f1b", pp=8, vpp=2, microbatches=640))
    path = tmp_path / "p.json"
    write_plan(result, path)
    data = json.loads(path.read_text())
    s, _ = read_plan_dict(data)
    assert s.n_ops == len(result.schedule.ops) >= columns.VECTOR_MIN_OPS
    assert not s.has_ops()
    assert Context(s).order is not None and not s.has_ops()
    o = result.schedule
    assert {k: [s.ops[i] for i in v] for k, v in s.lanes.items()} == {k: [o.ops[i] for i in v] for k, v in o.lanes.items()}


def _plan_data(force) -> dict:
    result = plan(Config(schedule="1f1b", pp=2, microbatches=2))
    return _written(result, force, True)


def test_an_order_that_is_not_topological_is_not_trusted(force) -> None:
    data = _plan_data(force)
    n = len(data["order"])
    data["order"] = list(reversed(range(n)))  # every lane edge goes backwards
    force(True)
    s, _ = read_plan_dict(data)
    assert Context(s).order is not None  # found by the checker's own walk
    assert run_checks(s) == []


def test_a_cycle_is_found_whatever_order_the_file_claims(force) -> None:
    data = _plan_data(force)
    kinds = data["ops"]["kind"]
    first_f, first_b = kinds["index"].index(kinds["values"].index("F")), kinds["index"].index(kinds["values"].index("B"))
    data["deps"] = [first_b, first_f]  # B before the F it needs: a cycle
    force(True)
    s, _ = read_plan_dict(data)
    assert Context(s).order is None
    assert [v.code for v in run_checks(s) if v.code == "PP007"] == ["PP007"]


@pytest.mark.parametrize("order, match", [
    ("x", r"field 'order': expected a list of \d+ integers"),
    ([0], r"field 'order': expected a list of \d+ integers"),
    ("huge", r"field 'order': expected a list of \d+ integers in 0\.\.\d+"),
    ("negative", r"field 'order': expected a list of \d+ integers in 0\.\.\d+"),
    (None, None),
])
def test_a_malformed_order_is_one_line(order, match, force) -> None:
    data = _plan_data(force)
    n = len(data["order"])
    named = {"huge": [2**70] * n, "negative": [-1] * n}
    data["order"] = named[order] if isinstance(order, str) and order in named else (
        [True] * n if order is None else order)
    force(True)
    with pytest.raises(InputError, match=match or r"field 'order'"):
        read_plan_dict(data, source="p.json")


def test_a_value_listed_twice_in_a_string_table_is_one_kind(force) -> None:
    data = _plan_data(force)
    kinds = data["ops"]["kind"]
    f = kinds["values"].index("F")
    kinds["values"].append("F")
    twice = len(kinds["values"]) - 1
    kinds["index"] = [twice if (k == f and i % 2) else k for i, k in enumerate(kinds["index"])]
    force(False)
    by_objects, _ = read_plan_dict(data)
    force(True)
    by_table, _ = read_plan_dict(data)
    assert by_table.built_table().kinds() == {"F", "B", "SEND", "RECV"}
    assert run_checks(by_table) == run_checks(by_objects) == []
    assert by_table.ops == by_objects.ops


@pytest.mark.parametrize("change, match", [
    ({"stage": [0]}, r"ops.stage: expected a list of \d+ integers"),
    ({"mb": "first"}, r"ops.mb: expected a list of \d+ integers"),
    ({"kind": {"values": ["F"], "index": [0, 1]}}, r"ops.kind.index: expected a list of \d+ positions"),
    ({"kind": {"values": [""], "index": None}}, r"ops.kind: got an empty kind"),
    ({"colour": [1, 2]}, r"ops.colour: unknown column"),
    ({"payload": [-1]}, r"ops.payload: expected a list of \d+ numbers"),
])
def test_broken_columns_read_the_same_on_both_paths(change: dict, match: str, force) -> None:
    data = _plan_data(force)
    n = len(data["order"])
    for key, value in change.items():
        if isinstance(value, dict) and value.get("index") is None:
            value = {"values": value["values"], "index": [0] * n}
        data["ops"][key] = value
    messages = []
    for value in (False, True):
        force(value)
        with pytest.raises(InputError, match=match) as e:
            read_plan_dict(data, source="p.json")
        messages.append(str(e.value))
    assert messages[0] == messages[1]


def test_copy_with_keeps_a_table_made_schedule_unbuilt(force) -> None:
    """``pptl plan --from`` swaps the config of a plan it read: on a table-made schedule that builds no ops, and
    the copy is the schedule ``dataclasses.replace`` would make."""
    import dataclasses

    from pptl.config import Costs

    data = _written(plan(Config(schedule="zbv", pp=4, microbatches=8)), force, True)
    force(True)
    s, _ = read_plan_dict(data)
    cfg = dataclasses.replace(s.config, costs=Costs(base={"F": 2.0, "B": 3.0, "I": 1.5, "W": 1.5}))
    copy = s.copy_with(config=cfg)
    assert copy.config is cfg and not copy.has_ops() and not s.has_ops()
    assert copy.order_hint() is s.order_hint() and copy.built_table() is s.built_table()
    assert copy == dataclasses.replace(s, config=cfg)
