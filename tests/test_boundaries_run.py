"""Boundaries of the `pptl run` path, each against numbers worked out by hand: the measured step a
timeline keeps from an interrupted or uneven run, the run summary's lines, --verify at its tolerance
and on a NaN, the run options' edges, a last stage's footprint, the host lag's and the receive gates'
waits, the clock-offset exchange, the cost means a run hands --costs-from, the refined programs and
their channels, the slow rank's hold and the output's name.

Each test kills a hand-written mutant that the suite let through (`python tests/hand_mutants.py --extra
ROWS`); none launches a rank.
"""
from __future__ import annotations

import gzip
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pptl.config import Workload, config_from_mapping
from pptl.errors import InputError
from pptl.ir import Schedule
from pptl.schedules import build_schedule
from pptl.timeline import Event, Timeline, TimelineMeta

torch = pytest.importorskip("torch")

# 1F1B, pp 2, one micro-batch: op indices of the plan (pptl.schedules order).
F0, B0, F1, B1, RECV_F1, RECV_B0, SEND_F0, SEND_B1 = range(8)


def _plan() -> Schedule:
    return build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 1}))


def _step(k: int, ms: float, events: list[list[Any]], *, timed: bool = True, loss: float | None = None
          ) -> dict[str, Any]:
    return {"step": k, "timed": timed, "step_ms": ms, "wall_ms": ms, "loss": loss, "events": events,
            "started": [e[0] for e in events]}


def _payload(rank: int, steps: list[dict[str, Any]], device: str = "test-gpu") -> dict[str, Any]:
    return {"rank": rank, "steps": steps, "info": {"device": device}}


# ----------------------------------------------------------------------------------------------
# results.py: what a measured timeline keeps


def test_a_step_only_some_ranks_completed_is_no_step() -> None:
    """Rank 0 finished timed steps 0 and 1, rank 1 only step 0 (the run stopped): step 1 has one
    rank's time, so the step times are step 0's alone, max(2, 3) = 3 ms."""
    from pptl.run.results import build_timeline, step_times

    p0 = _payload(0, [_step(0, 2.0, [[F0, 0.0, 1.0]]), _step(1, 9.0, [[F0, 0.0, 1.0]])])
    p1 = _payload(1, [_step(0, 3.0, [[F1, 1.0, 2.0]])])
    assert step_times([p0, p1], timed=True) == {0: 3.0}
    assert build_timeline(_plan(), [p0, p1]).meta.extra["step_ms"] == [3.0]


def test_the_loss_is_the_last_step_every_rank_completed() -> None:
    """Rank 1 (the last stage, which holds the loss) completed steps 0 and 1 with losses 2.0 and 1.5;
    rank 0 went on to step 2. The last step both completed is 1: loss 1.5 (step 2 has no loss on
    any rank, so a sum over it would be 0)."""
    from pptl.run.results import build_timeline

    p0 = _payload(0, [_step(k, 2.0, [[F0, 0.0, 1.0]]) for k in range(3)])
    p1 = _payload(1, [_step(0, 2.0, [[F1, 1.0, 2.0]], loss=2.0), _step(1, 2.0, [[F1, 1.0, 2.0]], loss=1.5)])
    assert build_timeline(_plan(), [p0, p1]).meta.extra["loss"] == 1.5


def test_step_ops_are_kept_up_to_exactly_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """1F1B pp 2 has 4 compute ops (F and B on each rank). With the limit at 8, two timed steps are
    4 x 2 = 8 op-steps: kept; three are 12: left out."""
    from pptl.run import results

    monkeypatch.setattr(results, "MAX_STEP_OPS", 8)

    def payloads(n: int) -> list[Any]:
        return [_payload(0, [_step(k, 4.0, [[F0, 0.0, 1.0], [B0, 3.0, 4.0]]) for k in range(n)]),
                _payload(1, [_step(k, 4.0, [[F1, 1.0, 2.0], [B1, 2.0, 3.0]]) for k in range(n)])]

    two = results.build_timeline(_plan(), payloads(2)).meta.extra
    assert two["step_ops"]["span_ms"] == [4.0, 4.0]  # first start 0 to last end 4, each step
    assert "step_ops" not in results.build_timeline(_plan(), payloads(3)).meta.extra


