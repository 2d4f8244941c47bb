"""Boundaries of explain's late chain and event indices, the weight-update family's sizes and limits,
the weight-update run's layout and rates, and the spawner that forks the ranks (hand mutants 752 on;
docs/testing.md lists them).

Every expected number here is worked out by hand in the test's docstring, not read back from the code.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pptl.config import MAX_OPS, config_from_mapping
from pptl.errors import InputError
from pptl.explain import explain, explanation_lines
from pptl.schedules import build_schedule
from pptl.schedules.weight_update import spec_from_options, validate
from pptl.timeline import Event, Timeline, TimelineMeta

ROOT = Path(__file__).resolve().parents[1]


# --- explain ----------------------------------------------------------------------------------------

def _compute(op: str, rank: int, kind: str, start: float, end: float, *, stage: int, mb: int,
             pair: tuple[int, int, int] | None = None) -> Event:
    return Event(op=op, rank=rank, lane="compute", kind=kind, start=start, end=end, stage=stage, mb=mb, pair=pair)


def _message(op: str, rank: int, kind: str, start: float, end: float) -> Event:
    """A forward message of mb 0 from rank 0 (stage 0) to rank 1 (stage 1)."""
    return Event(op=op, rank=rank, lane=kind.lower(), kind=kind, start=start, end=end, stage=rank, mb=0, flow="F",
                 peer=1 - rank)


def _timeline(events: list[Event], pp: int, **extra) -> Timeline:
    return Timeline(events, TimelineMeta(source="measured", units="ms", pp=pp, extra=extra))


_SEND = _message("send", 0, "SEND", 3, 4)
_RECV = _message("recv", 1, "RECV", 3, 4)
_F0 = _compute("f0", 0, "F", 0, 2, stage=0, mb=0)
_F1 = _compute("f1", 1, "F", 4, 6, stage=1, mb=0)


@pytest.mark.parametrize("events", [[_SEND, _RECV, _F0, _F1], [_RECV, _SEND, _F0, _F1], [_F0, _F1, _SEND, _RECV]],
                         ids=["send-first", "recv-first", "compute-first"])
def test_explain_reads_the_same_whichever_event_comes_first(events: list[Event]) -> None:
    """pp=2, one forward per rank, both 2 long: f0 on rank 0 at 0-2; its SEND is posted at 3 (1 after
    f0 ended) and its RECV on rank 1 ends at 4; f1 runs 4-6. The makespan is 6.

    Rank 1 (busy 2, idle 4): the gap 0-4 before f1 waits for f0 until 3 (f0 ended at 2, its SEND was
    posted at 3), then for the RECV until 4. Both replays (F's mean is 2) put f1 at 2-4: a gap of 2.
    So bubble 2, late input 3 - 2 = 1, transfer 4 - 3 = 1, host 0.
    Rank 0 (busy 2, idle 4): its tail 2-6 against the replays' 2-4: bubble 2, late 2.
    The late input's root is f0, whose SEND started 3 - 2 = 1 after it ended. The critical path is
    f0 then f1, after data with no wait (the RECV ended at 4, when f1 started).
    The order of events in the file changes none of this: index 0 is an event like any other."""
    x = explain(_timeline(events, 2))
    assert [(r.rank, r.busy, r.idle) for r in x.ranks] == [(0, 2, 4), (1, 2, 4)]
    assert x.ranks[0].parts() == {"bubble": 2, "late_input": 2, "transfer": 0, "host": 0, "imbalance": 0}
    assert x.ranks[1].parts() == {"bubble": 2, "late_input": 1, "transfer": 1, "host": 0, "imbalance": 0}
    [li] = x.late
    assert (li.op, li.waited, li.producer, li.root, li.delay) == ("f1", 1, "f0", "f0", 1)
    assert li.reason.startswith("its SEND started after it ended")
    assert [(s.op, s.via, s.wait) for s in x.path] == [("f0", "", 0), ("f1", "data", 0)]
    lines = explanation_lines(x)
    assert lines[-1].split() == ["4-6", "f1", "after", "data"]  # no "+0" for a wait of nothing


def test_the_late_chain_follows_the_latest_of_two_cross_rank_inputs() -> None:
    """pp=3, F and B 1 long, one FB 2 long (F of stage 1 mb 1 with the B of stage 1 mb 0), so the FB
    on rank 1 takes one input from rank 0 (F s0 mb1) and one from rank 2 (B s2 mb0).

    As planned: rank 0 F s0 mb0 0-1, F s0 mb1 1-2; rank 2 F s2 mb0 2-3, B s2 mb0 3-4; the FB waits
    for the B: 4-6; rank 0's B s0 mb0 waits for the FB: 6-7 (a gap of 4 after F s0 mb1).
    Measured: rank 0 starts F s0 mb1 a host gap of 1 late (2-3), rank 2 starts its B a host gap of 2
    late (5-6), so the FB runs 6-8 and rank 0's B 8-9: its gap 3-8 is 5, 1 more than the 4 planned.
    That 1 came up the chain through the FB (its own gap 2-6 was 2 longer than planned), whose later
    input is rank 2's B (ended 6, rank 0's F at 3): the root is that B, its host gap of 2. Following
    the earlier input would blame rank 0's F and its host gap of 1."""
    events = [
        _compute("F0m0", 0, "F", 0, 1, stage=0, mb=0), _compute("F0m1", 0, "F", 2, 3, stage=0, mb=1),
        _compute("B0m0", 0, "B", 8, 9, stage=0, mb=0),
        _compute("F1m0", 1, "F", 1, 2, stage=1, mb=0), _compute("FB1", 1, "FB", 6, 8, stage=1, mb=1, pair=(1, 0, 0)),
        _compute("F2m0", 2, "F", 2, 3, stage=2, mb=0), _compute("B2m0", 2, "B", 5, 6, stage=2, mb=0),
    ]
    x = explain(_timeline(events, 3))
    late = {li.op: (li.waited, li.producer, li.root, li.reason, li.delay) for li in x.late}
    assert late["B0m0"] == (1, "FB1", "B2m0", "host gap before it", 2)
    assert late["FB1"] == (2, "B2m0", "B2m0", "host gap before it", 2)


