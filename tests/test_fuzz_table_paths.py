"""Fuzz the array readers and rule paths: the same mutated plans and CSVs as the reader fuzzers,
read and checked with ``pptl.columns.FORCE = True`` (what files of 2,000+ ops take), so that a
hostile small file reaches the op-table code. Never a traceback, a hang or a memory blow-up."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from fuzzing import EXAMPLES, NASTY_CELLS, clean_run, mutate_bytes, mutate_cells, mutate_json, write_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pptl import columns
from pptl.config import Config
from pptl.formats.plan import PlanTimes, dumps, plan_to_dict
from pptl.planning import plan

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CSVS = sorted((FIXTURES / "csv").glob("*.csv")) + sorted((FIXTURES / "csv" / "invalid").glob("*.csv"))
_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def arrays():
    columns.FORCE = True
    yield
    columns.FORCE = None


@pytest.fixture(scope="module", params=["1f1b", "dualpipe", "weight-update"])
def plan_json(request) -> dict:
    """A plan as the table writer writes it (with its ``order``), of a family with pairs, payloads and buckets."""
    columns.FORCE = True
    try:
        r = plan(Config(schedule=request.param, pp=2 if request.param != "dualpipe" else 4, microbatches=8))
        sim = r.simulation
        return plan_to_dict(r.schedule, times=PlanTimes(sim.start, sim.end, sim.timeline_meta()), metrics=r.metrics,
                            topo=r.order)
    finally:
        columns.FORCE = None


def test_the_plans_carry_an_order(plan_json: dict) -> None:
    assert "order" in plan_json and len(plan_json["order"]) == sum(e["count"] for e in plan_json["lanes"])


@_SETTINGS
@given(st.randoms(use_true_random=False))
def test_fuzz_table_plan_structure(tmp_path: Path, plan_json: dict, rnd: random.Random) -> None:
    p = tmp_path / "p.json"
    write_json(p, mutate_json(plan_json, rnd))
    clean_run(["check", str(p)])


@_SETTINGS
@given(st.randoms(use_true_random=False))
def test_fuzz_table_plan_bytes(tmp_path: Path, plan_json: dict, rnd: random.Random) -> None:
    p = tmp_path / "p.json"
    p.write_bytes(mutate_bytes(dumps(plan_json).encode(), rnd))
    clean_run(["check", str(p)])


@_SETTINGS
@given(st.randoms(use_true_random=False))
def test_fuzz_table_plan_order_and_columns(tmp_path: Path, plan_json: dict, rnd: random.Random) -> None:
    """The fields the table reader reads on arrays, each replaced by a hostile value."""
    data = {**plan_json, "ops": dict(plan_json["ops"])}
    n = len(data["order"])
    field = rnd.choice(["order", "stage", "mb", "peer", "bucket", "kind"])
    bad = rnd.choice([[rnd.randint(-2**70, 2**70) for _ in range(n)], [1.5] * n, [None] * n, [True] * n,
                      list(range(n, 0, -1)), [0] * n, [2**63] * n, [-1] * n, "x", [], {}])
    if field == "order":
        data["order"] = bad
    elif field == "kind":
        data["ops"]["kind"] = {"values": rnd.choice([["F", "F"], [""], ["SEND"], []]), "index": bad}
    else:
        data["ops"][field] = bad
    p = tmp_path / "p.json"
    write_json(p, data)
    clean_run(["check", str(p)])


@_SETTINGS
@given(st.sampled_from(CSVS), st.randoms(use_true_random=False))
def test_fuzz_table_csv_bytes(tmp_path: Path, src: Path, rnd: random.Random) -> None:
    p = tmp_path / "s.csv"
    p.write_bytes(mutate_bytes(src.read_bytes(), rnd))
    clean_run(["check", str(p)])


@_SETTINGS
@given(st.sampled_from(CSVS), st.randoms(use_true_random=False))
def test_fuzz_table_csv_cells(tmp_path: Path, src: Path, rnd: random.Random) -> None:
    p = tmp_path / "s.csv"
    p.write_text(mutate_cells(src.read_text(), rnd))
    clean_run(["check", str(p), "--p2p", rnd.choice(["nccl", "blocking", "nonblocking"])])


@_SETTINGS
@given(st.lists(st.lists(st.sampled_from(NASTY_CELLS), max_size=12), min_size=0, max_size=6),
       st.randoms(use_true_random=False))
def test_fuzz_table_csv_from_nasty_cells(tmp_path: Path, rows: list[list[str]], rnd: random.Random) -> None:
    p = tmp_path / "s.csv"
    p.write_text("\n".join(",".join(r) for r in rows) + ("\n" if rnd.random() < 0.5 else ""))
    clean_run(["check", str(p)])