def test_step_ops_leave_out_an_op_missing_from_a_timed_step() -> None:
    """B s0 ran in timed step 0 (1 ms) but is missing from step 1: it has no time per step, so it is
    left out; F s0 (1 ms, then 2 ms) and F s1 (1 ms twice) are kept."""
    from pptl.run.results import build_timeline

    p0 = _payload(0, [_step(0, 4.0, [[F0, 0.0, 1.0], [B0, 3.0, 4.0]]), _step(1, 4.0, [[F0, 0.0, 2.0]])])
    p1 = _payload(1, [_step(k, 4.0, [[F1, 2.0, 3.0]]) for k in range(2)])
    ms = build_timeline(_plan(), [p0, p1]).meta.extra["step_ops"]["ms"]
    assert ms == {"r0/compute/F s0 mb0": [1.0, 2.0], "r1/compute/F s1 mb0": [1.0, 1.0]}


def test_executed_order_defaults_to_each_ranks_last_step() -> None:
    """No step named (a run with no timed step): each rank's last step, here step 1 where rank 0
    also started its SEND."""
    from pptl.run.results import executed_order

    p0 = _payload(0, [_step(0, 1.0, [[F0, 0.0, 1.0]]), _step(1, 1.0, [[F0, 0.0, 1.0], [SEND_F0, 1.0, 1.1]])])
    assert executed_order(_plan(), [p0]) == {"0": {"compute": ["r0/compute/F s0 mb0"],
                                                   "send": ["r0/send/SEND_F s0 mb0 ->r1"]}}


def test_a_run_with_no_timed_step_and_no_partial_shows_its_last_complete_step() -> None:
    """Only untimed steps 0 and 1, no interrupted step: the timeline is the last step (F s0 at 5-6),
    not the first (0-1)."""
    from pptl.run.results import build_timeline

    p0 = _payload(0, [_step(0, 1.0, [[F0, 0.0, 1.0]], timed=False), _step(1, 1.0, [[F0, 5.0, 6.0]], timed=False)])
    tl = build_timeline(_plan(), [p0])
    assert [(e.op, e.start, e.end) for e in tl.events] == [("r0/compute/F s0 mb0", 5.0, 6.0)]


def test_a_cpu_send_whose_receive_ended_at_its_start_ends_there() -> None:
    """CPU (gloo): SEND F s0 posted at 0.6 ms, reported done only at the step's end (1.9); its RECV
    on rank 1 ended at 0.6 ms, the send's start: the send was delivered then, a bar of 0 ms."""
    from pptl.run.results import build_timeline

    p0 = _payload(0, [_step(0, 2.0, [[F0, 0.1, 0.5], [SEND_F0, 0.6, 1.9]])], device="cpu")
    p1 = _payload(1, [_step(0, 2.0, [[RECV_F1, 0.0, 0.6], [F1, 0.65, 1.0]])], device="cpu")
    ends = {e.op: (e.start, e.end) for e in build_timeline(_plan(), [p0, p1]).events}
    assert ends["r0/send/SEND_F s0 mb0 ->r1"] == (0.6, 0.6)


def test_a_negative_i_part_of_a_b_is_recorded_as_zero() -> None:
    """A B's I part measured at -0.001 ms (the two timers' noise): 0 ms, not a negative time."""
    from pptl.run.results import build_timeline

    st = _step(0, 2.0, [[B0, 0.0, 1.0]])
    st["b_input"] = [[B0, -0.001]]
    tl = build_timeline(_plan(), [_payload(0, [st])])
    assert tl.meta.extra["b_input_ms"] == {"r0/compute/B s0 mb0": 0.0}


def test_the_recorded_offset_is_the_plans_first_sample() -> None:
    """Rank 1's offset to rank 0 was 0.3 ms at the plan's start and 0.5 ms at its end (one host: not
    applied). 'measured_offset_ms' is the first, 0.3 ms; the applied offset is 0."""
    from pptl.run.results import build_timeline

    def p(rank: int, samples: list[list[float]]) -> dict[str, Any]:
        st = _step(0, 1.0, [[F0 if rank == 0 else F1, 0.0, 1.0]])
        st["anchor_ms"], st["anchor_err_ms"] = 100.0, 0.0
        return {**_payload(rank, [st]), "clock": {"host": "h", "apply": False, "samples": samples}}

    tl = build_timeline(_plan(), [p(0, [[0.0, 0.0, 0.0]]), p(1, [[0.0, 0.3, 0.1], [50.0, 0.5, 0.1]])])
    r1 = tl.meta.extra["clock"]["ranks"]["1"]
    assert r1["measured_offset_ms"] == 0.3 and r1["offset_ms"] == 0.0


