"""pptl compare and calibration: pure tests on small timelines (no run needed)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.compare import compare_timelines, comparison_lines
from pptl.config import config_from_mapping
from pptl.errors import InputError
from pptl.planning import costs_from_timeline
from pptl.timeline import Event, Timeline, TimelineMeta


def _tl(rows: list[tuple], units: str = "ms", source: str = "measured", **extra) -> Timeline:
    """rows: (op, rank, lane, kind, start, end[, stage])."""
    events = [Event(op=r[0], rank=r[1], lane=r[2], kind=r[3], start=r[4], end=r[5], stage=r[6] if len(r) > 6 else -1)
              for r in rows]
    return Timeline(events, TimelineMeta(source=source, units=units, family="1f1b", pp=2, extra=extra))


PLAN = [("a", 0, "compute", "F", 0, 1, 0), ("b", 1, "compute", "F", 1, 2, 1), ("c", 1, "compute", "B", 2, 4, 1),
        ("d", 0, "compute", "B", 4, 6, 0)]


def test_identical_timelines_have_no_error():
    cmp = compare_timelines(_tl(PLAN), _tl(PLAN))
    assert cmp.makespan_error == 0 and cmp.scale == 1.0 and not cmp.notes
    assert [k.kind for k in cmp.kinds] == ["F", "B"] and all(k.error == 0 for k in cmp.kinds)
    assert all(o.end_error == 0 for o in cmp.ops)
    assert cmp.bubble_planned == cmp.bubble_measured == pytest.approx(1 - 6 / 12)


def test_errors_are_planned_minus_measured():
    measured = [r[:4] + (r[4] * 2, r[5] * 2) + r[6:] for r in PLAN]  # everything twice as long
    cmp = compare_timelines(_tl(PLAN), _tl(measured))
    assert cmp.makespan_planned == 6 and cmp.makespan_measured == 12
    assert cmp.makespan_error == pytest.approx(-0.5)
    f = next(k for k in cmp.kinds if k.kind == "F")
    assert (f.planned_mean, f.measured_mean, f.error) == (1, 2, pytest.approx(-0.5))
    assert cmp.worst_ops(1)[0].op == "d" and cmp.worst_ops(1)[0].end_error == -6


def test_different_units_are_scaled_and_said():
    measured = [r[:4] + (r[4] * 3, r[5] * 3) + r[6:] for r in PLAN]
    cmp = compare_timelines(_tl(PLAN, units="unit", source="planned"), _tl(measured))
    assert cmp.scale == 3 and cmp.makespan_error == pytest.approx(0)
    assert "plan times are scaled by 3" in cmp.notes[0]


def test_missing_ops_and_failed_runs_are_noted():
    cmp = compare_timelines(_tl(PLAN), _tl(PLAN[:2], failed="rank 1 failed at op b"))
    assert cmp.missing == ["c", "d"]
    assert any("2 planned ops were not measured" in n for n in cmp.notes)
    assert any("the run failed: rank 1 failed at op b" in n for n in cmp.notes)


@pytest.mark.parametrize("measured,message", [
    ([], "the measured timeline has no events"),
    ([("zzz", 0, "compute", "F", 0, 1)], "share no op id"),
], ids=["empty", "unrelated"])
def test_compare_errors(measured, message):
    with pytest.raises(InputError, match=message):
        compare_timelines(_tl(PLAN), _tl(measured))


def test_report_lines():
    lines = comparison_lines(compare_timelines(_tl(PLAN), _tl(PLAN)), top=2)
    assert lines[0] == "makespan: planned 6 ms, measured 6 ms (error +0.0%)"
    assert lines[1] == "bubble: planned 50.0%, measured 50.0%"
    assert "largest end-time errors (2 of 4 ops; planned - measured, ms):" in lines


def test_bubble_fraction_counts_compute_lanes_only():
    tl = _tl(PLAN + [("s", 0, "send", "SEND", 1, 6)])
    assert tl.bubble_fraction() == pytest.approx(0.5)


# ----------------------------------------------------------------------------------------------
# Calibration (pptl plan --costs-from): means per kind and per stage, in the run's unit


def test_calibration_means_and_fills_the_split():
    measured = _tl([("a", 0, "compute", "F", 0, 2, 0), ("b", 0, "compute", "F", 2, 6, 0),
                    ("c", 1, "compute", "B", 0, 8, 1)])
    costs = costs_from_timeline(measured)
    assert costs["F"] == 3 and costs["B"] == 8
    assert costs["I"] == costs["W"] == 4  # only full backwards measured: the default even split
    assert costs["stages"][0] == {"F": 3} and costs["stages"][1] == {"B": 8, "I": 4, "W": 4}


def test_calibration_latency_is_send_start_to_recv_end():
    rows = [("p", 0, "compute", "F", 0, 1, 0)]
    events = [Event(op=o, rank=r, lane=lane, kind=k, start=s, end=e, stage=st, mb=0, flow="F")
              for o, r, lane, k, s, e, st in [("s", 0, "send", "SEND", 1, 9, 0), ("r", 1, "recv", "RECV", 0, 1.5, 1)]]
    tl = _tl(rows)
    tl.events += events
    assert costs_from_timeline(tl)["comm"] == {"latency": 0.5}


def test_calibration_latency_leaves_out_the_wait_for_a_late_receiver():
    # the receiver posts its RECV at 4, 3 after the SEND started: the message then takes 0.5;
    # the simulator already makes the RECV wait for its lane, so the wait is no latency
    events = [Event(op=o, rank=r, lane=lane, kind=k, start=s, end=e, stage=st, mb=mb, flow="F")
              for o, r, lane, k, s, e, st, mb in [
                  ("s0", 0, "send", "SEND", 1, 4.5, 0, 0), ("r0", 1, "recv", "RECV", 4, 4.5, 1, 0),
                  ("s1", 0, "send", "SEND", 6, 6.5, 0, 1), ("r1", 1, "recv", "RECV", 5, 6.5, 1, 1),
                  ("s2", 0, "send", "SEND", 8, 10, 0, 2), ("r2", 1, "recv", "RECV", 9.5, 10, 1, 2)]]
    tl = _tl([("p", 0, "compute", "F", 0, 1, 0)])
    tl.events += events
    assert costs_from_timeline(tl)["comm"] == {"latency": 0.5}


def test_cli_compare_writes_html_and_refuses_other_suffixes(tmp_path: Path):
    from pptl.planning import plan, write_plan

    result = plan(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 2}))
    plan_path = tmp_path / "plan.json"
    write_plan(result, plan_path)
    planned = result.simulation.timeline()
    measured = Timeline([Event(**{**e.to_dict(), "start": e.start * 2, "end": e.end * 2,
                                  "waits_on": tuple(e.waits_on), "pair": e.pair}) for e in planned.events],
                        TimelineMeta(source="measured", units="ms", family="1f1b", pp=2))
    m_path = tmp_path / "m.json"
    m_path.write_text(json.dumps(measured.to_dict()))
    runner = CliRunner()
    r = runner.invoke(app, ["compare", str(plan_path), str(m_path), "-o", str(tmp_path / "cmp.html")])
    assert r.exit_code == 0, r.output
    page = (tmp_path / "cmp.html").read_text()
    assert "<svg" in page and "per kind" in page and "largest end-time errors" in page
    r = runner.invoke(app, ["compare", str(plan_path), str(m_path), "-o", str(tmp_path / "cmp.txt")])
    assert r.exit_code == 2
    assert "cmp.txt: cannot draw to '.txt', expected .png, .svg, .pdf or .html" in r.output
    r = runner.invoke(app, ["compare", str(plan_path), str(plan_path)])
    assert r.exit_code == 0, r.output  # a plan's own timeline against itself: zero error
    assert "(error +0.0%)" in r.output
