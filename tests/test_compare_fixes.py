"""``pptl compare`` as users meet it: a run of another schedule is refused in one line, CPU SEND
bars end at delivery, the README's calibration flow, an axis from 0, one step named consistently."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from kineto_synth import rank_traces, write
from typer.testing import CliRunner

from pptl.cli import app
from pptl.compare import compare_timelines, schedule_difference
from pptl.config import config_from_mapping
from pptl.formats.loader import load_any
from pptl.run.report import summary_lines
from pptl.run.results import build_timeline
from pptl.schedules import build_schedule
from pptl.simulate import simulate

runner = CliRunner()
RUNS = Path(__file__).resolve().parent / "data" / "runs"


def _plan(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "plan.json"
    r = runner.invoke(app, ["plan", *args, "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out


def test_a_run_of_another_family_is_refused(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "--schedule", "gpipe", "--pp", "4", "--microbatches", "8")
    r = runner.invoke(app, ["compare", str(plan), str(RUNS / "1f1b_cpu.measured.json")])
    assert r.exit_code == 2
    assert r.stderr.strip() == ("error: the plan and the measurement are different schedules: the plan is gpipe, "
                                "the run is 1f1b")


def test_imported_traces_of_another_order_are_refused(tmp_path: Path) -> None:
    """Traces carry no family: GPipe's traces against a 1F1B plan differ in each rank's order."""
    s = build_schedule(config_from_mapping({"schedule": "gpipe", "pp": 4, "microbatches": 8}))
    folder = write(tmp_path / "t", rank_traces(s, simulate(s)))
    plan = _plan(tmp_path, "--schedule", "1f1b", "--pp", "4", "--microbatches", "8")
    r = runner.invoke(app, ["compare", str(plan), str(folder)])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "rank 0 runs r0/compute/F s0 mb4 as compute op 4 where the plan runs r0/compute/B s0 mb0" in r.stderr


def test_same_schedule_and_a_partial_run_are_no_difference() -> None:
    measured = load_any(RUNS / "1f1b_h200.measured.json").timeline
    plan = load_any(RUNS / "1f1b_plan.json")
    planned = plan.timeline or simulate(plan.schedule).timeline()
    assert schedule_difference(planned, measured) == ""
    partial = type(measured)(measured.events[: len(measured.events) // 2], measured.meta)
    assert schedule_difference(planned, partial) == ""
    assert compare_timelines(planned, partial).missing


def test_cpu_send_bars_end_when_their_receive_completes() -> None:
    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 1}))
    idx = {op.id: i for i, op in enumerate(s.ops)}
    send = idx["r0/send/SEND_F s0 mb0 ->r1"]
    recv = idx["r1/recv/RECV_F s1 mb0 <-r0"]

    def payload(rank: int, events: list, device: str) -> dict:
        return {"rank": rank, "issue": [], "info": {"device": device},
                "steps": [{"step": 1, "timed": True, "step_ms": 9.0, "wall_ms": 9.0, "loss": None, "events": events}]}

    for device, end in (("cpu", 3.0), ("cuda", 9.0)):
        tl = build_timeline(s, [payload(0, [[send, 1.0, 9.0]], device), payload(1, [[recv, 0.5, 3.0]], device)])
        bar = next(e for e in tl.events if e.kind == "SEND")
        assert (bar.start, bar.end) == (1.0, end)  # posted -> delivered on CPU; CUDA events are exact


def test_readme_calibration_flow(tmp_path: Path) -> None:
    """README: pptl plan PLAN --costs-from MEASURED -o calibrated.json; pptl compare calibrated.json MEASURED."""
    plan = tmp_path / "plan.json"
    shutil.copy(RUNS / "zbv_plan.json", plan)
    measured = RUNS / "zbv_h200.measured.json"
    calibrated = tmp_path / "calibrated.json"
    r = runner.invoke(app, ["plan", str(plan), "--costs-from", str(measured), "-o", str(calibrated)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["compare", str(calibrated), str(measured), "--output", "json"])
    assert r.exit_code == 0, r.output
    cmp = json.loads(r.stdout)
    assert cmp["units"] == "ms" and cmp["scale"] == 1.0  # calibrated in the run's unit: no rescaling
    assert abs(cmp["makespan"]["error"]) < 0.1
    r = runner.invoke(app, ["plan", str(tmp_path / "nothing.json"), "--costs-from", str(measured)])
    assert r.exit_code == 2


def test_overlay_axis_starts_at_zero(tmp_path: Path) -> None:
    from pptl.render.compare import overlay_figure

    measured = load_any(RUNS / "1f1b_h200.measured.json").timeline
    plan = load_any(RUNS / "1f1b_plan.json")
    cmp = compare_timelines(plan.timeline or simulate(plan.schedule).timeline(), measured)
    assert overlay_figure(cmp).axes[0].get_xlim()[0] == 0


def test_run_summary_names_the_step_it_shows() -> None:
    tl = load_any(RUNS / "1f1b_h200.measured.json").timeline
    x = tl.meta.extra
    lines = summary_lines(tl)
    assert lines[1].startswith(f"step {x['median_step_ms']:.3f} ms: step {x['step']}, the median of "
                               f"{len(x['step_ms'])} timed")
    assert lines[2].startswith(f"measured step {x['step']}: makespan")


@pytest.mark.parametrize("steps,step", [([6.0, 9.0, 7.5, 8.0], 3), ([5.0, 4.0], 2)])
def test_even_step_counts_take_the_lower_median(steps: list[float], step: int) -> None:
    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 1, "microbatches": 1}))
    payload = {"rank": 0, "issue": [], "info": {"device": "cpu"},
               "steps": [{"step": k + 1, "timed": True, "step_ms": ms, "wall_ms": ms, "loss": None,
                          "events": [[0, 0.0, ms]]} for k, ms in enumerate(steps)]}
    tl = build_timeline(s, [payload])
    assert tl.meta.extra["step"] == step and tl.meta.extra["median_step_ms"] == steps[step - 1]
