"""What each rank executes: its ops, the waits between its lanes, and the order its host issues them.

Pure (no torch): the launcher, every worker and the tests build the same :class:`Program` from the
same plan, so all ranks agree on placement, message pairs and issue order without talking.

Streams: compute ops run on one stream per lane. A SEND or RECV runs on its *channel*, the stream
of messages from one stage to the next for one flow and direction (a two-rank communicator and a
CUDA stream at each end), not on its lane: the plan's ``send``/``recv`` lanes model one stream
per direction, but the order in which one rank produces messages for a peer (production order)
need not be the order the peer needs them in (ZB-V mixes activations and gradients on one pair of
ranks), and NCCL matches messages in order and lets a send finish only with its receive; serial
lanes would then deadlock. Within a channel both orders are the stage's micro-batch order. (The
executor's message modes may start them from the compute stream instead, in the order of
:func:`tighten_messages`.)

Vocabulary: an op's *producers* are the ops whose data it needs (the plan's dependencies);
*waits* are the producers on the same rank but another stream (a CUDA event wait; on one stream
the stream order already holds). The *issue order* is the order the host enqueues a rank's ops:
:func:`pptl.issue_order.issue_key`, the rank's ops sorted by their planned start, ties broken by a
topological order of the whole plan. That order is a linear extension of the plan's DAG on every rank at once, so (a) on CUDA every
event a stream waits on is recorded before the wait is enqueued, and (b) on CPU, where a compute
op blocks its host until its data has arrived, the ranks can never wait on each other in a cycle.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from pptl.config import Workload
from pptl.errors import InputError, InvalidScheduleError, PptlError
from pptl.ir import Op, Schedule
from pptl.issue_order import issue_key
from pptl.messages import message_key
from pptl.op import COMPUTE_KINDS
from pptl.schedules import find_family, names

__all__ = ["RUN_KINDS", "Channel", "RankProgram", "Program", "build_program", "refuse_invalid", "channel_of",
           "workload_of", "tighten_messages", "issued_for", "as_run", "orders", "held_sends", "stream_keys",
           "beside_compute", "BESIDE_WAIT"]

#: The op kinds ``pptl run`` executes.
RUN_KINDS = COMPUTE_KINDS | {"SEND", "RECV"}
# Families with an executor of their own declare more kinds in their record (``Family.runtime``).

#: (sender, receiver, flow, direction, sender's stage), with "*"/-1 where a channel carries every
#: flow, direction or stage of its pair: one ordered stream of messages, carried by its own
#: two-rank communicator and its own CUDA stream on both ends.
Channel = tuple[int, int, str, int, int]


@dataclass(frozen=True)
class RankProgram:
    """One rank's share of a plan."""

    rank: int
    issue: tuple[int, ...]
    """Op indices (into ``Schedule.ops``) in the order the host enqueues them."""
    waits: Mapping[int, tuple[int, ...]]
    """Op index -> producers on this rank but another stream (cross-stream event waits)."""
    waited: frozenset[int]
    """Ops some other stream waits on (they need an end event even in untimed steps)."""
    lanes: Mapping[str, tuple[int, ...]]
    """Lane -> op indices in plan order."""
    stages: tuple[tuple[int, int], ...]
    """(direction, stage) model copies this rank holds, sorted."""
    channels: Mapping[int, "Channel"]
    """SEND/RECV op index -> its channel."""


@dataclass(frozen=True)
class Program:
    """Every rank's share of a plan, plus what all ranks must agree on."""

    schedule: Schedule
    ranks: tuple[RankProgram, ...]
    placement: Mapping[tuple[int, int], int]
    """(direction, stage) -> rank that runs it."""
    channels: tuple["Channel", ...]
    """Every channel of the plan, sorted: all ranks open them in this order."""
    unheld: frozenset[int] = frozenset()
    """SENDs that ``sync-send`` runs on their channel's stream, not the compute stream
    (:func:`held_sends`): holding compute there could deadlock the run."""

    @property
    def world(self) -> int:
        return self.schedule.pp

    def op_id(self, index: int) -> str:
        return self.schedule.ops[index].id


