"""PP022 for the flush families (GPipe, 1F1B, interleaved 1F1B): their textbook bubble (p-1)(F+B)
assumes messages take no time, one cost per kind and B = I + W; where one fails the check says so."""
from __future__ import annotations

import pytest

from pptl.checks import run_checks
from pptl.config import Config, Costs
from pptl.schedules import build_schedule
from pptl.simulate import simulate

FAMILIES = [("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2)]


def _pp022(cfg: Config) -> list[str]:
    return [v.message for v in run_checks(build_schedule(cfg)) if v.code == "PP022"]


@pytest.mark.parametrize("family, vpp", FAMILIES)
def test_exact_formula_gives_no_warning(family: str, vpp: int) -> None:
    # pp 4, m 8, F 1, B 2: every rank idles (p-1)(F+B) = 9, as the formula says
    cfg = Config(schedule=family, pp=4, vpp=vpp, microbatches=8, costs=Costs(base={"F": 1.0, "B": 2.0}))
    assert [r.idle for r in simulate(build_schedule(cfg)).ranks] == [9.0] * 4
    assert _pp022(cfg) == []


@pytest.mark.parametrize("family, vpp", FAMILIES)
def test_message_latency_is_named(family: str, vpp: int) -> None:
    cfg = Config(schedule=family, pp=4, vpp=vpp, microbatches=8,
                 costs=Costs(base={"F": 1.0, "B": 2.0}, comm_latency=0.5))
    [msg] = _pp022(cfg)
    assert msg.startswith(f"{family}: the textbook bubble (p-1)(F+B) = 9 does not apply: communication takes 0.5 "
                          "per message (the formula assumes zero)")


def test_gpipe_idle_with_latency_worked_by_hand() -> None:
    # GPipe's forwards fill in (p-1)(F+c), its backwards drain in (p-1)(B+c): 9 + 2(p-1)c = 12 a rank
    cfg = Config(schedule="gpipe", pp=4, microbatches=8, costs=Costs(base={"F": 1.0, "B": 2.0}, comm_latency=0.5))
    [msg] = _pp022(cfg)
    assert msg.endswith("simulated idle per rank 12")


def test_per_stage_costs_are_named() -> None:
    cfg = Config(schedule="1f1b", pp=4, microbatches=8,
                 costs=Costs(base={"F": 1.0, "B": 2.0}, stages={3: {"F": 2.0}}))
    [msg] = _pp022(cfg)
    assert "per-stage costs for F (the formula assumes one value per kind)" in msg
