"""The exposed all-to-all of five real launches, predicted from each launch's own calibration.

tests/data/offload_gpu/run{A,B,C,E,G}: ``bench/gpu_offload.sh --gpus 2`` on 2 H200s (2026-11-27), the
moe-overlap plan (pp 1 x ep 2, 8 micro-batches, 2 layers, hidden 6144): its config, plan and measured
timeline. The two EP members computed 3.5-5.2% apart in their warm-up and cool-down (runs A, B, C) or
within 0.5% (E, G); in the steady state, beside the all-to-alls, they kept closer. Calibrating as
``pptl plan --costs-from`` does, the exposed all-to-all of the calibrated plan (the worst member's
all-to-all time with its compute idle, each all-to-all from its last member's start) is within 20% or
0.3 ms of the launch's in every run (issue 33's bound)."""
from __future__ import annotations

from pathlib import Path

import pytest

from pptl import planning
from pptl.formats.loader import load_any
from pptl.schedules._moe_metrics import exposure_of_timeline

DATA = Path(__file__).parent / "data" / "offload_gpu"
RUNS = ("runA", "runB", "runC", "runE", "runG")


def _calibrated(run: str):
    d = DATA / run
    cfg, _ = planning.calibrate(planning.make_config(d / "cfg_moe-overlap_main.json", {}, None, None),
                                d / "measured_moe-overlap_main.json")
    return cfg, planning.plan(cfg)


@pytest.mark.parametrize("run", RUNS)
def test_exposed_all_to_all_of_the_calibrated_plan_is_the_runs(run):
    d = DATA / run
    schedule = load_any(d / "plan_moe-overlap_main.json").schedule
    _, result = _calibrated(run)
    planned = exposure_of_timeline(schedule, result.timeline)["exposed_ep"]
    measured = exposure_of_timeline(schedule, load_any(d / "measured_moe-overlap_main.json").timeline)["exposed_ep"]
    assert abs(planned - measured) <= max(0.3, 0.2 * measured), (planned, measured)


@pytest.mark.parametrize("run,apart", [("runA", 0.0348), ("runB", 0.0491), ("runC", 0.0518)])
def test_members_apart_in_warm_up_are_learnt_at_their_steady_pace(run, apart):
    # The factors the wholly-alone ops alone gave (0.981/1.016, 0.975/1.024, 0.974/1.026: ``apart``)
    # made the faster member wait at every all-to-all in the plan (in-sample exposure 0.4-0.9 ms over);
    # fitted from every op's alone part they are a fifth or more closer (0.027, 0.037, 0.040 apart).
    cfg, _ = _calibrated(run)
    scale = cfg.costs.rank_scale
    assert set(scale) == {0, 1}
    assert 0.5 * apart < scale[1] - scale[0] < 0.8 * apart, scale
