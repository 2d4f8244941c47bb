"""Fuzz measured timelines as ``pptl compare`` and ``pptl render`` take them, and plan files as
``pptl render`` and ``pptl export`` take them (the plan reader's own fuzzing is in test_fuzz_readers)."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from fuzzing import EXAMPLES, clean_run, mutate_bytes, mutate_json, write_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pptl.config import Config
from pptl.formats.plan import dumps, plan_to_dict
from pptl.planning import plan

_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

FAMILIES = [Config(schedule="1f1b", pp=2, microbatches=3), Config(schedule="interleaved-1f1b", pp=2, vpp=2,
                                                                   microbatches=4),
            Config(schedule="dualpipev", pp=2, microbatches=4)]


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> list[tuple[Path, dict, dict]]:
    """(plan file, plan as data, a measured timeline of it as data) per family."""
    out = []
    folder = tmp_path_factory.mktemp("plans")
    for k, cfg in enumerate(FAMILIES):
        result = plan(cfg)
        data = plan_to_dict(result.schedule, timeline=result.timeline, metrics=result.metrics)
        path = folder / f"plan{k}.json"
        path.write_text(dumps(data))
        measured = result.timeline.to_dict()
        measured["meta"].update(source="measured", units="ms", clock="host")
        measured["meta"]["extra"] = {"step": 1, "plan": str(path)}
        for e in measured["events"]:  # a measured run is never exactly the plan
            e["start"], e["end"] = e["start"] * 1.1, e["end"] * 1.1 + 0.01
        out.append((path, data, measured))
    return out


def _timeline_command(plan_file: Path, t: Path, rnd: random.Random) -> list[str]:
    return rnd.choice([
        ["compare", str(plan_file), str(t)], ["compare", str(plan_file), str(t), "--output", "json"],
        ["render", str(t), "--width", "80"], ["render", str(t), "--width", "60", "--time", "1:5"],
        ["render", str(t), "--style", "dualpipe", "--width", "80"], ["export", str(t), "--to", "chrome"],
        ["plan", "--schedule", "1f1b", "--pp", "2", "--microbatches", "2", "--costs-from", str(t)],
    ])


@_SETTINGS
@given(st.integers(0, len(FAMILIES) - 1), st.randoms(use_true_random=False))
def test_fuzz_measured_timeline_structure(tmp_path: Path, plans, k: int, rnd: random.Random) -> None:
    plan_file, _, measured = plans[k]
    t = tmp_path / "m.json"
    data = measured
    for _ in range(rnd.randint(1, 3)):
        data = mutate_json(data, rnd)
    write_json(t, data)
    clean_run(_timeline_command(plan_file, t, rnd))


_TIMES = [0, -1, 1e-300, 1e-9, 1e300, -1e300, 1.7976931348623157e308, 2**62, 10**20, 1e6, 42.5]
_INTS = [0, 1, -1, 2, 7, 10**9, -(10**9), 2**62, 10**30]
_VALUES: dict[str, list] = {
    "start": _TIMES, "end": _TIMES, "rank": _INTS, "mb": _INTS, "stage": _INTS, "chunk": _INTS, "peer": _INTS,
    "direction": _INTS, "lane": ["compute", "send", "recv", "comm", "d2h", "", "x" * 300, "\u2603"],
    "op": ["r0/compute/F s0 mb0", "r9/compute/F s9 mb9", "", "x" * 3000, "r0/send/SEND_F s0 mb0 ->r1"],
    "kind": ["F", "B", "I", "W", "FB", "SEND", "RECV", "ATTN", "BCAST", "", "?" * 50],
    "flow": ["F", "B", "", "Z"], "label": ["", "Attn", "\u2603" * 100, "[bold]x[/bold]"],
    "pair": [[0, 0, 0], [10**9, -1, 5], [0, 0]],
}


@_SETTINGS
@given(st.integers(0, len(FAMILIES) - 1), st.randoms(use_true_random=False))
def test_fuzz_measured_timeline_events(tmp_path: Path, plans, k: int, rnd: random.Random) -> None:
    """Plausible events with wrong values: times out of order, far away, overlapping; unknown ops."""
    plan_file, _, measured = plans[k]
    data = {**measured, "events": [dict(e) for e in measured["events"]]}
    evs = data["events"]
    for _ in range(rnd.randint(1, 8)):
        e = rnd.choice(evs)
        field = rnd.choice(list(_VALUES))
        # Mostly values of the right type (they reach the comparison and the drawing), sometimes not.
        e[field] = rnd.choice(_VALUES[field] if rnd.random() < 0.85 else [None, "", 3.5, True, [], "\u2603"])
        if field == "start" and isinstance(e["start"], (int, float)) and rnd.random() < 0.5:
            e["end"] = e["start"] + rnd.choice([0, 1e-9, 1, 1e300])
        if rnd.random() < 0.2:
            evs.append(dict(e))  # one op measured twice
    if rnd.random() < 0.1:
        data["events"] = evs[: rnd.randrange(len(evs) + 1)]
    t = tmp_path / "m.json"
    write_json(t, data)
    clean_run(_timeline_command(plan_file, t, rnd))


@_SETTINGS
@given(st.integers(0, len(FAMILIES) - 1), st.randoms(use_true_random=False))
def test_fuzz_measured_timeline_bytes(tmp_path: Path, plans, k: int, rnd: random.Random) -> None:
    plan_file, _, measured = plans[k]
    t = tmp_path / "m.json"
    t.write_bytes(mutate_bytes(dumps(measured).encode(), rnd))
    clean_run(_timeline_command(plan_file, t, rnd))


def _plan_command(p: Path, rnd: random.Random) -> list[str]:
    return rnd.choice([
        ["render", str(p), "--width", "80"], ["render", str(p), "--style", "moe", "--width", "80"],
        ["export", str(p), "--to", "chrome"], ["export", str(p), "--to", "torch-csv"],
        ["export", str(p), "--to", "torch-csv", "--comms"], ["plan", "--from", str(p), "--output", "json"],
    ])


@_SETTINGS
@given(st.integers(0, len(FAMILIES) - 1), st.randoms(use_true_random=False))
def test_fuzz_plan_through_render_and_export(tmp_path: Path, plans, k: int, rnd: random.Random) -> None:
    _, data, _ = plans[k]
    p = tmp_path / "p.json"
    if rnd.random() < 0.3:
        p.write_bytes(mutate_bytes(dumps(data).encode(), rnd))
    else:
        if rnd.random() < 0.5:  # no stored timeline: render and export simulate the schedule
            data = {k2: v for k2, v in data.items() if k2 != "timeline"}
        write_json(p, mutate_json(data, rnd))
    clean_run(_plan_command(p, rnd))