def workload_of(schedule: Schedule) -> Workload:
    """The plan's workload section (defaults for plans without a config)."""
    return schedule.config.workload if schedule.config is not None else Workload()


def channel_of(op: Op) -> Channel:
    """(sender, receiver, flow, direction, sender's stage) of a SEND or RECV."""
    flow, d, stage, _ = message_key(op)
    sender, receiver = (op.rank, op.peer) if op.kind == "SEND" else (op.peer, op.rank)
    return (sender, receiver, flow, d, stage)


def refuse_invalid(schedule: Schedule, source: str, *, named: bool = True) -> None:
    """Refuse a plan that ``pptl check`` rejects, naming its first error.

    The rules run as ``pptl check`` runs them by default, under NCCL's P2P model: that is what the
    run's message modes share (each channel matches its messages in order, and a CUDA send
    completes only with its receive; gloo channels keep the same order). Warnings (a formula's
    assumption, PP022/PP023) do not stop a run. ``named``: ``source`` is a file the user can
    check.

    Raises:
        InvalidScheduleError: the plan has an error (exit 1, as ``pptl check``).
        InputError: a value the rules read is bad.

    Notes:
        O(ops + deps) for the structural rules (0.06-0.2 s on a plan of 176k ops).
    """
    from pptl.checks import run_checks

    try:
        found = run_checks(schedule, p2p="nccl")
    except InputError as e:
        raise InputError(str(e) if str(e).startswith(f"{source}:") else f"{source}: {e}") from None
    errors = [v for v in found if v.severity == "error"]
    if not errors:
        return
    from pptl.formats._quote import shell_word

    first = errors[0]
    more = f"run 'pptl check {shell_word(source)}' for every violation" if named else \
        "'pptl check' on its plan file lists every violation"
    raise InvalidScheduleError(f"{source}: {first.code}: {first.message} ({more})")


def build_program(schedule: Schedule, *, source: str = "plan") -> Program:
    """Split a validated schedule into per-rank programs.

    Raises:
        InputError: an op kind ``pptl run`` does not execute.
        InvalidScheduleError: data crosses ranks without SEND/RECV, a stage runs on two ranks,
            or two ranks disagree on the order of their messages (NCCL matches them in order).

    Notes:
        O(ops log ops + deps), dominated by the sort and the plan's topological order.
    """
    ops = schedule.ops
    fam = find_family(schedule.family)
    runtime = fam.runtime if fam is not None else None
    kinds = RUN_KINDS | runtime.kinds if runtime is not None else RUN_KINDS
    for op in ops:
        if op.kind not in kinds:
            own = sorted(n for n in names() if getattr(find_family(n), "runtime", None) is not None)
            raise InputError(f"{source}: op {op.id} has kind {op.kind}; pptl run executes training plans "
                             f"(kinds {', '.join(sorted(RUN_KINDS))}) and the {', '.join(own)} families")
        if op.kind in ("SEND", "RECV") and op.flow not in ("F", "B"):
            raise InvalidScheduleError(f"{source}: op {op.id} has flow {op.flow!r}, expected F or B")
        if not 0 <= op.rank < schedule.pp:
            raise InvalidScheduleError(f"{source}: op {op.id} is on rank {op.rank}, outside 0..{schedule.pp - 1}")
    layers = workload_of(schedule).stage_layers
    if layers is not None and len(layers) != schedule.num_stages:
        raise InputError(f"{source}: field 'workload.stage_layers': got {len(layers)} entries, expected one per "
                         f"stage ({schedule.num_stages} for {schedule.family} with these sizes)")
    if runtime is not None and runtime.check is not None:
        runtime.check(schedule, source)
    placement = _placement(schedule, source)
    _check_crossings(schedule, source, runtime.collectives if runtime is not None else frozenset())
    channel = _channels(schedule, source)
    key = issue_key(schedule, untimed=True)
    by_rank: dict[int, list[int]] = {r: [] for r in range(schedule.pp)}
    for i, op in enumerate(ops):
        by_rank[op.rank].append(i)
    waits: dict[int, dict[int, tuple[int, ...]]] = {r: {} for r in range(schedule.pp)}
    local: dict[int, list[int]] = {}

    def stream(i: int) -> tuple[str, object]:
        return ("channel", channel[i]) if i in channel else ("lane", ops[i].lane)

    for u, v in schedule.deps:
        if ops[u].rank == ops[v].rank and stream(u) != stream(v):
            local.setdefault(v, []).append(u)
    for v, us in local.items():
        waits[ops[v].rank][v] = tuple(sorted(set(us)))
    ranks = []
    for r in range(schedule.pp):
        issue = tuple(sorted(by_rank[r], key=key.__getitem__))
        lanes = {lane: tuple(order) for (rr, lane), order in sorted(schedule.lanes.items()) if rr == r}
        waited = frozenset(u for us in waits[r].values() for u in us)
        stages = tuple(sorted(k for k, rank in placement.items() if rank == r))
        mine = {i: channel[i] for i in by_rank[r] if i in channel}
        ranks.append(RankProgram(r, issue, waits[r], waited, lanes, stages, mine))
    return Program(schedule, tuple(ranks), placement, tuple(sorted(set(channel.values()))))


