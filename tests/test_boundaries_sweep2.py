"""Boundaries of the core modules a second mutation pass found untested (rows 663-703 of
tests/hand_mutants.py): the config's rank keys, stage layers and latency flag, the planner's
title, flag names and line numbers, compare's matching of a run to its plan, the P2P and structure
rules' steps, matching and self-sends, the flight-recorder reader's ranks, and explain's split of
idle time. Every expected value is worked out by hand in the test's docstring or comments."""
from __future__ import annotations

import pickle
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.checks import run_checks
from pptl.cli import app
from pptl.compare import compare_timelines
from pptl.config import Costs, apply_cost_flags, config_from_mapping
from pptl.errors import InputError
from pptl.explain import explain
from pptl.formats.flight_recorder import MAX_RANK, find_dumps, loads_dump, rank_from_name
from pptl.formats.torch_csv import load_csv_text
from pptl.planning import check_file, plan
from pptl.schedules import build_schedule
from pptl.timeline import Event, Timeline, TimelineMeta

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


# ----------------------------------------------------------------------------------------------
# pptl.config


def test_a_rank_scale_key_of_two_digits_or_nine_is_a_rank() -> None:
    """JSON keys are strings: rank 10 of a 12-rank run is written "10". A rank key is up to nine
    ASCII digits, so "999999999" is a rank and "1000000000" (ten digits) is not."""
    cfg = config_from_mapping({"schedule": "1f1b", "pp": 12, "microbatches": 12,
                               "costs": {"rank_scale": {"0": 0.97, "10": 1.03, "999999999": 1.5}}})
    assert dict(cfg.costs.rank_scale) == {0: 0.97, 10: 1.03, 999999999: 1.5}
    with pytest.raises(InputError, match=r"rank '1000000000' is not an integer >= 0"):
        config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 2,
                             "costs": {"rank_scale": {"1000000000": 1.0}}})


def test_stage_layers_give_stage_zero_its_own_entry() -> None:
    """stage_layers [9, 7, 7, 9]: stage 0 has 9 blocks (the list's first entry, not
    layers_per_stage's 2), stages 1 and 2 have 7, stage 3 has 9; a stage past the list falls back
    to layers_per_stage."""
    cfg = config_from_mapping({"schedule": "1f1b", "pp": 4, "microbatches": 4,
                               "workload": {"layers_per_stage": 2, "stage_layers": [9, 7, 7, 9]}})
    assert [cfg.workload.layers_of(s) for s in range(5)] == [9, 7, 7, 9, 2]


def test_a_comm_latency_flag_of_zero_overrides_the_configs() -> None:
    """--comm-latency 0 on a config whose comm.latency is 0.5: the flag wins, latency 0 (the
    bound is 0 <= latency <= 1e15, both ends included)."""
    assert apply_cost_flags(Costs(comm_latency=0.5), {}, 0.0).comm_latency == 0.0


# ----------------------------------------------------------------------------------------------
# pptl.planning


def test_the_line_of_a_hang_is_the_line_of_its_first_op() -> None:
    """A torch CSV holds one line per rank (rank r on line r + 1). The NCCL hang of
    hang_nccl_order.csv is printed starting at rank 1's SEND_B of mb 0, so the violation is on
    line 2, not on line 1 where the cycle's other rank (0) is."""
    path = ROOT / "fixtures" / "csv" / "invalid" / "hang_nccl_order.csv"
    report = check_file(str(path))
    hang = [v for v in report.violations if v.code == "PP031"]
    assert len(hang) == 1
    assert hang[0].ops[0].startswith("r1/") and hang[0].line == 2
    assert any(line.startswith(f"{path}:2: PP031 error: ") for line in report.text_lines())


def test_a_family_refusing_a_flag_names_the_flag_as_typed() -> None:
    """interleaved, pp 2, 4 micro-batches, --group-size 3: 4 mod 3 = 1 micro-batch in the last
    group, fewer than pp = 2, so Megatron's rule refuses it; the error names the flag as the user
    typed it (--group-size), not the config field (group_size)."""
    r = runner.invoke(app, ["plan", "--schedule", "interleaved", "--pp", "2", "--vpp", "2", "--microbatches", "4",
                            "--group-size", "3"])
    assert r.exit_code == 2, r.output
    assert "--group-size: got 3" in r.output and "group_size" not in r.output


def test_dualpipe_title_counts_the_microbatches_of_both_directions() -> None:
    """DualPipe's microbatches counts both directions (config docstring): 8 in the config is 4 per
    direction, and the title says the 8 the user asked for."""
    r = plan(config_from_mapping({"schedule": "dualpipe", "pp": 4, "microbatches": 8}))
    assert r.schedule.microbatches == 4 and r.schedule.directions == 2
    assert " microbatches=8 " in r.title


