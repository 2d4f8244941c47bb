"""The plan file: round trip, versioning, and clear errors for broken files."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pptl.checks import run_checks
from pptl.config import Config, Costs, Workload
from pptl.errors import InputError
from pptl.formats.loader import load_any
from pptl.formats.plan import PLAN_VERSION, dumps, load_plan, plan_from_dict, plan_to_dict
from pptl.planning import plan, plan_from_file, timeline_of, write_plan
from pptl.simulate import simulate


@pytest.mark.parametrize("name, kw", [("1f1b", {}), ("gpipe", {"split_backward": True}),
                                      ("interleaved-1f1b", {"vpp": 2}),
                                      # ops with a direction and pairs; with labels, cost keys, sub-indices, payloads
                                      ("dualpipe", {}), ("moe-1f1b-overlap", {"vpp": 2}), ("weight-update", {})],
                         ids=["1f1b", "gpipe-split", "interleaved", "dualpipe", "moe", "weight-update"])
def test_round_trip_keeps_ops_order_deps_and_timeline(tmp_path: Path, name: str, kw: dict) -> None:
    result = plan(Config(schedule=name, pp=4, microbatches=8, **kw))
    data = plan_to_dict(result.schedule, timeline=result.timeline, metrics=result.metrics)
    path = tmp_path / "p.json"
    path.write_text(dumps(data))
    back, timeline = load_plan(path)
    s = result.schedule
    assert {k: [s.ops[i] for i in v] for k, v in s.lanes.items()} == {k: [back.ops[i] for i in v] for k, v in back.lanes.items()}
    assert {(s.ops[u], s.ops[v]) for u, v in s.deps} == {(back.ops[u], back.ops[v]) for u, v in back.deps}
    assert simulate(back).makespan == result.simulation.makespan
    assert timeline is not None and len(timeline.events) == len(s.ops)
    waits = {s.ops[v].id: set() for _, v in s.deps}
    for u, v in s.deps:
        waits[s.ops[v].id].add(s.ops[u].id)
    assert {e.op: set(e.waits_on) for e in timeline.events if e.waits_on} == waits  # the reloaded timeline names its waits
    assert _same_config(back.config, s.config)
    assert run_checks(back) == run_checks(s)
    assert name == "moe-1f1b-overlap" or run_checks(back) == []  # moe: its formula's warning


def test_round_trip_keeps_every_config_field(tmp_path: Path) -> None:
    """Fields off their defaults come back equal, so a reloaded plan simulates the same memory."""
    cfg = Config(schedule="1f1b", pp=4, microbatches=8, split_backward=True, activation=2.5, w_activation=0.25,
                 memory_limit=40.0, costs=Costs(base={"F": 1.0, "B": 2.0, "I": 1.5, "W": 0.5}, stages={3: {"F": 2.0}},
                                                comm_latency=0.25, comm_bytes=1024.0, comm_bandwidth=4096.0),
                 workload=Workload(hidden=128, tokens=32, layers_per_stage=2, dtype="bfloat16"))
    result = plan(cfg)
    path = tmp_path / "p.json"
    path.write_text(dumps(plan_to_dict(result.schedule)))
    back, _ = load_plan(path)
    assert result.schedule.config.activation == 2.5  # the planned schedule holds the config asked for
    assert _same_config(back.config, result.schedule.config)
    again = simulate(back)
    assert [r.peak_activation for r in again.ranks] == [r.peak_activation for r in result.simulation.ranks]
    assert again.makespan == result.simulation.makespan


def test_plan_from_file_summarises_as_plan_does(tmp_path: Path) -> None:
    """``plan --from`` a written plan goes through plan's own path: the same makespan, ranks,
    critical path and violations; ``--cost W=3`` then makes B = I + W = 4."""
    result = plan(Config(schedule="zb-h1", pp=4, microbatches=8))
    path = tmp_path / "p.json"
    write_plan(result, path)
    again = plan_from_file(path)
    for key in ("makespan", "ops", "ranks", "bubble_fraction", "peak_activation", "critical_path", "violations"):
        assert again.metrics[key] == result.metrics[key], key
    assert (again.metrics["schedule"], again.metrics["source"], again.metrics["textbook_bubble"]) == \
        ("zb-h1", str(path), None)
    assert again.title == result.title and again.family is None
    slower = plan_from_file(path, cost_flags=["W=3"])
    assert slower.schedule.config.costs.lookup("B") == 4.0
    assert slower.metrics["makespan"] > result.metrics["makespan"]


def test_timeline_of_prefers_the_stored_timeline_and_simulates_the_rest(tmp_path: Path, fixtures: Path) -> None:
    result = plan(Config(schedule="1f1b", pp=2, microbatches=4))
    path = tmp_path / "p.json"
    write_plan(result, path)
    loaded = load_any(path)
    assert timeline_of(loaded) is loaded.timeline  # a plan's stored times, not a fresh simulation
    from_config = timeline_of(load_any(fixtures / "1f1b.yaml"))
    assert from_config is not None and len(from_config.events) == len(load_any(fixtures / "1f1b.yaml").schedule.ops)
    tl_path = tmp_path / "t.json"
    tl_path.write_text(json.dumps(result.timeline.to_dict()))
    tl_loaded = load_any(tl_path)
    assert tl_loaded.schedule is None and timeline_of(tl_loaded) is tl_loaded.timeline


def _same_config(back: Config, planned: Config) -> bool:
    """Equal in every field but ``source`` (the reloaded one names the plan file it came from)."""
    differ = [f.name for f in dataclasses.fields(Config)
              if f.name != "source" and getattr(back, f.name) != getattr(planned, f.name)]
    assert not differ, f"the reloaded config differs in {differ}: " + \
        ", ".join(f"{n}={getattr(back, n)!r}, planned {getattr(planned, n)!r}" for n in differ)
    return True


def _minimal(**over) -> dict:
    d = {"format": "pptl-plan", "version": 1,
         "schedule": {"family": "x", "pp": 1, "num_stages": 1, "microbatches": 1},
         "lanes": [{"rank": 0, "lane": "compute", "ops": [{"kind": "F", "stage": 0, "mb": 0},
                                                           {"kind": "B", "stage": 0, "mb": 0}]}]}
    d.update(over)
    return d


def test_minimal_hand_written_plan_is_valid() -> None:
    s, _ = plan_from_dict(_minimal())
    assert run_checks(s) == [] and len(s.deps) == 1


@pytest.mark.parametrize(
    "data, match",
    [
        ([], r"expected a JSON object with 'format': 'pptl-plan'"),
        (_minimal(format="other"), r"field 'format': got 'other', expected 'pptl-plan'"),
        (_minimal(version=4), r"plan format version 4 is newer than this pptl reads \(3\); upgrade pptl"),
        (_minimal(version="1"), r"field 'version': got '1', expected an integer"),
        (_minimal(schedule={"family": "x", "pp": -1, "num_stages": 1, "microbatches": 1}), r"schedule.pp': got -1"),
        (_minimal(lanes={}), r"field 'lanes': expected a list"),
        (_minimal(lanes=[{"rank": 0, "lane": "compute", "ops": [{"stage": 0}]}]), r"lanes\[0\].ops\[0\].kind: got None"),
        (_minimal(lanes=[{"rank": 0, "lane": "compute", "ops": [{"kind": "F", "mb": "x"}]}]), r"ops\[0\].mb: got 'x', expected an integer"),
        (_minimal(lanes=[{"rank": 0, "lane": "compute", "ops": [{"kind": "F", "speed": 1}]}]), r"unknown field 'speed'"),
        (_minimal(lanes=[{"rank": "0", "lane": "compute", "ops": []}]), r"lanes\[0\].rank: got '0', expected an integer"),
        (_minimal(deps=[[0, 7]]), r"deps\[0\]: got \[0, 7\], expected \[producer, consumer\] positions in 0..1"),
        (_minimal(config=[1]), r"field 'config': expected an object"),
    ],
    ids=["not-object", "format", "newer", "version-type", "negative-pp", "lanes-type", "no-kind", "mb-type",
         "unknown-op-field", "rank-type", "dep-range", "config-type"],
)
def test_broken_plans(data: object, match: str) -> None:
    with pytest.raises(InputError, match=match):
        plan_from_dict(data, source="p.json")


def test_truncated_file(tmp_path: Path) -> None:
    result = plan(Config(schedule="1f1b", pp=2, microbatches=2))
    text = dumps(plan_to_dict(result.schedule))
    p = tmp_path / "p.json"
    p.write_text(text[: len(text) // 2])
    with pytest.raises(InputError, match=r"p.json: not valid JSON"):
        load_plan(p)


def _v2(**ops_over) -> dict:
    """A two-op version-2 plan (F then B on rank 0), with some columns replaced."""
    cols = {"kind": {"values": ["F", "B"], "index": [0, 1]}, "stage": [0, 0], "mb": [0, 0]}
    cols.update(ops_over)
    return {"format": "pptl-plan", "version": 2,
            "schedule": {"family": "x", "pp": 1, "num_stages": 1, "microbatches": 1},
            "lanes": [{"rank": 0, "lane": "compute", "count": 2}], "ops": cols, "deps": []}


def test_written_plans_are_columnar_and_small(tmp_path: Path) -> None:
    result = plan(Config(schedule="interleaved-1f1b", pp=8, microbatches=32, vpp=2))
    path = tmp_path / "p.json"
    from pptl.planning import write_plan

    write_plan(result, path)
    data = json.loads(path.read_text())
    assert data["version"] == PLAN_VERSION == 3
    assert set(data["ops"]) >= {"kind", "stage", "mb", "chunk", "peer", "flow"}
    assert path.stat().st_size / len(result.schedule.ops) <= 40  # bytes an op, planned times included
    loaded = load_any(path)
    assert loaded.schedule.ops == [result.schedule.ops[i] for k in sorted(result.schedule.lanes)
                                   for i in result.schedule.lanes[k]]
    assert sorted((e.op, e.start, e.end) for e in loaded.timeline.events) == sorted(
        (e.op, e.start, e.end) for e in result.timeline.events)


def test_gzip_plan_round_trip(tmp_path: Path) -> None:
    from pptl.planning import write_plan

    result = plan(Config(schedule="1f1b", pp=4, microbatches=8))
    path = tmp_path / "p.json.gz"
    write_plan(result, path)
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    back, timeline = load_plan(path)
    assert back.ops and len(back.ops) == len(result.schedule.ops) and timeline is not None
    assert load_any(path).schedule.ops == back.ops


def test_version_1_files_still_load() -> None:
    s, timeline = plan_from_dict(_minimal())
    assert [op.kind for op in s.ops] == ["F", "B"] and timeline is None


def test_check_does_not_read_the_timeline(tmp_path: Path) -> None:
    """A broken stored timeline fails whoever reads it, not the rules (which ignore it); ``pptl check``
    validates it without building its events (tests/test_leftovers.py)."""
    data = _v2()
    data["timeline"] = {"meta": {}, "start": [0, 1], "end": [1]}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    loaded = load_any(path)
    assert run_checks(loaded.schedule) == []
    with pytest.raises(InputError, match=r"timeline.end: got \[1\], expected a list of 2 times"):
        loaded.timeline


@pytest.mark.parametrize(
    "data, match",
    [
        (_v2(stage=[0]), r"ops.stage: expected a list of 2 integers"),
        (_v2(mb=[0, True]), r"ops.mb: got True, expected integers"),
        (_v2(kind={"values": ["F"], "index": [0, 1]}), r"ops.kind.index: expected integers in 0..0"),
        (_v2(kind={"values": [1], "index": [0, 0]}), r"ops.kind.values: expected a list of strings"),
        (_v2(colour=[1, 2]), r"ops.colour: unknown column"),
        (_v2(pair=[None, [1, 2]]), r"ops.pair: got \[1, 2\], expected null or \[stage, mb, direction\]"),
        (_v2(payload=[0, -1]), r"ops.payload: got -1, expected a finite number >= 0"),
        ({**_v2(), "lanes": [{"rank": 0, "lane": "compute", "count": 10**9}]}, r"1,000,000,000 ops, more than the"),
        ({**_v2(), "deps": [0, 5]}, r"field 'deps': expected an even-length list of op positions in 0..1"),
    ],
    ids=["short-column", "bool-int", "index-range", "table-type", "unknown-column", "pair", "payload", "huge-count",
         "dep-range"],
)
def test_broken_v2_plans(data: object, match: str) -> None:
    with pytest.raises(InputError, match=match):
        plan_from_dict(data, source="p.json")


@pytest.mark.parametrize("pp, vpp, m", [(1, 1, 3), (2, 1, 1), (4, 1, 4), (2, 2, 4), (3, 1, 5)])
def test_inference_plan_round_trips_with_its_held_spans(tmp_path: Path, pp: int, vpp: int, m: int) -> None:
    """Inference builds its ops rank by rank in phase order, not lane by lane, and its held spans name
    ops by index: written as they were, they pointed at other ops once read back in file order (a SEND
    on another rank: the plan was refused). Each span must name the same two ops after the round trip,
    and the peak stay what it was (one forward's output held until its SEND has gone: 1 a rank)."""
    result = plan(Config(schedule="inference", pp=pp, vpp=vpp, microbatches=m))
    path = tmp_path / "inf.json"
    write_plan(result, path)
    back, _ = load_plan(path)
    s = result.schedule
    ids = [(s.ops[a].id, ea, s.ops[b].id, eb, x) for a, ea, b, eb, x in s.meta["held"]]
    assert [(back.ops[a].id, ea, back.ops[b].id, eb, x) for a, ea, b, eb, x in back.meta["held"]] == ids
    assert run_checks(back) == [] and run_checks(s) == []
    assert [r.peak_activation for r in simulate(back).ranks] == [r.peak_activation for r in result.simulation.ranks] \
        == [1.0] * pp


@pytest.mark.parametrize("name, ok", [("p.json", True), ("p.json.gz", True), ("P.JSON", True), ("p.txt", False),
                                      ("p.yaml", False), ("p", False)])
def test_a_plan_is_written_under_a_name_its_readers_know(tmp_path: Path, name: str, ok: bool) -> None:
    """``pptl check p.txt`` refuses '.txt'; so ``pptl plan -o p.txt`` must not write one."""
    result = plan(Config(schedule="1f1b", pp=2, microbatches=2))
    if ok:
        write_plan(result, tmp_path / name)
        assert load_plan(tmp_path / name)[0].n_ops == result.schedule.n_ops
    else:
        with pytest.raises(InputError, match=r"a plan is written as \.json \(or \.json\.gz\)"):
            write_plan(result, tmp_path / name)
        assert not (tmp_path / name).exists()