# ----------------------------------------------------------------------------------------------
# report.py: the run summary's lines


def _summary_timeline(**extra: Any) -> Timeline:
    ev = [Event(op="F0", rank=0, lane="compute", start=0.0, end=2.0, kind="F", stage=0, mb=0)]
    return Timeline(ev, TimelineMeta(source="measured", units="ms", family="1f1b", pp=1, extra=extra))


def test_one_measurement_error_is_one_event_pair() -> None:
    from pptl.run.report import summary_lines

    tl = _summary_timeline(clock={"tolerance_ms": 0.002, "offsets_applied": False, "violations": 1,
                                  "first_violation": "measurement error: A ends before B"})
    assert [x for x in summary_lines(tl) if x.startswith("measurement error")] == [
        "measurement error: 1 event pair out of causal order across ranks (tolerance 0.002 ms), e.g. A ends before B"]


def test_an_overhead_of_zero_is_printed() -> None:
    """Timed and untimed medians both 2 ms: overhead 2 / 2 - 1 = 0, printed as +0.0%."""
    from pptl.run.report import summary_lines

    tl = _summary_timeline(median_step_ms=2.0, median_untimed_step_ms=2.0, overhead=0.0, step=1, step_ms=[2.0])
    assert summary_lines(tl)[1] == ("step 2.000 ms: step 1, the median of 1 timed (untimed median 2.000 ms; "
                                    "instrumentation overhead +0.0%)")


def test_a_rank_never_held_by_its_power_cap_says_zero_percent() -> None:
    from pptl.run.report import summary_lines

    gpu = {"0": {"samples": 40, "sm_mhz": 1980.0, "sm_mhz_p10": 1970.0, "sm_mhz_p90": 1980.0, "power_w": 400.0,
                 "power_limit_w": 700.0, "power_capped": 0.0}}
    lines = [x for x in summary_lines(_summary_timeline(gpu=gpu)) if "SM clock" in x]
    assert lines == ["  rank 0: SM clock 1980 MHz (p10 1970, p90 1980), power 400 W of 700 W, held by the power cap "
                     "in 0% of 40 samples"]


# ----------------------------------------------------------------------------------------------
# verify.py


W32 = Workload(hidden=4, tokens=2, layers_per_stage=1, dtype="float32")


def test_identical_gradients_name_the_first_parameter() -> None:
    """Every error 0: none is larger than the first, so the first parameter, stage 0 layer 0 W_up."""
    from pptl.run.verify import compare_gradients

    grads = [[torch.ones(2, 2) * (k + 1) for k in range(4)] for _ in range(2)]
    v = compare_gradients(W32, 1.0, 1.0, [list(g) for g in grads], grads)
    assert v.ok and v.max_grad_rel_err == 0.0 and v.worst == "stage 0 layer 0 W_up"


def test_a_nan_gradient_fails_verify_and_is_named() -> None:
    """Stage 1's W_down (parameter 2) came back NaN, and stage 1's b_down (parameter 3) NaN too, the
    rest exact. A NaN's error is NaN, which no comparison calls larger than 0: it used to pass
    (verify ok, worst 'stage 0 layer 0 W_up', error 0). It is the worst now, the first one kept, and
    fails the tolerance."""
    import math

    from pptl.run.verify import compare_gradients

    ref = [[torch.ones(2, 2) for _ in range(4)] for _ in range(2)]
    mine = [[t.clone() for t in g] for g in ref]
    mine[1][2] = torch.full((2, 2), float("nan"))
    mine[1][3] = torch.full((2, 2), float("nan"))
    v = compare_gradients(W32, 1.0, 1.0, mine, ref)
    assert not v.ok and v.worst == "stage 1 layer 0 W_down" and math.isnan(v.max_grad_rel_err)


