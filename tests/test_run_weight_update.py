"""pptl run on CPU (gloo) for weight-update plans: host buckets -> H2D buffer -> IPC half -> broadcast ->
reload, the reloaded parameters equal to the host copy bit for bit, each lane in the plan's order, and
a run whose reload is missing fails naming the tensor."""
from __future__ import annotations

import dataclasses
import json

import pytest
from runorder import assert_runs_the_plans_order

from pptl.config import config_from_mapping
from pptl.errors import InvalidScheduleError, RunError
from pptl.run.families import remote_hop_waits
from pptl.run.program import build_program
from pptl.schedules import build_schedule

torch = pytest.importorskip("torch")

#: Unequal tensors per owner: buckets of 1, 2 and 3 tensors, and one owner with two rounds.
TENSORS = [[1024, 1024, 512], [2048], [512, 512, 256], [256]]
PLANS = {
    "h2d-buffer": {"tensors": TENSORS, "bucket_size": "2KiB", "free_memory": "1GiB"},
    "no-h2d-buffer": {"tensors": TENSORS, "bucket_size": "2KiB", "free_memory": "1GiB", "h2d_buffer": False},
    "one-round-at-a-time": {"tensors": TENSORS, "bucket_size": "2KiB", "free_memory": "1GiB", "h2d_overlap": False},
}
KINDS = ("H2D", "COPY", "BCAST src", "BCAST dst", "RELOAD")


def _schedule(name: str, pp: int = 4):
    options = {**PLANS[name], "tensors": TENSORS[:pp]}
    return build_schedule(config_from_mapping({"schedule": "weight-update", "pp": pp, "microbatches": 1,
                                               "options": options}))


@pytest.fixture(scope="module")
def runs():
    from pptl.run import run_plans

    schedules = {n: _schedule(n) for n in PLANS}
    tls = run_plans([(s, None) for s in schedules.values()], gpus=4, device="cpu", steps=1, warmup=0, verify=True,
                    timeout=60)
    return {n: (s, tl) for (n, s), tl in zip(schedules.items(), tls)}


@pytest.mark.parametrize("name", list(PLANS))
def test_reloaded_parameters_equal_the_host_copy(runs, name):
    schedule, tl = runs[name]
    model = sum(sum(t) for t in TENSORS)
    reports = tl.meta.extra["reports"]
    assert set(reports) == {"0", "1", "2", "3"}
    for r in reports.values():
        assert r == {"bitexact": True, "tensors": 8, "bytes_checked": model}
    assert tl.meta.extra["weight_update"]["bitexact"] is True
    assert tl.meta.extra["verify"]["ok"]


@pytest.mark.parametrize("name", list(PLANS))
def test_each_lane_runs_in_the_plans_order(runs, name):
    assert_runs_the_plans_order(*runs[name])


@pytest.mark.parametrize("name", list(PLANS))
def test_halves_are_reused_only_after_every_reload(runs, name):
    # Rank r's broadcast of bucket g overwrites the half that its reload of g-2 reads.
    schedule, tl = runs[name]
    ev = {e.op: e for e in tl.events}
    halves = schedule.meta["weight_update"]["ipc_halves"]
    bc = {(op.rank, op.bucket): op.id for op in schedule.ops if op.kind == "BCAST"}
    rl = {(op.rank, op.bucket): op.id for op in schedule.ops if op.kind == "RELOAD"}
    for (rank, g), op_id in bc.items():
        assert ev[op_id].end <= ev[rl[(rank, g)]].start
        if g >= halves:
            assert ev[rl[(rank, g - halves)]].end <= ev[op_id].start


def test_bandwidth_per_stage(runs):
    _, tl = runs["h2d-buffer"]
    wu = tl.meta.extra["weight_update"]
    assert set(wu["gbps_total"]) == set(KINDS)
    assert all(v > 0 for v in wu["gbps_total"].values())
    assert wu["update_ms"] == pytest.approx(tl.makespan)


def test_calibration_fixes_each_stage(runs, tmp_path):
    from pptl import planning
    from pptl.simulate import simulate

    schedule, tl = runs["h2d-buffer"]
    measured = tmp_path / "measured.json"
    measured.write_text(json.dumps(tl.to_dict()))
    cfg, units = planning.calibrate(schedule.config, measured)
    means = tl.meta.extra["cost_means"]["base"]
    calibrated = build_schedule(cfg)
    sim = simulate(calibrated)
    for i, op in enumerate(calibrated.ops):
        if op.cost in means:
            assert sim.end[i] - sim.start[i] == pytest.approx(means[op.cost] if op.kind != "RELOAD"
                                                              else cfg.costs.base["RELOAD"])
    assert units == "ms"


