"""The simulator and the plan's metrics on a schedule made from its op table (no ``Op`` objects)
give what they give on the ``Op`` list, float for float, and build no ``Op`` for the training
families.

The object runs take the plain-Python passes (``pptl.columns.FORCE = False``); the table runs
the array passes (``FORCE = True``), on :func:`tests.table_copy.table_made` copies.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from pptl.config import Config, Costs, load_config
from pptl.dag import adjacency, topological_order
from pptl.demo import default_fixtures_dir
from pptl.errors import InvalidScheduleError
from pptl.planning import title_of
from pptl.schedules import build_schedule, get_family
from pptl.simulate import durations, simulate
from tests.table_copy import table_made

EXAMPLES = {  # family -> its example config
    "gpipe": "gpipe.yaml", "1f1b": "1f1b.yaml", "interleaved-1f1b": "interleaved.yaml", "zb-h1": "zb_h1.yaml",
    "zb-h2": "zb_h2.yaml", "zbv": "zbv.yaml", "dualpipe": "dualpipe_seed.yaml", "dualpipev": "dualpipev.yaml",
    "moe-1f1b-overlap": "moe_seed.yaml", "weight-update": "weight_update_seed.yaml",
}
#: Families whose memory rules and metrics read ops (held spans, MoE metadata): they may build them.
READS_OPS = {"moe-1f1b-overlap", "weight-update"}




def _summary(schedule, sim) -> dict:
    """What ``pptl plan`` reports of a simulation: metrics, family metrics, title, meta, times."""
    fam = get_family(schedule.family)
    metrics = sim.metrics()
    extra = fam.extra_metrics(schedule, sim) if fam.extra_metrics is not None else {}
    return {"metrics": metrics, "extra": extra, "title": title_of(schedule, sim.makespan, metrics["bubble_fraction"]),
            "meta": sim.timeline_meta(), "start": sim.start, "end": sim.end, "peak_time": sim.peak_time}


def _both(schedule, force) -> tuple[dict, dict, object]:
    force(False)
    plain = _summary(schedule, simulate(schedule))
    force(True)
    t = table_made(schedule)
    return plain, _summary(t, simulate(t)), t


def _example(family: str) -> Config:
    cfg = load_config(default_fixtures_dir() / EXAMPLES[family])
    assert cfg.schedule == family
    return cfg


@pytest.mark.parametrize("family", sorted(EXAMPLES))
def test_every_family_simulates_the_same_from_its_table(family: str, force) -> None:
    plain, table, t = _both(build_schedule(_example(family)), force)
    assert table == plain
    assert plain["metrics"]["makespan"] > 0 and plain["metrics"]["critical_path"]
    if family not in READS_OPS:
        assert not t.has_ops()


@pytest.mark.parametrize("family", sorted(set(EXAMPLES) - READS_OPS))
def test_uneven_costs_and_payloads_time_the_same_from_the_table(family: str, force) -> None:
    """Per-stage costs, message latency and bytes, and per-rank speeds: each is looked up per
    (cost key, stage) or per payload on the table, spread over the rows."""
    cfg = _example(family)
    keys = ("F", "B", "I", "W") if cfg.split_backward or family in ("zbv", "zb-h1", "zb-h2") else ("F", "B")
    stages = {0: {k: 1.5 for k in keys}, cfg.pp - 1: {keys[0]: 0.7}}
    costs = replace(cfg.costs, stages=stages, comm_latency=0.25, comm_bandwidth=8.0, comm_bytes=3.0,
                    rank_scale={1: 1.1, cfg.pp - 1: 0.9})
    plain, table, t = _both(build_schedule(replace(cfg, costs=costs)), force)
    assert table == plain
    assert not t.has_ops()
    force(False)
    assert plain["metrics"]["makespan"] > simulate(build_schedule(cfg)).makespan  # the slower costs count


def test_durations_from_the_table_are_the_ops_durations(force) -> None:
    s = build_schedule(Config(schedule="1f1b", pp=4, microbatches=8,
                              costs=Costs(base={"F": 1.0, "B": 2.0}, stages={2: {"B": 3.5}}, comm_latency=0.5)))
    force(False)
    plain = durations(s, s.config.costs)
    force(True)
    t = table_made(s)
    assert durations(t, t.config.costs) == plain and not t.has_ops()
    assert {plain[i] for i, op in enumerate(s.ops) if op.kind == "B" and op.stage == 2} == {3.5}
    assert {plain[i] for i, op in enumerate(s.ops) if op.kind == "SEND"} == {0.5}
    assert {plain[i] for i, op in enumerate(s.ops) if op.kind == "RECV"} == {0.0}


def test_a_missing_cost_is_the_same_error_from_the_table(force) -> None:
    s = build_schedule(Config(schedule="zb-h1", pp=4, microbatches=8))
    costs = Costs(base={"F": 1.0, "B": 2.0, "I": 1.0})  # no W, and B is no use to W
    force(False)
    with pytest.raises(InvalidScheduleError) as plain:
        durations(s, costs)
    force(True)
    t = table_made(s)
    with pytest.raises(InvalidScheduleError) as table:
        durations(t, costs)
    assert str(table.value) == str(plain.value) and "no cost for 'W'" in str(plain.value)


def test_adjacency_of_a_table_made_schedule_reads_its_fact_arrays(force) -> None:
    s = build_schedule(Config(schedule="dualpipe", pp=4, microbatches=8))
    t = table_made(s)
    adj = adjacency(t)
    assert adj == adjacency(s) and topological_order(adj) == topological_order(adjacency(s))
    assert not t.has_ops() and "deps" not in vars(t)  # neither ops nor fact tuples were built


def test_the_critical_path_names_its_ops_from_the_table(force) -> None:
    """The plan's summary path (simulation, metrics, family metrics, title) on a table-made
    training plan asks the table for the critical path's ops only."""
    force(True)
    t = table_made(build_schedule(Config(schedule="zb-h1", pp=4, microbatches=8)))
    sim = simulate(t)
    ids = sim.metrics()["critical_path"]
    assert ids[0].startswith("r0/compute/F") and not t.has_ops()
    assert ids == [t.ops[i].id for i in sim.critical_path]


@pytest.mark.parametrize("family", sorted(EXAMPLES))
def test_successor_walk_gives_the_adjacency_walks_order_and_critical_path(family: str, force) -> None:
    """Kahn's order over flat successor lists is the order over adjacency lists, and the longest
    path pushed along successors gives the same times and the same critical path (ties included:
    zero-time RECVs make many) as the one pulled from predecessors."""
    from pptl.dag import kahn_order, successors

    s = build_schedule(_example(family))
    assert kahn_order(successors(s)) == topological_order(adjacency(s))
    force(False)
    pulled = simulate(s, dag=adjacency(s))
    pushed = simulate(s, dag=successors(s))
    if s.config.costs.context or s.config.costs.beside:
        return  # context costs re-time on predecessor lists: both take that path
    assert (pushed.start, pushed.end, pushed.critical_path) == (pulled.start, pulled.end, pulled.critical_path)
    assert len(pushed.critical_path) > 1
