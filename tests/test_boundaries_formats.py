"""Boundaries of the trace readers (torch profiler / Kineto traces, event lists, timelines, Chrome export,
torch CSV table, structured files) and of the measured-timeline rules, each pinned by numbers worked out by
hand: a kernel launched exactly as a range opens or closes, a gloo receive posted exactly at a RECV range's
edge, a wait that returns as a range closes, ranks whose clocks have different bases, ops that touch, two-digit
ranks, time units. Each test kills a hand-written mutant (/work/wt/_mutants/formats.py) that the rest of the
suite let through.

Synthetic traces here are as small as the rule they pin: ``ts``/``dur`` in microseconds, the timeline shifted
so that its first event starts at 0.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pptl.checks.measured import measured_violations
from pptl.formats.loaded import Loaded
from pptl.formats.loader import load_any
from pptl.timeline import Timeline

Trace = dict[str, Any]
Ev = dict[str, Any]

MAIN, AUTOGRAD, STREAM = 1, 2, 7


def _x(name: str, ts: float, dur: float, *, tid: int = MAIN, cat: str = "user_annotation", **args: Any) -> Ev:
    """A complete event (``ph: X``); keyword arguments go to its ``args``."""
    e: Ev = {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": tid, "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def _launch(ts: float, corr: int, *, tid: int = MAIN) -> Ev:
    return _x("cudaLaunchKernel", ts, 0.5, tid=tid, cat="cuda_runtime", correlation=corr)


def _kernel(ts: float, dur: float, corr: int, *, name: str = "sm90_gemm") -> Ev:
    return _x(name, ts, dur, tid=STREAM, cat="kernel", correlation=corr)


def _trace(events: list[Ev], *, rank: int | None = None, base_ns: int = 0) -> Trace:
    t: Trace = {"schemaVersion": 1, "baseTimeNanoseconds": base_ns, "traceEvents": events}
    if rank is not None:
        t["distributedInfo"] = {"rank": rank}
    return t


def _load(folder: Path, files: dict[str, Any], **options: Any) -> Loaded:
    """Write each file's JSON into ``folder`` and read the folder as ``pptl`` does."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_text(json.dumps(data))
    return load_any(folder, **options)


def _times(loaded: Loaded) -> dict[str, tuple[float, float]]:
    tl = loaded.timeline
    assert tl is not None
    return {e.op: (e.start, e.end) for e in tl.events}


def _timeline(loaded: Loaded) -> Timeline:
    assert loaded.timeline is not None
    return loaded.timeline


# ----------------------------------------------------------------------------------------------------------------
# kineto: which kernels a range launched, the gloo receives, flows, base times


def test_kernels_launched_exactly_at_a_ranges_start_and_end_are_its(tmp_path: Path) -> None:
    """PP:0F0 is open over [0, 10] and launches one kernel as it opens (t=0, GPU 100..110) and one as it closes
    (t=10, GPU 120..130); PP:0B0 [20, 30] launches one at 25 (GPU 140..150). Both edges are inside ("launched
    within [start, end]"), so F0 runs 100..130 and B0 140..150; shifted to start at 0: F0 [0, 30], B0 [40, 50].
    Leaving out the kernel launched at the end gives F0 [0, 10]; leaving out the one at the start moves the whole
    timeline (its first kernel then starts at 120)."""
    ev = [_x("PP:0F0", 0, 10), _x("PP:0B0", 20, 10),
          _launch(0, 1), _kernel(100, 10, 1), _launch(10, 2), _kernel(120, 10, 2), _launch(25, 3), _kernel(140, 10, 3)]
    loaded = _load(tmp_path / "t", {"rank0.json": _trace(ev)})
    assert _times(loaded) == {"r0/compute/F s0 mb0": (0.0, 30.0), "r0/compute/B s0 mb0": (40.0, 50.0)}
    # the GPU time of the step: first kernel (100) to last (150)
    assert _timeline(loaded).meta.extra["gpu_window"] == [0.0, 50.0]


def _gloo_pair(rank0_extra: list[Ev], rank1_extra: list[Ev]) -> dict[str, Trace]:
    """A CPU (gloo) step of two ranks, one micro-batch: rank 0 runs F0, sends it, posts the receive of its
    gradient and opens B0; rank 1 posts the receive of the activation, runs F0 and B0 and sends the gradient.
    No GPU kernels: every action is timed by its CPU range and the ``gloo:recv`` ranges (post to ``wait()``)."""
    r0 = [_x("PP:0F0", 0, 10), _x("PP:0SEND_F0", 10, 2), _x("PP:0RECV_B0", 12, 2), _x("PP:0B0", 14, 46)]
    r1 = [_x("PP:1RECV_F0", 0, 2), _x("PP:1F0", 2, 18), _x("PP:1B0", 20, 10), _x("PP:1SEND_B0", 30, 2)]
    return {"rank0.json": _trace(r0 + rank0_extra, rank=0), "rank1.json": _trace(r1 + rank1_extra, rank=1)}


def test_a_gloo_receive_posted_exactly_at_a_recv_ranges_edges_is_its_receive(tmp_path: Path) -> None:
    """Rank 0 posts the gradient's receive exactly as PP:0RECV_B0 [12, 14] opens (gloo:recv 12..50); rank 1 posts
    the activation's exactly as PP:1RECV_F0 [0, 2] closes (gloo:recv 2..15). Both are posted within their RECV's
    range, so each RECV ends when its wait returned: RECV_B0 [12, 50], RECV_F0 [0, 15]. The compute that waited
    inside its own range starts where that wait returned: B0 [50, 60] (range 14..60), F0 on rank 1 [15, 20]
    (range 2..20). So no RECV ends before its SEND starts (SEND_B0 starts at 30, SEND_F0 at 10)."""
    loaded = _load(tmp_path / "t", _gloo_pair([_x("gloo:recv", 12, 38)], [_x("gloo:recv", 2, 13)]))
    t = _times(loaded)
    assert t["r0/recv/RECV_B s0 mb0 <-r1"] == (12.0, 50.0)
    assert t["r0/compute/B s0 mb0"] == (50.0, 60.0)
    assert t["r1/recv/RECV_F s1 mb0 <-r0"] == (0.0, 15.0)
    assert t["r1/compute/F s1 mb0"] == (15.0, 20.0)
    assert t["r0/send/SEND_F s0 mb0 ->r1"] == (10.0, 12.0) and t["r1/send/SEND_B s1 mb0 ->r0"] == (30.0, 32.0)
    assert measured_violations(_timeline(loaded)) == []


