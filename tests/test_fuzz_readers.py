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
from pptl.formats.plan import PlanTimes, dumps, plan_to_dict
from pptl.planning import plan

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CONFIGS = sorted(p for p in FIXTURES.glob("*") if p.suffix in (".yaml", ".toml", ".json"))

_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module", params=["1f1b", "dualpipe", "weight-update"])
def plan_json(request: pytest.FixtureRequest) -> dict:
    """A plan as ``pptl plan -o`` writes it (with its ``order``), of families with pairs, payloads
    and buckets."""
    result = plan(Config(schedule=request.param, pp=4 if request.param == "dualpipe" else 2, microbatches=8))
    sim = result.simulation
    return plan_to_dict(result.schedule, times=PlanTimes(sim.start, sim.end, sim.timeline_meta()),
                        metrics=result.metrics, topo=result.order)


def test_plans_carry_their_order(plan_json: dict) -> None:
    n = sum(lane["count"] for lane in plan_json["lanes"])
    assert sorted(plan_json["order"]) == list(range(n))


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
    # A timeline is not a schedule: refused with one line, unless it reads as a measured one, whose
    # times are checked instead (pptl/checks/measured.py).
    assert code == 2 or (code in (0, 1) and "measured" in p.read_text())


def test_huge_sizes_are_refused_early(tmp_path: Path) -> None:
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"schedule": "1f1b", "pp": 100000, "microbatches": 1000000}))
    code, err = clean_run(["plan", str(p)])
    assert code == 2 and "more than the 2,000,000 pptl plans" in err
    p.write_text(json.dumps({"format": "pptl-plan", "version": 1, "lanes": [],
                             "schedule": {"family": "x", "pp": 1, "num_stages": 10000, "microbatches": 10000000}}))
    code, err = clean_run(["check", str(p)])
    assert code == 2 and "units of work pptl checks" in err


_HOSTILE = {"huge": lambda n: [2**70] * n, "int64-max+1": lambda n: [2**63] * n, "float": lambda n: [1.5] * n,
            "null": lambda n: [None] * n, "bool": lambda n: [True] * n, "backwards": lambda n: list(range(n, 0, -1)),
            "zeros": lambda n: [0] * n, "minus-one": lambda n: [-1] * n, "text": lambda n: "x", "empty": lambda n: [],
            "object": lambda n: {}, "short": lambda n: [0] * (n - 1)}


@pytest.mark.parametrize("value", sorted(_HOSTILE))
@pytest.mark.parametrize("field", ["order", "stage", "mb", "peer", "bucket", "kind-index", "kind-values"])
def test_hostile_plan_columns_and_order(tmp_path: Path, plan_json: dict, field: str, value: str) -> None:
    """Each field the readers turn into a column (and the order the checker may trust) replaced by
    each hostile value: one line and exit 1 or 2, or a clean check, never a traceback."""
    data = {**plan_json, "ops": dict(plan_json["ops"])}
    n = sum(e["count"] for e in data["lanes"])
    bad = _HOSTILE[value](n)
    if field == "order":
        data["order"] = bad
    elif field == "kind-index":
        data["ops"]["kind"] = {"values": plan_json["ops"]["kind"]["values"], "index": bad}
    elif field == "kind-values":
        data["ops"]["kind"] = {"values": bad, "index": plan_json["ops"]["kind"]["index"]}
    else:
        data["ops"][field] = bad
    p = tmp_path / "p.json"
    write_json(p, data)
    clean_run(["check", str(p)])