def test_a_loss_off_by_exactly_the_tolerance_passes() -> None:
    """|100001 - 100000| / 100000 = 1e-5 exactly in floats (a correctly rounded division), fp32's
    tolerance: accepted (forward only, no gradients)."""
    from pptl.run.verify import compare_gradients

    v = compare_gradients(W32, 100001.0, 100000.0, None, [])
    assert v.loss_rel_err == 1e-5 and v.ok


# ----------------------------------------------------------------------------------------------
# options.py


@pytest.mark.parametrize("kw", [{"slow_rank": 0, "slow_factor": 2.0}, {"slow_rank": 1, "slow_factor": 100.0},
                                {"steps": 1}, {"warmup": 0}],
                         ids=["slow-rank-0", "slow-factor-100", "steps-1", "warmup-0"])
def test_run_options_at_their_edges_are_accepted(kw: dict[str, Any]) -> None:
    from pptl.run.options import Job, PlanJob

    job = Job(plans=(PlanJob("p.json"),), **kw)
    assert job.validate() is job


def test_a_timeout_of_zero_seconds_is_refused() -> None:
    from pptl.run.options import Job, PlanJob

    with pytest.raises(InputError, match="--timeout: got 0, expected a number of seconds > 0"):
        Job(plans=(PlanJob("p.json"),), timeout=0).validate()


# ----------------------------------------------------------------------------------------------
# footprint.py


def test_a_bf16_last_stage_of_one_block_peaks_in_its_loss() -> None:
    """Hidden 4, tokens 2: a unit is 8 elements, 16 bytes in bf16. The last stage's B holds, beyond
    its forward, the larger of the loss's four float32 tensors (4 x 4 x 8 = 128 bytes) and its
    block's peak ((1 + 7) units = 128 bytes, plus the output's gradient 16, less the residual's 32:
    112). So 128, from the loss. Forward (9 - 1) units = 128 plus the float32 residual 32 = 160;
    until W (10 - 1) units = 144."""
    from pptl.run.footprint import Footprint, chunk_footprint

    w = Workload(hidden=4, tokens=2, layers_per_stage=1, dtype="bfloat16")
    assert chunk_footprint(w, 1, last=True) == Footprint(forward=160, until_w=144, full_backward=128)


# ----------------------------------------------------------------------------------------------
# family_program.py: the cost means a run hands --costs-from


def _ev(s: Schedule, i: int, start: float, end: float) -> Event:
    op = s.ops[i]
    return Event(op=op.id, rank=op.rank, lane=op.lane, start=start, end=end, kind=op.kind, stage=op.stage, mb=op.mb)


def test_cost_means_keep_stage_zero() -> None:
    """F s0 took 1 ms, F s1 3 ms: the mean F is 2 ms, per stage 1 and 3 (stage 0 is a stage)."""
    from pptl.run.family_program import cost_means

    s = _plan()
    out = cost_means(s, [_ev(s, F0, 0.0, 1.0), _ev(s, F1, 1.0, 4.0)])
    assert out == {"base": {"F": 2.0}, "stages": {"0": {"F": 1.0}, "1": {"F": 3.0}}}


def test_a_collective_copy_ending_before_its_last_peer_started_counts_zero() -> None:
    """Both F's taken for one collective: it counts from its last copy's start, 2 ms. F s0 ended at 1
    ms, before that (clock noise): 0 ms, not -1; F s1 ran 2-3: 1 ms. Mean (0 + 1) / 2 = 0.5."""
    from pptl.run.family_program import cost_means

    s = _plan()
    out = cost_means(s, [_ev(s, F0, 0.0, 1.0), _ev(s, F1, 2.0, 3.0)],
                     together=lambda op: "all" if op.kind == "F" else None)
    assert out == {"base": {"F": 0.5}, "stages": {"0": {"F": 0.0}, "1": {"F": 1.0}}}


def _op(kind: str, mb: int) -> SimpleNamespace:
    return SimpleNamespace(kind=kind, lane="compute", stage=0, mb=mb, sub=None, flow=None, chunk=0, bucket=None,
                           half=None)