def test_the_late_chain_stops_at_an_op_whose_own_wait_was_not_late() -> None:
    """pp=3, one forward per rank (mean 2): rank 0's runs 0-4 (2 over the mean), rank 1's waits for it
    and then a host gap of 1 (5-6), rank 2's runs 6-7.

    Replays: at the means, 0-2, 2-4, 4-6 (rank 2's gap 4); at the measured lengths, 0-4, 4-5, 5-6
    (its gap 5). Rank 1's gap 0-5 is bubble 2, imbalance 2 and host 1: nothing late, so the chain from
    rank 2's late input (6 - 4 - 1 = 1) ends at rank 1's forward and its host gap of 1. The long
    forward before it was imbalance, already paid for, not the cause. (Rank 1's tail 6-7 adds 1 of
    bubble: the replay at the means leaves it 4-6, 2 long.)"""
    events = [_compute("F0", 0, "F", 0, 4, stage=0, mb=0), _compute("F1", 1, "F", 5, 6, stage=1, mb=0),
              _compute("F2", 2, "F", 6, 7, stage=2, mb=0)]
    x = explain(_timeline(events, 3))
    assert x.ranks[1].parts() == {"bubble": 2 + 1, "late_input": 0, "transfer": 0, "host": 1, "imbalance": 2}
    assert [(li.op, li.waited, li.root, li.reason, li.delay) for li in x.late] == [
        ("F2", 1, "F1", "host gap before it", 1)]


def test_the_late_chain_walks_back_over_an_op_that_started_on_time() -> None:
    """pp=2, all ops 1 long. Rank 0: F mb0 0-1, a W of its own (no inputs, no readers) after a host gap
    of 2 (3-4), F mb1 right after it (4-5). Rank 1: F mb0 1-2, F mb1 5-6.

    As planned rank 0 runs 0-1, 1-2, 2-3 and rank 1's F mb1 3-4: a gap of 1 after its F mb0. Measured,
    that gap is 2-5, so 2 of it is late. Its producer, rank 0's F mb1, started the moment the W ended
    (no gap of its own), so the chain goes on to the W and its host gap of 2."""
    events = [_compute("F0m0", 0, "F", 0, 1, stage=0, mb=0), _compute("W0", 0, "W", 3, 4, stage=0, mb=5),
              _compute("F0m1", 0, "F", 4, 5, stage=0, mb=1),
              _compute("F1m0", 1, "F", 1, 2, stage=1, mb=0), _compute("F1m1", 1, "F", 5, 6, stage=1, mb=1)]
    x = explain(_timeline(events, 2))
    assert [(li.op, li.waited, li.producer, li.root, li.reason, li.delay) for li in x.late] == [
        ("F1m1", 2, "F0m1", "W0", "host gap before it", 2)]


