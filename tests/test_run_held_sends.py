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
from pptl.op import COMPUTE_KINDS
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


@pytest.mark.parametrize("messages", ["overlap", "sync-send", "inline"])
def test_the_executor_streams_follow_the_held_set(messages: str) -> None:
    # the CUDA executor runs each op on stream_keys' stream: on rank 1 of the plan that hung, under sync-send
    # the forward SENDs of stage 1 mb 0-2 hold compute and mb 3-12 run on their channel (s1 -> s2's forwards)
    s = _plan("interleaved-1f1b", 2, 13, vpp=2, group_size=13)
    prog = issued_for(build_program(s), messages)
    keys = program.stream_keys(prog, 1, messages)
    assert set(keys) == set(prog.ranks[1].issue)
    forward_channel = (1, 0, "F", 0, -1)  # rank 1 to rank 0, forwards, direction 0 (one channel for both stages)
    sends = {s.ops[i].mb: keys[i] for i in keys if s.ops[i].kind == "SEND" and s.ops[i].flow == "F"}
    assert len(sends) == 13
    if messages == "sync-send":
        assert sends == {mb: "compute" if mb < 3 else forward_channel for mb in range(13)}
    else:
        assert set(sends.values()) == {forward_channel}
    recvs = {keys[i] for i in keys if s.ops[i].kind == "RECV"}
    assert recvs == ({"compute"} if messages == "inline" else {(0, 1, "F", 0, -1), (0, 1, "B", 0, -1)})
    assert {keys[i] for i in keys if s.ops[i].kind in ("F", "B")} == {"compute"}


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


@pytest.mark.parametrize("m,beside", [(5, 0), (13, 18)])
def test_whatif_notes_the_sends_it_samples_beside_compute(m: int, beside: int, tmp_path) -> None:
    # the same plan sampled from a sync-send run of 2 H200s (call 30's calibrating 1F1B, same workload): the
    # 18 SENDs of m = 13 that run beside compute are named, with what the samples leave out; m = 5 has none
    import json
    from pathlib import Path

    from pptl.formats.plan import plan_to_dict
    from pptl.whatif.report import report_lines
    from pptl.whatif.study import study_plans

    data = Path(__file__).parent / "data" / "whatif_gpu" / "call30_h2560"
    cfg = json.loads((data / "plan_interleaved.json").read_text())["config"]
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(plan_to_dict(build_schedule(config_from_mapping(
        {**cfg, "microbatches": m, "group_size": m})))))
    out = study_plans([plan], measured=data / "measured_calibrate.json", samples=20, seed=0)
    assert out[0].beside_sends == beside
    notes = [line for line in report_lines(out, out[0].spread) if "beside compute" in line]
    assert notes == ([] if not beside else [
        f"note: {plan}: pptl run sends 18 of its SENDs beside compute (sync-send cannot hold them); one that "
        f"waits there for its receive slows the compute beside it (1.3-1.6x on H200s), which the samples do not "
        f"draw: its steps may be short (docs/tune.md)"])


# ------------------------------------------------------------------------------------------------
# A model of the hosts and streams the hang ran through, to check the fix against the mechanism


def _hosts_replay(prog: program.Program, queue: int) -> list[str]:
    """Replay ``prog`` (issued for sync-send) with hosts that issue in order and GPUs that run what was issued.

    A host issues a compute op only while fewer than ``queue`` of its compute ops wait on its GPU (the launch
    queue), a RECV only once the sender's host has issued its SEND (the gate), a SEND at once. The compute stream
    runs compute ops and held SENDs in issue order: a compute op once the data it receives has arrived, a held SEND
    once the receiver has posted its RECV and every earlier RECV of that channel is done. An unheld SEND runs the
    same way on its channel's stream, after its producer. Returns the ops never done (empty: no hang)."""
    s = prog.schedule
    ops = s.ops
    recv_of: dict[int, int] = {}
    chan_recvs: dict[object, list[int]] = {}
    for rp in prog.ranks:
        for i in rp.issue:
            if ops[i].kind == "RECV":
                chan_recvs.setdefault(rp.channels[i], []).append(i)
    chan_sends: dict[object, list[int]] = {}
    for rp in prog.ranks:
        for i in rp.issue:
            if ops[i].kind == "SEND":
                chan_sends.setdefault(rp.channels[i], []).append(i)
    for ch, sends in chan_sends.items():
        for k, j in enumerate(sends):
            recv_of[j] = chan_recvs[ch][k]
    send_of = {r: j for j, r in recv_of.items()}
    data = {v: [u for u, v2 in s.deps if v2 == v and ops[u].kind == "RECV"] for v in range(len(ops))}
    producer = {v: [u for u, v2 in s.deps if v2 == v and ops[u].kind in COMPUTE_KINDS] for v in range(len(ops))}
    issued: set[int] = set()
    done: set[int] = set()
    pos = {rp.rank: 0 for rp in prog.ranks}
    stream: dict[int, list[int]] = {rp.rank: [] for rp in prog.ranks}  # compute stream: compute ops and held SENDs, in issue order
    side: dict[object, list[int]] = {}  # unheld SENDs, a stream a channel as pptl run has
    moved = True

    def send_can_finish(j: int) -> bool:
        r = recv_of[j]
        ch_r = chan_recvs[next(rp.channels[r] for rp in prog.ranks if r in rp.channels)]
        first = next(x for x in ch_r if x not in done)
        return r in issued and first == r and all(u in done for u in producer[j])

    while moved:
        moved = False
        for rp in prog.ranks:  # hosts
            r = rp.rank
            while pos[r] < len(rp.issue):
                i = rp.issue[pos[r]]
                kind = ops[i].kind
                if kind in COMPUTE_KINDS and sum(1 for x in stream[r] if ops[x].kind in COMPUTE_KINDS) >= queue:
                    break
                if kind == "RECV" and send_of[i] not in issued:
                    break
                issued.add(i)
                if kind in COMPUTE_KINDS or (kind == "SEND" and i not in prog.unheld):
                    stream[r].append(i)
                elif kind == "SEND":
                    side.setdefault(rp.channels[i], []).append(i)
                pos[r] += 1
                moved = True
            while stream[r]:  # the compute stream
                i = stream[r][0]
                if ops[i].kind == "SEND":
                    if not send_can_finish(i):
                        break
                    done.update((i, recv_of[i]))
                elif all(u in done for u in data[i]):
                    done.add(i)
                else:
                    break
                stream[r].pop(0)
                moved = True
        for queued in side.values():
            while queued and send_can_finish(queued[0]):
                j = queued.pop(0)
                done.update((j, recv_of[j]))
                moved = True
    return [op.id for i, op in enumerate(ops) if i not in done]