def _placement(schedule: Schedule, source: str) -> dict[tuple[int, int], int]:
    from pptl.deps import roles

    where: dict[tuple[int, int], int] = {}
    for op in schedule.ops:
        for _, d, s, _ in roles(op):
            if not (0 <= s < schedule.num_stages and 0 <= d < schedule.directions):
                raise InvalidScheduleError(f"{source}: op {op.id} names stage {s} direction {d}, outside the plan's "
                                           f"{schedule.num_stages} stages and {schedule.directions} directions")
            rank = where.setdefault((d, s), op.rank)
            if rank != op.rank:
                raise InvalidScheduleError(f"{source}: stage {s} (direction {d}) runs on ranks {rank} and {op.rank}; "
                                           "pptl run keeps one copy of each stage's weights on one rank")
    return where


def _check_crossings(schedule: Schedule, source: str, collectives: frozenset[str]) -> None:
    ops = schedule.ops
    for u, v in schedule.deps:
        a, b = ops[u], ops[v]
        if a.rank != b.rank and not (a.kind == "SEND" and b.kind == "RECV") \
                and a.kind not in collectives and b.kind not in collectives:
            raise InvalidScheduleError(f"{source}: {a.id} -> {b.id} crosses ranks without a SEND/RECV; pptl run "
                                       "needs the communication ops (plan it with pptl plan)")


def _channels(schedule: Schedule, source: str) -> dict[int, Channel]:
    """Op index -> channel of every SEND and RECV.

    Both ends of a channel must list its messages in the same order (NCCL matches the messages of
    a communicator in order). Each pair of ranks gets one channel when its two orders agree; else
    one per (flow, direction); else one per sending stage, where a schedule that runs the
    micro-batches of a stage in one order on both sides always agrees. Fewer channels mean fewer
    communicators and fewer receive kernels waiting on the GPU at once.
    """
    ops = schedule.ops
    sent: dict[tuple[int, int], list[int]] = {}
    recv: dict[tuple[int, int], list[int]] = {}
    for (rank, _lane), order in sorted(schedule.lanes.items()):
        for i in order:
            full = channel_of(ops[i])
            if ops[i].kind == "SEND":
                sent.setdefault(full[:2], []).append(i)
            elif ops[i].kind == "RECV":
                recv.setdefault(full[:2], []).append(i)
    out: dict[int, Channel] = {}
    for pair in sorted(set(sent) | set(recv)):
        a, b = sent.get(pair, []), recv.get(pair, [])
        for depth in (2, 4, 5):
            def key(i: int) -> Channel:
                full = channel_of(ops[i])
                return full[:depth] + (_ANY, -1, -1)[depth - 2:]  # type: ignore[return-value]

            split_a: dict[Channel, list[int]] = {}
            split_b: dict[Channel, list[int]] = {}
            for i in a:
                split_a.setdefault(key(i), []).append(i)
            for i in b:
                split_b.setdefault(key(i), []).append(i)
            if all(_same_messages(ops, split_a.get(ch, []), split_b.get(ch, []))
                   for ch in set(split_a) | set(split_b)) or depth == 5:
                break
        for ch in sorted(set(split_a) | set(split_b)):
            x, y = split_a.get(ch, []), split_b.get(ch, [])
            for k, (u, v) in enumerate(zip(x, y)):
                if message_key(ops[u]) != message_key(ops[v]):
                    raise InvalidScheduleError(
                        f"{source}: rank {pair[0]} sends {ops[u].id} as message #{k} from stage {ops[u].stage} to "
                        f"rank {pair[1]}, which expects {ops[v].id} there; a stage and its receiver must exchange "
                        "micro-batches in one order (NCCL matches them in order)")
            if len(x) != len(y):
                longer = x if len(x) > len(y) else y
                extra = ops[longer[min(len(x), len(y))]]
                raise InvalidScheduleError(f"{source}: {extra.id} has no matching "
                                           f"{'RECV' if extra.kind == 'SEND' else 'SEND'} (run 'pptl check')")
            for i in x + y:
                out[i] = ch
    return out


