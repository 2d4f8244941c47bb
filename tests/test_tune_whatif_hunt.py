"""Defects found by using ``pptl tune`` and ``pptl whatif`` as a new user and as an adversary would.

Each test fails without its fix; expected values are worked out by hand in the docstrings.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.tune import load_tune_config
from pptl.tune.model import tune_config_from_mapping

DATA = Path(__file__).resolve().parent / "data"
runner = CliRunner()

# pp 2, 4 layers (2 a stage), F 1, B 2, activation 0.1 and weight 0.5 a layer, no embedding or head.
# 1F1B m=4: rank 0 holds its 2 layers' weights, 2 x 0.5 = 1.0, and at most pp - 0 = 2 micro-batches
# in flight of 2 x 0.1 each, 0.4: peak 1.4. Rank 1: 1.0 + 1 x 0.2 = 1.2.
_SMALL = """pp: 2
microbatches: 4
memory_limit: {limit}
families: [1f1b]
model:
  layers: 4
  layer: {{F: 1.0, B: 2.0, activation: 0.1, weight: 0.5}}
comm: {{latency: 0.05}}
"""


def _crossval_run(tmp_path: Path, shape: str) -> tuple[dict, Path]:
    d = json.loads((DATA / "tune_crossval" / f"{shape}.json").read_text())
    run = tmp_path / "run.json"
    run.write_text(json.dumps(d["base"]))
    return d, run


# --- 1. --costs-from a run of another pp: the memory fit rebuilt the run at the config's pp ---------


@pytest.mark.parametrize("pp", [1, 4])
def test_memory_is_fitted_to_the_runs_own_ranks_whatever_the_configs_pp(tmp_path: Path, pp: int) -> None:
    """The saved 2x H200 1F1B run of h3072-t4096-l12-m12 (pp 2) calibrates a config of pp 1 or 4.

    Its per-layer costs carry over; its memory fit must be of the plan that ran (2 ranks). By hand:
    the run's message buffer is ``message_bytes`` 25165824 B = 24 MiB, and the note names the run's
    2 ranks. Before: at pp 4 the run's 1F1B was rebuilt on 4 ranks, failed, and the fit was dropped
    silently (message 0, working 0: every peak too low, so plans were called "fits" that the run's
    own memory says do not); at pp 1 a 1-rank plan was fitted to rank 0's peak alone ("the 1 ranks'
    peaks", working memory 4097 MiB against 521 from both ranks).
    """
    from dataclasses import replace

    from pptl.tune.calibrate import calibrate_tune

    d, run = _crossval_run(tmp_path, "h3072-t4096-l12-m12")
    assert d["base"]["meta"]["pp"] == 2
    same = tune_config_from_mapping(d["config"], source="t")
    other = replace(same, pp=pp)
    tc, _, notes = calibrate_tune(other, run)
    assert tc.memory.message == pytest.approx(24.0)
    assert [n for n in notes if n.startswith("memory fitted to the 2 ranks' peaks of the 1f1b run")], notes
    # the fit is the run's: the same as for a config of the run's own pp
    ref, _, _ = calibrate_tune(same, run)
    assert tc.memory == ref.memory


# --- 2. a peak just over its limit read "peak 11567.2 over the limit 11567.2" -----------------------


def test_over_the_limit_reason_and_error_tell_the_peak_from_the_limit(tmp_path: Path) -> None:
    """Limit 1.3999999 under the 1F1B peak 1.4 (see ``_SMALL``): at ``:g`` both read "1.4"."""
    cfg = tmp_path / "t.yaml"
    cfg.write_text(_SMALL.format(limit=1.3999999))
    r = runner.invoke(app, ["tune", str(cfg)])
    assert r.exit_code == 1, r.output
    assert "over: peak 1.4 over the limit 1.3999999" in r.stdout
    last = r.stderr.strip().splitlines()[-1]
    assert last == ("error: no candidate fits the memory limit 1.3999999; closest: 1f1b m=4 split=balanced "
                    "with peak 1.4")


def test_peak_exactly_at_the_limit_fits_in_the_ranking_and_the_written_plan(tmp_path: Path) -> None:
    """Limit 1.4 = the 1F1B peak (``_SMALL``): "fits" (<=) in the table, the JSON and the plan -o writes."""
    cfg = tmp_path / "t.yaml"
    cfg.write_text(_SMALL.format(limit=1.4))
    plan = tmp_path / "best.json"
    r = runner.invoke(app, ["tune", str(cfg), "-o", str(plan), "--output", "json"])
    assert r.exit_code == 0, r.output
    best = json.loads(r.stdout)["best"]
    assert best["fits"] and best["peak_memory"] == [pytest.approx(1.4), pytest.approx(1.2)]
    assert json.loads(plan.read_text())["metrics"]["tune"]["fits"] is True


def test_peak_and_limit_adds_digits_only_where_needed() -> None:
    from pptl.tune.rank import peak_and_limit

    assert peak_and_limit(11567.164907804097, 11567.164) == ("11567.165", "11567.164")
    assert peak_and_limit(18402.6, 11916) == ("18402.6", "11916")
    assert peak_and_limit(7.6, 1) == ("7.6", "1")


# --- 3. a CPU run's SEND taken as a hold of the producer's compute stream --------------------------


def test_a_cpu_run_holds_no_compute_stream_for_its_sends(tmp_path: Path) -> None:
    """tests/data/runs/1f1b_cpu.measured.json: 4 gloo ranks, ``messages: sync-send`` recorded, but
    gloo has no streams, so a SEND holds no compute (``pptl whatif --from`` reads it so). By hand:
    hold 0, the whole message on the SEND; the note says 0. Before: the median SEND (host waiting on
    the transfer) was taken as the hold, on 10 CPU ranks 2.775 ms "of" a 1.593 ms message."""
    from pptl.tune.calibrate import calibrate_tune

    run = DATA / "runs" / "1f1b_cpu.measured.json"
    meta = json.loads(run.read_text())["meta"]
    assert meta["extra"]["device"] == "cpu" and meta["extra"]["messages"] == "sync-send"
    cfg = tmp_path / "cpu.yaml"
    cfg.write_text("pp: 4\nmicrobatches: [8]\nmemory_limit: 1000\nmodel:\n  layers: 4\n"
                   "  layer: {F: 1.0, B: 2.0, I: 1.0, W: 1.0, activation: 0.1, weight: 0.5}\n"
                   "comm: {latency: 0.05}\nworkload: {hidden: 256, tokens: 64, dtype: float32}\n"
                   "run_blocks: {embedding: 0, head: 0}\n")
    tc, _, notes = calibrate_tune(load_tune_config(cfg), run)
    assert tc.send_hold == 0.0
    assert [n for n in notes if n.endswith("(its SEND holds the producer's compute stream 0 of it)")], notes


def test_a_gpu_runs_hold_is_at_most_its_message() -> None:
    """A SEND longer than the message it sends cannot hold the stream longer than the message:
    median SEND 0.3 of a 0.1 message holds 0.1."""
    from pptl.timeline import Event, Timeline, TimelineMeta
    from pptl.tune.calibrate import _send_hold

    events = [Event(f"r0/send/SEND_F s0 mb{k} ->r1", 0, "send", 10.0 * k, 10.0 * k + 0.3, "SEND", 0, k)
              for k in range(3)]
    tl = Timeline(events, TimelineMeta(source="measured", units="ms",
                                       extra={"messages": "sync-send", "device": "cuda"}))
    assert _send_hold(tl, 0.1) == pytest.approx(0.1)
    assert _send_hold(tl) == pytest.approx(0.3)