def test_a_member_with_more_ops_than_its_lead_keeps_its_own_order() -> None:
    """Rank 0 (the lead) issues F mb0, F mb1; rank 1 has both twins and an F mb2 more: it cannot
    follow op for op, so no order is replaced ({})."""
    from pptl.run.family_program import symmetric_issue

    ops = [_op("F", 0), _op("F", 1), _op("F", 1), _op("F", 0), _op("F", 2)]
    program: Any = SimpleNamespace(schedule=SimpleNamespace(ops=ops),
                                   ranks=[SimpleNamespace(issue=(0, 1)), SimpleNamespace(issue=(2, 3, 4))])
    assert symmetric_issue(program, [[0, 1]]) == {}
    # Without the extra op rank 1 follows the lead: mb0 (op 3) then mb1 (op 2).
    program.ranks[1] = SimpleNamespace(issue=(2, 3))
    assert symmetric_issue(program, [[0, 1]]) == {1: (3, 2)}


# ----------------------------------------------------------------------------------------------
# clocksync.py: the offset exchange (rank 0's side, torch.distributed replaced)


class _Peer:
    """Rank 1 of an offset exchange: each stamp comes back as rank 1's clock at the round's middle
    plus an offset; the sample rank 0 sends at the end is kept."""

    def __init__(self, offsets: list[float], clock: list[float]) -> None:
        self.offsets, self.clock, self.rounds = offsets, clock, 0
        self.sent: list[float] | None = None

    def send(self, t: Any, dst: int, group: Any = None) -> None:
        if t.numel() == 3:
            self.sent = [float(x) for x in t]

    def recv(self, t: Any, src: int, group: Any = None) -> None:
        k = self.rounds
        mid = (self.clock[2 * k] + self.clock[2 * k + 1]) / 2
        t[0] = mid + self.offsets[k]
        self.rounds += 1


def test_the_offset_comes_from_the_shortest_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    """16 rounds, round k sent at 10k ms. Every round trip takes 2 ms except round 5's (0.5 ms, 50 to
    50.5): its offset, rank 1's stamp 3 ms past the round's middle 50.25, is the one kept. The other
    rounds' replies came back late on one leg (stamps 3.8 ms past the middle)."""
    from pptl.run import clocksync

    clock: list[float] = []
    for k in range(clocksync.ROUNDS):
        clock += [10.0 * k, 10.0 * k + (0.5 if k == 5 else 2.0)]
    clock.append(1000.0)
    offsets = [3.0 if k == 5 else 3.8 for k in range(clocksync.ROUNDS)]
    peer = _Peer(offsets, clock)
    ticks = iter(clock)
    monkeypatch.setattr(clocksync, "dist", SimpleNamespace(send=peer.send, recv=peer.recv))
    monkeypatch.setattr(clocksync, "_now_ms", lambda: next(ticks))
    assert clocksync.measure_offset(0, 2) == [1000.0, 0.0, 0.0]
    assert peer.sent == pytest.approx([50.25, 3.0, 0.5])


# ----------------------------------------------------------------------------------------------
# slow.py


def test_the_slow_ranks_hold_follows_the_median_op_time() -> None:
    """Op 0 measured 1, 2 then 9 ms (the last a hiccup): the hold is based on the median, 2 ms. The
    spin's rate is known already, so nothing is timed on a GPU."""
    from pptl.run.slow import Stretch

    st = Stretch(1.5)
    st.cycles_per_ms = 1000.0
    for ms in (1.0, 2.0, 9.0):
        st.measured({0: ms}, None)
    assert st.base_ms == {0: 2.0}


# ----------------------------------------------------------------------------------------------
# output.py


def test_a_timeline_named_in_capitals_dot_gz_is_gzip(tmp_path: Path) -> None:
    from pptl.run.output import check_output, write_output

    out = check_output(tmp_path / "M.JSON.GZ")
    write_output(out, b'{"a": 1}')
    assert gzip.decompress(out.read_bytes()) == b'{"a": 1}'


def test_a_folder_named_like_a_timeline_is_refused_before_the_run(tmp_path: Path) -> None:
    from pptl.run.output import check_output

    (tmp_path / "m.json").mkdir()
    with pytest.raises(InputError, match="is a directory"):
        check_output(tmp_path / "m.json")


# ----------------------------------------------------------------------------------------------
# program.py: one channel per pair of ranks where their orders agree


