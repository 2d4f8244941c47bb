"""What ``pptl run`` refuses before it starts a process (invalid plans, outputs it could not write or
no reader takes, a --slow-factor without its rank), what it writes where it was asked to (.json.gz,
a failed final write), what a partial timeline keeps, and compare naming a vpp difference.

Refusals are checked with the launcher replaced by one that fails the test: nothing may start."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.config import config_from_mapping
from pptl.errors import InputError
from pptl.formats.plan import dumps, plan_to_dict
from pptl.schedules import build_schedule

torch = pytest.importorskip("torch")

TINY = {"hidden": 32, "tokens": 8, "layers_per_stage": 1, "dtype": "float32"}
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "invalid"


def _schedule(family: str = "1f1b", pp: int = 2, m: int = 4, **extra):
    return build_schedule(config_from_mapping({"schedule": family, "pp": pp, "microbatches": m, "workload": TINY,
                                               **extra}))


def _write(path: Path, schedule) -> Path:
    path.write_text(dumps(plan_to_dict(schedule)))
    return path


def _run(*args: str):
    r = CliRunner().invoke(app, ["run", *args, "--device", "cpu", "--steps", "1", "--warmup", "0"])
    err = [line for line in r.stderr.splitlines() if line.strip()]
    return r, err


# ----------------------------------------------------------------------------------------------
# 1. A plan pptl check rejects is an invalid schedule (exit 1), refused before anything starts


def test_a_plan_missing_a_backward_is_refused_with_its_first_violation(tmp_path, monkeypatch, no_launch):
    s = _schedule(pp=3, m=6)
    lanes = {k: s.lane_ops(*k) for k in s.lanes}
    lanes[(0, "compute")] = [op for op in lanes[(0, "compute")] if op.id != "r0/compute/B s0 mb5"]
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "noB.json", s.with_lanes(lanes))
    r, err = _run("noB.json", "-o", "m.json")
    assert r.exit_code == 1, r.output
    assert err == ["error: noB.json: PP003: missing B for stage 0 mb 5 (run 'pptl check noB.json' for every "
                   "violation)"]
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("fixture,code", [
    ("dualpipe_fb_self_dependency", "PP020"),
    ("zb_w_fifo", "PP021"),
    ("moe_backward_before_onload", "PP040"),
    ("moe_onload_without_offload", "PP041"),
    ("moe_ep_a2a_order", "PP042"),
    ("deadlock_two_ranks", "PP007"),
    ("unmatched_send", "PP008"),
])
def test_invalid_fixtures_are_refused_before_any_process(tmp_path, no_launch, fixture, code):
    path = FIXTURES / f"{fixture}.json"
    r, err = _run(str(path), "-o", str(tmp_path / "m.json"))
    assert r.exit_code == 1, r.output
    assert len(err) == 1, err
    assert err[0].startswith(f"error: {path}: {code}: "), err[0]
    assert err[0].endswith(f"(run 'pptl check {path}' for every violation)"), err[0]


@pytest.mark.parametrize("change,message", [
    ("compute-only", r"error: p\.json: r0/compute/F s0 mb0 -> r1/compute/F s1 mb0 crosses ranks without a "
                     r"SEND/RECV"),
    ("recv-swapped", r"error: p\.json: rank 0 sends r0/send/SEND_F s0 mb0 ->r1 as message #0 from stage 0 to rank "
                     r"1, which expects r1/recv/RECV_F s1 mb1 <-r0 there; .* \(NCCL matches them in order\)$"),
], ids=["crossing", "message-order"])
def test_what_check_accepts_but_run_cannot_is_an_invalid_schedule_too(tmp_path, monkeypatch, no_launch, change,
                                                                         message):
    """Plans pptl check passes (no given issue order to hold to NCCL) that the run still cannot execute
    were refused as bad input (exit 2): they are invalid schedules, exit 1, with the file named."""
    import re

    s = _schedule()
    lanes = {k: s.lane_ops(*k) for k in s.lanes}
    if change == "compute-only":
        lanes = {k: v for k, v in lanes.items() if k[1] == "compute"}
    else:
        recv = lanes[(1, "recv")]
        lanes[(1, "recv")] = [recv[1], recv[0]] + recv[2:]
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "p.json", s.with_lanes(lanes))
    r, err = _run("p.json", "-o", "m.json")
    assert r.exit_code == 1, r.output
    assert len(err) == 1 and re.match(message, err[0]), err


# ----------------------------------------------------------------------------------------------
# 2, 3, 5. Refused before the run: an output no reader takes, an unwritable folder, a lone --slow-factor


@pytest.mark.parametrize("name", ["m.png", "m.gz", "m"])
def test_an_output_no_reader_takes_is_refused(tmp_path, no_launch, name):
    plan = _write(tmp_path / "p.json", _schedule())
    r, err = _run(str(plan), "-o", str(tmp_path / name))
    assert r.exit_code == 2, r.output
    assert err == [f"error: {tmp_path / name}: a measured timeline is written as .json (or .json.gz), which is how "
                   "pptl's commands read it back"]
    assert not (tmp_path / name).exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_a_folder_it_cannot_write_in_is_found_before_the_run(tmp_path, no_launch):
    """/proc/self exists and is a folder (what the old check looked at), but no one can make a file
    in it, root included."""
    plan = _write(tmp_path / "p.json", _schedule())
    r, err = _run(str(plan), "-o", "/proc/self/m.json")
    assert r.exit_code == 2, r.output
    assert len(err) == 1 and err[0].startswith("error: /proc/self/m.json: cannot write: "), err


def test_slow_factor_without_slow_rank_is_refused(tmp_path, no_launch):
    plan = _write(tmp_path / "p.json", _schedule())
    r, err = _run(str(plan), "--slow-factor", "3", "-o", str(tmp_path / "m.json"))
    assert r.exit_code == 2, r.output
    assert err == ["error: --slow-factor 3: give --slow-rank too (the rank to slow down)"]


# ----------------------------------------------------------------------------------------------
# Runs (processes start): .json.gz, a plan with warnings only, a final write that fails


def test_a_plan_with_warnings_only_runs_and_json_gz_is_gzip(tmp_path):
    """1F1B with B = 3F breaks the textbook bubble's assumption (PP022, a warning): it still runs."""
    from pptl.checks import run_checks
    from pptl.formats.loader import load_any

    s = _schedule(costs={"F": 1, "B": 3})
    assert [(v.code, v.severity) for v in run_checks(s)] == [("PP022", "warning")]
    plan = _write(tmp_path / "p.json", s)
    out = tmp_path / "m.json.gz"
    r, err = _run(str(plan), "-o", str(out))
    assert r.exit_code == 0, r.output
    data = json.loads(gzip.decompress(out.read_bytes()))
    assert data["format"] == "pptl-timeline" and len(data["events"]) == len(s.ops)
    assert len(load_any(out).timeline.events) == len(s.ops)  # and pptl's readers take it back