# ----------------------------------------------------------------------------------------------
# pptl.checks.p2p and pptl.checks.structure

_RANK0 = "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"


def test_an_early_send_on_rank_one_is_placed_by_its_ranks_own_steps() -> None:
    """Rank 1 issues RECV_F0 (step 0), RECV_F1 (1), F0 (2), F1 (3), SEND_B0 (4), B0 (5): its
    SEND_B of mb 0 at step 4 comes before the B that makes it (step 5). The steps count from rank
    1's own first action, not from rank 0's (whose row holds 8)."""
    rank1 = "1RECV_F0,1RECV_F1,1F0,1F1,1SEND_B0,1B0,1B1,1SEND_B1\n"
    vs = run_checks(load_csv_text(_RANK0 + rank1)[0])
    assert [(v.code, v.message) for v in vs if v.severity == "error"] == [
        ("PP032", "rank 1 issues SEND_B stage 1 mb 0 at step 4, before r1/compute/B s1 mb0 (step 5) produces its data")]


def test_a_send_past_the_receives_of_its_pair_is_unmatched_not_a_mismatch() -> None:
    """Rank 0 sends F of mb 0 and mb 1 to rank 1, which posts one RECV_F (mb 0): the 1st pair
    matches (mb 0 = mb 0); the 2nd SEND has no receive. PP008 for it and no PP030: the 2nd SEND
    is not paired with a receive of another pair of ranks (rank 0's RECV_Bs from rank 1)."""
    rank1 = "1RECV_F0,1F0,1F1,1B0,1SEND_B0,1B1,1SEND_B1\n"
    vs = run_checks(load_csv_text(_RANK0 + rank1)[0])
    assert [(v.code, v.message) for v in vs if v.severity == "error"] == [
        ("PP008", "r0/send/SEND_F s0 mb1 ->r1 has no matching RECV on rank 1")]


def test_a_send_to_its_own_rank_is_malformed() -> None:
    """1F1B on 2 ranks with rank 0's SEND_F of mb 0 aimed at rank 0 itself: PP001, "to its own
    rank" (peer 0 is inside 0..1, so only the self test catches it)."""
    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 2}))
    lanes = {k: [replace(s.ops[i], peer=0) if s.ops[i].id == "r0/send/SEND_F s0 mb0 ->r1" else s.ops[i] for i in v]
             for k, v in s.lanes.items()}
    msgs = [v.message for v in run_checks(s.with_lanes(lanes)) if v.code == "PP001"]
    assert msgs == ["malformed op r0/send/SEND_F s0 mb0 ->r0: SEND to its own rank"]


# ----------------------------------------------------------------------------------------------
# pptl.compare


def _tl(rows: list[tuple], *, source: str = "measured", family: str = "1f1b", vpp: int = 1) -> Timeline:
    """rows: (op, rank, kind, start, end[, waits_on]); compute ops on stage = rank, messages F-flow
    from rank 0 to rank 1 (stage 0 to stage 1, mb 0)."""
    events = []
    for r in rows:
        op, rank, kind, start, end = r[:5]
        comm = kind in ("SEND", "RECV")
        events.append(Event(op=op, rank=rank, lane=kind.lower() if comm else "compute", kind=kind, start=start, end=end,
                            stage=rank, mb=0, flow="F" if comm else "", peer=1 - rank if comm else -1,
                            waits_on=r[5] if len(r) > 5 else ()))
    return Timeline(events, TimelineMeta(source=source, units="ms", family=family, pp=2, vpp=vpp))


def test_a_run_that_starts_late_on_its_clock_is_moved_to_zero_per_op() -> None:
    """The run's clock reads 100 at its first op; every op ran exactly as planned, so each op's
    measured start is its planned one (0, 1, 2) and no end is off."""
    plan_rows = [("a", 0, "F", 0, 1), ("b", 1, "F", 1, 2), ("c", 1, "B", 2, 4)]
    run_rows = [(op, rank, kind, s + 100, e + 100) for op, rank, kind, s, e in plan_rows]
    cmp = compare_timelines(_tl(plan_rows, source="planned"), _tl(run_rows))
    assert [(o.measured_start, o.measured_end) for o in cmp.ops] == [(0, 1), (1, 2), (2, 4)]
    assert [o.end_error for o in cmp.ops] == [0, 0, 0]