def _missing_reload():
    s = _schedule("h2d-buffer", pp=2)
    lanes = {k: s.lane_ops(*k) for k in s.lanes}
    lanes[(1, "compute")] = lanes[(1, "compute")][1:]  # rank 1 never reloads bucket 0
    return s.with_lanes(lanes)


def test_a_missing_reload_is_refused_before_the_run(monkeypatch):
    import pptl.run.launcher
    from pptl.run import run_plans

    def launch(*a, **k):
        raise AssertionError("pptl run started processes")

    monkeypatch.setattr(pptl.run.launcher, "launch", launch)
    with pytest.raises(InvalidScheduleError, match=r"^weight-update: PP055: bucket 0 is missing its reload on rank 1"):
        run_plans([(_missing_reload(), None)], gpus=2, device="cpu", steps=1, warmup=0, timeout=60)


def test_a_missing_reload_fails_naming_the_tensor():
    """The ranks' own check of what they reloaded, past the checker (the launcher, not run_plans)."""
    from pptl.run.launcher import launch
    from pptl.run.options import Job, PlanJob

    job = Job(plans=(PlanJob("broken", None, "broken"),), device="cpu", steps=1, warmup=0, timeout=60).validate()
    with pytest.raises(RunError, match=r"rank 1: reloaded tensor 0 \(owner 0, 1024 bytes\) differs from the host "
                                       r"copy at byte 0"):
        launch(job, [_missing_reload()], 2)


def test_broadcast_waits_for_the_reload_two_buckets_back():
    s = _schedule("h2d-buffer")
    waits = remote_hop_waits(s)
    ops = s.ops
    for r in range(4):
        for v, ws in waits.get(r, {}).items():
            assert ops[v].rank == r and all(ops[w].rank == r for w in ws)
    bc = {(op.rank, op.bucket): i for i, op in enumerate(ops) if op.kind == "BCAST"}
    rl = {(op.rank, op.bucket): i for i, op in enumerate(ops) if op.kind == "RELOAD"}
    owner = {op.bucket: op.rank for op in ops if op.kind == "COPY"}
    for (rank, g), i in bc.items():
        if g >= 2 and rank != owner[g]:
            assert rl[(rank, g - 2)] in waits[rank][i]
    prog = build_program(s)  # cross-rank orderings are allowed here: the broadcast carries them
    assert len(prog.ranks) == 4


def test_a_broadcast_counts_from_the_last_rank_to_arrive():
    from pptl.run.families import cost_means
    from pptl.timeline import Event

    s = _schedule("h2d-buffer", pp=2)
    bc = [op for op in s.ops if op.kind == "BCAST" and op.bucket == 0]
    rl = next(op for op in s.ops if op.kind == "RELOAD" and op.bucket == 0)
    # The receiver reaches the broadcast at 0, the source at 3; both end at 4: the transfer took 1.
    events = [Event(op=bc[0].id, rank=bc[0].rank, lane="comm", start=3.0 if bc[0].peer == bc[0].rank else 0.0,
                    end=4.0, kind="BCAST"),
              Event(op=bc[1].id, rank=bc[1].rank, lane="comm", start=3.0 if bc[1].peer == bc[1].rank else 0.0,
                    end=4.0, kind="BCAST"),
              Event(op=rl.id, rank=rl.rank, lane="compute", start=4.0, end=6.0, kind="RELOAD")]
    together = cost_means(s, events, lambda op: ("BCAST", op.bucket) if op.kind == "BCAST" else None)
    assert together["base"] == {bc[0].cost: 1.0, rl.cost: 2.0}
    assert cost_means(s, events)["base"][bc[0].cost] == pytest.approx(2.5)  # each copy's own length


def test_refuses_a_bucket_larger_than_the_buffers():
    from pptl.errors import InputError

    s = build_schedule(config_from_mapping({"schedule": "weight-update", "pp": 2, "microbatches": 1,
                                            "options": {"tensors": [[1024], [2048]], "bucket_size": "1KiB",
                                                        "free_memory": "1GiB"}}))
    with pytest.raises(InputError, match=r"p.json: bucket 1 holds 2048 bytes, more than the buffers' bucket_size 1024"):
        build_program(s, source="p.json")


def test_layout_follows_the_plans_buckets():
    from pptl.run.weight_update import layout_of

    s = _schedule("h2d-buffer")
    lay = layout_of(s)
    for owner, row in enumerate(TENSORS):  # every owner's tensors, in its order
        assert [n for n, o in zip(lay.sizes, lay.owner_of) if o == owner] == row
    for g, (owner, half, n, _off, _first, parts) in enumerate(lay.buckets):
        assert sum(p[2] for p in parts) == n and half == g % 2
        assert all(lay.owner_of[t] == owner for t, _, _ in parts)
    bare = dataclasses.replace(s, config=None)  # a plan without its config: each bucket is one tensor
    assert layout_of(bare).sizes == tuple(b[2] for b in lay.buckets)