def test_the_model_hangs_the_plan_as_it_hung_and_runs_it_with_the_fix() -> None:
    """Every SEND held (before the fix): the plan hangs while a host can queue fewer than 20 compute ops past a
    held SEND, mb 12's k + 8 (above); on the H200s rank 1's host stopped 15 past it. With the fix's held set it
    runs at any queue of RUN_AHEAD or more."""
    from dataclasses import replace

    s = _plan("interleaved-1f1b", 2, 13, vpp=2, group_size=13)
    fixed = issued_for(build_program(s), "sync-send")
    before = replace(fixed, unheld=frozenset())
    for queue in (15, 19):
        assert "r1/send/SEND_F s1 mb12 ->r0" in _hosts_replay(before, queue), queue
    assert _hosts_replay(before, 20) == []
    for queue in (program.RUN_AHEAD, 5, 15, 100):
        assert _hosts_replay(fixed, queue) == [], queue


@pytest.mark.parametrize("family,pp,m,extra", [("1f1b", 2, 8, {}), ("1f1b", 4, 8, {}), ("gpipe", 4, 8, {}),
                                               ("zb-h1", 4, 8, {}), ("zb-h2", 3, 9, {}), ("zbv", 4, 8, {}),
                                               ("v-half", 4, 16, {}), ("v-min", 3, 12, {}), ("dualpipe", 4, 8, {}),
                                               ("dualpipev", 4, 8, {}), ("interleaved-1f1b", 4, 16, {"vpp": 2}),
                                               ("interleaved-1f1b", 2, 10, {"vpp": 2, "group_size": 10}),
                                               ("looped-bfs", 4, 8, {"vpp": 2}), ("interleaved-zb", 3, 9, {"vpp": 2}),
                                               ("interleaved-zb", 4, 16, {"vpp": 2})])
def test_every_family_runs_in_the_model_with_the_held_set_at_the_run_ahead(family: str, pp: int, m: int,
                                                                          extra: dict[str, int]) -> None:
    s = _plan(family, pp, m, **extra)
    assert _hosts_replay(issued_for(build_program(s), "sync-send"), program.RUN_AHEAD) == []


def test_sends_that_hold_alone_but_not_together_are_let_go() -> None:
    """interleaved-zb, pp 4, 8 micro-batches: every SEND passes the one-send test (its receive needs its host
    at most 4 compute ops on), yet held all together the hosts wait on each other through a third rank until
    a host may queue 5; held_sends replays the hosts and lets go of the SENDs a stuck stream waits in (4 here),
    after which the replay, and this test's own model, run with a queue of 4."""
    from dataclasses import replace

    s = _plan("interleaved-zb", 4, 8, vpp=2)
    fixed = issued_for(build_program(s), "sync-send")
    assert len(fixed.unheld) == 4
    every = replace(fixed, unheld=frozenset())
    assert _hosts_replay(every, program.RUN_AHEAD) and _hosts_replay(every, 5) == []
    assert _hosts_replay(fixed, program.RUN_AHEAD) == []


@pytest.mark.parametrize("beside,line", [
    (["r1/send/SEND_F s1 mb12 ->r0"], "sync-send: 1 SEND ran beside compute instead of holding it (each one's receive "
                                      "comes too late: pptl.run.program.held_sends), e.g. r1/send/SEND_F s1 mb12 ->r0"),
    (["a", "b"], "sync-send: 2 SENDs ran beside compute instead of holding it (each one's receive comes too late: "
                 "pptl.run.program.held_sends), e.g. a"),
    ([], None), (None, None)])
def test_pptl_run_says_how_many_sends_ran_beside_compute(beside: list[str] | None, line: str | None) -> None:
    from pptl.events import Event
    from pptl.run.report import summary, summary_lines
    from pptl.timeline import Timeline, TimelineMeta

    ev = [Event(op="F0", rank=0, lane="compute", start=0.0, end=1.0, kind="F", stage=0, mb=0)]
    extra = {} if beside is None else {"sends_beside_compute": beside}
    tl = Timeline(ev, TimelineMeta(source="measured", units="ms", family="1f1b", pp=1, extra=extra))
    got = [x for x in summary_lines(tl) if x.startswith("sync-send:")]
    assert got == ([] if line is None else [line])
    assert summary(tl)["sends_beside_compute"] == beside