def test_a_gloo_wait_that_returns_as_a_compute_range_closes_leaves_it_zero_long(tmp_path: Path) -> None:
    """Rank 1's F0 range [2, 20] holds the wait on the activation, which returns exactly at 20 (gloo:recv posted
    at 1, inside RECV_F0 [0, 2]). The wait ended within [2, 20], so F0 starts where it returned: [20, 20], all of
    its range spent waiting (not 2..20 of forward work); the RECV ends there too: [0, 20]."""
    loaded = _load(tmp_path / "t", _gloo_pair([], [_x("gloo:recv", 1, 19)]))
    t = _times(loaded)
    assert t["r1/compute/F s1 mb0"] == (20.0, 20.0)
    assert t["r1/recv/RECV_F s1 mb0 <-r0"] == (0.0, 20.0)


def _one_step(rank0_base_ns: int, rank1_base_ns: int) -> dict[str, Trace]:
    """Rank 0 (clock base 5000 us when ``rank0_base_ns`` is 5_000_000) runs F0 [0, 10], SEND_F0 [10, 12],
    RECV_B0 [12, 42], B0 [42, 52] in its own ``ts``; rank 1's ``ts`` are 3012 later than rank 0's would be for
    the same instant when its base is 2000 us: RECV_F0 3012..3014, F0 3014..3024, B0 3024..3034, SEND_B0
    3034..3036."""
    r0 = [_x("PP:0F0", 0, 10), _x("PP:0SEND_F0", 10, 2), _x("PP:0RECV_B0", 12, 30), _x("PP:0B0", 42, 10)]
    r1 = [_x("PP:1RECV_F0", 3012, 2), _x("PP:1F0", 3014, 10), _x("PP:1B0", 3024, 10), _x("PP:1SEND_B0", 3034, 2)]
    return {"rank0.json": _trace(r0, rank=0, base_ns=rank0_base_ns),
            "rank1.json": _trace(r1, rank=1, base_ns=rank1_base_ns)}


def test_base_time_is_nanoseconds_added_to_microsecond_timestamps(tmp_path: Path) -> None:
    """baseTimeNanoseconds 5_000_000 ns is 5000 us, 2_000_000 ns is 2000 us: rank 0's F0 is at 5000 us, rank 1's
    RECV_F0 at 2000 + 3012 = 5012 us. Shifted to the first event (5000): rank 1's RECV_F0 [12, 14], F0 [14, 24],
    B0 [24, 34], SEND_B0 [34, 36]; rank 0's RECV_B0 [12, 42] ends after that SEND starts, so no PP090. Read as
    microseconds (or milliseconds) the two bases would be 3 us apart and rank 1 some 3000 us late."""
    loaded = _load(tmp_path / "t", _one_step(5_000_000, 2_000_000))
    t = _times(loaded)
    assert t["r0/compute/F s0 mb0"] == (0.0, 10.0)
    assert t["r1/recv/RECV_F s1 mb0 <-r0"] == (12.0, 14.0)
    assert t["r1/compute/F s1 mb0"] == (14.0, 24.0)
    assert t["r1/send/SEND_B s1 mb0 ->r0"] == (34.0, 36.0)
    assert t["r0/compute/B s0 mb0"] == (42.0, 52.0)
    assert measured_violations(_timeline(loaded)) == []


def test_the_largest_base_time_is_taken(tmp_path: Path) -> None:
    """baseTimeNanoseconds may be as large as MAX_TIME (1e18 us) in nanoseconds, 10**21; one more is refused.
    At 1e18 a float's step is 128 us, so the durations here are multiples of it: F0 [0, 1280], B0 [1280, 2560]."""
    from pptl.errors import InputError

    ev = [_x("PP:0F0", 0, 1280), _x("PP:0B0", 1280, 1280)]
    loaded = _load(tmp_path / "ok", {"rank0.json": _trace(ev, base_ns=10**21)})
    assert _times(loaded) == {"r0/compute/F s0 mb0": (0.0, 1280.0), "r0/compute/B s0 mb0": (1280.0, 2560.0)}
    with pytest.raises(InputError, match="baseTimeNanoseconds"):
        _load(tmp_path / "over", {"rank0.json": _trace(ev, base_ns=10**21 + 1)})


def test_two_kernels_starting_together_take_their_flows_in_trace_order(tmp_path: Path) -> None:
    """No correlation ids: the ac2g flows alone tie launches to kernels. Two kernels start at 100 on one stream,
    the zero-length one listed first; the flow ends at (stream, 100) are listed in the same order, the first from
    F0's launch (t=1, in PP:0F0 [0, 5]), the second from B0's (t=11, in PP:0B0 [10, 15]). So F0 is the
    zero-length kernel [100, 100] and B0 the 20 us one [100, 120]: F0 [0, 0], B0 [0, 20]."""
    flows = [{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 0, "tid": MAIN, "ts": 1},
             {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 2, "pid": 0, "tid": MAIN, "ts": 11},
             {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 0, "tid": STREAM, "ts": 100, "bp": "e"},
             {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 2, "pid": 0, "tid": STREAM, "ts": 100, "bp": "e"}]
    ev = [_x("PP:0F0", 0, 5), _x("PP:0B0", 10, 5), _x("elementwise", 100, 0, tid=STREAM, cat="kernel"),
          _x("sm90_gemm", 100, 20, tid=STREAM, cat="kernel")] + flows
    loaded = _load(tmp_path / "t", {"rank0.json": _trace(ev)})
    assert _times(loaded) == {"r0/compute/F s0 mb0": (0.0, 0.0), "r0/compute/B s0 mb0": (0.0, 20.0)}