def test_an_absent_rank_0_is_noted() -> None:
    """pp=3 and events on ranks 1 and 2 only: rank 0 is named as having no events."""
    events = [_compute("F1", 1, "F", 0, 1, stage=1, mb=0), _compute("F2", 2, "F", 1, 2, stage=2, mb=0)]
    notes = explain(_timeline(events, 3)).notes
    assert [n.split(":")[0] for n in notes] == ["rank 0 has no events in the timeline (pp=3)"]


def test_kernel_launches_are_counted_from_the_latest_end_so_far() -> None:
    """One rank, three forwards: F0 0-4, F1 1-2 (inside F0, on another stream), F2 5-6, its kernel
    launched at 4.5. The GPU was busy until 4 (F0's end, not F1's 2), so it waited 4.5 - 4 = 0.5 for
    the launch."""
    events = [_compute("F0", 0, "F", 0, 4, stage=0, mb=0), _compute("F1", 0, "F", 1, 2, stage=0, mb=1),
              _compute("F2", 0, "F", 5, 6, stage=0, mb=2)]
    notes = explain(_timeline(events, 1, launch={"F2": 4.5})).notes
    assert notes == ["kernel launches: the GPU waited 0.5 in all for kernels its launching thread had not yet "
                     "launched (part of the host gaps)"]


# --- the weight-update family ----------------------------------------------------------------------

def test_exactly_the_most_tensors_a_plan_may_hold_are_listed() -> None:
    """model_size 5,000,000 x 256 bytes in tensors of 256 bytes is exactly MAX_OPS (5,000,000) tensors:
    listed, 2,500,000 per rank on 2 ranks. One tensor's worth more (5,000,001) is refused before the
    list is made."""
    assert MAX_OPS == 5_000_000
    spec = spec_from_options({"model_size": 5_000_000 * 256, "tensor_size": 256}, pp=2)
    assert [len(t) for t in spec.owners] == [2_500_000, 2_500_000]
    with pytest.raises(InputError, match=r"which makes 5000001 tensors, more than the 5000000 a plan may hold"):
        spec_from_options({"model_size": 5_000_001 * 256, "tensor_size": 256}, pp=2)


def test_a_plan_of_exactly_the_most_ops_is_planned() -> None:
    """pp=4 with an H2D buffer: each bucket is H2D, COPY, 4 BCAST and 4 RELOAD = 10 ops. 128,000,000
    bytes in 256-byte tensors and 256-byte buckets is 500,000 buckets (125,000 per rank), 5,000,000
    ops: exactly MAX_OPS, which validate accepts."""
    cfg = config_from_mapping({"schedule": "weight-update", "pp": 4, "microbatches": 1,
                               "options": {"model_size": 128_000_000, "tensor_size": 256, "bucket_size": 256,
                                           "free_memory": "1GiB"}})
    validate(cfg)


def test_one_list_of_tensors_per_rank_and_no_more() -> None:
    """Three lists of tensors for 2 ranks name no owner for the third: refused, naming both counts."""
    with pytest.raises(InputError, match=r"field 'options.tensors': got 3 lists, expected one list of tensor sizes "
                       r"per rank \(2\)"):
        spec_from_options({"tensors": [[256], [256], [256]]}, pp=2)


def test_a_part_of_a_byte_is_a_whole_byte() -> None:
    """Sizes round up to whole bytes: a tensor of "0.5" bytes is 1 byte, aligned to 256; a bucket of
    1.0005 KiB (1024.512 bytes) holds 1025."""
    spec = spec_from_options({"tensors": ["0.5", "0.5"], "bucket_size": "1.0005KiB", "free_memory": "1GiB"}, pp=2)
    assert spec.owners == ((256,), (256,))
    assert spec.bucket_size == 1025


