"""The rules on the op table report, case by case, what their per-op statements reported.

The cases (tests/rule_cases.py): every fixture, every family on a small config, mutated copies
(a dropped, duplicated or moved op, an op on another rank, two swapped cells of a CSV row) and
hand-made broken schedules. The expected violations (code, message, op ids, in order) were
recorded from the per-op implementation of each rule; the structure rules (PP001-PP005) on every
case, the order and P2P rules (PP006, PP008, PP030-PP033) under each P2P model.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from rule_cases import MODES, ORDER_P2P, STRUCTURE, p2p_cases, structure_cases

from pptl.checks import run_checks
from pptl.ir import Schedule

EXPECTED = json.loads((Path(__file__).parent / "data/rule_cases.json").read_text())
# The recorded cases (a fixture added since has its own tests).
STRUCTURE_CASES = [(n, s) for n, s in structure_cases() if n in EXPECTED["structure"]]
P2P_CASES = [(n, s) for n, s in p2p_cases() if n in EXPECTED["p2p"]]


def _found(s: Schedule, codes: tuple[str, ...], mode: str = "nccl") -> list[list]:
    return [[v.code, v.message, list(v.ops)] for v in run_checks(s, p2p=mode, select=set(codes))]


def test_the_cases_reach_every_rule() -> None:
    seen = {v[0] for vs in EXPECTED["structure"].values() for v in vs}
    seen |= {v[0] for per in EXPECTED["p2p"].values() for vs in per.values() for v in vs}
    assert set(STRUCTURE) | {"PP006", "PP008", "PP030", "PP031", "PP032", "PP033"} <= seen
    assert {n for n, _ in STRUCTURE_CASES} == set(EXPECTED["structure"])  # none recorded has gone
    assert {n for n, _ in P2P_CASES} == set(EXPECTED["p2p"])


@pytest.mark.parametrize("name,schedule", STRUCTURE_CASES, ids=[n for n, _ in STRUCTURE_CASES])
def test_structure_rules(name: str, schedule: Schedule) -> None:
    assert _found(schedule, STRUCTURE) == EXPECTED["structure"][name]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,schedule", P2P_CASES, ids=[n for n, _ in P2P_CASES])
def test_order_and_p2p_rules(name: str, schedule: Schedule, mode: str) -> None:
    assert _found(schedule, ORDER_P2P, mode) == EXPECTED["p2p"][name][mode]


def test_a_valid_table_made_plan_builds_no_op() -> None:
    from pptl.config import Config
    from pptl.schedules import build_schedule

    s = build_schedule(Config(schedule="interleaved-1f1b", pp=4, vpp=2, microbatches=8))
    assert not s.has_ops()
    assert run_checks(s) == [] and not s.has_ops()
