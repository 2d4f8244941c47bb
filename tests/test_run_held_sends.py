"""pptl.run.program.held_sends: which SENDs ``--messages sync-send`` may run on the compute stream.

A held SEND stops its rank's GPU until the receiver posts the RECV; the receiver posts it only after the
sender's host issued every SEND its earlier RECVs wait for (gates). Interleaved 1F1B, pp 2, vpp 2, every
micro-batch in one group (m = 13, G = 13) hung on 2 H200s: rank 1 sent its last forward from stage 1
first thing, rank 0 received it only after nine backwards from rank 1's stage 3, and rank 1's host,
queueing those past the blocked SEND, stopped (tests here need no GPU: the issue orders tell it).
"""
from __future__ import annotations

import pytest

import pptl.run.program as program
from pptl.config import config_from_mapping
from pptl.ir import Schedule
from pptl.run.program import build_program, held_sends, issued_for, tighten_messages
from pptl.schedules import build_schedule


def _plan(family: str, pp: int, m: int, **extra: int) -> Schedule:
    return build_schedule(config_from_mapping({"schedule": family, "pp": pp, "microbatches": m, **extra}))


def _unheld_forward_sends(s: Schedule, rank: int, unheld: frozenset[int]) -> list[int]:
    return sorted(s.ops[i].mb for i in unheld if s.ops[i].rank == rank and s.ops[i].flow == "F")


@pytest.mark.parametrize("family,pp", [("gpipe", 2), ("1f1b", 2), ("1f1b", 4), ("zb-h1", 4), ("zb-h2", 2)])
def test_one_chunk_schedules_hold_every_send(family: str, pp: int) -> None:
    # every RECV is posted within an op or two of its SEND: sync-send runs them all on compute, as before
    s = _plan(family, pp, 8)
    p = issued_for(build_program(s), "sync-send")
    assert p.unheld == frozenset()


def test_interleaved_in_groups_of_pp_holds_every_send() -> None:
    s = _plan("interleaved-1f1b", 2, 12, vpp=2)  # Megatron's default group of pp
    assert issued_for(build_program(s), "sync-send").unheld == frozenset()


def test_the_plan_that_hung_runs_its_late_received_sends_beside_compute() -> None:
    """m = 13, G = 13. Rank 0 posts RECV_F s2 mb k (k >= 3) right after RECV_B s2 mb k-3, whose SEND comes
    after rank 1's B s3 mb k-3; rank 1 issues SEND_F s1 mb k after F s1 mb k. Between the two rank 1 runs
    F s1 mb k+1..12, F s3 mb 0..k-3 and B s3 mb 0..k-3: (12 - k) + 2 (k - 2) = k + 8 compute ops, over the
    4 a host may run ahead for every k >= 3; mb 0-2 are received while rank 0 still runs stage 0."""
    s = _plan("interleaved-1f1b", 2, 13, vpp=2, group_size=13)
    p = issued_for(build_program(s), "sync-send")
    assert _unheld_forward_sends(s, 1, p.unheld) == list(range(3, 13))
    assert "r1/send/SEND_F s1 mb12 ->r0" in {s.ops[i].id for i in p.unheld}


@pytest.mark.parametrize("run_ahead,first_unheld", [(10, 3), (11, 4), (19, 12), (20, None)])
def test_run_ahead_boundary_is_k_plus_8_compute_ops(monkeypatch: pytest.MonkeyPatch, run_ahead: int,
                                                    first_unheld: int | None) -> None:
    # SEND_F s1 mb k needs its host k + 8 compute ops past it (above): held exactly when k + 8 <= RUN_AHEAD
    s = _plan("interleaved-1f1b", 2, 13, vpp=2, group_size=13)
    monkeypatch.setattr(program, "RUN_AHEAD", run_ahead)
    unheld = frozenset(i for i, op in enumerate(s.ops) if op.kind == "SEND") \
        - held_sends(tighten_messages(build_program(s), receives=False))
    got = _unheld_forward_sends(s, 1, unheld)
    assert got == ([] if first_unheld is None else list(range(first_unheld, 13)))


def test_only_sync_send_names_unheld_sends() -> None:
    s = _plan("interleaved-1f1b", 2, 13, vpp=2, group_size=13)
    prog = build_program(s)
    assert issued_for(prog, "overlap").unheld == frozenset()
    assert issued_for(prog, "inline").unheld == frozenset()
    assert issued_for(prog, "sync-send").unheld


def test_a_send_received_first_thing_is_held_with_no_run_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    # GPipe pp 2: rank 1 posts RECV_F s1 mb k right after its compute of mb k-1, which needs only rank 0's
    # SEND of mb k-1: no op of rank 0 past SEND mb k is needed, so every SEND holds even at RUN_AHEAD 0
    monkeypatch.setattr(program, "RUN_AHEAD", 0)
    s = _plan("gpipe", 2, 4)
    sends = {i for i, op in enumerate(s.ops) if op.kind == "SEND" and op.rank == 0}
    assert sends <= held_sends(tighten_messages(build_program(s), receives=False))


def test_whatif_keeps_the_sends_sync_send_runs_beside_compute_off_the_compute_lane() -> None:
    # what `pptl whatif --from` a sync-send run samples: the held SENDs on the compute lane, the others not
    from pptl.whatif.lanes import sends_on_compute

    s = _plan("interleaved-1f1b", 2, 13, vpp=2, group_size=13)
    unheld = issued_for(build_program(s), "sync-send").unheld
    on_compute = {i for (_, lane), order in sends_on_compute(s).lanes.items() if lane == "compute" for i in order
                  if s.ops[i].kind == "SEND"}
    sends = {i for i, op in enumerate(s.ops) if op.kind == "SEND"}
    assert len(unheld) == 18 and on_compute == sends - unheld