def test_a_final_write_that_fails_says_where_the_measurement_is(tmp_path, monkeypatch):
    import pptl.run.output
    from pptl.formats.loader import load_any
    from pptl.run import run_plans

    def full(path, raw):
        raise InputError(f"{path}: cannot write: No space left on device")

    monkeypatch.setattr(pptl.run.output, "write_output", full)
    s = _schedule()
    out = tmp_path / "m.json"
    with pytest.raises(InputError) as e:
        run_plans([(s, out)], gpus=2, device="cpu", steps=1, warmup=0, timeout=60)
    text = str(e.value)
    assert text.startswith(f"{out}: cannot write: No space left on device; the measured timeline is kept in "), text
    kept = Path(text.rsplit(" ", 1)[1])
    assert kept.name == "measured0.json" and len(load_any(kept).timeline.events) == len(s.ops)


# ----------------------------------------------------------------------------------------------
# 4. A partial timeline: finished ops, and the SENDs their RECVs show were delivered


def test_partial_timeline_keeps_delivered_sends_and_drops_unfinished_ops():
    """Records without clocks keep each rank's own times, so every number below is the record's.
    Rank 0 ran F mb0 (0-1) and posted SEND_F mb0 at 1 and SEND_F mb1 at 2 (a CPU send has no end
    until waited on); rank 1 received mb0 (0.5-3), ran F mb0 (3-4), and never finished mb1's RECV."""
    from pptl.run.results import build_timeline

    s = _schedule()
    idx = {op.id: i for i, op in enumerate(s.ops)}
    payloads = [
        {"rank": 0, "steps": [], "partial": {"step": 0, "events": [
            [idx["r0/compute/F s0 mb0"], 0.0, 1.0], [idx["r0/send/SEND_F s0 mb0 ->r1"], 1.0, None],
            [idx["r0/send/SEND_F s0 mb1 ->r1"], 2.0, None]]}},
        {"rank": 1, "steps": [], "partial": {"step": 0, "events": [
            [idx["r1/recv/RECV_F s1 mb0 <-r0"], 0.5, 3.0], [idx["r1/compute/F s1 mb0"], 3.0, 4.0]]}},
    ]
    tl = build_timeline(s, payloads)
    got = {e.op: (e.start, e.end) for e in tl.events}
    assert got == {"r0/compute/F s0 mb0": (0.0, 1.0), "r0/send/SEND_F s0 mb0 ->r1": (1.0, 3.0),
                   "r1/recv/RECV_F s1 mb0 <-r0": (0.5, 3.0), "r1/compute/F s1 mb0": (3.0, 4.0)}
    assert tl.meta.extra["partial"] is True


def test_a_failed_run_keeps_the_sends_that_arrived(tmp_path, monkeypatch):
    """Rank 1 fails just before posting mb2's receive: mb0's message arrived (rank 1 ran F s1 mb0 on
    it), mb2's never could. The partial timeline lacked every SEND before."""
    from pptl.errors import RunError
    from pptl.run import run_plans

    monkeypatch.setenv("PPTL_RUN_FAULT", "raise:1:r1/recv/RECV_F s1 mb2 <-r0")
    out = tmp_path / "m.json"
    with pytest.raises(RunError, match=r"rank 1 failed at op r1/recv/RECV_F s1 mb2 <-r0"):
        run_plans([(_schedule(), out)], gpus=2, device="cpu", steps=1, warmup=0, timeout=60)
    events = {e["op"]: e for e in json.loads(out.read_text())["events"]}
    sent, got = events["r0/send/SEND_F s0 mb0 ->r1"], events["r1/recv/RECV_F s1 mb0 <-r0"]
    assert sent["end"] == got["end"]  # delivered when its receive completed
    assert "r0/send/SEND_F s0 mb2 ->r1" not in events
    assert "r1/recv/RECV_F s1 mb2 <-r0" not in events


# ----------------------------------------------------------------------------------------------
# 6. compare: another vpp is named as such


def test_compare_names_a_vpp_difference():
    from pptl.compare import schedule_difference
    from pptl.simulate import simulate

    planned = simulate(_schedule("interleaved", pp=2, m=4, vpp=4)).timeline()
    ran = simulate(_schedule("interleaved", pp=2, m=4, vpp=2)).timeline()
    assert schedule_difference(planned, ran) == "the plan has vpp 4, the run 2"
    assert schedule_difference(ran, ran) == ""
