"""ZB-V: torch's ScheduleZBVZeroBubble order, the V placement, memory, and zero bubble within each
rank's span (first op to last op) when F = I = W and m >= 2p-1."""
from __future__ import annotations

from pathlib import Path

import pytest

from pptl.checks import run_checks
from pptl.config import Config, Costs, load_config
from pptl.planning import plan
from pptl.schedules import build_schedule, get_family
from pptl.schedules._common import span_idle
from pptl.simulate import simulate

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _cfg(p: int, m: int, f: float = 1, i: float = 1, w: float = 1) -> Config:
    return Config(schedule="zbv", pp=p, microbatches=m, costs=Costs(base={"F": f, "I": i, "W": w, "B": i + w}))


def _order(s, r: int) -> list[str]:
    return [f"{op.kind}{op.chunk}:{op.mb}" for op in s.lane_ops(r, "compute")]


def test_order_matches_torch_for_two_ranks() -> None:
    """Worked by hand from ScheduleZBVZeroBubble._calculate_single_rank_operations (p=2, m=3)."""
    s = build_schedule(_cfg(2, 3))
    assert _order(s, 0) == ["F0:0", "F0:1", "F0:2",  # warmup 1: 2(p-r)-1 F0
                            "F1:0", "I1:0", "W1:0", "F1:1", "I1:1", "W1:1",  # warmup 3: p-r x F1 I1 W1
                            "I0:0", "W0:0", "F1:2", "I1:2", "W1:2",  # steady (every F0 already in)
                            "I0:1", "W0:1", "I0:2", "W0:2"]  # cooldown 2: p-r x I0 W0
    assert _order(s, 1) == ["F0:0",  # warmup 1
                            "F1:0", "F0:1",  # warmup 2: r x F1 F0
                            "F1:1", "I1:0", "W1:0",  # warmup 3
                            "F0:2", "I0:0", "W0:0", "F1:2", "I1:1", "W1:1",  # steady
                            "I0:1", "I1:2",  # cooldown 1: r x I0 I1
                            "I0:2", "W0:1",  # cooldown 2
                            "W1:2", "W0:2"]  # tail: W1 left, then W0 left


@pytest.mark.parametrize("p", [1, 2, 3, 5])
def test_v_placement(p: int) -> None:
    s = build_schedule(_cfg(p, 2 * p))
    assert s.num_stages == 2 * p
    for r in range(p):
        chunks = {(op.chunk, op.stage) for op in s.lane_ops(r, "compute")}
        assert chunks == {(0, r), (1, 2 * p - 1 - r)}


def test_fixture_memory_and_zero_bubble() -> None:
    cfg = load_config(FIXTURES / "zbv.yaml")
    result = plan(cfg)
    assert result.violations == []
    assert [r["peak_activation"] for r in result.metrics["ranks"]] == [8.0] * 4  # 2p stage activations
    assert get_family("zbv").memory(cfg) == 8.0
    assert result.metrics["span_idle"] == [0.0] * 4
    assert [r["idle"] for r in result.metrics["ranks"]] == [3.0] * 4  # (p-1)F of stagger


@pytest.mark.parametrize("p, m, u", [(p, m, u) for p in (1, 2, 3, 4, 6) for m in (2 * p - 1, 2 * p, 3 * p + 1)
                                     for u in (1, 2)], ids=lambda v: str(v))
def test_zero_bubble_when_f_i_w_equal(p: int, m: int, u: float) -> None:
    cfg = _cfg(p, m, u, u, u)
    s = build_schedule(cfg)
    sim = simulate(s)
    assert list(span_idle(s, sim.start, sim.end).values()) == [0.0] * p
    assert [r.idle for r in sim.ranks] == pytest.approx([(p - 1) * u] * p)
    assert get_family("zbv").bubble(cfg) == 0.0
    assert run_checks(s) == []


@pytest.mark.parametrize("p, m", [(2, 1), (3, 2), (4, 6), (5, 3)], ids=lambda v: str(v))
def test_few_microbatches_are_valid_but_not_zero_bubble(p: int, m: int) -> None:
    """Below 2p-1 micro-batches the table is built for 2p-1 and the extra ops dropped (as torch
    does): still a valid schedule, with idle time, and PP022 says the claim does not apply."""
    s = build_schedule(_cfg(p, m))
    sim = simulate(s)
    assert max(span_idle(s, sim.start, sim.end).values()) > 0
    violations = run_checks(s)
    assert [v.code for v in violations] == ["PP022"]
    assert f"microbatches={m} < {2 * p - 1} (zero bubble needs 2p-1 micro-batches)" in violations[0].message
    assert get_family("zbv").bubble(s.config) is None


def test_unequal_costs_leave_a_bubble_and_warn() -> None:
    s = build_schedule(_cfg(4, 8, 1, 2, 1))
    sim = simulate(s)
    assert max(span_idle(s, sim.start, sim.end).values()) > 0
    [warning] = [v for v in run_checks(s) if v.code == "PP022"]
    assert warning.severity == "warning"
    assert "F=1, I=2, W=1 are not all equal" in warning.message
