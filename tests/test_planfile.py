"""The plan file: round trip, versioning, and clear errors for broken files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pptl.checks import run_checks
from pptl.config import Config
from pptl.errors import InputError
from pptl.formats.plan import dumps, load_plan, plan_from_dict, plan_to_dict
from pptl.planning import plan
from pptl.simulate import simulate


@pytest.mark.parametrize("name, kw", [("1f1b", {}), ("gpipe", {"split_backward": True}),
                                      ("interleaved-1f1b", {"vpp": 2})], ids=["1f1b", "gpipe-split", "interleaved"])
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
    assert back.config == result.schedule.config.__class__(**{**back.config.__dict__})  # a Config came back
    assert back.config.costs.base == s.config.costs.base
    assert run_checks(back) == []


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
        (_minimal(version=2), r"plan format version 2 is newer than this pptl reads \(1\); upgrade pptl"),
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
