"""ZB-H1 and ZB-H2 (and 1F1B as the reference): phase tables, memory, constraints, and the bubble
formulas against the simulator.

"Bubble" is ``RankMetrics.idle`` (makespan minus busy, every rank) for 1F1B and ZB-H1; for the
zero-bubble claim of ZB-H2 it is idle time within each rank's own span (first op to last op,
``span_idle``), the zero-bubble paper's measure: against the makespan every rank still idles
(p-1)F, the stagger of the parallelogram's start and end.
"""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from pptl.checks import run_checks
from pptl.config import Config, Costs, load_config
from pptl.errors import InputError
from pptl.planning import plan
from pptl.schedules import build_schedule, get_family
from pptl.schedules._common import span_idle
from pptl.simulate import simulate

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _cfg(name: str, p: int, m: int, f: float = 1, i: float = 1, w: float = 1, **kw) -> Config:
    return Config(schedule=name, pp=p, microbatches=m, costs=Costs(base={"F": f, "I": i, "W": w, "B": i + w}), **kw)


def _order(s, r: int) -> list[tuple[str, int]]:
    return [(op.kind, op.mb) for op in s.lane_ops(r, "compute")]


# --------------------------------------------------------------------------------------------
# Phase tables


@pytest.mark.parametrize("p, m", [(1, 3), (2, 2), (4, 4), (4, 9), (5, 12)], ids=lambda v: str(v))
def test_zb_h1_phase_table_matches_the_paper(p: int, m: int) -> None:
    """Stage i: p-1-i F; i x (F, I); m-p+1 x (F_x, I_{x-(p-1-i)}, W_{x-(p-1)}); p-1-i x (I, W); i x W."""
    s = build_schedule(_cfg("zb-h1", p, m))
    for i in range(p):
        expected = [("F", x) for x in range(p - 1 - i)]
        expected += [y for k in range(i) for y in (("F", p - 1 - i + k), ("I", k))]
        expected += [y for x in range(p - 1, m) for y in (("F", x), ("I", x - (p - 1 - i)), ("W", x - (p - 1)))]
        expected += [y for k in range(m - (p - 1 - i), m) for y in (("I", k), ("W", k - i))]
        expected += [("W", k) for k in range(m - i, m)]
        assert _order(s, i) == expected, i
        assert {op.stage for op in s.lane_ops(i, "compute")} == {i}


def test_zb_h2_doubles_the_offsets() -> None:
    """ZB-H2 on 4 ranks: stage 0 warms up with 2(p-1) = 6 forwards and holds 2p-1 = 7 activations."""
    s = build_schedule(_cfg("zb-h2", 4, 8))
    assert _order(s, 0)[:9] == [("F", k) for k in range(7)] + [("I", 0), ("W", 0)]
    assert _order(s, 3)[:6] == [("F", 0), ("I", 0), ("F", 1), ("I", 1), ("F", 2), ("I", 2)]
    assert _order(s, 3)[-6:] == [("W", k) for k in range(2, 8)]  # 2i trailing W on the last stage
    assert [r.peak_activation for r in simulate(s).ranks] == [7.0, 5.0, 3.0, 1.0]


def test_zb_h1_memory_matches_1f1b() -> None:
    s = build_schedule(_cfg("zb-h1", 4, 8))
    assert [r.peak_activation for r in simulate(s).ranks] == [4.0, 3.0, 2.0, 1.0]
    assert get_family("zb-h1").memory(s.config) == 4.0
    assert get_family("zb-h2").memory(s.config) == 7.0


def test_w_drains_in_the_order_of_i() -> None:
    s = build_schedule(_cfg("zb-h1", 4, 10))
    for r in range(4):
        order = _order(s, r)
        assert [mb for k, mb in order if k == "W"] == [mb for k, mb in order if k == "I"] == list(range(10))


@pytest.mark.parametrize("name, p, m, match", [
    ("zb-h1", 4, 3, "field 'microbatches': got 3, expected at least \\(pp-1\\)\\+1 = 4 for schedule 'zb-h1'"),
    ("zb-h2", 4, 6, "field 'microbatches': got 6, expected at least 2\\*\\(pp-1\\)\\+1 = 7 for schedule 'zb-h2'"),
], ids=["zb-h1-few-microbatches", "zb-h2-few-microbatches"])
def test_constraints(name: str, p: int, m: int, match: str) -> None:
    with pytest.raises(InputError, match=match):
        build_schedule(Config(schedule=name, pp=p, microbatches=m))


def test_vpp_is_refused() -> None:
    with pytest.raises(InputError, match="field 'vpp': got 2, expected 1 \\(use zbv for two stages per rank\\)"):
        build_schedule(Config(schedule="zb-h1", pp=4, microbatches=8, vpp=2))


