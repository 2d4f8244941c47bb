"""A weight update's bucket and IPC half are fields of their own (``Op.bucket``, ``Op.half``; plan
file version 3). Files written before (plan versions 1 and 2, timelines) stored them in ``mb`` and
``sub``: they load into the new fields and check and simulate as they did.

The ``*_v2.json`` files of tests/data/plans were written by pptl at commit 1d981cc (plan format
version 2), with ``pptl plan fixtures/weight_update_seed.yaml -o weight_update_v2.json``, the same
for ``weight_update_no_h2d_buffer.yaml``, ``pptl plan -s zb-h1 --pp 2 -m 4`` and ``pptl plan -s
moe-1f1b-overlap --pp 2 -m 2 --vpp 2``; ``weight_update_one_half_v2.json`` is the first with every
IPC half set to 0 (``sub=0`` then), which that pptl's ``pptl check`` reported as 7 PP050 errors;
``weight_update_timeline.json`` is that pptl's planned timeline of the seed plan (``Timeline.to_dict``).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pptl.checks import run_checks
from pptl.config import Config, load_config
from pptl.errors import InputError
from pptl.formats._legacy import bucket_id
from pptl.formats.plan import PLAN_VERSION, dumps, load_plan, plan_from_dict, plan_to_dict
from pptl.formats.timeline import timeline_from_dict
from pptl.ir import Op
from pptl.optable import OpTable
from pptl.planning import plan, write_plan
from pptl.simulate import simulate

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests/data/plans"
UPDATES = [("weight_update_v2.json", "weight_update_seed.yaml", 3272.7650795519994),
           ("weight_update_no_h2d_buffer_v2.json", "weight_update_no_h2d_buffer.yaml", 3006.4771072000003)]


@pytest.fixture
def path_kind():
    """The reader (one: the plan's columns into an op table)."""
    return "table"


def _key(op: Op) -> tuple:
    return (op.rank, op.lane, op.kind, op.bucket, op.half, op.peer, op.label, op.payload, op.cost)


@pytest.mark.parametrize(("name", "config", "makespan"), UPDATES, ids=["h2d-buffer", "no-h2d-buffer"])
def test_a_version_2_update_loads_into_bucket_and_half(name: str, config: str, makespan: float, path_kind) -> None:
    raw = json.loads((DATA / name).read_text())
    assert raw["version"] == 2 and {"mb", "sub"} <= set(raw["ops"])
    old, timeline = load_plan(DATA / name)
    fresh = plan(load_config(ROOT / "fixtures" / config)).schedule
    assert all((op.mb, op.sub) == (-1, -1) and op.bucket >= 0 for op in old.ops)  # mb and sub keep their meanings
    # The file lists ops lane by lane: the same ops as planning them now, the same facts between them.
    assert sorted(map(_key, old.ops)) == sorted(map(_key, fresh.ops))
    assert {(old.ops[u].id, old.ops[v].id) for u, v in old.deps} == \
        {(fresh.ops[u].id, fresh.ops[v].id) for u, v in fresh.deps}
    # The file's mb and sub columns, in file order, are the buckets and halves now.
    assert [op.bucket for op in old.ops] == raw["ops"]["mb"] and [op.half for op in old.ops] == raw["ops"]["sub"]
    assert run_checks(old) == []
    assert simulate(old).makespan == pytest.approx(makespan, rel=1e-12) == simulate(fresh).makespan
    events = {e.op: e for e in timeline.events}
    assert len(events) == len(old.ops)
    assert all((e.bucket, e.half, e.mb, e.sub) == (op.bucket, op.half, -1, -1) for op in old.ops
               for e in [events[op.id]])


def test_a_version_2_update_with_one_half_reports_what_it_did(path_kind) -> None:
    # What pptl at commit 1d981cc reported for this file, with its op ids then ("mb1 #0" is now
    # "bucket1 half0"): the half a write goes to is read from the file's sub column.
    old, _ = load_plan(DATA / "weight_update_one_half_v2.json")
    got = [(v.code, v.message.split(" (and ")[0]) for v in run_checks(old)]
    assert got == [("PP050", f"IPC half 0 is rewritten with bucket {b} by r{b % 4}/ipc/COPY IPC bucket{b} half0 at t={t}")
                   for b, t in zip(range(1, 8), ("343.597", "867.583", "1211.18", "1554.78", "1898.38", "2241.97",
                                                 "2585.57"))]


@pytest.mark.parametrize(("name", "config"), [(n, c) for n, c, _ in UPDATES], ids=["h2d-buffer", "no-h2d-buffer"])
def test_a_new_update_file_stores_bucket_and_half_columns(tmp_path: Path, name: str, config: str) -> None:
    result = plan(load_config(ROOT / "fixtures" / config))
    write_plan(result, tmp_path / "p.json")
    new = json.loads((tmp_path / "p.json").read_text())
    old = json.loads((DATA / name).read_text())
    assert new["version"] == PLAN_VERSION == 3
    assert "mb" not in new["ops"] and "sub" not in new["ops"]
    assert new["ops"]["bucket"] == old["ops"]["mb"] and new["ops"]["half"] == old["ops"]["sub"]
    # the title counts what a weight update's step is made of: buckets (the version-2 file said micro-batches)
    for meta in (old["schedule"]["meta"], old["timeline"]["meta"]):
        meta["title"] = meta["title"].replace(" microbatches=", " buckets=")
    for key in ("config", "schedule", "lanes", "deps", "timeline"):
        assert new[key] == old[key], key
    back, _ = load_plan(tmp_path / "p.json")
    assert back.ops == [result.schedule.ops[i] for k in sorted(result.schedule.lanes)
                        for i in result.schedule.lanes[k]]


@pytest.mark.parametrize(("name", "config"), [("zb_h1_v2.json", Config(schedule="zb-h1", pp=2, microbatches=4)),
                                              ("moe_v2.json", Config(schedule="moe-1f1b-overlap", pp=2,
                                                                     microbatches=2, vpp=2))], ids=["zb-h1", "moe"])
def test_other_families_write_what_version_2_wrote(tmp_path: Path, name: str, config: Config, path_kind) -> None:
    # Only the version changes: no bucket or half column (all default), a MoE layer stays in sub.
    write_plan(plan(config), tmp_path / "p.json")
    new = json.loads((tmp_path / "p.json").read_text())
    old = json.loads((DATA / name).read_text())
    assert new.pop("version") == 3 and old.pop("version") == 2
    new.pop("order", None)  # the table writer's topological hint, never written by the version-2 fixture's size
    assert new == old
    loaded, _ = load_plan(DATA / name)
    assert all((op.bucket, op.half) == (-1, -1) for op in loaded.ops)
    if name == "moe_v2.json":
        assert {op.sub for op in loaded.ops} >= {0, 1}


def test_a_version_2_file_cannot_hold_bucket_columns() -> None:
    data = json.loads((DATA / "weight_update_v2.json").read_text())
    data["ops"]["bucket"] = data["ops"]["mb"]
    with pytest.raises(InputError, match=r"ops.bucket: unknown column"):
        plan_from_dict(data)
    data["version"] = 3
    del data["ops"]["bucket"]
    # Read as version 3, the same columns mean micro-batch and MoE layer: taken as written.
    s, _ = plan_from_dict(data)
    assert all(op.bucket == -1 and op.mb >= 0 for op in s.ops)


def test_a_version_1_update_loads_into_bucket_and_half() -> None:
    data = {"format": "pptl-plan", "version": 1,
            "schedule": {"family": "weight-update", "pp": 2, "num_stages": 1, "microbatches": 1},
            "lanes": [{"rank": 0, "lane": "compute", "ops": [{"kind": "RELOAD", "mb": 3, "sub": 1}]},
                      {"rank": 1, "lane": "compute", "ops": [{"kind": "F", "stage": 0, "mb": 3}]}]}
    s, _ = plan_from_dict(data)
    assert [(op.mb, op.sub, op.bucket, op.half) for op in s.ops] == [(-1, -1, 3, 1), (3, -1, -1, -1)]
    data["lanes"][0]["ops"][0]["bucket"] = 3
    with pytest.raises(InputError, match=r"unknown field 'bucket'"):
        plan_from_dict(data)


def test_timeline_files_of_before_read_bucket_and_half() -> None:
    def events(*rows: dict) -> list:
        data = {"format": "pptl-timeline", "version": 1,
                "events": [{"op": f"e{i}", "rank": 0, "lane": "comm", "start": 0, "end": 1, **r}
                           for i, r in enumerate(rows)]}
        return timeline_from_dict(data).events

    old, new, training = events({"kind": "BCAST", "mb": 3, "sub": 1}, {"kind": "BCAST", "bucket": 3, "half": 1},
                                {"kind": "F", "mb": 3, "sub": 1})
    assert (old.mb, old.sub, old.bucket, old.half) == (-1, -1, 3, 1)
    assert (new.mb, new.sub, new.bucket, new.half) == (-1, -1, 3, 1)
    assert (training.mb, training.sub, training.bucket, training.half) == (3, 1, -1, -1)
    # And what a timeline of now writes, it reads back.
    e = plan(load_config(ROOT / "fixtures/weight_update_seed.yaml")).timeline.events[0]
    assert e.bucket >= 0 and timeline_from_dict({"format": "pptl-timeline", "version": 1,
                                                 "events": [e.to_dict()]}).events == [e]


def test_a_timeline_of_before_matches_the_ops_of_now() -> None:
    # Its events said mb and sub, and their ids "mb1 #1": read as bucket and half, with the ids a plan
    # has now, so that a measured timeline of before still lines up with a plan (compare, draw).
    raw = json.loads((DATA / "weight_update_timeline.json").read_text())
    assert raw["events"][18]["op"] == "r2/compute/RELOAD Reload weights mb1 #1"
    old = timeline_from_dict(raw)
    now = plan(load_config(ROOT / "fixtures/weight_update_seed.yaml")).timeline
    assert old.events[18].op == "r2/compute/RELOAD Reload weights bucket1 half1"
    assert old.events[18].waits_on == ("r2/comm/BCAST Broadcast (dst) bucket1 half1",)
    assert sorted(old.events, key=lambda e: e.op) == sorted(now.events, key=lambda e: e.op)
    # The ids of a version-2 plan's stored metrics (the critical path) name ops of the plan as loaded.
    s, _ = load_plan(DATA / "weight_update_v2.json")
    path = json.loads((DATA / "weight_update_v2.json").read_text())["metrics"]["critical_path"]
    assert path[:2] == ["r0/h2d/H2D H2D mb0", "r0/ipc/COPY IPC mb0 #0"]
    assert {bucket_id(x) for x in path} <= {op.id for op in s.ops}
    assert bucket_id("r0/compute/F s0 mb1") == "r0/compute/F s0 mb1" and bucket_id("r0/x/MLP mb1 #1") == "r0/x/MLP mb1 #1"


def test_op_table_keeps_bucket_and_half() -> None:
    ops = plan(load_config(ROOT / "fixtures/weight_update_seed.yaml")).schedule.ops
    t = OpTable.from_ops(ops)
    assert t.ops() == ops and [t.op(i) for i in range(len(ops))] == ops
    assert t.bucket.tolist() == [op.bucket for op in ops] and t.half.tolist() == [op.half for op in ops]
    both = OpTable.concat([t, OpTable.from_ops([Op("F", 0, "compute", stage=0, mb=0)])])
    assert both.ops() == [*ops, Op("F", 0, "compute", stage=0, mb=0)]
    assert Op("COPY", 1, "ipc", bucket=5, half=1, label="IPC").to_dict() == {
        "kind": "COPY", "rank": 1, "lane": "ipc", "label": "IPC", "bucket": 5, "half": 1}


def test_duplicate_updates_differ_by_bucket() -> None:
    # Two ops equal in every field but the bucket are two ops, not a duplicate (PP002 compares whole ops).
    s = plan(load_config(ROOT / "fixtures/weight_update_seed.yaml")).schedule
    assert run_checks(s, select={"PP002"}) == []
    assert dumps(plan_to_dict(s))  # serialisable as written


def test_exports_name_the_bucket_and_half() -> None:
    # The Chrome trace's args and the HTML hover say bucket and half, not mb and sub.
    from pptl.formats.chrome_trace import to_chrome
    from pptl.render.html import _hover_row

    tl = plan(load_config(ROOT / "fixtures/weight_update_seed.yaml")).timeline
    copy = next(e for e in tl.events if e.kind == "COPY" and e.bucket == 5)
    slices = [x for x in to_chrome(tl)["traceEvents"] if x.get("ph") == "X" and x["args"]["op"] == copy.op]
    assert [x["args"] for x in slices] == [{"op": "r1/ipc/COPY IPC bucket5 half1", "bucket": 5, "half": 1,
                                            "label": "IPC", "waits_on": list(copy.waits_on)}]
    assert _hover_row(copy, 3)[4] == "- · bucket 5 half 1"