def _single_stage(*, f1_flow_at: float, extra: tuple[Ev, ...] = ()) -> dict[str, Trace]:
    """One rank of a single-stage schedule (no PP: ranges), two micro-batches, on the CPU: forward ops on the main
    thread, each run making an autograd node (a ``fwdbwd`` flow), backward nodes on autograd's thread.
    F0: aten::linear [0, 10] with aten::addmm [0, 6] (same start, nested) and aten::relu [8, 9] inside it;
    B0 [20, 30]; F1: aten::linear [40, 50], its flow at ``f1_flow_at``; B1 [60, 70]."""
    bwd = "autograd::engine::evaluate_function: AddmmBackward0"
    ev = [_x("aten::linear", 0, 10, cat="cpu_op"), _x("aten::addmm", 0, 6, cat="cpu_op"),
          _x("aten::relu", 8, 1, cat="cpu_op"), _x(bwd, 20, 10, tid=AUTOGRAD, cat="cpu_op"),
          _x("aten::linear", 40, 10, cat="cpu_op"), _x(bwd, 60, 10, tid=AUTOGRAD, cat="cpu_op"),
          {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": 1, "pid": 0, "tid": MAIN, "ts": 0},
          {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": 2, "pid": 0, "tid": MAIN, "ts": f1_flow_at}]
    return {"rank0.json": _trace(ev + list(extra), rank=0)}


def test_a_range_and_a_shorter_one_opening_together_nest_in_the_longer(tmp_path: Path) -> None:
    """aten::linear [0, 10] and aten::addmm [0, 6] open together: addmm is inside linear, and so is relu [8, 9];
    the forward is linear's range, F0 [0, 10] (not 0..9, as if addmm and then relu were the top-level ops)."""
    t = _times(_load(tmp_path / "t", _single_stage(f1_flow_at=40)))
    assert t == {"r0/compute/F s0 mb0": (0.0, 10.0), "r0/compute/B s0 mb0": (20.0, 30.0),
                 "r0/compute/F s0 mb1": (40.0, 50.0), "r0/compute/B s0 mb1": (60.0, 70.0)}


def test_an_autograd_flow_at_a_forward_ops_last_instant_makes_it_a_forward(tmp_path: Path) -> None:
    """F1's fwdbwd flow leaves at 50, the instant aten::linear [40, 50] closes: within [start, end], so the op
    made an autograd node and is forward 1. aten::div_ [80, 85] after the last backward made none (grad
    scaling): not a forward. Two forwards, two backwards."""
    loaded = _load(tmp_path / "t", _single_stage(f1_flow_at=50, extra=(_x("aten::div_", 80, 5, cat="cpu_op"),)))
    t = _times(loaded)
    assert t["r0/compute/F s0 mb1"] == (40.0, 50.0)
    assert sorted(t) == ["r0/compute/B s0 mb0", "r0/compute/B s0 mb1", "r0/compute/F s0 mb0", "r0/compute/F s0 mb1"]
    assert any("2 forwards and 2 backwards" in n for n in loaded.notes)


# ----------------------------------------------------------------------------------------------------------------
# profiler: ranks from file names, event lists, notes


def _events(*rows: tuple[str, float, float, int]) -> list[dict[str, Any]]:
    return [{"type": k, "start_time": s, "end_time": e, "minibatch": mb} for k, s, e, mb in rows]


def test_the_rank_is_the_last_number_of_the_file_name(tmp_path: Path) -> None:
    """step3_rank10.json is rank 10 and step3_rank2.json rank 2 (the last number, not the step's 3): 11 ranks, no
    file for 0, 1 and 3 to 9."""
    loaded = _load(tmp_path / "t", {"step3_rank10.json": _events(("F", 0.0, 1.0, 0)),
                                    "step3_rank2.json": _events(("F", 0.5, 1.5, 0))})
    tl = _timeline(loaded)
    assert sorted(e.rank for e in tl.events) == [2, 10]
    assert tl.meta.pp == 11
    assert "no file for ranks 0, 1, 3-9" in loaded.notes  # two in a row are listed, three or more a range


def test_rank_65536_is_one_past_the_largest(tmp_path: Path) -> None:
    """MAX_RANKS is 65536: ranks 0..65535; 65536 is refused in one line naming the range."""
    from pptl.errors import InputError

    with pytest.raises(InputError, match=r"rank 65536, expected an integer in 0\.\.65535"):
        _load(tmp_path / "t", {"a.json": {"rank": 65536, "events": _events(("F", 0.0, 1.0, 0))}})


def test_a_zero_length_event_is_an_event(tmp_path: Path) -> None:
    """end_time equal to start_time is an event that took no measurable time (a timer's resolution), not an
    event that ends before it starts: F0 [2, 2] ms, B0 [2, 3] ms, shifted by 2: F0 [0, 0], B0 [0, 1]."""
    loaded = _load(tmp_path / "t", {"rank0.json": _events(("F", 2.0, 2.0, 0), ("B", 2.0, 3.0, 0))})
    assert _times(loaded) == {"r0/compute/F s0 mb0": (0.0, 0.0), "r0/compute/B s0 mb0": (0.0, 1.0)}


def test_events_at_one_start_run_in_the_order_shortest_first(tmp_path: Path) -> None:
    """F0 [2, 2] and B0 [2, 3] start together; an event list has only times, so the lane's order is by start and
    then by end: F0 before B0, the order the schedule needs (B0 after its F0 on the one rank). The other way
    round, B0 would come before the forward it needs, and the schedule would not be valid."""
    from pptl.checks import run_checks

    loaded = _load(tmp_path / "t", {"rank0.json": _events(("B", 2.0, 3.0, 0), ("F", 2.0, 2.0, 0))})
    assert loaded.schedule is not None
    assert [loaded.schedule.ops[i].kind for i in loaded.schedule.lanes[0, "compute"]] == ["F", "B"]
    assert [v for v in run_checks(loaded.schedule) if v.severity == "error"] == []


def test_four_skipped_files_are_all_named_and_a_fifth_is_an_ellipsis(tmp_path: Path) -> None:
    """The note names the first four files that are not traces and adds ' ...' only when there are more."""
    others = {f"{c}.json": {"step_time": 1.0} for c in "abcd"}
    loaded = _load(tmp_path / "four", {"rank0.json": _events(("F", 0.0, 1.0, 0)), **others})
    assert "skipped 4 file(s) that are not traces: a.json, b.json, c.json, d.json" in loaded.notes
    loaded = _load(tmp_path / "five", {"rank0.json": _events(("F", 0.0, 1.0, 0)), **others, "e.json": {"x": 1}})
    assert "skipped 5 file(s) that are not traces: a.json, b.json, c.json, d.json ..." in loaded.notes


def test_the_timeline_starts_at_the_earliest_event_of_any_rank(tmp_path: Path) -> None:
    """Rank 1's F starts at 2 ms, before rank 0's at 5 ms: the timeline starts at 2, so rank 1's F is [0, 1] and
    rank 0's [3, 4] (not rank 0's start, which would put rank 1 at -3)."""
    loaded = _load(tmp_path / "t", {"rank0.json": _events(("F", 5.0, 6.0, 0)),
                                    "rank1.json": _events(("F", 2.0, 3.0, 0))})
    assert _times(loaded) == {"r0/compute/F s0 mb0": (3.0, 4.0), "r1/compute/F s1 mb0": (0.0, 1.0)}


def test_a_step_whose_kernels_take_no_time_has_no_makespan_share(tmp_path: Path) -> None:
    """F0 and B0 each launch one zero-length kernel at GPU time 100: the step's GPU time is 100 - 100 = 0, so there
    is no share of it to print (the note would divide by zero); both actions are [0, 0]."""
    ev = [_x("PP:0F0", 0, 10), _x("PP:0B0", 20, 10), _launch(1, 1), _kernel(100, 0, 1), _launch(21, 2),
          _kernel(100, 0, 2)]
    loaded = _load(tmp_path / "t", {"rank0.json": _trace(ev)})
    assert _times(loaded) == {"r0/compute/F s0 mb0": (0.0, 0.0), "r0/compute/B s0 mb0": (0.0, 0.0)}
    assert not any(n.startswith("makespan") for n in loaded.notes)


def _forwards_then(backwards: int, forwards: int = 9) -> list[Ev]:
    """PP:0F0..PP:0F{forwards-1}, then PP:0B0..: one rank, one stage, CPU ranges 10 us apart."""
    names = [f"PP:0F{k}" for k in range(forwards)] + [f"PP:0B{k}" for k in range(backwards)]
    return [_x(n, 10 * k, 5) for k, n in enumerate(names)]


def test_eight_missing_actions_are_all_named_and_a_ninth_is_an_ellipsis(tmp_path: Path) -> None:
    """Nine forwards make nine micro-batches; with only B0 recorded, B1..B8 (eight) are missing and all are named;
    with no backward at all, B0..B8 (nine) are missing: the first eight named, then ' ...'."""
    loaded = _load(tmp_path / "eight", {"rank0.json": _trace(_forwards_then(1))})
    eight = ", ".join(f"0B{k}" for k in range(1, 9))
    assert any(n.startswith(f"missing 8 action(s): {eight}: no PP:<action> range") for n in loaded.notes)
    loaded = _load(tmp_path / "nine", {"rank0.json": _trace(_forwards_then(0))})
    first = ", ".join(f"0B{k}" for k in range(8))
    assert any(n.startswith(f"missing 9 action(s): {first} ...: no PP:<action> range") for n in loaded.notes)


def test_units_asked_for_win_over_the_files_units(tmp_path: Path) -> None:
    """An event list that says ``"units": "ms"`` read with units="us": the timeline is in us, as asked."""
    data = {"rank": 0, "units": "ms", "events": _events(("F", 0.0, 1.0, 0))}
    assert _timeline(_load(tmp_path / "t", {"r.json": data}, units="us")).meta.units == "us"
    assert _timeline(_load(tmp_path / "u", {"r.json": data})).meta.units == "ms"


# ----------------------------------------------------------------------------------------------------------------
# trace_actions: steps, ordering, which kernels time an action


def _two_steps() -> Trace:
    """PP:0F0 and PP:0B0 recorded in two profiled steps (the second 1000 us later)."""
    return _trace([_x("PP:0F0", 0, 10), _x("PP:0B0", 20, 10), _x("PP:0F0", 1000, 10), _x("PP:0B0", 1020, 30)])


def test_a_step_equal_to_the_count_is_refused_in_one_line(tmp_path: Path) -> None:
    """Two steps are steps 0 and 1: step 1 is the second (B0 30 us long), step 2 is not in the trace."""
    from pptl.errors import InputError

    loaded = _load(tmp_path / "t", {"rank0.json": _two_steps()}, step=1)
    assert _times(loaded)["r0/compute/B s0 mb0"] == (20.0, 50.0)
    with pytest.raises(InputError, match=r"step 2 is not in the trace's 2 profiled step\(s\)"):
        load_any(tmp_path / "t", step=2)


def test_one_profiled_step_gets_no_note_about_steps(tmp_path: Path) -> None:
    """'N profiled steps, using step k' is said only when there is a choice (two steps or more)."""
    one = _load(tmp_path / "one", {"rank0.json": _trace([_x("PP:0F0", 0, 10), _x("PP:0B0", 20, 10)])})
    assert not any("profiled steps" in n for n in one.notes)
    two = _load(tmp_path / "two", {"rank0.json": _two_steps()})
    assert "rank0.json: 2 profiled steps, using step 1" in two.notes


def test_at_one_start_the_shorter_range_was_issued_first(tmp_path: Path) -> None:
    """Rank 1 posts RECV_F0 (a zero-length range at 0) and opens F0 at the same microsecond [0, 10]: the posted
    receive comes first in the rank's issue order (r, then c), as it ran; issued the other way round, F0 would
    wait for a receive not yet posted."""
    r0 = [_x("PP:0F0", 0, 5), _x("PP:0SEND_F0", 5, 1), _x("PP:0RECV_B0", 6, 20), _x("PP:0B0", 26, 5)]
    r1 = [_x("PP:1F0", 0, 10), _x("PP:1RECV_F0", 0, 0), _x("PP:1B0", 10, 10), _x("PP:1SEND_B0", 20, 1)]
    loaded = _load(tmp_path / "t", {"rank0.json": _trace(r0, rank=0), "rank1.json": _trace(r1, rank=1)})
    assert loaded.schedule is not None
    assert loaded.schedule.meta["program_order"][1] == "rccs"


def test_an_action_ends_with_its_latest_kernel_not_its_last_launched(tmp_path: Path) -> None:
    """F0 launches a gemm at 1 on stream 7 (GPU 100..150) and then a small kernel at 2 on stream 8 (110..120): F0
    runs from its first kernel's start to the latest end, 100..150, so [0, 50]; B0's one kernel 160..170 is
    [60, 70]."""
    ev = [_x("PP:0F0", 0, 10), _x("PP:0B0", 20, 10), _launch(1, 1), _kernel(100, 50, 1), _launch(2, 2),
          _x("elementwise", 110, 10, tid=8, cat="kernel", correlation=2), _launch(21, 3), _kernel(160, 10, 3)]
    assert _times(_load(tmp_path / "t", {"rank0.json": _trace(ev)})) == {
        "r0/compute/F s0 mb0": (0.0, 50.0), "r0/compute/B s0 mb0": (60.0, 70.0)}


def test_a_gloo_receive_that_completed_inside_its_recv_range_keeps_the_range(tmp_path: Path) -> None:
    """Rank 1's data was there already: gloo:recv posted at 0.5 returned at 1.5, inside PP:1RECV_F0 [0, 2]. The
    RECV ends at the later of its range's end and the wait's: 2 (not 1.5)."""
    loaded = _load(tmp_path / "t", _gloo_pair([], [_x("gloo:recv", 0.5, 1.0)]))
    assert _times(loaded)["r1/recv/RECV_F s1 mb0 <-r0"] == (0.0, 2.0)


def test_an_op_starting_as_the_previous_one_ends_is_top_level(tmp_path: Path) -> None:
    """aten::relu [10, 12] opens the instant aten::linear [0, 10] closes, on the same thread: it is not inside
    linear but next to it, so forward 0 runs [0, 12]."""
    loaded = _load(tmp_path / "t", _single_stage(f1_flow_at=40, extra=(_x("aten::relu", 10, 2, cat="cpu_op"),)))
    assert _times(loaded)["r0/compute/F s0 mb0"] == (0.0, 12.0)


def test_ops_touching_the_profiled_steps_edges_belong_to_it(tmp_path: Path) -> None:
    """Two ProfilerStep# ranges, [0, 100] and [100, 200]; the last is read. Its forward 0 (aten::linear) opens
    exactly at 100 and its backward 1 closes exactly at 200: both are inside [100, 200]. Step 2's ops are the
    single-stage step shifted by 100 with B1 [160, 200]: F0 [100, 110], B0 [120, 130], F1 [140, 150],
    B1 [160, 200]; the timeline starts at its first event (0: step 1's ops do not count, but 100 is F0's start)."""
    bwd = "autograd::engine::evaluate_function: AddmmBackward0"

    def step(t: float) -> list[Ev]:
        return [_x("aten::linear", t, 10, cat="cpu_op"), _x(bwd, t + 20, 10, tid=AUTOGRAD, cat="cpu_op"),
                _x("aten::linear", t + 40, 10, cat="cpu_op"), _x(bwd, t + 60, 40, tid=AUTOGRAD, cat="cpu_op")]

    ev = [_x("ProfilerStep#1", 0, 100), _x("ProfilerStep#2", 100, 100)] + step(0) + step(100)
    loaded = _load(tmp_path / "t", {"rank0.json": _trace(ev, rank=0)})
    assert _times(loaded) == {"r0/compute/F s0 mb0": (0.0, 10.0), "r0/compute/B s0 mb0": (20.0, 30.0),
                              "r0/compute/F s0 mb1": (40.0, 50.0), "r0/compute/B s0 mb1": (60.0, 100.0)}
    assert any("2 forwards and 2 backwards" in n for n in loaded.notes)


def test_a_send_that_launched_only_a_copy_is_timed_by_the_copy(tmp_path: Path) -> None:
    """With NCCL's P2P over the copy engine a send shows as a memcpy, not an NCCL kernel: PP:0SEND_F0 [10, 12]
    launches one at 11 (GPU 150..170). An action with none of its own kind of kernels is timed by the others it
    launched: SEND_F0 [50, 70] (F0's gemm 100..150 is [0, 50]; rank 1 receives with an NCCL kernel 120..170 and
    runs F0 170..190)."""
    ev = [_x("PP:0F0", 0, 10), _x("PP:0SEND_F0", 10, 2), _launch(1, 1), _kernel(100, 50, 1), _launch(11, 2),
          _x("Memcpy DtoD (Device -> Device)", 150, 20, tid=STREAM, cat="gpu_memcpy", correlation=2)]
    r1 = [_x("PP:1RECV_F0", 0, 1), _x("PP:1F0", 1, 10), _launch(0.5, 1), _launch(2, 2),
          _kernel(120, 50, 1, name="ncclDevKernel_SendRecv"), _kernel(170, 20, 2)]
    loaded = _load(tmp_path / "t", {"rank0.json": _trace(ev, rank=0), "rank1.json": _trace(r1, rank=1)})
    t = _times(loaded)
    assert t["r0/compute/F s0 mb0"] == (0.0, 50.0)
    assert t["r0/send/SEND_F s0 mb0 ->r1"] == (50.0, 70.0)
    assert t["r1/recv/RECV_F s1 mb0 <-r0"] == (20.0, 70.0) and t["r1/compute/F s1 mb0"] == (70.0, 90.0)


def test_an_action_with_no_gpu_work_sits_at_the_next_compute_kernel_not_an_nccl_one(tmp_path: Path) -> None:
    """Rank 1 (FSDP) opens UNSHARD [0, 5] and launches nothing; then RECV_F0 [10, 15] launches an NCCL kernel at
    11 (GPU 100..180, mostly waiting), F0 [20, 25] a gemm at 21 (180..200), B0 [30, 35] one at 31 (200..220).
    UNSHARD sits where the compute stream next ran, at 180, not at the NCCL kernel's 100. Rank 0's F0 kernel
    (90..95) is the first event of the step, so shifted by 90 UNSHARD is [90, 90] (not [10, 10])."""
    r1 = [_x("PP:1UNSHARD", 0, 5), _x("PP:1RECV_F0", 10, 5), _x("PP:1F0", 20, 5), _x("PP:1B0", 30, 5),
          _launch(11, 1), _kernel(100, 80, 1, name="ncclDevKernel_SendRecv"), _launch(21, 2), _kernel(180, 20, 2),
          _launch(31, 3), _kernel(200, 20, 3)]
    r0 = [_x("PP:0F0", 0, 5), _x("PP:0SEND_F0", 5, 1), _launch(1, 1), _kernel(90, 5, 1), _launch(6, 2),
          _kernel(95, 10, 2, name="ncclDevKernel_SendRecv"), _x("PP:0B0", 40, 5), _launch(41, 3), _kernel(230, 5, 3)]
    loaded = _load(tmp_path / "t", {"rank0.json": _trace(r0, rank=0), "rank1.json": _trace(r1, rank=1)})
    t = _times(loaded)
    assert t["r1/compute/UNSHARD s1"] == (90.0, 90.0)


def test_fewer_forwards_than_backwards_is_noted(tmp_path: Path) -> None:
    """F1's flow leaves at 55, after aten::linear [40, 50] closed: that op made no autograd node, so it is no
    forward. One forward and two backwards: the step may be cut short, and the note says so."""
    loaded = _load(tmp_path / "t", _single_stage(f1_flow_at=55))
    assert "rank0.json: 1 forward but 2 backwards; the step may be cut short" in loaded.notes


# ----------------------------------------------------------------------------------------------------------------
# chrome_trace: units, rounding, the memory counter at a tie


def _chrome(units: str, *events: tuple[str, int, float, float]) -> dict[str, Any]:
    from pptl.formats.chrome_trace import to_chrome
    from pptl.timeline import Event, TimelineMeta

    ev = [Event(op=f"r0/compute/{k} s0 mb{mb}", rank=0, lane="compute", start=s, end=e, kind=k, stage=0, mb=mb)
          for k, mb, s, e in events]
    return to_chrome(Timeline(ev, TimelineMeta(source="measured", units=units)))


def test_a_timeline_in_seconds_is_drawn_in_microseconds() -> None:
    """1 s = 1e6 us: F0 [2, 3.5] s is ts 0 (the timeline's start) and dur 1.5e6 us; B0 [3.5, 4] s is ts 1.5e6,
    dur 5e5."""
    trace = _chrome("s", ("F", 0, 2.0, 3.5), ("B", 0, 3.5, 4.0))
    xs = {e["name"]: (e["ts"], e["dur"]) for e in trace["traceEvents"] if e["ph"] == "X"}
    assert xs == {"F s0 mb0": (0.0, 1.5e6), "B s0 mb0": (1.5e6, 5e5)}
    assert trace["otherData"]["us_per_unit"] == 1e6


def test_chrome_times_keep_nanoseconds() -> None:
    """Times are rounded to 3 decimals of a microsecond (1 ns): F0 [0, 0.125] us keeps dur 0.125 and B0 starts
    at ts 0.125 (two decimals would make them 0.12)."""
    trace = _chrome("us", ("F", 0, 0.0, 0.125), ("B", 0, 0.125, 1.0))
    xs = {e["name"]: (e["ts"], e["dur"]) for e in trace["traceEvents"] if e["ph"] == "X"}
    assert xs == {"F s0 mb0": (0.0, 0.125), "B s0 mb0": (0.125, 0.875)}


def test_the_activation_counter_frees_before_it_allocates_at_one_instant() -> None:
    """One rank, 1F1B of two micro-batches back to back: F0 [0, 1], B0 [1, 2], F1 [2, 3], B1 [3, 4] ms. B0 frees
    mb0's activation at 2 ms, the instant F1 allocates mb1's: the free is counted first, so the counter never
    holds two: 0 at 0, 1 at 0 (F0), 0 at 2 ms (B0 ends), 1 at 2 ms (F1), 0 at 4 ms (B1 ends)."""
    trace = _chrome("ms", ("F", 0, 0.0, 1.0), ("B", 0, 1.0, 2.0), ("F", 1, 2.0, 3.0), ("B", 1, 3.0, 4.0))
    counter = [(e["ts"], e["args"]["activation"]) for e in trace["traceEvents"] if e["ph"] == "C"]
    assert counter == [(0.0, 0), (0.0, 1.0), (2000.0, 0.0), (2000.0, 1.0), (4000.0, 0.0)]


# ----------------------------------------------------------------------------------------------------------------
# structured: the size and alias limits, line numbers, .JSON.GZ


def test_a_file_of_exactly_the_size_limit_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit is the largest size taken (as 512 MiB is): with a limit of 64 bytes, a 64-byte JSON config reads
    and a 65-byte one is refused, naming both sizes."""
    from pptl.errors import InputError
    from pptl.formats import structured

    monkeypatch.setattr(structured, "MAX_FILE_BYTES", 64)
    text = '{"schedule": "gpipe", "pp": 2, "microbatches": 2}'
    path = tmp_path / "c.json"
    path.write_text(text + " " * (64 - len(text)))
    assert structured.read_structured(path)["pp"] == 2
    path.write_text(text + " " * (65 - len(text)))
    with pytest.raises(InputError, match="file is 65 bytes, larger than the 64 accepted"):
        structured.read_structured(path)


def test_yaml_of_exactly_the_value_limit_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A list counts itself and each item: [1, 2, 3, 4] is 5 values, taken under a limit of 5; [1, 2, 3, 4, 5] is
    6, refused."""
    from pptl.errors import InputError
    from pptl.formats import structured

    monkeypatch.setattr(structured, "_MAX_YAML_VALUES", 5)
    path = tmp_path / "c.yaml"
    path.write_text("[1, 2, 3, 4]\n")
    assert structured.read_structured(path) == [1, 2, 3, 4]
    path.write_text("[1, 2, 3, 4, 5]\n")
    with pytest.raises(InputError, match="aliases expand it to more than 5 values"):
        structured.read_structured(path)


def test_a_duplicate_yaml_key_is_named_at_its_own_line(tmp_path: Path) -> None:
    """Lines count from 1: the second 'pp' is on line 3."""
    from pptl.errors import InputError
    from pptl.formats.structured import read_structured

    path = tmp_path / "c.yaml"
    path.write_text("schedule: gpipe\npp: 2\npp: 4\n")
    with pytest.raises(InputError, match=r"c\.yaml: line 3: duplicate key 'pp'$"):
        read_structured(path)


def test_an_upper_case_json_gz_name_is_gunzipped(tmp_path: Path) -> None:
    """CFG.JSON.GZ is a .json.gz file whatever its case: read gunzipped, as the lower-case name is."""
    import gzip

    from pptl.formats.structured import read_structured

    path = tmp_path / "CFG.JSON.GZ"
    path.write_bytes(gzip.compress(b'{"schedule": "gpipe", "pp": 2}'))
    assert read_structured(path) == {"schedule": "gpipe", "pp": 2}


# ----------------------------------------------------------------------------------------------------------------
# timeline files: bounds taken at their limit, the tolerance against the makespan, two-digit ranks in ids


def _tl_dict(units: str = "ms", *, end: float = 5.0, **meta: Any) -> dict[str, Any]:
    """A measured timeline of one event, F0 on rank 0 over [0, ``end``] in ``units``."""
    return {"format": "pptl-timeline", "version": 1, "meta": {"source": "measured", "units": units, **meta},
            "events": [{"op": "r0/compute/F s0 mb0", "rank": 0, "lane": "compute", "start": 0.0, "end": end,
                        "kind": "F", "stage": 0, "mb": 0}]}


def test_a_tolerance_as_long_as_the_makespan_is_taken() -> None:
    """Only a tolerance longer than the step is refused: 5 ms on a 5 ms timeline reads; 5.5 ms does not."""
    from pptl.errors import InputError
    from pptl.formats.timeline import timeline_from_dict

    assert timeline_from_dict(_tl_dict(extra={"clock": {"tolerance_ms": 5}})).makespan == 5.0
    with pytest.raises(InputError, match="got 5.5 ms, longer than the timeline's makespan"):
        timeline_from_dict(_tl_dict(extra={"clock": {"tolerance_ms": 5.5}}))


def test_a_tolerance_of_zero_is_a_tolerance() -> None:
    """Clocks known exactly: tolerance_ms 0 reads (>= 0), and the rules then use 0."""
    from pptl.checks.measured import tolerance
    from pptl.formats.timeline import timeline_from_dict

    assert tolerance(timeline_from_dict(_tl_dict(extra={"clock": {"tolerance_ms": 0}}))) == 0.0


def test_the_tolerance_is_held_to_the_makespan_in_ms_whatever_the_timelines_unit() -> None:
    """A timeline in us whose makespan is 5000 us is 5 ms long: tolerance_ms 4 reads, 6 is refused (it is not 5e6
    ms long, nor 5 us)."""
    from pptl.errors import InputError
    from pptl.formats.timeline import timeline_from_dict

    timeline_from_dict(_tl_dict("us", end=5000.0, extra={"clock": {"tolerance_ms": 4}}))
    with pytest.raises(InputError, match=r"got 6 ms, longer than the timeline's makespan \(5 ms\)"):
        timeline_from_dict(_tl_dict("us", end=5000.0, extra={"clock": {"tolerance_ms": 6}}))


def test_a_two_digit_rank_in_an_op_id_is_checked_against_the_events_rank() -> None:
    """r12/compute/... names rank 12: an event of rank 1 with that id is refused (not read as rank 1's)."""
    from pptl.errors import InputError
    from pptl.formats.timeline import timeline_from_dict

    d = _tl_dict()
    d["events"][0].update(op="r12/compute/F s0 mb0", rank=1)
    with pytest.raises(InputError, match=r"events\[0\]: rank 1, but its op id 'r12/compute/F s0 mb0' names rank 12"):
        timeline_from_dict(d)


def test_counts_ranks_and_times_at_their_limits_are_taken() -> None:
    """MAX_INDEX (10,000,000) is the largest pp and rank a timeline may hold, and -MAX_TIME (-1e18) the earliest
    time: each reads."""
    from pptl.formats.timeline import timeline_from_dict

    d = _tl_dict(pp=10_000_000)
    d["events"][0].update(op="warmup", rank=10_000_000 - 1)
    assert timeline_from_dict(d).meta.pp == 10_000_000
    d = _tl_dict()
    d["events"][0].update(op="warmup", rank=10_000_000)
    assert timeline_from_dict(d).events[0].rank == 10_000_000
    d = _tl_dict()
    d["events"][0]["start"] = -1e18
    assert timeline_from_dict(d).events[0].start == -1e18


def test_a_pair_of_four_numbers_is_refused() -> None:
    """An OVERLAP_F_B's pair is [stage, mb, direction]: three integers, not four."""
    from pptl.errors import InputError
    from pptl.formats.timeline import timeline_from_dict

    d = _tl_dict()
    d["events"][0]["pair"] = [1, 0, 0, 7]
    with pytest.raises(InputError, match=r"events\[0\]\.pair: got .*, expected \[stage, mb, direction\]"):
        timeline_from_dict(d)


# ----------------------------------------------------------------------------------------------------------------
# torch CSV, read as arrays (torch_csv_table)


def test_a_19_digit_index_is_named_not_wrapped() -> None:
    """9999999999999999999 (19 digits) is past int64's 9223372036854775807: the file is not read as if it said
    some other number; the cell is named."""
    from pptl.errors import InputError
    from pptl.formats.torch_csv import load_csv_text

    with pytest.raises(InputError, match="<csv>:2: rank 1, step 0: a stage or micro-batch index does not fit 64 bits"):
        load_csv_text("0F0,0B0\n1F9999999999999999999,1B0\n")


def test_the_highest_forward_index_is_over_every_stage() -> None:
    """Stage 0 runs F0..F3 and stage 1 only F0, F1: 4 micro-batches, indices up to 3, all within 0..3, so the
    note adds nothing (the last stage's highest, 1, is not the file's highest)."""
    from pptl.formats.torch_csv import load_csv_text

    _, notes, _, _ = load_csv_text("0F0,0F1,0F2,0F3,0B0,0B1,0B2,0B3\n1F0,1F1,1B0,1B1\n")
    assert "micro-batches: 4 (inferred: the number of distinct forwards per stage; override with --microbatches)" in notes


def test_a_ranks_lanes_are_in_the_order_its_row_first_uses_them() -> None:
    """Rank 0 computes, then sends, then receives; rank 1 receives first: lanes compute, send, recv for rank 0 and
    recv, compute, send for rank 1 (not in name order)."""
    from pptl.formats.torch_csv import load_csv_text

    schedule, _, _, _ = load_csv_text("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n")
    assert list(schedule.lanes) == [(0, "compute"), (0, "send"), (0, "recv"), (1, "recv"), (1, "compute"),
                                    (1, "send")]


# ----------------------------------------------------------------------------------------------------------------
# the measured rules (PP090/PP091): edges, integer tolerances, the order violations are reported in


def _measured(events: list[Any], *, units: str = "us", clock: dict[str, Any] | None = None) -> Timeline:
    from pptl.timeline import TimelineMeta

    return Timeline(events, TimelineMeta(source="measured", units=units,
                                         extra={"clock": clock} if clock is not None else {}))


def test_a_consumer_starting_exactly_at_the_tolerance_is_no_error() -> None:
    """F0 ends at 100 us; B0 needs it. The default tolerance is 0.01 ms = 10 us: B0 may start at 90 (100 - 10), not
    at 89.5."""
    from pptl.checks.measured import CONSUMER_BEFORE_PRODUCER
    from pptl.timeline import Event

    def at(b_start: float) -> list[str]:
        f = Event("r0/compute/F s0 mb0", 0, "compute", 0.0, 100.0, "F", stage=0, mb=0)
        b = Event("r0/compute/B s0 mb0", 0, "compute", b_start, 200.0, "B", stage=0, mb=0, waits_on=(f.op,))
        return [v.code for v in measured_violations(_measured([f, b]))]

    assert at(90.0) == []
    assert at(89.5) == [CONSUMER_BEFORE_PRODUCER]


def test_an_integer_tolerance_is_the_clocks_tolerance() -> None:
    """tolerance_ms written as the integer 2 is 2 ms (2000 us), not 'no number' and the 0.01 ms default."""
    from pptl.checks.measured import tolerance

    assert tolerance(_measured([], clock={"tolerance_ms": 2})) == 2000.0
    assert tolerance(_measured([], units="ms", clock={"tolerance_ms": 0})) == 0.0


def test_a_coalesced_p2p_call_is_timed_by_the_kernels_its_group_launched(tmp_path: Path) -> None:
    """Schedule1F1B over NCCL, two ranks, one micro-batch, no PP: ranges. Each c10d::send / c10d::recv_ is
    followed by nccl:coalesced, which launches the NCCL kernel after the call's own range has closed: the call is
    timed by the kernels launched until the group ends. Rank 0: F0 gemm 100..110, SEND_F0 kernel (launched at
    13, in nccl:coalesced [12, 14]) 110..115, RECV_B0 115..140, B0 140..150; rank 1: RECV_F0 105..115, F0
    115..125, B0 125..135, SEND_B0 135..140. Shifted by 100."""
    bwd = "autograd::engine::evaluate_function: AddmmBackward0"
    nccl = "ncclDevKernel_SendRecv"

    def flow(ts: float) -> Ev:
        return {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": int(ts), "pid": 0, "tid": MAIN, "ts": ts}

    r0 = [_x("aten::linear", 0, 10, cat="cpu_op"), flow(0), _launch(1, 1), _kernel(100, 10, 1),
          _x("c10d::send", 10, 2, cat="cpu_op"), _x("nccl:coalesced", 12, 2, cat="cpu_op"), _launch(13, 2),
          _kernel(110, 5, 2, name=nccl),
          _x("c10d::recv_", 20, 2, cat="cpu_op"), _x("nccl:coalesced", 22, 2, cat="cpu_op"), _launch(23, 3),
          _kernel(115, 25, 3, name=nccl),
          _x(bwd, 30, 10, tid=AUTOGRAD, cat="cpu_op"), _launch(31, 4, tid=AUTOGRAD), _kernel(140, 10, 4)]
    r1 = [_x("c10d::recv_", 0, 2, cat="cpu_op"), _x("nccl:coalesced", 2, 2, cat="cpu_op"), _launch(3, 1),
          _kernel(105, 10, 1, name=nccl),
          _x("aten::linear", 10, 10, cat="cpu_op"), flow(10), _launch(11, 2), _kernel(115, 10, 2),
          _x(bwd, 30, 10, tid=AUTOGRAD, cat="cpu_op"), _launch(31, 3, tid=AUTOGRAD), _kernel(125, 10, 3),
          _x("c10d::send", 40, 2, cat="cpu_op"), _x("nccl:coalesced", 42, 2, cat="cpu_op"), _launch(43, 4),
          _kernel(135, 5, 4, name=nccl)]
    loaded = _load(tmp_path / "t", {"rank0.json": _trace(r0, rank=0), "rank1.json": _trace(r1, rank=1)})
    assert _times(loaded) == {
        "r0/compute/F s0 mb0": (0.0, 10.0), "r0/send/SEND_F s0 mb0 ->r1": (10.0, 15.0),
        "r0/recv/RECV_B s0 mb0 <-r1": (15.0, 40.0), "r0/compute/B s0 mb0": (40.0, 50.0),
        "r1/recv/RECV_F s1 mb0 <-r0": (5.0, 15.0), "r1/compute/F s1 mb0": (15.0, 25.0),
        "r1/compute/B s1 mb0": (25.0, 35.0), "r1/send/SEND_B s1 mb0 ->r0": (35.0, 40.0)}
    assert measured_violations(_timeline(loaded)) == []


def test_a_structured_file_that_is_a_folder_or_a_name_too_long_is_one_line(tmp_path: Path) -> None:
    """read_structured leaves every refusal of the path to read_bounded, the one wording of every reader:
    a folder named like a config, and a name the system refuses (ENAMETOOLONG, 300 characters)."""
    from pptl.errors import InputError
    from pptl.formats.structured import read_structured

    (tmp_path / "c.yaml").mkdir()
    with pytest.raises(InputError, match=r"c\.yaml: is a folder, expected a file$"):
        read_structured(tmp_path / "c.yaml")
    with pytest.raises(InputError, match=r"\.yaml: cannot read: File name too long$"):
        read_structured(tmp_path / ("a" * 300 + ".yaml"))