@pytest.mark.parametrize("name", ["zb_h1.yaml", "zb_h2.yaml"])
def test_fixtures_plan_and_pass_check(name: str) -> None:
    result = plan(load_config(FIXTURES / name))
    assert result.violations == []
    assert result.metrics["makespan"] == 27  # 4 ranks, 8 micro-batches, F = I = W = 1
    assert max(result.metrics["span_idle"]) == (3 if name == "zb_h1.yaml" else 0)


# --------------------------------------------------------------------------------------------
# Bubble formulas against the simulator (zero comm)


def _grid(ps, ms, costs) -> list[tuple]:
    return [(p, m, f, i, w) for p, mm, (f, i, w) in itertools.product(ps, ms, costs) for m in [mm(p)]]


_M = [lambda p: p, lambda p: p + 1, lambda p: 2 * p + 3, lambda p: 4 * p]
_COSTS_I_GE_F = [(1, 1, 1), (1, 1, 0.5), (1, 2, 1), (2, 3, 1), (2, 2, 2), (3, 4, 2), (1, 4, 0.5)]


@pytest.mark.parametrize("p, m, f, i, w", _grid([1, 2, 3, 4, 6, 8], _M, _COSTS_I_GE_F), ids=lambda v: str(v))
def test_1f1b_and_zb_h1_formulas_exact(p: int, m: int, f: float, i: float, w: float) -> None:
    """With I >= F >= W: 1F1B idles (p-1)(F+B) and ZB-H1 (p-1)(F+B-2W) on every rank (B = I+W)."""
    for name, formula in (("1f1b", (p - 1) * (f + i + w)), ("zb-h1", (p - 1) * (f + i - w))):
        cfg = _cfg(name, p, m, f, i, w)
        assert get_family(name).bubble(cfg) == pytest.approx(formula)
        s = build_schedule(cfg)
        assert [r.idle for r in simulate(s).ranks] == pytest.approx([formula] * p), name
        assert run_checks(s) == [], name


@pytest.mark.parametrize("p, m, f, i, w", _grid([2, 3, 4, 6], _M[1:], [(1, 1, 2), (1, 3, 2), (2, 2, 3), (1, 0.5, 1),
                                                                      (3, 1, 2), (1, 1, 3)]),
                         ids=lambda v: str(v))
def test_zb_h1_formula_when_w_exceeds_f_or_i(p: int, m: int, f: float, i: float, w: float) -> None:
    """The formula needs W <= min(F, I), not just I >= F: a longer W no longer fits the slot it
    fills, and every rank idles (p-1)(W-min(F, I)) more; PP022 says so."""
    cfg = _cfg("zb-h1", p, m, f, i, w)
    s = build_schedule(cfg)
    formula = (p - 1) * (f + i - w)
    expected = formula + (p - 1) * (w - min(f, i))
    assert [r.idle for r in simulate(s).ranks] == pytest.approx([expected] * p)
    [warning] = [v for v in run_checks(s) if v.code == "PP022"]
    assert warning.severity == "warning"
    assert warning.message == (f"zb-h1: the textbook bubble (p-1)(F+B-2W) = {formula:g} does not apply: "
                               f"W={w:g} > min(F, I)={min(f, i):g}: each rank idles (p-1)(W-min(F,I)) = "
                               f"{expected - formula:g} more than the formula; simulated idle per rank {expected:g}")


@pytest.mark.parametrize("p, m, u", [(p, m, u) for p in (1, 2, 3, 4, 6) for m in (2 * p - 1, 2 * p + 4, 5 * p)
                                     for u in (1, 2.5)], ids=lambda v: str(v))
def test_zb_h2_zero_bubble_when_f_i_w_equal(p: int, m: int, u: float) -> None:
    """F = I = W and m >= 2p-1: no rank idles between its first and last op; against the makespan
    each idles (p-1)F, the start/end stagger."""
    cfg = _cfg("zb-h2", p, m, u, u, u)
    s = build_schedule(cfg)
    sim = simulate(s)
    assert list(span_idle(s, sim.start, sim.end).values()) == [0.0] * p
    assert [r.idle for r in sim.ranks] == pytest.approx([(p - 1) * u] * p)
    assert get_family("zb-h2").bubble(cfg) == 0.0
    assert run_checks(s) == []


def test_zb_h2_warns_when_costs_differ() -> None:
    s = build_schedule(_cfg("zb-h2", 4, 8, 1, 2, 1))
    sim = simulate(s)
    assert max(span_idle(s, sim.start, sim.end).values()) > 0
    [warning] = [v for v in run_checks(s) if v.code == "PP022"]
    assert "F=1, I=2, W=1 are not all equal (zero bubble needs F = I = W)" in warning.message
    assert get_family("zb-h2").bubble(s.config) is None