def test_a_pair_whose_messages_agree_in_order_gets_one_channel() -> None:
    """1F1B pp 2, one micro-batch: rank 0 sends rank 1 one activation, rank 1 sends rank 0 one
    gradient. Each ordered pair's one message agrees with itself: one channel per pair, for every
    flow, direction and stage ('*', -1, -1), not one per flow and direction."""
    from pptl.run.program import build_program

    prog = build_program(_plan())
    assert prog.channels == ((0, 1, "*", -1, -1), (1, 0, "*", -1, -1))
    assert prog.ranks[0].channels == {RECV_B0: (1, 0, "*", -1, -1), SEND_F0: (0, 1, "*", -1, -1)}


# ----------------------------------------------------------------------------------------------
# family_program.py: refine adds waits to those the program had


def test_refine_adds_waits_to_the_programs_own() -> None:
    """1F1B pp 2: rank 0's SEND F waits for F s0 (compute stream to its channel) and B s0 for its
    RECV B (channel to compute). Refining B s0 to wait for F s0 too adds it to the RECV it waited
    for: (F s0 = 0, RECV B = 5); the SEND keeps its wait."""
    from pptl.run.family_program import refine
    from pptl.run.program import build_program

    prog = build_program(_plan())
    assert prog.ranks[0].waits == {SEND_F0: (F0,), B0: (RECV_B0,)}
    out = refine(prog, waits={0: {B0: [F0]}})
    assert out.ranks[0].waits == {SEND_F0: (F0,), B0: (F0, RECV_B0)}
    assert out.ranks[0].waited == frozenset({F0, RECV_B0})


# ----------------------------------------------------------------------------------------------
# hostlag.py: the timeout is a wait longer than it


class _SlowEvent:
    """An event whose op completes on its n-th query."""

    def __init__(self, n: int) -> None:
        self.n, self.queries = n, 0

    def record(self) -> None:
        pass

    def query(self) -> bool:
        self.queries += 1
        return self.queries >= self.n


def test_the_host_waits_out_exactly_its_timeout() -> None:
    """Lag 1, timeout 3 s, a clock that moves 1 s a reading. The op completes on the 5th query:
    first query (before the wait), then t0 = 0; queries 2-4 fail at clock 1, 2 and 3 (3 s waited is
    not more than 3), the 5th succeeds: no timeout, three sleeps. One more failed query (the op
    completing on the 6th) reads clock 4 > 3: the timeout."""
    from pptl.run.hostlag import HostLag

    for n, stuck in ((5, False), (6, True)):
        ev = _SlowEvent(n)
        ticks = iter(range(100))
        sleeps: list[float] = []
        hold = HostLag(1, lambda: ev, timeout=3, clock=lambda: float(next(ticks)), sleep=sleeps.append)
        hold.after()  # the first marked op issued
        if stuck:
            with pytest.raises(TimeoutError, match="no progress for 3 s"):
                hold.before()
        else:
            hold.before()
            assert len(sleeps) == 3 and hold.waits == 1


# ----------------------------------------------------------------------------------------------
# gates.py: a receive waits for its sender's publication of this very step


def _gates(published: int) -> Any:
    import struct

    from pptl.run.gates import Gates

    g: Any = object.__new__(Gates)
    g.slot, g.send_of, g.remote = {7: 0}, {4: 7}, {4: "event of SEND 7"}
    g._map = bytearray(struct.pack("<q", published))
    return g


class _Stream:
    def __init__(self) -> None:
        self.waited: list[Any] = []

    def wait_event(self, ev: Any) -> None:
        self.waited.append(ev)


class _TimedOut(Exception):
    pass


def _on_timeout() -> None:
    raise _TimedOut


def test_a_receive_goes_on_once_its_sender_published_this_step() -> None:
    """SEND 7 published step 3 and the RECV 4 waits for step 3: it waits on the sender's event at once."""
    stream = _Stream()
    _gates(3).wait(4, 3, stream, timeout=0.5, on_timeout=_on_timeout)
    assert stream.waited == ["event of SEND 7"]


def test_a_receive_does_not_take_the_last_steps_publication() -> None:
    """SEND 7 last published step 2; the RECV waits for step 3: the event is step 2's (stale), so it
    keeps waiting, here until its timeout of 0 s."""
    stream = _Stream()
    with pytest.raises(_TimedOut):
        _gates(2).wait(4, 3, stream, timeout=0.0, on_timeout=_on_timeout)
    assert stream.waited == []