def test_an_imported_trace_is_not_held_to_the_plans_vpp() -> None:
    """A plan of vpp 2 against an imported trace (family "measured"), whose vpp of 1 is inferred
    from the stages it saw: compared, not refused as another plan."""
    rows = [("a", 0, "F", 0, 1), ("b", 1, "F", 1, 2)]
    cmp = compare_timelines(_tl(rows, source="planned", family="interleaved", vpp=2), _tl(rows, family="measured"))
    assert cmp.makespan_error == 0


def test_an_op_missing_from_the_middle_of_a_rank_is_missing_not_another_order() -> None:
    """Rank 0 plans F a1, F a2, B a3; the run lost a2's event. Its order a1, a3 is the plan's with
    a2 left out: compared, with a2 listed as not measured."""
    plan_rows = [("a1", 0, "F", 0, 1), ("a2", 0, "F", 1, 2), ("a3", 0, "B", 3, 5)]
    cmp = compare_timelines(_tl(plan_rows, source="planned"), _tl([plan_rows[0], plan_rows[2]]))
    assert cmp.missing == ["a2"]
    assert any("1 planned ops were not measured" in n for n in cmp.notes)


def test_a_zero_time_op_sharing_its_start_comes_before_the_op_that_lasts() -> None:
    """Rank 0 runs F a1 (0-1), a zero-time F a2 (1-1), then B a3 (1-3). The run lists a3 before a2
    in its file: ordered by (start, end) a2 (1, 1) still comes before a3 (1, 3), the plan's order."""
    plan_rows = [("a1", 0, "F", 0, 1), ("a2", 0, "F", 1, 1), ("a3", 0, "B", 1, 3)]
    run_rows = [plan_rows[0], plan_rows[2], plan_rows[1]]
    cmp = compare_timelines(_tl(plan_rows, source="planned"), _tl(run_rows))
    assert cmp.makespan_error == 0 and not cmp.missing


def test_a_message_with_a_measurement_error_stays_out_of_the_means() -> None:
    """The RECV v ends at 1.0 but its SEND s starts at 2.0 on the run's clock (1.0 ms earlier,
    past the 0.01 ms tolerance): no true duration, so neither SEND nor RECV gets a mean; only F
    does (planned 1, measured 1)."""
    plan_rows = [("a", 0, "F", 0, 1), ("s", 0, "SEND", 1, 1.5), ("v", 1, "RECV", 1, 1.5, ("s",)),
                 ("b", 1, "F", 1.5, 2.5)]
    run_rows = [("a", 0, "F", 0, 1), ("s", 0, "SEND", 2, 3), ("v", 1, "RECV", 0.5, 1.0, ("s",)),
                ("b", 1, "F", 3, 4)]
    cmp = compare_timelines(_tl(plan_rows, source="planned"), _tl(run_rows))
    assert [v.code for v in cmp.measurement] == ["PP090"]
    assert [(k.kind, k.count, k.planned_mean, k.measured_mean) for k in cmp.kinds] == [("F", 2, 1, 1)]
    assert "2 SEND/RECV ops with a measurement error are left out of the mean durations" in cmp.notes


# ----------------------------------------------------------------------------------------------
# pptl.formats.flight_recorder


def test_a_dump_named_on_the_command_line_takes_every_digit_that_ends_its_name(tmp_path: Path) -> None:
    """A dump named without the default prefix, passed by path: its rank is the whole number that
    ends its name (dump_12 is rank 12, not rank 2; trace_rank_7.pkl is 7)."""
    assert rank_from_name("dump_12") == 12 and rank_from_name("trace_rank_7.pkl") == 7
    f = tmp_path / "dump_12"
    f.write_bytes(b"")
    assert find_dumps([f]).dumps == ((12, f),)


def test_a_dump_of_the_largest_rank_taken_is_read() -> None:
    """Ranks up to MAX_RANK = 1,000,000 are taken, that one included; 1,000,001 is refused."""
    data = pickle.dumps({"version": "2.10", "entries": []})
    assert loads_dump(data, source="nccl_trace_rank_1000000", rank=MAX_RANK).rank == 1_000_000
    with pytest.raises(InputError, match=r"rank 1000001 \(from the file name\) is over 1000000"):
        loads_dump(data, source="nccl_trace_rank_1000001", rank=MAX_RANK + 1)


# ----------------------------------------------------------------------------------------------
# pptl.explain


def _compute(rows: list[tuple]) -> list[Event]:
    """rows: (rank, kind, mb, start, end), stage = rank."""
    return [Event(f"r{r}/compute/{k} s{r} mb{mb}", r, "compute", a, b, k, stage=r, mb=mb) for r, k, mb, a, b in rows]


_META = TimelineMeta(source="measured", units="ms", pp=3, microbatches=2)


