"""Fuzz the measured-timeline readers: torch profiler traces and per-rank event lists, as one file,
a .json.gz, a folder or a glob, through render, check, compare and export."""
from __future__ import annotations

import copy
import json
import random
import shutil
from pathlib import Path

import pytest
from fuzzing import EXAMPLES, clean_run, gzip_bytes, mutate_bytes, mutate_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pptl.config import config_from_mapping
from pptl.formats.plan import dumps, plan_to_dict
from pptl.formats.torch_csv import action_of
from pptl.issue_order import program
from pptl.schedules import build_schedule
from pptl.simulate import simulate

_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict:
    """A 1F1B plan (pp=2, 3 micro-batches), its profiler traces and its event lists, as data."""
    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 3}))
    sim = simulate(s)
    traces, events = [], []
    for rank, seq in program(s).items():
        evs = [{"ph": "X", "cat": "user_annotation", "name": f"PP:{action_of(s.ops[i])}", "pid": 1, "tid": 1,
                "ts": 1000.0 * sim.start[i], "dur": 1000.0 * (sim.end[i] - sim.start[i])} for i in seq]
        evs.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 1})
        traces.append({"schemaVersion": 1, "baseTimeNanoseconds": 1_790_000_000_000_000_000,
                       "distributedInfo": {"rank": rank}, "traceEvents": evs})
        events.append({"rank": rank, "units": "ms", "events": [
            {"type": s.ops[i].kind, "start_time": sim.start[i], "end_time": sim.end[i], "minibatch": s.ops[i].mb,
             "stage": s.ops[i].stage} for i in seq if s.ops[i].lane == "compute"]})
    plan = tmp_path_factory.mktemp("plan") / "plan.json"
    plan.write_text(dumps(plan_to_dict(s, timeline=sim.timeline())))
    return {"traces": traces, "events": events, "plan": plan}


def _write(folder: Path, files: list[tuple[str, bytes]]) -> None:
    """A fresh folder per example (hypothesis reuses the test's tmp_path)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for name, raw in files:
        (folder / name).write_bytes(raw)


def _commands(folder: Path, plan: Path, rnd: random.Random) -> list[str]:
    files = sorted(folder.iterdir())
    glob = str(folder / ("rank*" + "".join(files[0].suffixes))) if files else str(folder)
    target = rnd.choice([str(folder), str(files[0]), glob] if files else [str(folder)])
    return rnd.choice([
        ["render", target, "--width", "80"], ["check", target], ["compare", str(plan), target],
        ["export", target, "--to", "chrome"], ["export", target, "--to", "torch-csv"],
    ])


def _encode(data: object, name: str, rnd: random.Random) -> tuple[str, bytes]:
    try:
        raw = json.dumps(data, allow_nan=True).encode("utf-8", "surrogatepass")
    except (ValueError, RecursionError):
        raw = b"{}"
    if rnd.random() < 0.3:
        return name + ".json.gz", gzip_bytes(raw)
    return name + ".json", raw


@_SETTINGS
@given(st.sampled_from(["traces", "events"]), st.randoms(use_true_random=False))
def test_fuzz_trace_structure(tmp_path: Path, base: dict, which: str, rnd: random.Random) -> None:
    data = copy.deepcopy(base[which])
    k = rnd.randrange(len(data))
    data[k] = mutate_json(data[k], rnd)
    if which == "events" and rnd.random() < 0.3:
        data[k] = data[k]["events"] if isinstance(data[k], dict) and "events" in data[k] else data[k]  # list form
    _write(tmp_path / "t", [_encode(d, f"rank{r}", rnd) for r, d in enumerate(data)])
    clean_run(_commands(tmp_path / "t", base["plan"], rnd))


@_SETTINGS
@given(st.sampled_from(["traces", "events"]), st.randoms(use_true_random=False))
def test_fuzz_trace_events(tmp_path: Path, base: dict, which: str, rnd: random.Random) -> None:
    """Mutate the events themselves (times, names, ranks), several at once."""
    data = copy.deepcopy(base[which])
    key = "traceEvents" if which == "traces" else "events"
    for _ in range(rnd.randint(1, 6)):
        evs = data[rnd.randrange(len(data))][key]
        j = rnd.randrange(len(evs))
        evs[j] = mutate_json(evs[j], rnd)
        if rnd.random() < 0.2:
            evs.append(copy.deepcopy(evs[j]))  # the same action twice
    _write(tmp_path / "t", [_encode(d, f"rank{r}", rnd) for r, d in enumerate(data)])
    clean_run(_commands(tmp_path / "t", base["plan"], rnd))


@_SETTINGS
@given(st.sampled_from(["traces", "events"]), st.booleans(), st.randoms(use_true_random=False))
def test_fuzz_trace_bytes(tmp_path: Path, base: dict, which: str, gz: bool, rnd: random.Random) -> None:
    files = []
    for r, d in enumerate(base[which]):
        raw = json.dumps(d).encode()
        if gz:
            raw = gzip_bytes(raw)
        if r == 0 or rnd.random() < 0.3:
            raw = mutate_bytes(raw, rnd)
        files.append((f"rank{r}.json" + (".gz" if gz else ""), raw))
    _write(tmp_path / "t", files)
    clean_run(_commands(tmp_path / "t", base["plan"], rnd))
