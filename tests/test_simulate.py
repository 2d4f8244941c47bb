"""The simulator against the textbook formulas, and its metrics."""
from __future__ import annotations

import dataclasses

import pytest

from pptl.config import Config, Costs
from pptl.planning import plan
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


@pytest.mark.parametrize("p", [2, 4])
def test_one_microbatch_pays_each_link_once_per_direction(p: int) -> None:
    """One micro-batch is a single chain F0..F(p-1), B(p-1)..B0 with 2(p-1) messages: each message
    costs its latency once (on the SEND; the RECV completes with it, so charging it again is a bug)."""
    cfg = Config(schedule="1f1b", pp=p, microbatches=1, costs=Costs(base={"F": 1.0, "B": 2.0}, comm_latency=0.5))
    s = build_schedule(cfg)
    assert {op.kind for op in s.ops} >= {"SEND", "RECV"}
    sim = simulate(s)
    assert sim.makespan == pytest.approx(p * 3.0 + 2 * (p - 1) * 0.5), "a message is charged more than once"
    for i, op in enumerate(s.ops):
        if op.kind == "RECV":
            assert sim.end[i] == sim.start[i], f"{op.id} takes time of its own"


def test_makespan_is_the_last_end_not_the_last_op_in_dag_order() -> None:
    """W s1 (100 units) ends last, while the op deepest in the DAG is rank 0's short W s0."""
    costs = Costs(base={"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}, stages={1: {"W": 100.0}})
    s = build_schedule(Config(schedule="1f1b", pp=2, microbatches=1, split_backward=True, costs=costs))
    sim = simulate(s)
    ends = {op.id: sim.end[i] for i, op in enumerate(s.ops)}
    # F s0, F s1, I s1, then W s1 for 100 units; rank 0's I and W finish long before.
    assert ends["r1/compute/W s1 mb0"] == 103.0
    assert ends["r0/compute/W s0 mb0"] == 5.0
    assert sim.makespan == 103.0, f"makespan {sim.makespan}, but W s1 ends at 103"
    assert sim.ranks[0].idle == 103.0 - 3.0


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


def test_metrics_values() -> None:
    """pp=2, m=2, F=1, B=2: makespan 9, each rank busy 6 (bubble 3 of 9), peaks 2 and 1."""
    sim = simulate(build_schedule(_cfg("1f1b", 2, 2)))
    m = sim.metrics()
    assert m["makespan"] == 9.0 and m["ops"] == len(sim.schedule.ops)
    assert m["ranks"] == [{"rank": 0, "busy": 6.0, "idle": 3.0, "bubble_fraction": 3.0 / 9.0, "peak_activation": 2.0},
                          {"rank": 1, "busy": 6.0, "idle": 3.0, "bubble_fraction": 3.0 / 9.0, "peak_activation": 1.0}]
    assert m["bubble_fraction"] == pytest.approx(3.0 / 9.0)
    assert m["peak_activation"] == 2.0
    assert m["critical_path"][0] == "r0/compute/F s0 mb0" and m["critical_path"][-1] == "r0/compute/B s0 mb1"


def test_plan_timeline_and_title_report_one_bubble() -> None:
    """One definition (``timeline.bubble_fraction``): the plan's metrics, its planned timeline
    (what draw, compare and run report) and a rank's stats agree, ZB-H1 with uneven stages."""
    from pptl.render.layout import title_line
    from pptl.timeline import RankStats, bubble_fraction

    result = plan(Config(schedule="zb-h1", pp=4, microbatches=8, costs=Costs(stages={3: {"F": 2.0}})))
    sim = result.simulation
    assert all(isinstance(r, RankStats) for r in sim.ranks)
    tl_stats = result.timeline.rank_stats()
    assert [(s.rank, s.busy, s.idle, s.bubble_fraction) for s in tl_stats] == \
        [(r.rank, r.busy, r.idle, r.bubble_fraction) for r in sim.ranks]
    expected = sum(r.idle for r in sim.ranks) / (4 * sim.makespan)
    assert 0 < expected < 1
    assert result.metrics["bubble_fraction"] == expected == result.timeline.bubble_fraction()
    assert bubble_fraction(sim.ranks, sim.makespan) == expected and bubble_fraction([], 5.0) == 0.0
    assert f"bubble={100 * expected:.1f}%" in title_line(result.timeline)


def test_metrics_of_a_zero_length_plan() -> None:
    """Costs of 0 give makespan 0: fractions are 0, not a division by zero."""
    sim = simulate(build_schedule(_cfg("1f1b", 2, 2, f=0.0, b=0.0)))
    m = sim.metrics()
    assert m["makespan"] == 0.0 and m["bubble_fraction"] == 0.0
    assert {r["bubble_fraction"] for r in m["ranks"]} == {0.0}
    short = simulate(build_schedule(_cfg("1f1b", 2, 2, f=0.1, b=0.2))).metrics()  # makespan 0.9: still a fraction
    assert short["makespan"] == pytest.approx(0.9) and short["bubble_fraction"] == pytest.approx(1 / 3)


def test_planned_timeline_carries_every_op_field_and_its_waits() -> None:
    s = build_schedule(_cfg("interleaved-1f1b", 2, 4, 2))
    sim = simulate(s)
    tl = sim.timeline()
    assert (tl.meta.source, tl.meta.units, tl.meta.family, tl.meta.pp, tl.meta.vpp, tl.meta.microbatches) == \
        ("planned", "unit", "interleaved-1f1b", 2, 2, 4)
    assert tl.meta.title == s.meta.get("title", "") and tl.meta.extra == {"makespan": sim.makespan}
    waits: dict[int, set[str]] = {}
    for u, v in s.deps:
        waits.setdefault(v, set()).add(s.ops[u].id)
    assert len(tl.events) == len(s.ops)
    for i, (op, e) in enumerate(zip(s.ops, tl.events)):
        assert (e.op, e.rank, e.lane, e.kind, e.stage, e.mb, e.direction, e.chunk, e.pair, e.label, e.sub, e.peer,
                e.flow) == (op.id, op.rank, op.lane, op.kind, op.stage, op.mb, op.direction, op.chunk, op.pair,
                            op.label, op.sub, op.peer, op.flow)
        assert (e.start, e.end) == (sim.start[i], sim.end[i])
        assert set(e.waits_on) == waits.get(i, set()), op.id
    assert any(e.waits_on for e in tl.events)
    assert all(e.waits_on == () for e in sim.timeline(with_waits=False).events)
    timed = simulate(dataclasses.replace(s, meta={**s.meta, "units": "ms"}))  # a calibrated plan keeps its unit
    assert timed.timeline().meta.units == "ms"


@pytest.mark.parametrize("cfg", [Config(schedule="dualpipe", pp=4, microbatches=8),
                                 Config(schedule="moe-1f1b-overlap", pp=2, microbatches=4, vpp=2)],
                         ids=["dualpipe", "moe-1f1b-overlap"])
def test_planned_timeline_keeps_directions_pairs_labels_and_titles(cfg: Config) -> None:
    """Fields the 1F1B families leave at their defaults: direction and FB pairs (DualPipe), labels
    and sub-indices (MoE sub-ops), and the title a plan gets."""
    result = plan(cfg)
    s, tl = result.schedule, result.simulation.timeline()
    assert tl.meta.title == s.meta["title"] != ""
    fields = ("direction", "pair", "label", "sub", "chunk", "peer", "flow")
    assert [[getattr(e, f) for f in fields] for e in tl.events] == [[getattr(op, f) for f in fields] for op in s.ops]


def test_zbv_timeline_counts_two_chunks_per_rank() -> None:
    """zbv builds two chunks per rank whatever the config's vpp says."""
    s = build_schedule(Config(schedule="zbv", pp=2, microbatches=4))
    assert simulate(s).timeline().meta.vpp == 2


@pytest.mark.parametrize("family, costs, peaks", [
    # GPipe holds every micro-batch's activation before its first backward: m a rank
    ("gpipe", {"F": 0, "B": 0}, [8, 8, 8, 8]),
    # 1F1B holds the p - r forwards of its warmup
    ("1f1b", {"F": 0, "B": 0}, [4, 3, 2, 1]),
    ("zb-h1", {"F": 0, "B": 0, "I": 0, "W": 0}, [4, 3, 2, 1]),
    # zero forwards, timed backwards: the same counts
    ("gpipe", {"F": 0, "B": 2}, [8, 8, 8, 8]),
])
def test_zero_time_ops_still_hold_their_activations(family: str, costs: dict, peaks: list) -> None:
    """Every event of a zero-cost rank falls at one time; frees before allocations there counted no
    activation at all (peak 0, so any --memory-limit passed). The counts are the families' own, in
    activation units (pp 4, m 8)."""
    sim = simulate(build_schedule(Config(schedule=family, pp=4, microbatches=8, costs=Costs(base=costs))))
    assert [r.peak_activation for r in sim.ranks] == peaks