_ANY = "*"


def _same_messages(ops: list[Op], sends: list[int], recvs: list[int]) -> bool:
    return len(sends) == len(recvs) and all(message_key(ops[u]) == message_key(ops[v]) for u, v in zip(sends, recvs))


def tighten_messages(program: Program, *, receives: bool = True) -> Program:
    """``program`` with every SEND issued right after the last op it needs on its rank and, with
    ``receives``, every RECV right before the first op that needs it (the order the ``inline``
    message mode of :class:`pptl.run.executor.Executor` runs in; ``sync-send`` moves the SENDs
    only: its RECVs run on their channel's stream, gated on their sender, so one issued where the
    plan's linear extension puts it waits for its data without holding the compute stream, and
    the sender's SEND, which holds its compute stream until its receive is posted, is not kept
    waiting for the receiver's consumer. NCCL lets only a few sends to one peer finish before
    their receives are posted: looped-bfs's rank 0 sat 40-56 ms in its fifth backward send while
    rank 1 ran every stage-3 backward before receiving any of them, 2x H200).

    Why it cannot deadlock: the issue orders come from one linear extension of the plan's DAG;
    moving a SEND earlier (never before its producers) and a RECV later (never after its
    consumers) keeps every data edge forward, and within a channel the sends keep their order
    (running maximum) and so do the receives (running minimum), which is what NCCL matches on.
    A SEND's consumers and a RECV's producers live on other ranks, so nothing else moves.
    """
    s = program.schedule
    ops = s.ops
    before: dict[int, list[int]] = {}
    after: dict[int, list[int]] = {}
    for u, v in s.deps:
        if ops[u].rank == ops[v].rank:
            after.setdefault(u, []).append(v)
            before.setdefault(v, []).append(u)
    orders: dict[int, tuple[int, ...]] = {}
    for rp in program.ranks:
        pos = {i: k for k, i in enumerate(rp.issue)}
        key: dict[int, tuple[int, int, int]] = {i: (k, 0, 0) for i, k in pos.items()}
        for i in rp.issue:
            if ops[i].kind == "SEND" and before.get(i):
                key[i] = (max(pos[u] for u in before[i]), 1, pos[i])
            elif receives and ops[i].kind == "RECV" and after.get(i):
                key[i] = (min(pos[v] for v in after[i]), -1, pos[i])
        by_channel: dict[Channel, list[int]] = {}
        for i in rp.issue:
            if i in rp.channels:
                by_channel.setdefault(rp.channels[i], []).append(i)
        for members in by_channel.values():
            sends = [i for i in members if ops[i].kind == "SEND"]
            recvs = [i for i in members if ops[i].kind == "RECV"]
            for a, b in zip(sends, sends[1:]):
                key[b] = max(key[a], key[b])
            if receives:
                for a, b in zip(reversed(recvs[1:]), reversed(recvs[:-1])):
                    key[b] = min(key[a], key[b])
        orders[rp.rank] = tuple(sorted(rp.issue, key=key.__getitem__))
    ranks = tuple(replace(rp, issue=orders[rp.rank]) for rp in program.ranks)
    return replace(program, ranks=ranks)


