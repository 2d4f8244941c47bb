"""Measured timelines from torch profiler traces (PP:<action> ranges) and per-rank event lists."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from pptl.config import config_from_mapping
from pptl.errors import InputError
from pptl.formats.loader import load_any
from pptl.formats.torch_csv import action_of
from pptl.issue_order import program
from pptl.schedules import build_schedule
from pptl.simulate import simulate

BASE_NS = 1_790_000_000_000_000_000


@pytest.fixture(scope="module")
def plan():
    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 3, "microbatches": 4}))
    return s, simulate(s)


def _traces(tmp_path: Path, plan, *, gz: bool = False, cat: str = "user_annotation", steps: int = 1) -> Path:
    """One profiler trace per rank, as torch's runtime would record the plan (1 unit = 1 ms)."""
    s, sim = plan
    folder = tmp_path / "traces"
    folder.mkdir()
    for rank, seq in program(s).items():
        events = []
        for k in range(steps):
            for i in seq:
                ts = 1000.0 * (sim.start[i] + k * 1000)
                events.append({"ph": "X", "cat": cat, "name": f"PP:{action_of(s.ops[i])}", "pid": 1, "tid": 1,
                               "ts": ts, "dur": 1000.0 * (sim.end[i] - sim.start[i])})
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 1})
        data = {"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS, "distributedInfo": {"rank": rank},
                "traceEvents": events}
        raw = json.dumps(data).encode()
        name = f"trace_{9 - rank}.json"  # the file name's number is not the rank: distributedInfo wins
        if gz:
            (folder / (name + ".gz")).write_bytes(gzip.compress(raw))
        else:
            (folder / name).write_bytes(raw)
    return folder


def test_folder_of_profiler_traces_matches_the_plan(tmp_path: Path, plan) -> None:
    s, sim = plan
    loaded = load_any(_traces(tmp_path, plan))
    tl = loaded.timeline
    assert loaded.kind == "profiler" and tl.meta.source == "measured" and tl.meta.units == "us"
    assert sorted(e.op for e in tl.events) == sorted(op.id for op in s.ops)  # same ids: compare pairs them
    ev = {e.op: e for e in tl.events}
    i = next(k for k, op in enumerate(s.ops) if op.id == "r2/compute/B s2 mb1")
    assert ev["r2/compute/B s2 mb1"].start == pytest.approx(1000 * sim.start[i])
    assert loaded.notes[0] == f"torch profiler traces: 3 files, {len(s.ops)} events in us"
    assert loaded.schedule is not None and loaded.schedule.meta["program_order"]


def test_gzip_and_glob_and_gpu_ranges(tmp_path: Path, plan) -> None:
    folder = _traces(tmp_path, plan, gz=True, cat="gpu_user_annotation")
    loaded = load_any(folder / "trace_*.json.gz")
    assert len(loaded.timeline.events) == len(plan[0].ops)
    one = load_any(sorted(folder.iterdir())[0])
    assert {e.rank for e in one.timeline.events} == {2}


def test_several_profiled_steps_use_the_last(tmp_path: Path, plan) -> None:
    loaded = load_any(_traces(tmp_path, plan, steps=2))
    assert any("2 profiled steps, using step 1" in n for n in loaded.notes)
    assert len(loaded.timeline.events) == len(plan[0].ops)


def test_event_lists(tmp_path: Path) -> None:
    for rank in range(2):
        rows = [{"type": "forward", "start_time": 10.0 + rank + 2 * mb, "end_time": 11.0 + rank + 2 * mb,
                 "minibatch": mb} for mb in range(2)]
        rows += [{"type": "B", "start_time": 20.0 - rank + 2 * mb, "completion_time": 21.5 - rank + 2 * mb,
                  "minibatch": mb} for mb in range(2)]
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(rows))
    loaded = load_any(tmp_path)
    assert loaded.kind == "events" and loaded.timeline.meta.units == "ms"
    ev = {e.op: e for e in loaded.timeline.events}
    assert (ev["r1/compute/F s1 mb0"].start, ev["r1/compute/F s1 mb0"].end) == (1.0, 2.0)
    assert ev["r0/compute/B s0 mb1"].end == pytest.approx(13.5)