def test_sends_keep_their_lane_order_where_their_producers_ran_the_other_way() -> None:
    """GPipe, pp 2, 2 micro-batches, rank 0's compute lane edited to run F mb1 before F mb0 while its
    send lane keeps SEND mb0 before SEND mb1 (a valid plan: `pptl check` passes it; rank 1 receives mb0
    first). Moving each SEND up to its producer alone would issue SEND mb1 right after F mb1, before F
    mb0 and SEND mb0: the channel's sends out of the order rank 1 receives them (mb1's tensor into mb0's
    receive). Kept in lane order, both follow F mb0: F1, F0, S0, S1."""
    from pptl.formats.plan import plan_from_dict, plan_to_dict
    from pptl.run.program import build_program, tighten_messages

    data = plan_to_dict(build_schedule(config_from_mapping({"schedule": "gpipe", "pp": 2, "microbatches": 2})))
    for col in data["ops"].values():  # ops 0 and 1: rank 0's F mb0 and F mb1, first on its compute lane
        values = col["index"] if isinstance(col, dict) else col
        values[0], values[1] = values[1], values[0]
    for key in ("order", "timeline", "metrics"):
        data.pop(key, None)
    s, _ = plan_from_dict(data)
    ops = s.ops
    tight = tighten_messages(build_program(s))
    rank0 = next(rp for rp in tight.ranks if rp.rank == 0)
    assert [ops[i].id for i in rank0.issue[:4]] == [
        "r0/compute/F s0 mb1", "r0/compute/F s0 mb0", "r0/send/SEND_F s0 mb0 ->r1", "r0/send/SEND_F s0 mb1 ->r1"]


# ----------------------------------------------------------------------------------------------
# the allocator's record: steps in which a CUDA rank mapped new memory


def test_the_timeline_keeps_the_steps_that_mapped_memory() -> None:
    """Rank 0 mapped nothing; rank 1 mapped new memory in two of its three steps (3 and 1 cudaMallocs; one
    step with none): steps_mapping {"1": 2}."""
    from pptl.run.report import summary_lines
    from pptl.run.results import build_timeline

    p0 = _payload(0, [{**_step(k, 2.0, [[F0, 0.0, 1.0]]), "device_allocs": 0} for k in range(3)])
    p1 = _payload(1, [{**_step(k, 2.0, [[F1, 1.0, 2.0]]), "device_allocs": n} for k, n in enumerate((3, 0, 1))])
    tl = build_timeline(_plan(), [p0, p1])
    assert tl.meta.extra["steps_mapping"] == {"1": 2}
    assert [x for x in summary_lines(tl) if x.startswith("allocator:")] == [
        "allocator: rank 1 mapped new GPU memory in 2 steps (a cudaMalloc waits for the GPU's work, a message "
        "spinning for its peer too: a hang risk)"]
    for p in (p0, p1):
        for st in p["steps"]:
            st["device_allocs"] = 0
    quiet = build_timeline(_plan(), [p0, p1])
    assert "steps_mapping" not in quiet.meta.extra
    assert not [x for x in summary_lines(quiet) if x.startswith("allocator:")]


@pytest.mark.parametrize("preset,want", [(None, "32"), ("1", "1"), ("8", "8")])
def test_a_rank_sets_cuda_connections_only_where_unset(monkeypatch: pytest.MonkeyPatch, preset: str | None,
                                                       want: str) -> None:
    """Set before anything makes a CUDA context (a rank exits 2 here, given no plan); the user's value stays."""
    from pptl.run.__main__ import main

    if preset is None:
        monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    else:
        monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", preset)
    assert main([]) == 2
    import os

    assert os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] == want


@pytest.mark.parametrize("raw,want", [(None, 8), ("32", 32), (" 4 ", 4), ("x", None), ("-1", None), ("", None)])
def test_the_run_records_the_connections_cuda_read(monkeypatch: pytest.MonkeyPatch, raw: str | None,
                                                   want: int | None) -> None:
    from pptl.run.worker import _connections

    if raw is None:
        monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    else:
        monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", raw)
    assert _connections() == want
