"""Fuzz the readers of configs, plans and timelines through the CLI: never a traceback or a hang."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from fuzzing import EXAMPLES, clean_run, mutate_bytes, mutate_json, write_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pptl.config import Config
from pptl.formats.plan import dumps, plan_to_dict
from pptl.planning import plan

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CONFIGS = sorted(p for p in FIXTURES.glob("*") if p.suffix in (".yaml", ".toml", ".json"))

_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def plan_json() -> dict:
    result = plan(Config(schedule="1f1b", pp=2, microbatches=3))
    return plan_to_dict(result.schedule, timeline=result.timeline, metrics=result.metrics)


@_SETTINGS
@given(st.sampled_from(CONFIGS), st.randoms(use_true_random=False))
def test_fuzz_config_bytes(tmp_path: Path, src: Path, rnd: random.Random) -> None:
    p = tmp_path / f"c{src.suffix}"
    p.write_bytes(mutate_bytes(src.read_bytes(), rnd))
    clean_run(["plan", str(p), "--output", "json"])


@_SETTINGS
@given(st.randoms(use_true_random=False))
def test_fuzz_config_structure(tmp_path: Path, rnd: random.Random) -> None:
    base = {"schedule": rnd.choice(["1f1b", "gpipe", "interleaved-1f1b"]), "pp": 2, "microbatches": 4, "vpp": 2,
            "costs": {"F": 1, "B": 2, "stages": {"0": {"F": 2}}}, "comm": {"latency": 0.1},
            "workload": {"hidden": 8}, "memory_limit": 10}
    p = tmp_path / "c.json"
    write_json(p, mutate_json(base, rnd))
    clean_run(["check", str(p)])


@_SETTINGS
@given(st.randoms(use_true_random=False))
def test_fuzz_plan_structure(tmp_path: Path, plan_json: dict, rnd: random.Random) -> None:
    p = tmp_path / "p.json"
    write_json(p, mutate_json(plan_json, rnd))
    clean_run(["check", str(p)])


@_SETTINGS
@given(st.randoms(use_true_random=False))
def test_fuzz_plan_bytes(tmp_path: Path, plan_json: dict, rnd: random.Random) -> None:
    p = tmp_path / "p.json"
    p.write_bytes(mutate_bytes(dumps(plan_json).encode(), rnd))
    clean_run(["check", str(p)])


@_SETTINGS
@given(st.randoms(use_true_random=False))
def test_fuzz_timeline_structure(tmp_path: Path, plan_json: dict, rnd: random.Random) -> None:
    p = tmp_path / "t.json"
    write_json(p, mutate_json(plan_json["timeline"], rnd))
    code, _ = clean_run(["check", str(p)])
    assert code == 2  # a timeline is not a schedule: always refused with one line


def test_huge_sizes_are_refused_early(tmp_path: Path) -> None:
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"schedule": "1f1b", "pp": 100000, "microbatches": 1000000}))
    code, err = clean_run(["plan", str(p)])
    assert code == 2 and "more than the 2,000,000 pptl plans" in err
    p.write_text(json.dumps({"format": "pptl-plan", "version": 1, "lanes": [],
                             "schedule": {"family": "x", "pp": 1, "num_stages": 10000, "microbatches": 10000000}}))
    code, err = clean_run(["check", str(p)])
    assert code == 2 and "units of work pptl checks" in err