def test_event_list_object_form_with_chunks(tmp_path: Path) -> None:
    for rank in range(2):
        ev = [{"type": "F", "start_time": c, "end_time": c + 0.5, "minibatch": 0, "chunk": c} for c in range(2)]
        (tmp_path / f"r{rank}.json").write_text(json.dumps({"rank": rank, "units": "us", "events": ev}))
    tl = load_any(tmp_path).timeline
    assert tl.meta.units == "us"
    assert sorted((e.rank, e.stage) for e in tl.events) == [(0, 0), (0, 2), (1, 1), (1, 3)]


@pytest.mark.parametrize("content,match", [
    ([{"type": "X", "start_time": 0, "end_time": 1, "minibatch": 0}], r"events\[0\]\.type: got 'X', expected F, B"),
    ([{"type": "F", "start_time": 2, "end_time": 1, "minibatch": 0}], r"end_time 1 is before start_time 2"),
    ([{"type": "F", "start_time": 0, "end_time": 1, "minibatch": -1}], r"minibatch: got -1, expected an integer"),
    ({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 0, "dur": 1}]}, r"no 'PP:<action>' ranges, and no "
                                                                               "forward and backward ops"),
    ({"traceEvents": [{"ph": "X", "name": "PP:0BW0", "ts": 0, "dur": 1}]}, r"range 'PP:0BW0': '0BW0' is not an"),
], ids=["bad-type", "end-before-start", "negative-mb", "no-pp-ranges", "bad-action"])
def test_bad_traces_are_one_line_errors(tmp_path: Path, content, match: str) -> None:
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(content))
    with pytest.raises(InputError, match=match):
        load_any(path)


def test_two_files_for_one_rank(tmp_path: Path) -> None:
    for name in ("a_rank0.json", "b_rank0.json"):
        (tmp_path / name).write_text(json.dumps([{"type": "F", "start_time": 0, "end_time": 1, "minibatch": 0}]))
    with pytest.raises(InputError, match=r"rank 0 also comes from .*a_rank0\.json; expected one file per rank"):
        load_any(tmp_path)


def test_plain_json_still_loads_plans_and_configs(tmp_path: Path) -> None:
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({"schedule": "gpipe", "pp": 2, "microbatches": 2}))
    assert load_any(path).kind == "config"
    with pytest.raises(InputError, match=r"not a pptl plan, timeline or config"):
        (tmp_path / "x.json").write_text("{}")
        load_any(tmp_path / "x.json")
    with pytest.raises(InputError, match=r"no file matches"):
        load_any(tmp_path / "nothing*.json")


def test_real_torch_profiler_trace(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import profile, record_function

    with profile() as prof:
        for name in ("PP:0F0", "PP:0F1", "PP:0B0", "PP:0B1"):
            with record_function(name):
                torch.ones(64, 64) @ torch.ones(64, 64)
    path = tmp_path / "rank0.json"
    prof.export_chrome_trace(str(path))
    loaded = load_any(path)
    assert [e.op for e in sorted(loaded.timeline.events, key=lambda e: e.start)] == [
        "r0/compute/F s0 mb0", "r0/compute/F s0 mb1", "r0/compute/B s0 mb0", "r0/compute/B s0 mb1"]
    assert loaded.timeline.events[0].start == 0.0


def test_compare_and_check_read_trace_folders(tmp_path: Path, plan) -> None:
    from typer.testing import CliRunner

    from pptl.cli import app

    runner = CliRunner()
    folder = _traces(tmp_path, plan)
    plan_file = tmp_path / "plan.json"
    r = runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", "3", "--microbatches", "4", "-o", str(plan_file)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["compare", str(plan_file), str(folder)])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("makespan: planned")
    r = runner.invoke(app, ["check", str(folder)])  # what actually ran, as a schedule
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[-1] == f"{folder}: ok, {len(plan[0].ops)} ops checked"