def test_a_wait_past_both_replays_is_bubble_then_imbalance_then_late() -> None:
    """Forwards only, 3 ranks, 2 micro-batches. Rank 1's F0 lasts 4 (the others 1) and starts 1
    late (at 2, its input ready at 1). F's mean is (1+1+4+1+1+1)/6 = 1.5.
    Rank 2's F0 waits from 0 to 6, when rank 1's F0 ends: the balanced replay (every F 1.5) leaves
    it a gap of 1.5 + 1.5 = 3 (bubble), the measured-duration replay 1 + 4 = 5, 2 more (imbalance);
    the last 1 is rank 1's late start (late input): 3 + 2 + 1 = 6, its whole idle (8 - 2)."""
    rows = [(0, "F", 0, 0, 1), (0, "F", 1, 1, 2), (1, "F", 0, 2, 6), (1, "F", 1, 6, 7),
            (2, "F", 0, 6, 7), (2, "F", 1, 7, 8)]
    r2 = explain(Timeline(_compute(rows), _META)).ranks[2]
    assert (r2.idle, r2.bubble, r2.imbalance, r2.late_input, r2.transfer, r2.host) == (6, 3, 2, 1, 0, 0)


def test_own_message_from_the_gaps_start_is_transfer_not_host() -> None:
    """Rank 0 (first stage: its forwards wait for nothing) idles from 1 to 2 between F0 and F1; its
    SEND of F0 runs from 1 to 2.5, starting exactly where the gap does. The whole gap (1) is its own
    message's time (transfer), no host gap."""
    ev = _compute([(0, "F", 0, 0, 1), (0, "F", 1, 2, 3), (1, "F", 0, 2.5, 3.5), (1, "F", 1, 3.5, 4.5)])
    for mb, (a, b) in enumerate([(1, 2.5), (3, 3.5)]):
        ev += [Event(f"r0/send/SEND_F s0 mb{mb} ->r1", 0, "send", a, b, "SEND", stage=0, mb=mb, flow="F", peer=1),
               Event(f"r1/recv/RECV_F s1 mb{mb} <-r0", 1, "recv", a, b, "RECV", stage=1, mb=mb, flow="F", peer=0)]
    r0 = explain(Timeline(ev, replace(_META, pp=2))).ranks[0]
    assert (r0.transfer, r0.host) == (1, 0)


def test_two_overlapping_kernels_of_one_rank_are_busy_for_their_union() -> None:
    """Rank 0's F0 (0-2) and F1 (1-3) overlap (two streams): busy 3 (their union), not 2 + 2 = 4;
    idle = makespan 4 - 3 = 1."""
    ev = _compute([(0, "F", 0, 0, 2), (0, "F", 1, 1, 3), (1, "F", 0, 2, 3), (1, "F", 1, 3, 4)])
    r0 = explain(Timeline(ev, replace(_META, pp=2))).ranks[0]
    assert (r0.busy, r0.idle) == (3, 1)


def test_a_rank_without_compute_is_counted_in_the_pp_the_note_infers() -> None:
    """No pp in the header; ranks 0, 1 and 2 show up (rank 2 with a RECV only): pp = 2 + 1 = 3."""
    ev = _compute([(0, "F", 0, 0, 1), (1, "F", 0, 1, 2)])
    ev.append(Event("r2/recv/RECV_F s2 mb0 <-r1", 2, "recv", 2, 3, "RECV", stage=2, mb=0, flow="F", peer=1))
    notes = explain(Timeline(ev, replace(_META, pp=0, microbatches=1))).notes
    assert notes[0].startswith("rank 2 has no compute events in the timeline (pp=3): ")


def test_a_launch_stamped_after_its_kernel_started_counts_up_to_the_start() -> None:
    """pp=2, 1F1B, every op 1 long: rank 0's F1 starts at 3 after its F0 ended at 1; its launch is
    stamped 3.5, past its own start (two clocks): the GPU waited 3 - 1 = 2 for it, not 3.5 - 1."""
    meta = TimelineMeta(source="measured", units="ms", pp=2, microbatches=2,
                        extra={"launch": {"r0/compute/F s0 mb1": 3.5}})
    rows = [(0, "F", 0, 0, 1), (0, "F", 1, 3, 4), (0, "B", 0, 4, 5), (0, "B", 1, 6, 7),
            (1, "F", 0, 1, 2), (1, "B", 0, 2, 3), (1, "F", 1, 4, 5), (1, "B", 1, 5, 6)]
    notes = explain(Timeline(_compute(rows), meta)).notes
    assert any(n.startswith("kernel launches: the GPU waited 2 in all") for n in notes)