def issued_for(program: Program, messages: str) -> Program:
    """``program`` in the issue order a message mode runs (:mod:`pptl.run.executor`): ``overlap`` as
    planned, ``sync-send`` with its SENDs moved to their producers (those that may not hold the
    compute stream named in ``unheld``, :func:`held_sends`), ``inline`` with its RECVs moved to their
    consumers too (:func:`tighten_messages`)."""
    if messages == "overlap":
        return program
    issued = tighten_messages(program, receives=messages == "inline")
    if messages != "sync-send":
        return issued
    sends = {i for rp in issued.ranks for i in rp.issue if issued.schedule.ops[i].kind == "SEND"}
    return replace(issued, unheld=frozenset(sends - held_sends(issued)))


def stream_keys(program: Program, rank: int, messages: str) -> dict[int, Any]:
    """Op index -> the stream ``rank`` runs it on under ``messages``, named as the executor names its CUDA
    streams: a SEND or RECV its channel's, other ops their lane's, except what the mode puts on
    ``"compute"``: ``sync-send``'s SENDs but those in ``program.unheld`` (a held one would deadlock the
    run), and ``inline``'s RECVs. ``program`` as :func:`issued_for` gave it for ``messages``."""
    rp = program.ranks[rank]
    ops = program.schedule.ops
    on_compute = {"sync-send": "SEND", "inline": "RECV"}.get(messages)
    keys: dict[int, Any] = {}
    for i in rp.issue:
        if i not in rp.channels:
            keys[i] = ops[i].lane
        elif ops[i].kind == on_compute and i not in program.unheld:
            keys[i] = "compute"
        else:
            keys[i] = rp.channels[i]
    return keys


#: Compute ops a host may issue past a SEND that holds its GPU before its launches block (a stage of
#: 16 blocks launches about 150 kernels and events a backward): 4 keeps well under CUDA's ~1,024.
#: The rank that hung had queued 15 ops of 8 blocks past its SEND and stopped. 1F1B, GPipe, ZB-H1/H2
#: and interleaved 1F1B in groups of pp need none; ZB-V, V-Half and DualPipeV at pp 4 run one or two
#: SENDs of a step beside compute, interleaved-zb at pp 4 four to twelve.
RUN_AHEAD = 4

#: What a SEND beside compute costs while it waits for its receive, for the notes of tune and whatif (neither
#: times it): its NCCL kernel stays on the GPU, and an MLP block beside one took 1.3-1.6x its time on 2 H200s
#: (``bench/gpu_spin.py``, docs/benchmarks.md "A message kernel waiting beside compute").
BESIDE_WAIT = "one that waits there for its receive slows the compute beside it (1.3-1.6x on H200s)"


def as_run(schedule: Schedule, messages: str) -> Program | None:
    """``schedule`` as ``pptl run`` issues it under ``messages`` (:func:`issued_for`), or None for a plan it cannot
    run (a profiler trace's, another runtime's kinds) or a mode it does not know: what the analyses of a run read."""
    from pptl.run.options import MESSAGE_MODES

    if messages not in MESSAGE_MODES:
        return None
    try:
        return issued_for(build_program(schedule), messages)
    except PptlError:
        return None


def beside_compute(schedule: Schedule) -> frozenset[int]:
    """The SENDs ``pptl run --messages sync-send`` keeps off the compute stream (:func:`held_sends`; none for a
    plan it cannot run: a profiler trace's, another runtime's)."""
    run = as_run(schedule, "sync-send")
    return frozenset() if run is None else run.unheld


def orders(program: Program) -> dict[int, list[int]]:
    """Rank -> its op indices in issue order."""
    return {rp.rank: list(rp.issue) for rp in program.ranks}


