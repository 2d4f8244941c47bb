"""`pptl tune --costs-from` on a run whose GPUs ran free of their power cap: no duty law (pptl.tune.calibrate)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pptl.power import FREE_CLOCK_SHARE, unthrottled
from pptl.tune.calibrate import calibrate_tune
from pptl.tune.model import tune_config_from_mapping

DATA = Path(__file__).parent / "data" / "tune_crossval"


def _gpu(slowed0: float | None, slowed1: float | None) -> dict:
    return {"0": {"sm_mhz": 1980.0, "slowed": slowed0}, "1": {"sm_mhz": 1965.0, "slowed": slowed1}}


def test_unthrottled_only_when_every_rank_ran_free():
    assert unthrottled(_gpu(0.0, 0.1), 2) == ("rank 0 at 1980 MHz, held in 0% of samples; "
                                              "rank 1 at 1965 MHz, held in 10% of samples")
    # exactly at the share counts as held: the limit is strict
    assert unthrottled(_gpu(0.0, FREE_CLOCK_SHARE), 2) is None
    assert unthrottled(_gpu(1.0, 0.0), 2) is None
    assert unthrottled(_gpu(None, 0.0), 2) is None  # the driver did not say
    assert unthrottled(_gpu(0.0, 0.0), 3) is None  # a rank without a record
    assert unthrottled(None, 2) is None and unthrottled({"0": "x", "1": {}}, 2) is None
    assert unthrottled(_gpu(-0.5, 0.0), 2) is None  # not a share
    assert unthrottled({"0": {"slowed": 0.0}, "1": {"slowed": 0.0}}, 2) == ("rank 0, held in 0% of samples; "
                                                                           "rank 1, held in 0% of samples")


def test_unthrottled_needs_one_record_per_rank_and_a_number_for_a_share():
    # A record of three ranks is not a two-rank run's (another run's record, or a rank counted twice),
    # even where every rank in it ran free.
    three = {**_gpu(0.0, 0.0), "2": {"sm_mhz": 1980.0, "slowed": 0.0}}
    assert unthrottled(three, 2) is None
    assert unthrottled(three, 3) is not None  # the same record for a three-rank run is that run's
    # 'slowed': false is a flag, not a share of samples (bool is an int in Python, False == 0): it says nothing
    assert unthrottled({"0": {"slowed": False}, "1": {"slowed": 0.0}}, 2) is None


def _calibrate(tmp_path: Path, gpu: dict | None) -> tuple[float | None, list[str]]:
    saved = json.loads((DATA / "h4864-t2304-l8-m10.json").read_text())
    base = saved["base"]
    if gpu is None:
        base["meta"]["extra"].pop("gpu")
    else:
        base["meta"]["extra"]["gpu"] = gpu
    path = tmp_path / "base.json"
    path.write_text(json.dumps(base))
    cfg = {k: v for k, v in saved["config"].items() if k != "families"}
    tc, _, notes = calibrate_tune(tune_config_from_mapping(cfg, source="t"), path)
    return tc.duty_exponent, notes


def test_a_capped_run_takes_the_clock_law_and_a_free_one_has_none(tmp_path: Path):
    # The run as measured (2 H200s, both ranks held by the 700 W cap in every sample, busy 0.90 and 0.90,
    # at 1470 and 1485 MHz of 1980) takes the clock law's 0.55 x 0.55 = 0.3025; the same run with its record
    # saying the GPUs ran free takes 0; without a record (too alike to fit from) the device's, the same 0.3025.
    alpha, notes = _calibrate(tmp_path, json.loads((DATA / "h4864-t2304-l8-m10.json").read_text())["base"]["meta"]
                              ["extra"]["gpu"])
    assert alpha == pytest.approx(0.3025)
    assert any(n.startswith("duty exponent 0.303 from the clock law") for n in notes), notes
    alpha, notes = _calibrate(tmp_path, _gpu(0.0, 0.05))
    assert alpha == 0.0
    assert any(n.startswith("duty exponent 0: the run's GPUs were not held") for n in notes), notes
    alpha, notes = _calibrate(tmp_path, None)
    assert alpha == pytest.approx(0.3025)
    assert any(n.startswith("duty exponent 0.3025: the run's ranks (busy 0.90, 0.90") for n in notes), notes


def test_whatif_learns_no_duty_exponent_from_a_run_that_ran_free(tmp_path: Path):
    # Call 10's calibrating run (2 H200s) learns 0.55 from its ranks; the same timeline whose record says
    # no limit held the clocks learns 0, and the report says why. The plan the run measured is
    # predicted alike either way (its ranks' duty is the run's), a busier plan is not.
    from pptl.whatif.study import study_plans

    call = Path(__file__).parent / "data" / "whatif_gpu" / "call10_h3840"
    tl = json.loads((call / "measured_calibrate.json").read_text())
    free = tmp_path / "free.json"
    tl["meta"]["extra"]["gpu"] = _gpu(0.0, 0.0)
    free.write_text(json.dumps(tl))
    plans = [call / "plan_1f1b.json", call / "plan_interleaved.json"]
    capped = study_plans(plans, measured=call / "measured_calibrate.json", samples=400, seed=0, duty_exponent=None)
    ran_free = study_plans(plans, measured=free, samples=400, seed=0, duty_exponent=None)
    assert capped[0].spread.duty_exponent > 0.3
    assert ran_free[0].spread.duty_exponent == 0.0
    assert ran_free[0].spread.describe().count("duty exponent 0 (no power or thermal limit held the run's clocks: "
                                                "rank 0 at 1980 MHz, held in 0% of samples; rank 1 at 1965 MHz") == 1
    same = abs(float(ran_free[0].samples.makespan.mean()) / float(capped[0].samples.makespan.mean()) - 1)
    moved = abs(float(ran_free[1].samples.makespan.mean()) / float(capped[1].samples.makespan.mean()) - 1)
    assert same < 0.005 < moved


def test_ranks_are_named_in_number_order():
    # twelve ranks: rank 10 and 11 come after rank 9, not after rank 1 (as text would sort them)
    gpu = {str(r): {"sm_mhz": 1980.0, "slowed": 0.0} for r in range(12)}
    said = unthrottled(gpu, 12)
    assert said is not None
    assert [p.split(" at ")[0] for p in said.split("; ")] == [f"rank {r}" for r in range(12)]


def test_one_rank_order_for_the_clock_record():
    from pptl.power import rank_order
    from pptl.run.report import _gpu_lines

    keys = ["10", "2", "x", "0", "²", "11", "1"]  # "²" is a digit to str.isdigit, and no rank number
    assert sorted(keys, key=rank_order) == ["0", "1", "2", "10", "11", "x", "²"]
    g = {"sm_mhz": 1500.0, "sm_mhz_p10": 1400.0, "sm_mhz_p90": 1600.0, "power_w": 600.0}
    lines = _gpu_lines({k: g for k in ("10", "2", "²")})
    assert [ln.split(":")[0].strip() for ln in lines] == ["rank 2", "rank 10", "rank ²"]