def test_a_parameter_count_with_a_part_byte_rounds_up() -> None:
    """1025 parameters of 0.5 bytes are 512.5 bytes, so 513; on 2 ranks 257 and 256 (the odd byte to
    rank 0), each one tensor aligned up to 256: 512 and 256."""
    spec = spec_from_options({"params": 1025, "bytes_per_param": 0.5}, pp=2)
    assert spec.owners == ((512,), (256,))


# --- the weight-update run: layout and rates -------------------------------------------------------

def test_the_layout_finds_each_owners_third_bucket() -> None:
    """Owner 0's tensors 256, 256, 512, 256, 256 in buckets of 512 bytes: three buckets, [256, 256],
    [512], [256, 256]. The third starts at owner 0's fourth tensor (2 + 1 = 3 before it), so the layout
    lists all five, not the third bucket as one tensor of 512."""
    torch = pytest.importorskip("torch")
    del torch
    from pptl.run.weight_update import layout_of

    s = build_schedule(config_from_mapping({"schedule": "weight-update", "pp": 2, "microbatches": 1,
                                            "options": {"tensors": [[256, 256, 512, 256, 256], [256]],
                                                        "bucket_size": 512, "free_memory": "1GiB"}}))
    lay = layout_of(s)
    assert [n for n, o in zip(lay.sizes, lay.owner_of) if o == 0] == [256, 256, 512, 256, 256]


def test_rates_leave_out_an_op_measured_as_taking_no_time() -> None:
    """pp=2, one 1 MiB (1,048,576-byte) tensor per rank: 12 ops. Each measured 1 ms but one RELOAD
    measured 0 (below the clock's resolution): RELOAD's rate is 1,048,576 B / 1 ms = 1.048576 GB/s
    from the other three, median and total alike."""
    torch = pytest.importorskip("torch")
    del torch
    from pptl.run.weight_update import WeightUpdateExecutor

    s = build_schedule(config_from_mapping({"schedule": "weight-update", "pp": 2, "microbatches": 1,
                                            "options": {"tensors": [[1 << 20], [1 << 20]], "bucket_size": "1MiB",
                                                        "free_memory": "1GiB"}}))
    assert len(s.ops) == 12
    first_reload = next(op.id for op in s.ops if op.kind == "RELOAD")
    events = [Event(op=op.id, rank=op.rank, lane=op.lane, kind=op.kind, start=0.0,
                    end=0.0 if op.id == first_reload else 1.0) for op in s.ops]
    tl = WeightUpdateExecutor.finish_timeline(s, _timeline(events, 2))
    wu = tl.meta.extra["weight_update"]
    assert wu["gbps_median"]["RELOAD"] == pytest.approx(1.048576)
    assert wu["gbps_total"]["RELOAD"] == pytest.approx(1.048576)


# --- the spawner ------------------------------------------------------------------------------------

_SPAWN = textwrap.dedent("""
    import os, signal, sys, types

    def rank_main(argv):
        r = int(os.environ["RANK"])
        print(os.environ["RANK"], os.environ["LOCAL_RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_WORLD_SIZE"],
              *argv, flush=True)  # before rank 10's SIGKILL, which flushes nothing
        if r == 3:
            raise RuntimeError("rank 3 fails")
        if r == 10:
            os.kill(os.getpid(), signal.SIGKILL)
        return r

    fake = types.ModuleType("pptl.run.__main__")
    fake.main = rank_main
    sys.modules["pptl.run.__main__"] = fake
    from pptl.run import spawner
    sys.exit(spawner.main(["job.json", "tcp://127.0.0.1:1", "11", sys.argv[1]]))
""")


def test_the_spawner_starts_every_rank_and_writes_each_exit_code(tmp_path: Path) -> None:
    """11 ranks (0 to 10) whose main returns its rank, but rank 3 raises and rank 10 is killed with
    SIGKILL: exit.rankR holds R for the others (0 for rank 0 too), 1 for rank 3 (a rank that raised
    failed), -9 for rank 10 (killed by signal 9). Rank 10's log holds its environment and arguments."""
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-c", _SPAWN, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    codes = {int(p.name.removeprefix("exit.rank")): p.read_text() for p in tmp_path.glob("exit.rank*")}
    assert codes == {**{k: str(k) for k in range(11)}, 3: "1", 10: "-9"}
    assert (tmp_path / "rank10.log").read_text().split() == ["10", "10", "11", "11", "--job", "job.json", "--init",
                                                             "tcp://127.0.0.1:1"]
