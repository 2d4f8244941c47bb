"""Fuzz the trace importer and ``pptl explain`` from real traces (tests/data/traces): cut short,
events dropped or shuffled, ids (correlation, thread, flow) broken, fields mutated. Every outcome
is exit 0 with notes, or one line and exit 2; never a traceback."""
from __future__ import annotations

import copy
import gzip
import json
import random
import shutil
from pathlib import Path

import pytest
from fuzzing import EXAMPLES, clean_run, mutate_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

DATA = Path(__file__).resolve().parent / "data" / "traces"
# Small steps keep each example fast; the two single-stage ones and two multi-stage ones cover both paths.
SEEDS = ("Schedule1F1B", "ScheduleGPipe", "ScheduleZBVZeroBubble", "ScheduleDualPipeV")
_SETTINGS = settings(max_examples=max(8, EXAMPLES // 2), deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def seeds() -> dict[str, list[dict]]:
    return {name: [json.loads(gzip.decompress(f.read_bytes())) for f in sorted((DATA / name).glob("rank*.json.gz"))]
            for name in SEEDS}


def _cut(evs: list, rnd: random.Random) -> list:
    return evs[: rnd.randrange(len(evs) + 1)]


def _drop(evs: list, rnd: random.Random) -> list:
    p = rnd.choice([0.01, 0.1, 0.5])
    return [e for e in evs if rnd.random() >= p]


def _shuffle(evs: list, rnd: random.Random) -> list:
    evs = list(evs)
    rnd.shuffle(evs)
    return evs


def _break_ids(evs: list, rnd: random.Random) -> list:
    out = copy.deepcopy(evs)
    for e in out:
        if not isinstance(e, dict):
            continue
        r = rnd.random()
        if r < 0.1 and isinstance(e.get("args"), dict):
            e["args"]["correlation"] = rnd.choice([None, "x", -1, 0, 10**30, [1], 7])
        elif r < 0.15:
            e["tid"] = rnd.choice([None, [], "t", 0, 10**20])
        elif r < 0.18 and "id" in e:
            e["id"] = rnd.choice([None, {}, 1])
        elif r < 0.2:
            e["ts"] = rnd.choice([None, "1", -1e300, float("inf"), 1e17, rnd.uniform(-1e5, 1e5)])
    return out


def _mutate(evs: list, rnd: random.Random) -> list:
    out = list(evs)
    for _ in range(rnd.randint(1, 8)):
        if out:
            j = rnd.randrange(len(out))
            out[j] = mutate_json(copy.deepcopy(out[j]), rnd)
    return out


_HOW = {"cut": _cut, "drop": _drop, "shuffle": _shuffle, "ids": _break_ids, "mutate": _mutate}


@_SETTINGS
@given(st.sampled_from(SEEDS), st.lists(st.sampled_from(sorted(_HOW)), min_size=1, max_size=3),
       st.integers(0, 2**32 - 1))
def test_fuzz_real_traces(tmp_path: Path, seeds: dict, seed: str, how: list[str], salt: int) -> None:
    rnd = random.Random(salt)  # one integer of entropy: shuffling thousands of events draws a lot
    traces = [dict(t) for t in seeds[seed]]
    for k in rnd.sample(range(len(traces)), rnd.randint(1, len(traces))):
        evs = traces[k]["traceEvents"]
        for h in how:
            evs = _HOW[h](evs, rnd)
        traces[k]["traceEvents"] = evs
    if rnd.random() < 0.1:
        traces.pop(rnd.randrange(len(traces)))  # a rank's file lost
    folder = tmp_path / "t"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for r, t in enumerate(traces):
        raw = json.dumps(t, allow_nan=True).encode()
        if rnd.random() < 0.1:
            raw = raw[: rnd.randrange(len(raw))]  # a file cut short
        (folder / f"rank{r}.json").write_bytes(raw)
    cmd = rnd.choice([["explain", str(folder)], ["explain", str(folder), "--output", "json"],
                      ["check", str(folder)], ["render", str(folder), "--width", "80"]])
    clean_run(cmd)