def held_sends(program: Program) -> frozenset[int]:
    """The SENDs of ``program`` (in its issue order) that may hold their rank's compute stream until
    their receive is posted, as ``sync-send`` runs them, without a deadlock.

    A held SEND stops its rank's GPU until the receiver's host has posted the RECV, and a host runs
    only so far ahead of its GPU (CUDA blocks a launch once about a thousand wait queued). The
    receiver's host, for its part, posts a RECV only once the sender's host has issued the matching
    SEND (gates, :mod:`pptl.run.gates`), and issues in order. So a SEND may hold only if its RECV can
    be posted while the sending host is at most :data:`RUN_AHEAD` compute ops past the SEND: no RECV
    issued before it on any host may wait for an op the sender issues later than that. (1F1B needs
    the run-ahead: each rank's SEND is received after the receiver's own SEND, one op later.)
    Interleaved 1F1B with every micro-batch in one group (pp 2, m 13 on 2 H200s) sent its last
    forward from stage 1 first and received it on rank 0 after nine backwards it needed from rank 1's
    later ops: rank 1's GPU sat in the SEND, its host filled its launch queue and stopped, and rank
    0's host waited for it (a hang).

    Computed with a vector clock over the hosts' issue orders and the RECV-after-SEND waits: for
    every op, the furthest position on each rank that must be issued before it can be (acyclic:
    the issue orders come from one linear extension of the plan). O(ops x ranks). Then the hosts are
    replayed with a queue of :data:`RUN_AHEAD` (:func:`_stuck_held`), and a held SEND a stuck compute
    stream waits in is let go, until the replay runs every op.
    """
    ops = program.schedule.ops
    world = len(program.ranks)
    pos: dict[int, tuple[int, int]] = {}
    for rp in program.ranks:
        for k, i in enumerate(rp.issue):
            pos[i] = (rp.rank, k)
    wiring = _wiring(program)
    send_of = wiring.send_of
    need: dict[int, list[int]] = {}
    at = [0] * world
    seqs = [rp.issue for rp in program.ranks]
    left = sum(len(q) for q in seqs)
    while left:
        moved = False
        for r, seq in enumerate(seqs):
            while at[r] < len(seq):
                i = seq[at[r]]
                j = send_of.get(i)
                if j is not None and j not in need:
                    break
                clock = list(need[seq[at[r] - 1]]) if at[r] else [-1] * world
                if j is not None:
                    clock = [max(x, y) for x, y in zip(clock, need[j])]
                clock[r] = at[r]
                need[i] = clock
                at[r] += 1
                left -= 1
                moved = True
        if not moved:  # the hosts' orders wait on each other: nothing holds safely
            return frozenset()
    # Per rank, how many compute ops its issue order holds up to each position: what a host queues
    # past a held SEND is its compute (a message is one launch).
    upto = []
    for seq in seqs:
        c, row = 0, []
        for i in seq:
            c += ops[i].kind in COMPUTE_KINDS
            row.append(c)
        upto.append(row)
    held = set()
    for i, j in send_of.items():
        a, k = pos[j]
        if need[i][a] <= k or upto[a][need[i][a]] - upto[a][k] <= RUN_AHEAD:
            held.add(j)
    # Each SEND alone may hold; together, through a third rank, they can still wait on each other (interleaved-zb
    # at pp 4 needs a queue of 5 with every SEND held). Replay the hosts and let go of the held SENDs a stuck
    # compute stream waits in, until the replay runs through.
    sends = frozenset(j for j in pos if ops[j].kind == "SEND")
    for _ in range(len(held) + 1):
        stuck = _stuck_held(program, wiring, sends - held, RUN_AHEAD)
        if not stuck:
            break
        held -= stuck
    return frozenset(held)


def _channel_pairs(program: Program) -> tuple[dict[int, int], dict[int, int]]:
    """(SEND -> the RECV it meets, RECV -> its place among its channel's RECVs): the k-th SEND of a channel
    in its sender's issue order meets the k-th RECV in its receiver's, as NCCL matches them."""
    ops = program.schedule.ops
    by_channel: dict[Channel, tuple[list[int], list[int]]] = {}
    for rp in program.ranks:
        for i in rp.issue:
            if i in rp.channels:
                by_channel.setdefault(rp.channels[i], ([], []))[ops[i].kind == "RECV"].append(i)
    recv_of: dict[int, int] = {}
    place: dict[int, int] = {}
    for sends, recvs in by_channel.values():
        recv_of.update(zip(sends, recvs))
        place.update({r: k for k, r in enumerate(recvs)})
    return recv_of, place


