"""pptl run on CPU (gloo) for moe-1f1b-overlap plans: a pp x ep grid, all-to-alls issued in the plan's
order by every EP member, the split backward against a one-process reference (--verify), offload and
onload copies before their backward, calibration from the measured sub-ops."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from runorder import assert_runs_the_plans_order

from pptl.config import config_from_mapping
from pptl.errors import InputError
from pptl.formats.plan import dumps, plan_to_dict
from pptl.run.families import refine, symmetric_issue
from pptl.run.program import build_program
from pptl.schedules import build_schedule

torch = pytest.importorskip("torch")

TINY = {"hidden": 16, "tokens": 8, "dtype": "float32"}
#: name -> (processes, config): one launch per process count runs all plans of that count.
PLANS = {
    "pp2-ep2-offload": (4, {"pp": 2, "vpp": 2, "microbatches": 4,
                            "options": {"ep": 2, "layers_per_chunk": 2, "offload": True}}),
    "pp2-ep2-no-overlap": (4, {"pp": 2, "vpp": 2, "microbatches": 4,
                               "options": {"ep": 2, "layers_per_chunk": 1, "overlap": False}}),
    "pp1-ep2-paired": (2, {"pp": 1, "microbatches": 3, "options": {"ep": 2, "layers_per_chunk": 2, "offload": True}}),
    "pp2-ep1-offload": (2, {"pp": 2, "vpp": 2, "microbatches": 2,
                            "options": {"ep": 1, "layers_per_chunk": 2, "offload": True}}),
}
A2A = ("A2A_DISPATCH", "A2A_COMBINE")


def _schedule(name: str):
    _, cfg = PLANS[name]
    return build_schedule(config_from_mapping({"schedule": "moe-1f1b-overlap", "workload": TINY, **cfg}))


@pytest.fixture(scope="module")
def runs():
    """name -> (schedule, measured timeline), with --verify."""
    from pptl.run import run_plans

    out = {}
    for procs in (4, 2):
        names = [n for n, (p, _) in PLANS.items() if p == procs]
        schedules = [_schedule(n) for n in names]
        tls = run_plans([(s, None) for s in schedules], gpus=procs, device="cpu", steps=1, warmup=0, verify=True,
                        timeout=60)
        out.update({n: (s, tl) for n, s, tl in zip(names, schedules, tls)})
    return out


@pytest.mark.parametrize("name", list(PLANS))
def test_each_lane_runs_in_the_plans_order(runs, name):
    schedule, tl = runs[name]
    # One host runs compute and comm one at a time, in this order.
    assert_runs_the_plans_order(schedule, tl, serial_lanes=("compute", "comm"))


@pytest.mark.parametrize("name", list(PLANS))
def test_every_ep_member_issues_the_same_all_to_alls_in_order(runs, name):
    schedule, tl = runs[name]
    executed = tl.meta.extra["executed"]
    by_id = {op.id: op for op in schedule.ops}
    for group in schedule.meta["ep_groups"]:
        seqs = []
        for rank in group:
            ids = [i for i in executed[str(rank)]["comm"] if by_id[i].kind in A2A]
            seqs.append([(by_id[i].kind, by_id[i].flow, by_id[i].stage, by_id[i].mb, by_id[i].sub) for i in ids])
            assert ids == [schedule.ops[i].id for i in schedule.lanes[(rank, "comm")] if schedule.ops[i].kind in A2A]
        assert all(s == seqs[0] for s in seqs), group
        assert len(seqs[0]) == 4 * sum(1 for op in schedule.ops if op.rank == group[0] and op.kind == "ATTN") // 2


@pytest.mark.parametrize("name", list(PLANS))
def test_loss_and_every_gradient_match_one_process(runs, name):
    # The reference routes tokens with torch.cat/chunk: a dispatch or combine that met another
    # micro-batch's all-to-all, or a split backward in the wrong order, would not match.
    _, tl = runs[name]
    v = tl.meta.extra["verify"]
    assert v["ok"], v
    assert v["max_grad_rel_err"] < 1e-5 and v["loss_rel_err"] < 1e-5


@pytest.mark.parametrize("name", ["pp2-ep2-offload", "pp1-ep2-paired", "pp2-ep1-offload"])
def test_offloaded_layers_come_back_before_their_backward(runs, name):
    schedule, tl = runs[name]
    ev = {e.op: e for e in tl.events}
    ops = schedule.ops
    off = {(op.direction, op.stage, op.mb, op.sub): op.id for op in ops if op.kind == "OFFLOAD"}
    on = {(op.direction, op.stage, op.mb, op.sub): op.id for op in ops if op.kind == "ONLOAD"}
    assert off and set(off) == set(on)
    for op in ops:
        key = (op.direction, op.stage, op.mb, op.sub)
        if op.kind == "MLP" and op.flow == "B" and key in on:
            assert ev[off[key]].end <= ev[on[key]].start <= ev[on[key]].end <= ev[op.id].start, key
        if op.kind == "MLP" and op.flow == "F" and key in off:
            assert ev[op.id].end <= ev[off[key]].start
    reports = tl.meta.extra["reports"]
    assert sum(r["offloaded_layers"] for r in reports.values()) == len(off)


def test_markers_are_recorded_with_zero_length(runs):
    schedule, tl = runs["pp2-ep2-offload"]
    marks = [e for e in tl.events if e.lane == "pass"]
    assert len(marks) == sum(op.lane == "pass" for op in schedule.ops) > 0
    assert all(e.duration == 0 for e in marks)


def test_measured_exposure_and_calibration(runs, tmp_path):
    from pptl import planning
    from pptl.simulate import simulate

    schedule, tl = runs["pp2-ep2-offload"]
    moe = tl.meta.extra["moe"]
    assert 0 <= moe["exposed_ep"] <= moe["ep_time"] and moe["ep_time"] > 0
    assert 0 <= moe["exposed_copy"] <= moe["copy_time"] and moe["copy_time"] > 0
    means = tl.meta.extra["cost_means"]["base"]
    assert {"attn", "mlp", "attn_b", "mlp_b", "wgrad", "dispatch", "combine", "offload", "onload", "mark"} <= set(means)
    assert means["mark"] == 0
    measured = tmp_path / "measured.json"
    measured.write_text(json.dumps(tl.to_dict()))
    cfg, units = planning.calibrate(schedule.config, measured)
    assert units == "ms"
    calibrated = build_schedule(cfg)
    for key in ("attn", "dispatch", "offload"):
        assert cfg.costs.lookup(key) == pytest.approx(means[key])
    sim = simulate(calibrated)
    assert sim.makespan > 0


# ----------------------------------------------------------------------------------------------
# The program (pure)


def test_members_share_one_issue_order():
    s = _schedule("pp2-ep2-offload")
    prog = build_program(s)
    groups = s.meta["ep_groups"]
    refined = refine(prog, issue=symmetric_issue(prog, groups))
    for group in groups:
        keys = [[(s.ops[i].kind, s.ops[i].lane, s.ops[i].stage, s.ops[i].mb, s.ops[i].sub, s.ops[i].flow)
                 for i in refined.ranks[r].issue] for r in group]
        assert all(k == keys[0] for k in keys)
    for rp in refined.ranks:  # still a linear extension of the plan on every rank
        pos = {i: k for k, i in enumerate(rp.issue)}
        for u, v in s.deps:
            if u in pos and v in pos:
                assert pos[u] < pos[v]


def test_refine_keeps_the_ops_of_each_rank():
    s = _schedule("pp2-ep1-offload")
    prog = build_program(s)
    with pytest.raises(ValueError, match="same ops"):
        refine(prog, issue={0: prog.ranks[0].issue[1:]})


def test_refuses_tokens_that_do_not_split_over_the_members():
    s = build_schedule(config_from_mapping({"schedule": "moe-1f1b-overlap", "pp": 2, "vpp": 2, "microbatches": 2,
                                            "workload": {**TINY, "tokens": 9}, "options": {"ep": 2}}))
    with pytest.raises(InputError, match=r"p.json: field 'workload.tokens': got 9, expected a multiple of "
                                         r"options.ep = 2"):
        build_program(s, source="p.json")


def test_plan_file_runs_through_the_cli(tmp_path):
    from typer.testing import CliRunner

    from pptl.cli import app

    plan = tmp_path / "moe.json"
    plan.write_text(dumps(plan_to_dict(_schedule("pp1-ep2-paired"))))
    out = tmp_path / "measured.json"
    result = CliRunner().invoke(app, ["run", str(plan), "--device", "cpu", "--steps", "1", "--warmup", "0",
                                      "-o", str(out), "--output", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(Path(out).read_text())
    assert data["meta"]["extra"]["moe"]["ep_time"] > 0
    assert json.loads(result.stdout)["family"] == "moe-1f1b-overlap"
