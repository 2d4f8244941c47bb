"""The simulator against the textbook formulas, and its metrics."""
from __future__ import annotations

import pytest

from pptl.config import Config, Costs
from pptl.schedules import build_schedule, get_family
from pptl.simulate import simulate


def _cfg(name: str, p: int, m: int, v: int = 1, f: float = 1.0, b: float = 2.0, **kw) -> Config:
    return Config(schedule=name, pp=p, microbatches=m, vpp=v, costs=Costs(base={"F": f, "B": b, "I": b / 2, "W": b / 2}), **kw)


GRID = [(p, m, f, b) for p in (1, 2, 4, 8) for m in (1, 3, 8, 16) for f, b in ((1, 2), (1, 1), (2, 3.5))]


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p, m, f, b", GRID, ids=[f"p{p}-m{m}-F{f}-B{b}" for p, m, f, b in GRID])
def test_gpipe_1f1b_bubble(name: str, p: int, m: int, f: float, b: float) -> None:
    cfg = _cfg(name, p, m, f=f, b=b)
    sim = simulate(build_schedule(cfg))
    expected = (p - 1) * (f + b)
    assert get_family(name).bubble(cfg) == pytest.approx(expected)
    assert sim.makespan == pytest.approx(m * (f + b) + expected)
    for r in sim.ranks:
        assert r.idle == pytest.approx(expected), r


IGRID = [(p, v, m, f, b) for p in (2, 4) for v in (2, 3) for m in (p, 2 * p, 4 * p) for f, b in ((1, 2), (1, 1))]


@pytest.mark.parametrize("p, v, m, f, b", IGRID, ids=[f"p{p}-v{v}-m{m}-F{f}-B{b}" for p, v, m, f, b in IGRID])
def test_interleaved_bubble(p: int, v: int, m: int, f: float, b: float) -> None:
    """(p-1)(F+B)/V with whole-rank costs, i.e. (p-1)(F_c+B_c) with the per-chunk costs we plan with."""
    cfg = _cfg("interleaved-1f1b", p, m, v, f=f, b=b)
    sim = simulate(build_schedule(cfg))
    expected = (p - 1) * (f + b)
    whole_rank = (p - 1) * (v * f + v * b) / v
    assert expected == pytest.approx(whole_rank)
    for r in sim.ranks:
        assert r.idle == pytest.approx(expected), r


@pytest.mark.parametrize("p, m", [(4, 8), (4, 2), (8, 3)])
def test_1f1b_peak_activation(p: int, m: int) -> None:
    sim = simulate(build_schedule(_cfg("1f1b", p, m)))
    assert [r.peak_activation for r in sim.ranks] == [min(p - r, m) for r in range(p)]


def test_gpipe_peak_is_all_microbatches() -> None:
    sim = simulate(build_schedule(_cfg("gpipe", 4, 6)))
    assert {r.peak_activation for r in sim.ranks} == {6}


def test_interleaved_peak_matches_formula() -> None:
    cfg = _cfg("interleaved-1f1b", 4, 8, 2)
    sim = simulate(build_schedule(cfg))
    assert sim.ranks[0].peak_activation == get_family("interleaved-1f1b").memory(cfg)


def test_comm_latency_adds_to_makespan() -> None:
    base = simulate(build_schedule(_cfg("1f1b", 4, 8))).makespan
    cfg = Config(schedule="1f1b", pp=4, microbatches=8, costs=Costs(comm_latency=0.5))
    slow = simulate(build_schedule(cfg)).makespan
    # The first forward crosses three links and the last backward three more: six latencies at least.
    assert slow >= base + 6 * 0.5


def test_per_stage_override_slows_the_pipeline() -> None:
    cfg = Config(schedule="1f1b", pp=4, microbatches=8, costs=Costs(stages={3: {"F": 2.0, "B": 4.0}}))
    sim = simulate(build_schedule(cfg))
    assert sim.ranks[3].busy == 8 * 6
    assert sim.makespan > 33


def test_critical_path_is_a_chain() -> None:
    s = build_schedule(_cfg("1f1b", 4, 8))
    sim = simulate(s)
    path = sim.critical_path
    assert sim.end[path[-1]] == sim.makespan
    for a, b in zip(path, path[1:]):
        assert sim.end[a] == pytest.approx(sim.start[b])


def test_metrics_json_contract() -> None:
    m = simulate(build_schedule(_cfg("1f1b", 2, 4))).metrics()
    assert set(m) >= {"makespan", "ranks", "critical_path", "bubble_fraction"}
    assert set(m["ranks"][0]) == {"rank", "busy", "idle", "bubble_fraction", "peak_activation"}


def test_split_backward_1f1b_shortens_the_gradient_chain() -> None:
    """With W right after its I, the gradient crosses ranks after I alone: bubble (p-1)(F+I)."""
    plain = simulate(build_schedule(_cfg("1f1b", 4, 8))).makespan
    split = simulate(build_schedule(_cfg("1f1b", 4, 8, split_backward=True))).makespan
    assert plain == 8 * 3 + 3 * (1 + 2)
    assert split == 8 * 3 + 3 * (1 + 1)
