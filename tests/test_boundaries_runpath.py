"""Boundaries of the run path's pure parts: the clock map's uncertainty, /proc/meminfo's units, the
swapped-sends fault, --hidden/--tokens and --slow-rank at their limits, and where each weight-update
bucket sits in its owner's host buffer. Hand mutants: /work/wt/_mutants/wave4_runpath.py."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pptl.config import config_from_mapping
from pptl.errors import InputError
from pptl.ir import Schedule
from pptl.run.timebase import ClockSample, RankClock, fit_clock
from pptl.schedules import build_schedule

MiB = 2**20


# ----------------------------------------------------------------------------------------------
# pptl/run/timebase.py


def test_the_clock_uncertainty_is_the_wider_round_trip_even_when_it_is_the_last() -> None:
    # Start sample's round trip 0.1 ms, end sample's 0.4 ms: the offset is known within half the
    # wider one, 0.2 ms (not the first's 0.05).
    c = fit_clock([ClockSample(0.0, 1.0, 0.1), ClockSample(1000.0, 1.0, 0.4)], apply=True)
    assert c.uncertainty_ms == pytest.approx(0.2)
    assert c.drift == 0.0  # same offset at both ends: no drift


def test_a_rank_without_clock_samples_maps_as_the_identity() -> None:
    # Offsets to apply but none measured for this rank: nothing to correct, nothing uncertain.
    assert fit_clock([], apply=True) == RankClock()


# ----------------------------------------------------------------------------------------------
# pptl/run/hostmem.py


def test_meminfo_kilobytes_are_kibibytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Linux's "kB" in /proc/meminfo is 1024 bytes: 2048 kB is 2 MiB = 2097152 bytes.
    import pptl.run.hostmem as hostmem

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:        4096 kB\nMemFree:          100 kB\nMemAvailable:     2048 kB\n")
    monkeypatch.setattr(hostmem, "_MEMINFO", meminfo)
    assert hostmem.available_bytes() == 2 * MiB


def _weight_update_plan() -> Schedule:
    s: Schedule = build_schedule(config_from_mapping({"schedule": "weight-update", "pp": 2, "microbatches": 1,
                                                      "options": {"model_size": "8MiB", "tensor_size": "1MiB",
                                                                  "bucket_size": "2MiB"}}))
    return s


def test_only_a_cpu_run_of_a_weight_update_plan_checks_host_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    # With no host memory free: a CUDA run keeps its buffers on the GPU, a training plan is small;
    # only the CPU run of the weight-update plan is refused.
    import pptl.run.hostmem as hostmem

    monkeypatch.setattr(hostmem, "available_bytes", lambda: 0)
    hostmem.check_host_memory(_weight_update_plan(), "wu.json", "cuda")
    hostmem.check_host_memory(_two_rank_plan(), "p.json", "cpu")
    with pytest.raises(InputError, match="wu.json: a CPU run"):
        hostmem.check_host_memory(_weight_update_plan(), "wu.json", "cpu")


def test_host_memory_that_cannot_be_read_does_not_refuse_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # Not Linux (no /proc/meminfo): nothing known, so nothing is refused.
    import pptl.run.hostmem as hostmem

    monkeypatch.setattr(hostmem, "available_bytes", lambda: None)
    hostmem.check_host_memory(_weight_update_plan(), "wu.json", "cpu")


# ----------------------------------------------------------------------------------------------
# pptl/run/swap.py

_A = "r1/send/SEND_F s1 mb7 ->r2"
_B = "r1/send/SEND_B s1 mb6 ->r0"


def _program() -> Any:
    from pptl.run.program import build_program

    return build_program(build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 4, "microbatches": 8})))


def _ids(program: Any, rank: int) -> list[str]:
    return [program.schedule.ops[i].id for i in program.ranks[rank].issue]


def test_a_swapped_send_is_issued_right_after_the_other() -> None:
    # The module's own example: rank 1 issues F mb7's send right after B mb6's, nothing else moves.
    from pptl.run.swap import swap_sends

    prog = _program()
    before = _ids(prog, 1)
    after = _ids(swap_sends(prog, 1, _A, _B), 1)
    assert after.index(_A) == after.index(_B) + 1
    assert [x for x in after if x != _A] == [x for x in before if x != _A]
    assert _ids(swap_sends(prog, 1, _A, _B), 2) == _ids(prog, 2)  # other ranks untouched


def test_swapping_a_send_with_itself_is_refused() -> None:
    # A send is not issued before itself: the fault would change nothing and the run would pass.
    from pptl.run.swap import swap_sends

    with pytest.raises(InputError, match="after"):
        swap_sends(_program(), 1, _A, _A)


def test_a_swap_with_an_empty_second_id_is_refused() -> None:
    from pptl.run.swap import parse_swap

    with pytest.raises(InputError, match="two op ids"):
        parse_swap(1, f"{_A}|")
    assert parse_swap(12, f"{_A}|{_B}") == (12, _A, _B)


# ----------------------------------------------------------------------------------------------
# pptl/run/__init__.py


def test_a_workload_of_zero_is_refused_and_one_is_taken() -> None:
    from pptl.run import with_workload

    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 2}))
    with pytest.raises(InputError, match="--hidden: got 0"):
        with_workload(s, hidden=0)
    with pytest.raises(InputError, match="--tokens: got 0"):
        with_workload(s, tokens=0)
    one = with_workload(s, hidden=1, tokens=1)
    assert (one.config.workload.hidden, one.config.workload.tokens) == (1, 1)


def test_a_slow_rank_equal_to_the_process_count_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # 2 processes are ranks 0 and 1: --slow-rank 2 names none of them; --slow-rank 1 is the last.
    import pptl.run.launcher
    from pptl.run import run_plans

    started: list[int | None] = []

    def launch(job: Any, schedules: list[Schedule], world: int) -> list[Any]:
        started.append(job.slow_rank)
        return []

    monkeypatch.setattr(pptl.run.launcher, "launch", launch)
    s: Schedule = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 2}))
    with pytest.raises(InputError, match="--slow-rank: got 2"):
        run_plans([(s, None)], gpus=2, device="cpu", slow_rank=2, slow_factor=2.0)
    assert started == []
    run_plans([(s, None)], gpus=2, device="cpu", slow_rank=1, slow_factor=2.0)
    assert started == [1]


# ----------------------------------------------------------------------------------------------
# pptl/run/weight_update.py


def test_each_owners_buckets_follow_each_other_in_its_host_buffer() -> None:
    # 12 MiB of 1 MiB tensors over 2 owners in 2 MiB buckets: 3 buckets (6 MiB) each. An owner's
    # host buffer holds its buckets one after another: at 0, 2 and 4 MiB, ending at 6 MiB.
    pytest.importorskip("torch")
    from pptl.run.weight_update import layout_of

    s = build_schedule(config_from_mapping({"schedule": "weight-update", "pp": 2, "microbatches": 1,
                                            "options": {"model_size": "12MiB", "tensor_size": "1MiB",
                                                        "bucket_size": "2MiB"}}))
    lay = layout_of(s)
    for owner in (0, 1):
        offsets = [b[3] for b in lay.buckets if b[0] == owner]
        assert offsets == [0, 2 * MiB, 4 * MiB]
        assert lay.host_bytes(owner) == 6 * MiB


# ----------------------------------------------------------------------------------------------
# pptl/run/launcher.py: the failure message (_diagnose), from the ranks' posts


def _two_rank_plan() -> Schedule:
    s: Schedule = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 2}))
    return s


def test_a_signal_in_step_zero_says_step_zero_not_set_up(tmp_path: Path) -> None:
    # Both ranks posted step 0 (the first timed or warm-up step): that is a step, not set-up.
    import signal

    from pptl.run.launcher import _diagnose
    from pptl.run.progress import Post

    posts = [Post(0, 0, 2, 1.0), Post(0, 0, 1, 1.0)]
    verdict = {"signal": int(signal.SIGINT), "codes": [None, None], "lost_at": {}}
    assert _diagnose(verdict, str(tmp_path), 2, posts, [_two_rank_plan()]) == (
        "run stopped by SIGINT at step 0; every rank was stopped", 0, 1)


def test_a_rank_lost_at_the_plans_first_op_names_that_op(tmp_path: Path) -> None:
    # Op index 0 is an op of the plan like any other: "at op <its id>", not "between ops".
    from pptl.run.launcher import _diagnose
    from pptl.run.progress import Post

    s = _two_rank_plan()
    posts = [Post(0, 1, 0, 1.0), Post(0, 1, 3, 1.0)]
    verdict = {"codes": [-9, None], "lost_at": {0: 1.0}}
    assert _diagnose(verdict, str(tmp_path), 2, posts, [s]) == (
        f"rank 0 was lost (killed by SIGKILL) at op {s.ops[0].id} (step 1)", 0, 1)


def test_of_two_killed_ranks_the_first_lost_is_named(tmp_path: Path) -> None:
    # 12 ranks; rank 2 was found gone at 5.0 s, rank 10 at 1.0 s: rank 10 went first.
    from pptl.run.launcher import _diagnose
    from pptl.run.progress import NOT_STARTED, Post

    posts = [Post(NOT_STARTED, -1, -1, 0.0)] * 12
    codes: list[int | None] = [None] * 12
    codes[2] = codes[10] = -9
    verdict = {"codes": codes, "lost_at": {2: 5.0, 10: 1.0}}
    assert _diagnose(verdict, str(tmp_path), 12, posts, [_two_rank_plan()]) == (
        "rank 10 was lost (killed by SIGKILL) during set-up, before any op", 0, 1)


def test_of_two_failure_records_the_earliest_is_the_message(tmp_path: Path) -> None:
    # Rank 1 failed at t=1.0 and rank 0 (its peer, failing because of it) at t=2.0: rank 1's message.
    import json

    from pptl.run.launcher import _diagnose
    from pptl.run.progress import Post

    (tmp_path / "failure.rank0.json").write_text(json.dumps(
        {"rank": 0, "time": 2.0, "message": "rank 0: peer went away", "plan": 0, "exit_code": 1}))
    (tmp_path / "failure.rank1.json").write_text(json.dumps(
        {"rank": 1, "time": 1.0, "message": "rank 1: out of memory", "plan": 0, "exit_code": 3}))
    posts = [Post(0, 0, 1, 1.0), Post(0, 0, 2, 1.0)]
    verdict = {"codes": [1, 3], "lost_at": {0: 2.5, 1: 1.5}}
    assert _diagnose(verdict, str(tmp_path), 2, posts, [_two_rank_plan()]) == ("rank 1: out of memory", 0, 3)
