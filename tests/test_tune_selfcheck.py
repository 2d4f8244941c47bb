"""`pptl tune --costs-from RUN`: the ranking's candidate of the plan the run ran, held against the run's steps."""
from __future__ import annotations

import copy
import json
import statistics
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.tune.calibrate import calibrate_tune, own_plan_note
from pptl.tune.model import MeasuredRun, tune_config_from_mapping

SAVED = Path(__file__).parent / "data" / "tune_crossval" / "h2816-t1280-l13-m6.json"


@pytest.fixture(scope="module")
def saved() -> dict:
    return json.loads(SAVED.read_text())


def _files(tmp_path: Path, saved: dict, stretch: float = 1.0, duty: float | None = None) -> tuple[Path, Path]:
    """The stored shape's config (three families, for speed) and its calibrating run, the run's gaps
    between ops ``stretch`` times as long (every op as long as it was), as a host late to issue them."""
    cfg = dict(saved["config"], families=["1f1b", "gpipe", "zb-h1"])
    if duty is not None:
        cfg["device"] = {"duty_exponent": duty}
    run = copy.deepcopy(saved["base"])
    ex = run["meta"]["extra"]
    ex["step_ms"] = [x * stretch for x in ex["step_ms"]]
    ex["step_ops"]["span_ms"] = [x * stretch for x in ex["step_ops"]["span_ms"]]
    for e in run["events"]:
        e["start"], e["end"] = e["start"] * stretch, e["start"] * stretch + (e["end"] - e["start"])
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    (tmp_path / "run.json").write_text(json.dumps(run))
    return tmp_path / "cfg.json", tmp_path / "run.json"


def test_calibration_keeps_what_the_run_ran_and_its_median_step(tmp_path, saved):
    cfg, run = _files(tmp_path, saved)
    tc, _, _ = calibrate_tune(tune_config_from_mapping(json.loads(cfg.read_text()), source="cfg"), run)
    # the stored run: 1F1B, 6 micro-batches, 16 and 16 blocks of which 2 embedding and 4 head -> 14 and 12 layers
    assert tc.measured_run == MeasuredRun(family="1f1b", microbatches=6, vpp=1, split=(14, 12),
                                          step_p50=statistics.median(saved["base"]["meta"]["extra"]["step_ms"]))


def test_a_run_the_ranking_reproduces_gets_no_note(tmp_path, saved):
    cfg, run = _files(tmp_path, saved)
    r = CliRunner().invoke(app, ["tune", str(cfg), "--costs-from", str(run), "--output", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    own = [c for c in out["candidates"] if c["label"] == "1f1b m=6 split=balanced"]
    # ranked within 1% of the run's 96.55 ms median: the run's ops account for its steps
    assert len(own) == 1 and own[0]["step"] == pytest.approx(96.55, rel=0.01)
    assert not any("the run's own plan" in n for n in out["notes"])


def test_a_run_whose_steps_hold_a_quarter_more_than_its_ops_is_named_short(tmp_path, saved):
    # with the duty law off the ops' costs are the run's as they were: the own plan ranks near 96.55 (the
    # run's message latency, read from the stretched gaps, moves it a little), against 1.25 x 96.55 = 120.7:
    # about 0.99 / 1.25 - 1 = -21%
    cfg, run = _files(tmp_path, saved, stretch=1.25, duty=0.0)
    r = CliRunner().invoke(app, ["tune", str(cfg), "--costs-from", str(run)])
    assert r.exit_code == 0, r.output
    notes = [x for x in r.output.splitlines() if "the run's own plan" in x]
    assert len(notes) == 1 and "(1f1b m=6 split=balanced)" in notes[0] and "likely short" in notes[0], notes
    err = float(notes[0].split("(")[2].split("%")[0])
    assert -23.0 < err < -18.0


def _results(*rows: tuple[str, int, int, tuple[int, ...], float | None]) -> list:
    return [SimpleNamespace(structure=SimpleNamespace(family=f, microbatches=m, vpp=v), split=SimpleNamespace(layers=lay),
                            step=step, label=f"{f} m={m}") for f, m, v, lay, step in rows]


def test_the_note_is_past_three_percent_either_way_and_only_for_the_one_plan_that_ran():
    tc = replace(tune_config_from_mapping({"pp": 2, "microbatches": [6], "model": {"layers": 4, "layer": {"F": 1, "B": 2}}},
                                          source="t"),
                 measured_run=MeasuredRun(family="1f1b", microbatches=6, vpp=1, split=(2, 2), step_p50=100.0))
    assert own_plan_note(tc, _results(("1f1b", 6, 1, (2, 2), 102.9)), "ms") is None  # +2.9%
    assert own_plan_note(tc, _results(("1f1b", 6, 1, (2, 2), 97.1)), "ms") is None  # -2.9%
    long = own_plan_note(tc, _results(("1f1b", 6, 1, (2, 2), 103.1)), "ms")
    assert long is not None and "(+3.1%)" in long and "likely long" in long
    short = own_plan_note(tc, _results(("1f1b", 6, 1, (2, 2), 96.9)), "ms")
    assert short is not None and "(-3.1%)" in short and "likely short" in short
    # another split, another micro-batch count, other chunks, untimed: not the plan that ran
    for other in (("1f1b", 6, 1, (3, 1), 50.0), ("1f1b", 8, 1, (2, 2), 50.0), ("1f1b", 6, 2, (2, 2), 50.0),
                  ("gpipe", 6, 1, (2, 2), 50.0), ("1f1b", 6, 1, (2, 2), None)):
        assert own_plan_note(tc, _results(other), "ms") is None, other
    # two candidates that could be it (options the run does not record): no telling which ran
    assert own_plan_note(tc, _results(("1f1b", 6, 1, (2, 2), 50.0), ("1f1b", 6, 1, (2, 2), 60.0)), "ms") is None
    assert own_plan_note(replace(tc, measured_run=None), _results(("1f1b", 6, 1, (2, 2), 50.0)), "ms") is None
