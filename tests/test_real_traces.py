"""torch 2.11 traces of one profiled step of torch.distributed.pipelining's schedules on 4 H200s
(bench/torch_pp_anchor.py's workload, 8 micro-batches), trimmed by tests/data/trim_traces.py, and
``pptl run`` output of 1f1b and zbv on the same machine: each imports whole and explains."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.explain import PARTS, explain
from pptl.formats.loader import load_any

DATA = Path(__file__).resolve().parent / "data"
#: schedule -> (events imported, compute kinds); torch's runtime adds UNSHARD/RESHARD/REDUCE_GRAD per stage.
EXPECTED = {
    "Schedule1F1B": (160, {"F": 32, "B": 32}),
    "ScheduleGPipe": (64, {"F": 32, "B": 32}),
    "ScheduleInterleaved1F1B": (376, {"F": 64, "B": 64}),
    "ScheduleInterleavedZeroBubble": (440, {"F": 64, "I": 64, "W": 64}),
    "ScheduleZBVZeroBubble": (408, {"F": 64, "I": 64, "W": 64}),
    # 39 + 25 forwards and 17 + 22 + 25 backwards (FB halves) = 64 each, W for every I
    "ScheduleDualPipeV": (341, {"F": 39, "B": 17, "I": 22, "W": 22, "FB": 25}),
}


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def trace(request):
    return request.param, load_any(DATA / "traces" / request.param)


def test_every_action_imports_and_the_makespan_is_the_gpus(trace) -> None:
    name, loaded = trace
    count, kinds = EXPECTED[name]
    tl = loaded.timeline
    assert len(tl.events) == count
    got = Counter(e.kind for e in tl.events if e.kind in ("F", "B", "I", "W", "FB"))
    assert dict(got) == kinds
    assert not [n for n in loaded.notes if n.startswith("missing") or "left out" in n]
    lo, hi = tl.meta.extra["gpu_window"]
    assert tl.makespan == pytest.approx(hi - lo, rel=0.05)
    # FB halves: an OVERLAP_F_B names both; every stage has all its micro-batches' work
    if name == "ScheduleDualPipeV":
        assert all(e.pair is not None for e in tl.events if e.kind == "FB")


def test_check_finds_no_error_but_the_clocks(trace) -> None:
    """The order every trace ran is valid. Schedule1F1B's ranks' clocks disagree beyond the 10 us a
    trace is held to: 18 receives end before their sends start (PP090), which compare and explain
    report too; check reports the same and nothing else."""
    name, _ = trace
    r = CliRunner().invoke(app, ["check", str(DATA / "traces" / name)])
    errors = [ln for ln in r.stdout.splitlines() if " error: " in ln]
    if name == "Schedule1F1B":
        assert r.exit_code == 1, r.output
        assert len(errors) == 18 and all(": PP090 error: " in ln for ln in errors), errors
    else:
        assert r.exit_code == 0, r.output
        assert "error" not in r.stdout


def test_explain_parts_sum_to_idle(trace) -> None:
    _, loaded = trace
    x = explain(loaded.timeline)
    for r in x.ranks:
        assert all(getattr(r, p) >= 0 for p in PARTS)
        assert r.parts_sum == pytest.approx(r.idle, rel=0.01)
    assert x.path[-1].end == pytest.approx(loaded.timeline.start + loaded.timeline.makespan)


@pytest.mark.parametrize("family", ["1f1b", "zbv"])
def test_explain_pptl_run_output_with_its_plan(family: str) -> None:
    measured = load_any(DATA / "runs" / f"{family}_h200.measured.json").timeline
    plan = load_any(DATA / "runs" / f"{family}_plan.json").schedule
    x = explain(measured, plan)
    for r in x.ranks:
        assert r.parts_sum == pytest.approx(r.idle, rel=0.01)
    # sync-send: each message is a CUDA event pair on its own stream, so transfer shows
    assert sum(r.transfer for r in x.ranks) > 0
    assert x.to_dict() == explain(measured).to_dict()  # the plan's facts are the ones the ops imply
