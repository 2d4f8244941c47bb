"""One time base for measured timelines, and the rule that data cannot arrive before it was sent.

Every number here is worked out by hand in the comments: the clock maps (offset, drift,
uncertainty), the aligned times of a two-rank step, and where each rule's tolerance ends.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_runner import CliRunner

from pptl.checks.measured import (
    CONSUMER_BEFORE_PRODUCER,
    DEFAULT_TOLERANCE_MS,
    RECV_BEFORE_SEND,
    measured_violations,
    measurement_line,
    tolerance,
)
from pptl.cli import app
from pptl.config import config_from_mapping
from pptl.run.results import CLOCK, CLOCK_PER_RANK, build_timeline
from pptl.run.timebase import TOLERANCE_FLOOR_MS, ClockSample, RankClock, fit_clock, tolerance_ms
from pptl.schedules import build_schedule
from pptl.timeline import Event, Timeline, TimelineMeta

RUNS = Path(__file__).parent / "data" / "runs"


# ----------------------------------------------------------------------------------------------
# The clock map


def test_two_samples_give_offset_drift_and_uncertainty() -> None:
    # Offset 5 ms at 1000 ms, 5.004 ms at 3000 ms: 0.004 ms gained in 2000 ms = 2 ppm.
    c = fit_clock([ClockSample(1000.0, 5.0, 0.2), ClockSample(3000.0, 5.004, 0.1)], apply=True)
    assert c.offset_ms == 5.0 and c.at_ms == 1000.0
    assert c.drift == pytest.approx(2e-6, rel=1e-9)
    assert c.uncertainty_ms == pytest.approx(0.1)  # the wider round trip (0.2 ms), halved
    # At 2000 ms the offset is 5.002 ms: 2000 - 5.002.
    assert c.to_base(2000.0) == pytest.approx(1994.998, abs=1e-9)
    assert c.to_base(1000.0) == pytest.approx(995.0, abs=1e-9)  # first sample: its own offset


def test_one_sample_is_a_constant_offset() -> None:
    c = fit_clock([ClockSample(10.0, -3.0, 0.06)], apply=True)
    assert (c.offset_ms, c.drift, c.uncertainty_ms) == (-3.0, 0.0, pytest.approx(0.03))
    assert c.to_base(1e6) == pytest.approx(1e6 + 3.0)


def test_samples_at_one_instant_give_no_drift() -> None:
    c = fit_clock([ClockSample(7.0, 1.0, 0.0), ClockSample(7.0, 9.0, 0.0)], apply=True)
    assert c.drift == 0.0 and c.offset_ms == 1.0


@pytest.mark.parametrize("samples", [[], [ClockSample(1.0, 50.0, 4.0)]], ids=["none", "one"])
def test_one_host_is_one_clock(samples: list[ClockSample]) -> None:
    # Not applied (one host): identity, nothing uncertain, whatever was measured.
    c = fit_clock(samples, apply=False)
    assert c == RankClock() and c.to_base(123.25) == 123.25


def test_tolerance_adds_the_two_worst_ranks() -> None:
    clocks = {0: RankClock(), 1: RankClock(uncertainty_ms=0.03), 2: RankClock(uncertainty_ms=0.05),
              10: RankClock(uncertainty_ms=0.001)}
    # rank 2: 0.05; rank 1: 0.03 + its anchor 0.01 = 0.04; rank 10: 0.001 + 0.002 = 0.003; rank 0: 0.
    assert tolerance_ms(clocks, {1: 0.01, 10: 0.002}) == pytest.approx(TOLERANCE_FLOOR_MS + 0.05 + 0.04)
    assert tolerance_ms({0: RankClock()}, {}) == TOLERANCE_FLOOR_MS


# ----------------------------------------------------------------------------------------------
# A two-rank step put on one clock (build_timeline)

# 1F1B, pp 2, one micro-batch: op indices of the plan (pptl.schedules order).
F0, B0, F1, B1, RECV_F1, RECV_B0, SEND_F0, SEND_B1 = range(8)


def _plan() -> Any:
    return build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 1}))


def _payload(rank: int, anchor: float | None, events: list[list[float]], *, host: str = "h",
             samples: list[list[float]] | None = None, apply: bool = False) -> dict[str, Any]:
    step: dict[str, Any] = {"step": 0, "timed": True, "step_ms": 2.0, "wall_ms": 2.0, "loss": None,
                            "events": events, "started": [e[0] for e in events]}
    if anchor is not None:
        step["anchor_ms"], step["anchor_err_ms"] = anchor, 0.0
    p: dict[str, Any] = {"rank": rank, "steps": [step], "info": {"device": "test-gpu"}}
    if anchor is not None:
        p["clock"] = {"host": host, "apply": apply, "samples": samples or [[0.0, 0.0, 0.0]]}
    return p


# Each rank's own times (ms after its anchor). Rank 1 left the barrier 0.5 ms after rank 0.
R0 = [[F0, 0.1, 0.5], [SEND_F0, 0.6, 0.7], [RECV_B0, 0.65, 1.9], [B0, 1.95, 2.0]]
R1 = [[RECV_F1, 0.0, 0.3], [F1, 0.35, 0.8], [B1, 0.85, 1.2], [SEND_B1, 1.25, 1.3]]


def _times(tl: Timeline) -> dict[str, tuple[float, float]]:
    return {e.op: (e.start, e.end) for e in tl.events}


def test_per_rank_zeros_put_a_recv_before_its_send() -> None:
    # Records without anchors (the old format): each rank's own zero. RECV_F ends at 0.3 ms, its
    # SEND starts at 0.6 ms on rank 0's zero: 0.3 ms before, over the 0.01 ms default.
    s = _plan()
    tl = build_timeline(s, [_payload(0, None, R0), _payload(1, None, R1)])
    assert tl.meta.clock == CLOCK_PER_RANK and "clock" not in tl.meta.extra
    found = measured_violations(tl)
    codes = sorted(v.code for v in found)
    # PP090: RECV_F (ends 0.3) before SEND_F (0.6). PP091: F s1 starts 0.35 before F s0 ends 0.5 on rank 0.
    assert codes == [RECV_BEFORE_SEND, CONSUMER_BEFORE_PRODUCER]
    assert found[0].ops == ("r1/recv/RECV_F s1 mb0 <-r0", "r0/send/SEND_F s0 mb0 ->r1")
    assert "0.3 ms before its SEND" in found[0].message


def test_one_host_aligns_on_the_anchors() -> None:
    # Same host: rank 1's times move by its anchor's 0.5 ms (1000.5 - 1000.0). Zero: rank 0's anchor.
    s = _plan()
    tl = build_timeline(s, [_payload(0, 1000.0, R0), _payload(1, 1000.5, R1)])
    t = _times(tl)
    assert t["r1/recv/RECV_F s1 mb0 <-r0"] == pytest.approx((0.5, 0.8))
    assert t["r1/compute/F s1 mb0"] == pytest.approx((0.85, 1.3))
    assert t["r0/send/SEND_F s0 mb0 ->r1"] == pytest.approx((0.6, 0.7))
    assert tl.meta.clock == CLOCK
    clock = tl.meta.extra["clock"]
    assert clock["same_host"] is True and clock["offsets_applied"] is False
    assert clock["ranks"]["1"]["anchor_skew_ms"] == pytest.approx(0.5)
    assert clock["tolerance_ms"] == TOLERANCE_FLOOR_MS and clock["violations"] == 0
    assert measured_violations(tl) == []


def test_zero_is_the_earliest_anchor() -> None:
    # Rank 1 anchored 0.25 ms before rank 0: zero is rank 1's anchor, rank 0 moves by +0.25.
    s = _plan()
    tl = build_timeline(s, [_payload(0, 1000.25, R0), _payload(1, 1000.0, R1)])
    t = _times(tl)
    assert t["r0/compute/F s0 mb0"] == pytest.approx((0.35, 0.75))
    assert t["r1/recv/RECV_F s1 mb0 <-r0"] == pytest.approx((0.0, 0.3))
    assert min(e.start for e in tl.events) >= 0


def test_two_hosts_map_through_offset_and_drift() -> None:
    # Rank 1's clock is 2 ms ahead at 999 ms (round trip 0.02 ms) and 2.0011 ms ahead at 1010 ms:
    # drift 0.0011 / 11 = 1e-4. Its anchor 1002.5 maps to 1002.5 - (2 + 1e-4 * 3.5) = 1000.49965.
    s = _plan()
    samples = [[999.0, 2.0, 0.02], [1010.0, 2.0011, 0.02]]
    tl = build_timeline(s, [_payload(0, 1000.0, R0, host="a", samples=[[999.0, 0.0, 0.0], [1010.0, 0.0, 0.0]]),
                            _payload(1, 1002.5, R1, host="b", samples=samples)])
    clock = tl.meta.extra["clock"]
    assert clock["same_host"] is False and clock["offsets_applied"] is True
    r1 = clock["ranks"]["1"]
    assert r1["offset_ms"] == 2.0 and r1["drift_ppm"] == pytest.approx(100.0)
    assert r1["uncertainty_ms"] == pytest.approx(0.01)
    assert r1["anchor_skew_ms"] == pytest.approx(0.49965, abs=1e-9)
    # RECV_F at 0.3 ms after rank 1's anchor: 1002.8 -> 1002.8 - (2 + 1e-4 * 3.8) = 1000.79962.
    assert _times(tl)["r1/recv/RECV_F s1 mb0 <-r0"][1] == pytest.approx(0.79962, abs=1e-9)
    # Tolerance: the floor plus rank 1's 0.01 (rank 0 has none).
    assert clock["tolerance_ms"] == pytest.approx(TOLERANCE_FLOOR_MS + 0.01)


def test_one_host_can_be_told_to_apply_measured_offsets() -> None:
    # PPTL_RUN_CLOCK=offsets on one host: rank 1's measured -0.03 ms is applied (+0.03 to its times).
    s = _plan()
    tl = build_timeline(s, [_payload(0, 1000.0, R0, apply=True),
                            _payload(1, 1000.5, R1, apply=True, samples=[[1000.0, -0.03, 0.004]])])
    assert tl.meta.extra["clock"]["offsets_applied"] is True
    assert _times(tl)["r1/recv/RECV_F s1 mb0 <-r0"] == pytest.approx((0.53, 0.83))


def test_a_rank_without_anchors_keeps_per_rank_zeros() -> None:
    # One rank's records lack an anchor: no common base can be built, so none is claimed.
    s = _plan()
    tl = build_timeline(s, [_payload(0, 1000.0, R0), _payload(1, None, R1)])
    assert tl.meta.clock == CLOCK_PER_RANK and "clock" not in tl.meta.extra


# ----------------------------------------------------------------------------------------------
# The rule, at its boundaries


def _tl(events: list[Event], *, units: str = "ms", source: str = "measured", clock: dict | None = None) -> Timeline:
    extra = {"clock": clock} if clock is not None else {}
    return Timeline(events, TimelineMeta(source=source, units=units, extra=extra))


def _pair(send_start: float, recv_end: float, *, sender: int = 0, receiver: int = 1, stage: int = 0,
          named: bool = True) -> list[Event]:
    send = Event(f"r{sender}/send/SEND_F s{stage} mb0 ->r{receiver}", sender, "send", send_start, send_start + 0.5,
                 "SEND", stage=stage, mb=0, peer=receiver, flow="F")
    recv = Event(f"r{receiver}/recv/RECV_F s{stage + 1} mb0 <-r{sender}", receiver, "recv", 0.0, recv_end, "RECV",
                 stage=stage + 1, mb=0, peer=sender, flow="F", waits_on=(send.op,) if named else ())
    return [send, recv]


@pytest.mark.parametrize(("recv_end", "bad"), [(0.75, False), (0.7421875, True), (1.0, False), (5.0, False)],
                         ids=["exactly-at-tolerance", "just-past", "at-send-start", "after"])
def test_recv_before_send_at_the_tolerance(recv_end: float, bad: bool) -> None:
    # SEND starts at 1.0, tolerance 0.25 (both exact in binary): a RECV may end at 0.75, not earlier.
    tl = _tl(_pair(1.0, recv_end), clock={"tolerance_ms": 0.25})
    assert [v.code for v in measured_violations(tl)] == ([RECV_BEFORE_SEND] if bad else [])


def test_default_tolerance_and_units() -> None:
    assert tolerance(_tl([])) == DEFAULT_TOLERANCE_MS == 0.01
    assert tolerance(_tl([], units="us")) == pytest.approx(10.0)  # 0.01 ms in us
    assert tolerance(_tl([], units="us", clock={"tolerance_ms": 0.05})) == pytest.approx(50.0)
    assert tolerance(_tl([], clock={"tolerance_ms": -1})) == 0.0  # a negative one is none
    assert tolerance(_tl([], clock={"tolerance_ms": "x"})) == 0.01  # not a number: the default
    # 0.011 ms early fails at the default tolerance, 0.009 ms does not.
    assert measured_violations(_tl(_pair(1.0, 0.989)))
    assert not measured_violations(_tl(_pair(1.0, 0.991)))


def test_a_planned_timeline_is_never_a_measurement_error() -> None:
    assert measured_violations(_tl(_pair(1.0, 0.0), source="planned")) == []


def test_two_digit_ranks_pair_by_rank_not_by_prefix() -> None:
    # Without waits_on, a RECV finds its SEND by message key and ranks: r11's RECV from r10 must not
    # take r1's SEND to r11 (same stage and mb) though "r1" is a prefix of "r10".
    early_r1 = _pair(0.0, 9.0, sender=1, receiver=11, named=False)[0]
    send10, recv11 = _pair(5.0, 2.0, sender=10, receiver=11, named=False)
    found = measured_violations(_tl([early_r1, send10, recv11]))
    assert [v.ops for v in found] == [(recv11.op, send10.op)]
    assert "r11/recv/RECV_F s1 mb0 <-r10 ends at 2 ms, 3 ms before" in found[0].message


def test_kth_recv_takes_kth_send_of_the_same_key() -> None:
    # Two messages with one key (a plan that sends the same stage/mb twice): first to first, in time.
    a_send, a_recv = _pair(1.0, 1.6, named=False)
    b_send, b_recv = _pair(3.0, 3.6, named=False)
    b_recv = Event(b_recv.op + "#2", 1, "recv", 3.1, 3.6, "RECV", stage=1, mb=0, peer=0, flow="F")
    assert measured_violations(_tl([a_send, b_send, a_recv, b_recv])) == []
    # Swap what the second RECV waits on by time: it now ends before the second SEND started.
    b_recv = Event(b_recv.op, 1, "recv", 2.0, 2.5, "RECV", stage=1, mb=0, peer=0, flow="F")
    assert [v.code for v in measured_violations(_tl([a_send, b_send, a_recv, b_recv]))] == [RECV_BEFORE_SEND]


def test_consumer_before_its_input() -> None:
    # F s1 on r1 waits on its RECV (ends 2.0) whose SEND waits on F s0 on r0 (ends 1.5).
    f0 = Event("r0/compute/F s0 mb0", 0, "compute", 1.0, 1.5, "F", stage=0, mb=0)
    send = Event("r0/send/SEND_F s0 mb0 ->r1", 0, "send", 1.5, 1.6, "SEND", stage=0, mb=0, peer=1, flow="F",
                 waits_on=(f0.op,))
    recv = Event("r1/recv/RECV_F s1 mb0 <-r0", 1, "recv", 0.0, 2.0, "RECV", stage=1, mb=0, peer=0, flow="F",
                 waits_on=(send.op,))

    def f1(start: float) -> Event:
        return Event("r1/compute/F s1 mb0", 1, "compute", start, start + 1, "F", stage=1, mb=0, waits_on=(recv.op,))

    clock = {"tolerance_ms": 0.125}
    assert measured_violations(_tl([f0, send, recv, f1(1.875)], clock=clock)) == []  # 2.0 - 0.125: at the limit
    found = measured_violations(_tl([f0, send, recv, f1(1.75)], clock=clock))
    assert [(v.code, v.ops) for v in found] == [(CONSUMER_BEFORE_PRODUCER, (f1(0).op, recv.op))]
    assert "before its input was received by r1/recv/RECV_F s1 mb0 <-r0" in found[0].message
    # Before even the producer on the other rank ended (1.5): both the RECV and F s0 are named.
    found = measured_violations(_tl([f0, send, recv, f1(1.25)], clock=clock))
    assert [v.ops[1] for v in found] == [recv.op, f0.op]
    assert "before its input was produced by r0/compute/F s0 mb0" in found[1].message


def test_measurement_line_counts_and_quotes_the_first() -> None:
    assert measurement_line([]) is None
    found = measured_violations(_tl(_pair(1.0, 0.5)))
    line = measurement_line(found)
    assert line is not None and line.startswith("measurement error (PP090): 1 event pair out of causal order")
    assert "e.g. r1/recv/RECV_F s1 mb0 <-r0 ends at 0.5 ms" in line and "\n" not in line


# ----------------------------------------------------------------------------------------------
# The command line


def _write(tmp_path: Path, tl: Timeline) -> Path:
    p = tmp_path / "m.json"
    p.write_text(json.dumps(tl.to_dict()))
    return p


def test_check_of_a_measured_timeline(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = _write(tmp_path, _tl(_pair(1.0, 0.5)))
    r = runner.invoke(app, ["check", str(bad)])
    assert r.exit_code == 1, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == (f"{bad}: PP090 error: measurement error: r1/recv/RECV_F s1 mb0 <-r0 ends at 0.5 ms, 0.5 ms "
                        "before its SEND r0/send/SEND_F s0 mb0 ->r1 starts (1 ms; tolerance 0.01 ms): the ranks' "
                        "times are not on one clock")
    assert lines[1] == f"{bad}: invalid (1 error), 2 ops checked"
    good = _write(tmp_path, _tl(_pair(1.0, 1.5)))
    r = runner.invoke(app, ["check", str(good)])
    assert r.exit_code == 0 and r.stdout.strip() == f"{good}: ok, 2 ops checked"


@pytest.mark.parametrize(("name", "code"), [("1f1b_cpu.measured.json", 1), ("zbv_cpu.measured.json", 1),
                                            ("1f1b_h200.measured.json", 0), ("zbv_h200.measured.json", 0)])
def test_check_of_recorded_runs(name: str, code: int) -> None:
    # The CPU runs were recorded with a zero per rank (before the time base): out of order, as the
    # bug report saw; the GPU runs' per-step collective kept them within 0.01 ms.
    r = CliRunner().invoke(app, ["check", str(RUNS / name)])
    assert r.exit_code == code, r.output


def test_compare_and_explain_name_the_measurement_error() -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["compare", str(RUNS / "1f1b_plan.json"), str(RUNS / "1f1b_cpu.measured.json")])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[2].startswith("measurement error (PP090, PP091): ")
    assert any("SEND/RECV ops with a measurement error are left out of the mean durations" in x for x in lines)
    r = runner.invoke(app, ["explain", str(RUNS / "1f1b_cpu.measured.json")])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0].startswith("measurement error (PP090, PP091): ")
    r = runner.invoke(app, ["explain", str(RUNS / "1f1b_h200.measured.json"), "--output", "json"])
    assert json.loads(r.stdout)["measurement_errors"] == []


def test_run_summary_names_a_measurement_error() -> None:
    from pptl.run.report import summary, summary_lines

    # Rank 1's anchor 0.2 ms before rank 0's (zero): its RECV_F ends at 0.3, rank 0's SEND starts at
    # 0.2 + 0.6 = 0.8; F s1 starts at 0.35, F s0 ends at 0.7. Two pairs out of order.
    s = _plan()
    tl = build_timeline(s, [_payload(0, 1000.0, R0), _payload(1, 999.8, R1)])
    assert summary(tl)["clock"] == {"tolerance_ms": TOLERANCE_FLOOR_MS, "offsets_applied": False, "violations": 2,
                                    "first_violation": tl.meta.extra["clock"]["first_violation"]}
    lines = [x for x in summary_lines(tl) if x.startswith("measurement error")]
    assert lines == ["measurement error: 2 event pairs out of causal order across ranks (tolerance 0.002 ms), e.g. "
                     "r1/recv/RECV_F s1 mb0 <-r0 ends at 0.3 ms, 0.5 ms before its SEND r0/send/SEND_F s0 mb0 ->r1 "
                     "starts (0.8 ms; tolerance 0.002 ms): the ranks' times are not on one clock"]
    good = build_timeline(s, [_payload(0, 1000.0, R0), _payload(1, 1000.5, R1)])
    assert not any(x.startswith("measurement error") for x in summary_lines(good))