@dataclass(frozen=True)
class _Wiring:
    """What the replay of a program's hosts reads, made once (:func:`_wiring`)."""

    recv_of: dict[int, int]
    """SEND -> the RECV it meets."""
    send_of: dict[int, int]
    """RECV -> the SEND it meets."""
    first_recv: dict[int, int]
    """RECV -> its place among its channel's RECVs."""
    channel_of: dict[int, Channel]
    """RECV -> its channel."""
    data: dict[int, list[int]]
    """Compute op -> the RECVs it reads."""
    made: dict[int, list[int]]
    """SEND -> the compute ops that make what it sends."""


def _wiring(program: Program) -> _Wiring:
    ops = program.schedule.ops
    recv_of, first_recv = _channel_pairs(program)
    send_of = {r: j for j, r in recv_of.items()}
    channel_of = {r: program.ranks[ops[r].rank].channels[r] for r in send_of}
    data: dict[int, list[int]] = {}
    made: dict[int, list[int]] = {}
    for u, v in program.schedule.deps:
        if ops[u].kind == "RECV" and ops[v].kind in COMPUTE_KINDS:
            data.setdefault(v, []).append(u)
        elif ops[u].kind in COMPUTE_KINDS and ops[v].kind == "SEND":
            made.setdefault(v, []).append(u)
    return _Wiring(recv_of, send_of, first_recv, channel_of, data, made)


def _stuck_held(program: Program, wiring: _Wiring, unheld: frozenset[int], queue: int) -> set[int]:
    """Replay ``program``'s hosts and GPUs (:func:`held_sends`' model): each host issues in order, a compute op
    only while fewer than ``queue`` of its compute ops wait on its GPU, a RECV only once its SEND is issued; the
    compute stream runs compute ops (once the data they receive has come) and held SENDs (once their RECV is
    posted and first in its channel) in order; an unheld SEND runs beside it, after its producers. Returns the
    held SENDs at the head of a compute stream when nothing more can run (empty: every op ran)."""
    ops = program.schedule.ops
    recv_of, send_of, first_recv, channel_of = wiring.recv_of, wiring.send_of, wiring.first_recv, wiring.channel_of
    data, made = wiring.data, wiring.made
    head = dict.fromkeys(channel_of.values(), 0)
    issued: set[int] = set()
    done: set[int] = set()
    at = [0] * len(program.ranks)
    queued = [0] * len(program.ranks)
    stream: list[list[int]] = [[] for _ in program.ranks]
    side: dict[Channel, list[int]] = {}  # unheld SENDs: a stream a channel, as the executor runs them

    def sent(j: int) -> bool:  # the SEND j and its RECV run now, if they can
        r = recv_of.get(j)
        if r is None or r not in issued or head[channel_of[r]] != first_recv[r] \
                or not all(u in done for u in made.get(j, ())):
            return False
        done.update((j, r))
        head[channel_of[r]] += 1
        return True

    moved = True
    while moved:
        moved = False
        for rp in program.ranks:
            q, seq = rp.rank, rp.issue
            while at[q] < len(seq):
                i = seq[at[q]]
                kind = ops[i].kind
                if (kind in COMPUTE_KINDS and queued[q] >= queue) or (kind == "RECV" and send_of.get(i) not in issued):
                    break
                issued.add(i)
                if kind in COMPUTE_KINDS:
                    queued[q] += 1
                    stream[q].append(i)
                elif kind == "SEND" and i in unheld:
                    side.setdefault(rp.channels[i], []).append(i)
                elif kind == "SEND":
                    stream[q].append(i)
                at[q] += 1
                moved = True
            k = 0
            while k < len(stream[q]):
                i = stream[q][k]
                if ops[i].kind == "SEND":
                    if not sent(i):
                        break
                elif all(u in done for u in data.get(i, ())):
                    done.add(i)
                    queued[q] -= 1
                else:
                    break
                k += 1
            if k:
                del stream[q][:k]
                moved = True
        for waiting in side.values():
            while waiting and sent(waiting[0]):
                waiting.pop(0)
                moved = True
    if all(at[rp.rank] == len(rp.issue) for rp in program.ranks) and not any(stream) \
            and not any(side.values()):
        return set()
    return {s[0] for s in stream if s and ops[s[0]].kind == "SEND"}
