"""Explain a hung job: which NCCL ops each rank was waiting on, and the cycle of waits across ranks.

:func:`diagnose_dumps` gathers everything a diagnosis holds: each rank's calls (named by the plan,
:mod:`pptl.diagnose.plan_names`), the count facts (:mod:`pptl.diagnose.counts`), the wait-for cycle
and order mismatches (here), and the leading sentence (:mod:`pptl.diagnose.cause`).

Inputs are views of one run: torch's flight-recorder dumps (:mod:`pptl.formats.flight_recorder`,
one per rank), or the partial timeline ``pptl run`` writes when it stops a hung run. Pure: no
torch, no files.

The wait-for model (the same as ``pptl check --p2p nccl``, PP031, seen from the run):

- Per group and ordered pair of ranks, the k-th send of the sender meets the k-th receive of the
  receiver (NCCL matches in issue order, with no tags); a collective meets its peers at the same
  ``collective_seq_id`` of its group. Matched ops form one node: they complete together.
- An op that never completed and whose kernel had not started (``scheduled``) waits for the op the
  rank issued before it that never completed either (its stream, or the host, is behind that op).
  A ``started`` op waits only for its peers (the dump says ``started`` only when torch timed the
  kernels: ``TORCH_NCCL_ENABLE_TIMING=1``; without it every pending op is ``scheduled``).
- An op whose peer never issued the matching op waits for the last op that peer did issue.

A cycle in that graph is the hang, printed op by op as PP031 prints it: ``A -> (why) B`` means B
waits for A. With a plan, each NCCL op is named by the plan's op id: a rank's send/receive order
(:func:`pptl.issue_order.program`) is aligned with the dump's, skipping set-up messages and
repeating per step.

Vocabulary: *front* is a rank's first op that never completed; *pending* is any such op.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

import networkx as nx
import numpy as np

from pptl.diagnose.cause import Cause, PlanNext, evidence, find_cause
from pptl.diagnose.counts import EMPTY, Counts, MissingDump, count_calls, group_members
from pptl.diagnose.ops import NcclOp, sizes_may_differ
from pptl.diagnose.ops import ranks_text as _ranks
from pptl.diagnose.plan_names import name_by_plan, plan_counterparts, plan_next, plan_pairs
from pptl.formats.flight_recorder import FrDump, FrEntry
from pptl.ir import Schedule
from pptl.op import COMPUTE_KINDS
from pptl.timeline import Timeline

__all__ = ["Diagnosis", "diagnose_dumps", "diagnose_timeline"]


@dataclass(frozen=True)
class Diagnosis:
    """What a hang looks like from its dumps."""

    source: str
    """"flight-recorder" or "timeline"."""
    ops: Mapping[int, tuple[NcclOp, ...]]
    """Rank -> its ops in issue order (NCCL calls; with a timeline: every op of the plan)."""
    front: Mapping[int, NcclOp | None]
    """Rank -> its first op that never completed (None: all completed)."""
    cycle: tuple[tuple[str, str], ...]
    """(node, why the next node waits for it), around the cycle; empty when none was found."""
    cycle_ranks: tuple[int, ...]
    cycle_ops: tuple[tuple[str, ...], ...]
    """The op names (plan op ids where known) of each node of the cycle, in cycle order."""
    order: tuple[str, ...]
    """NCCL order mismatches in words (a rank's front op is not what its peer's front op meets)."""
    collectives: tuple[str, ...]
    """Collective mismatches: different op or sizes at the same group and sequence number."""
    sizes: tuple[str, ...]
    """Send/receive pairs whose sizes differ."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    blocked: tuple[str, ...] = field(default_factory=tuple)
    """Ranks whose front waits on a peer that is itself held up elsewhere (a consequence of the
    hang, not an order mismatch)."""
    cause: Cause = Cause("none", (), "")
    """The root cause in one sentence (:func:`pptl.diagnose.cause.find_cause`)."""
    counts: Counts = EMPTY
    """The count, size and sequence-number facts (:mod:`pptl.diagnose.counts`)."""
    plan_next: Mapping[int, PlanNext] = field(default_factory=dict)
    """With a plan: per stopped rank, the op it should have issued next."""
    no_completion: bool = False
    """No call of any rank is past ``scheduled`` (gloo's dumps: torch's gloo backend never records a
    start or an end): a call done and a call waiting look the same, so no rank is shown waiting from
    state alone; only what does not depend on state (counts, kinds, sizes, a cycle of issue orders)."""

    @property
    def hung(self) -> bool:
        if self.no_completion:
            return bool(self.cycle)  # issue orders no run can complete, whatever completed
        return any(v is not None for v in self.front.values())

    @property
    def ok(self) -> bool:
        """Every call completed and the counts, sizes and kinds match (exit 0)."""
        return not self.hung and not self.counts.mismatched


# ----------------------------------------------------------------------------------------------
# Flight-recorder dumps


def diagnose_dumps(dumps: Sequence[FrDump], schedule: Schedule | None = None) -> Diagnosis:
    """Diagnose from one flight-recorder dump per rank (``schedule``: name ops by the plan).

    Notes: O(entries log entries) plus the cycle search (linear in pending ops).
    """
    notes: list[str] = []
    ops: dict[int, list[NcclOp]] = {}
    groups: dict[str, tuple[int, ...]] = {}
    views: dict[str, dict[tuple[int, ...], list[int]]] = {}
    labels: dict[str, str] = {}
    wrapped_ranks: set[int] = set()
    for d in sorted(dumps, key=lambda d: d.rank):
        if d.rank in ops:
            raise ValueError(f"two dumps for rank {d.rank}")
        ops[d.rank] = _rank_ops(d)
        for g in d.groups.values():
            groups.setdefault(g.name, g.ranks)
            views.setdefault(g.name, {}).setdefault(tuple(sorted(g.ranks)), []).append(d.rank)
            labels.setdefault(g.name, g.desc if g.desc not in ("", "undefined") else g.name)
        if d.entries and d.entries[0].record_id > 0:
            wrapped_ranks.add(d.rank)
            notes.append(f"rank {d.rank}: the ring buffer wrapped (first record {d.entries[0].record_id}); older "
                         "calls are gone, so its sends and receives are not counted and the cycle assumes both ends "
                         "lost the same number (raise TORCH_NCCL_TRACE_BUFFER_SIZE)")
    notes += _renumbered(ops)
    if schedule is not None:
        ops = name_by_plan(ops, schedule, notes)
    frozen = {r: tuple(v) for r, v in ops.items()}
    collectives, mixed = _collective_mismatches(frozen)
    nodes = _match(frozen, mixed)
    front = {r: next((o for o in v if not o.done), None) for r, v in frozen.items()}
    cycle, ranks, names = _cycle(frozen, nodes, groups)
    order, blocked = _order_mismatches(frozen, front, nodes)
    order += _collective_order(frozen, nodes)
    missing = sorted({m for members in groups.values() for m in members} - set(frozen))
    if missing:
        notes.append(f"no dump for rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}: "
                     "their ops are unknown")
    counts = count_calls(frozen, groups, frozenset(wrapped_ranks))
    counts = replace(counts, members=group_members(views, labels, frozen))
    # gloo's dumps leave every call "scheduled": nothing tells a call that waits from one that is done. NCCL's
    # record completion, so an NCCL dump with every call "scheduled" is a hang at the first call, and says so.
    no_completion = any(d.entries for d in dumps) and all(
        e.state == "scheduled" and e.profiling_name.startswith("gloo:") for d in dumps for e in d.entries)
    if no_completion:
        counts = replace(counts, missing=tuple(MissingDump(m.rank, ()) for m in counts.missing))
        notes.append(_NO_COMPLETION)
    nexts = plan_next(frozen, schedule, [st.rank for st in counts.stopped]) if schedule is not None else {}
    off_plan = [r for r, v in frozen.items() if schedule is not None and
                any(o.is_p2p for o in v) and not any(o.name for o in v)]
    cause = find_cause(counts, frozen, cycle_ranks=ranks, order=collectives + order, plan_next=nexts,
                       plan_pairs=plan_pairs(schedule) if schedule is not None else None, off_plan=off_plan,
                       counterpart=plan_counterparts(schedule) if schedule is not None else None, cycle=cycle,
                       no_completion=no_completion)
    if cause.kind == "no_completion":
        notes.remove(_NO_COMPLETION)  # the cause says it
    return Diagnosis("flight-recorder", frozen, front, cycle, ranks, names, tuple(order), tuple(collectives),
                     tuple(_size_lines(counts)), tuple(notes), tuple(blocked), cause, counts, nexts, no_completion)


_NO_COMPLETION = ("the dumps record no completion (every call is 'scheduled', as gloo's dumps are): which calls "
                  "completed is unknown, so no rank is shown waiting")


def _size_lines(counts: Counts) -> list[str]:
    """The size facts as the ``size_mismatches`` field carries them (the evidence's wording)."""
    return [line[len("sizes: "):] for line in evidence(counts) if line.startswith("sizes: ")]


def _rank_ops(d: FrDump) -> list[NcclOp]:
    """The rank's NCCL calls in issue order; members of a coalesced group take the group's state
    (torch records them without events, so they stay "scheduled" forever).

    torch 2.11 wraps every ``batch_isend_irecv``, even of one op, in a coalesced group: the members
    (``is_p2p`` true) come first, then a ``nccl:coalesced`` entry with ``is_p2p`` false but the
    members' ``p2p_seq_id``. So the members are the entries just before it with both sequence
    numbers equal to its own, whatever ``is_p2p`` says.
    """
    entries = sorted(d.entries, key=lambda e: e.record_id)
    state = [e.state for e in entries]
    for k, e in enumerate(entries):
        if e.kind != "coalesced":
            continue
        key = (e.group, e.p2p_seq_id, e.collective_seq_id)
        j = k - 1
        while j >= 0 and entries[j].kind != "coalesced" and \
                (entries[j].group, entries[j].p2p_seq_id, entries[j].collective_seq_id) == key:
            state[j] = e.state
            j -= 1
    out: list[NcclOp] = []
    count: dict[tuple[str, str, int], int] = {}
    epochs = _epochs(entries)
    for e, st, epoch in zip(entries, state, epochs):
        if e.kind == "coalesced":
            continue
        nth = 0
        if e.is_p2p:
            key = (e.group, e.kind, e.peer)
            nth = count.get(key, 0)
            count[key] = nth + 1
        recv = e.kind == "recv"
        out.append(NcclOp(d.rank, len(out), e.group, e.kind, e.peer, _seq(e), nth,
                          e.output_sizes if recv else e.input_sizes, st, group_desc=e.group_desc,
                          dtypes=e.output_dtypes if recv else e.input_dtypes, epoch=epoch,
                          out_sizes=() if e.is_p2p or e.kind in ("send", "recv") else e.output_sizes))
    return out


def _epochs(entries: Sequence[FrEntry]) -> list[int]:
    """Per entry (in record order), how many times its group's collective numbers started again after it.

    A group destroyed and made again (``destroy_process_group`` then ``init_process_group``) takes the
    same name and numbers its collectives from #1 again, while the recorder keeps the older calls: a
    number below one the group already reached starts a new numbering. Equal numbers do not (the members
    of a coalesced collective share one), so a restart right after #1 is not seen."""
    top: dict[str, int] = {}
    epoch: dict[str, int] = {}
    out = []
    for e in entries:
        if e.is_p2p or e.kind == "coalesced":
            out.append(epoch.get(e.group, 0))
            continue
        if e.collective_seq_id < top.get(e.group, -1):
            epoch[e.group] = epoch.get(e.group, 0) + 1
        top[e.group] = e.collective_seq_id
        out.append(epoch.get(e.group, 0))
    # counted back from the newest numbering: the one a hang is in is 0 on every rank
    return [epoch.get(e.group, 0) - k for e, k in zip(entries, out)]


def _renumbered(ops: Mapping[int, Sequence[NcclOp]]) -> list[str]:
    """A note per rank and group whose collective numbers started again (see :func:`_epochs`)."""
    out = []
    for r in sorted(ops):
        last: dict[str, NcclOp] = {}
        for o in ops[r]:
            if o.is_p2p:
                continue
            before = last.get(o.group)
            if before is not None and o.epoch < before.epoch:
                out.append(f"rank {r}: the collectives of group {o.group_label} start again at #{o.seq} after "
                           f"#{before.seq} (the group was made again under its name); calls are matched within each "
                           "numbering")
            last[o.group] = o
    return out


def _seq(e: FrEntry) -> int:
    return e.p2p_seq_id if e.is_p2p else e.collective_seq_id


def _match(ops: Mapping[int, tuple[NcclOp, ...]], mixed: set[str]) -> dict[tuple[int, int], tuple[tuple[int, int], ...]]:
    """(rank, index) -> the node it belongs to (the keys of the ops that meet). Sizes are compared
    once, by :func:`pptl.diagnose.counts.count_calls`.

    In a group whose ranks issued different collectives at one sequence number (``mixed``), NCCL
    pairs calls that do not belong together; the wait-for cycle is then about which call each rank
    needs, so its collectives are matched by what they are (kind and sizes, k-th occurrence).

    Every op gets a node, also where a dump is inconsistent: the k-th collective a rank issued at one
    sequence number meets the k-th of the others (a coalesced group's members share its number), and
    a send to itself meets the rank's own receive.
    """
    node: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {}
    by_key: dict[tuple[Any, ...], list[NcclOp]] = {}
    for r, seq in ops.items():
        seen: dict[tuple[Any, ...], int] = {}
        for o in seq:
            key: tuple[Any, ...]
            what: tuple[Any, ...]
            if o.kind == "send":
                key = ("p2p", o.group, r, o.peer, o.nth)
            elif o.kind == "recv":
                key = ("p2p", o.group, o.peer, r, o.nth)
            else:
                what = (o.group, o.kind, o.sizes) if o.group in mixed else (o.group, o.match_seq)
                key = ("what" if o.group in mixed else "coll",) + what + (seen.get(what, 0),)
                seen[what] = seen.get(what, 0) + 1
            by_key.setdefault(key, []).append(o)
    for members in by_key.values():
        keys = tuple(sorted((o.rank, o.index) for o in members))
        for k in keys:
            node[k] = keys
    return node


def _shape(sizes: tuple[tuple[int, ...], ...]) -> str:
    return " ".join("x".join(map(str, s)) for s in sizes) or "[]"


def _collective_mismatches(ops: Mapping[int, tuple[NcclOp, ...]]) -> tuple[list[str], set[str]]:
    """Messages, and the groups they concern (the first mismatch per group)."""
    seen: dict[tuple[str, tuple[int, int]], NcclOp] = {}
    out: list[str] = []
    reported: set[str] = set()
    for r in sorted(ops):
        for o in ops[r]:
            if o.kind in ("send", "recv"):
                continue
            first = seen.setdefault((o.group, o.match_seq), o)
            if first is o or o.group in reported:
                continue
            if first.kind != o.kind or _differ(ops, first, o):
                what = f"{first.kind} {_shape(first.sizes)}"
                other = f"{o.kind} {_shape(o.sizes)}"
                why = (" (the ranks issue the group's collectives in different orders)"
                       if _same_calls(ops, o.group, first.rank, o.rank) else "")
                out.append(f"group {o.group_label} collective #{o.seq}: rank {first.rank} issues {what} but rank {o.rank} "
                           f"issues {other}{why}")
                reported.add(o.group)  # later ones follow from the first
    return out, reported


def _differ(ops: Mapping[int, tuple[NcclOp, ...]], a: NcclOp, b: NcclOp) -> bool:
    """Two members' calls of one kind at one sequence number are different calls. Where inputs may differ
    legitimately (an all_to_all's splits, a scatter's root: :func:`sizes_may_differ`), only the same calls
    issued in another order tell them apart; elsewhere the shapes do."""
    if not sizes_may_differ(a.kind)[0]:
        return a.sizes != b.sizes
    return a.sizes != b.sizes and _same_calls(ops, a.group, a.rank, b.rank)


def _same_calls(ops: Mapping[int, tuple[NcclOp, ...]], group: str, a: int, b: int) -> bool:
    """Ranks a and b issued the same collectives (kind, shapes) in ``group``, whatever the order."""

    def calls(r: int) -> list[tuple]:
        return sorted((o.kind, o.sizes) for o in ops[r] if o.group == group and o.kind not in ("send", "recv"))

    return calls(a) == calls(b)


def _cycle(ops: Mapping[int, tuple[NcclOp, ...]], node: Mapping[tuple[int, int], tuple[tuple[int, int], ...]],
           groups: Mapping[str, tuple[int, ...]]
           ) -> tuple[tuple[tuple[str, str], ...], tuple[int, ...], tuple[tuple[str, ...], ...]]:
    g = nx.DiGraph()
    why: dict[tuple[Any, Any], str] = {}

    def edge(before: Any, after: Any, text: str) -> None:
        if before != after and (before, after) not in why:
            g.add_edge(before, after)
            why[(before, after)] = text

    pending = {r: [o for o in v if not o.done] for r, v in ops.items()}
    for r, seq in pending.items():
        prev = None
        for o in seq:
            me = node[(o.rank, o.index)]
            if prev is not None and o.state == "scheduled":
                edge(node[(prev.rank, prev.index)], me, f"next on rank {r}")
            prev = o
            for q in _peers(o, groups):
                if q == r or any(k[0] == q for k in me):
                    continue
                last = pending.get(q)
                if last:  # q never issued its side: it is behind the last op it did issue
                    edge(node[(q, last[-1].index)], me, f"rank {q} issues its side only after this")
    try:
        found = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        return (), (), ()
    by_key = {(o.rank, o.index): o for v in ops.values() for o in v}
    steps = tuple((_node_text(u, by_key), why[(u, v)]) for u, v in found)
    ranks = tuple(sorted({k[0] for u, _ in found for k in u}))
    names = tuple(tuple(by_key[k].label for k in u) for u, _ in found)
    return steps, ranks, names


def _peers(o: NcclOp, groups: Mapping[str, tuple[int, ...]]) -> Iterable[int]:
    if o.kind in ("send", "recv"):
        return (o.peer,)
    return groups.get(o.group, ())


def _node_text(keys: tuple[tuple[int, int], ...], by_key: Mapping[tuple[int, int], NcclOp]) -> str:
    members = [by_key[k] for k in keys]
    members.sort(key=lambda o: (o.kind != "send", o.rank))
    if len(members) == 1:
        return members[0].label
    first = members[0]
    if len(members) > 2 and first.kind not in ("send", "recv") and not any(o.name for o in members) and \
            all((o.kind, o.group, o.match_seq) == (first.kind, first.group, first.match_seq) for o in members):
        # One collective call of a whole group: naming it per rank repeats the same words N times.
        return f"[{first.kind} #{first.seq} (group {first.group_label}) on ranks {_ranks(o.rank for o in members)}]"
    return "[" + " = ".join(o.label for o in members) + "]"


def _collective_order(ops: Mapping[int, tuple[NcclOp, ...]],
                      node: Mapping[tuple[int, int], tuple[tuple[int, int], ...]], limit: int = 64) -> list[str]:
    """Pending collectives of different groups that the ranks issued in different orders.

    Each group's calls match by sequence number, so the groups agree on *what* meets; the hang
    comes from a rank whose stream (or host) runs group B's call before group A's while its peers
    run A's before B's. Only consecutive pending calls of a rank are compared, and the first
    ``limit`` per rank: O(ranks x limit).
    """
    pos: dict[int, dict[tuple, int]] = {}
    firsts: dict[int, list[tuple]] = {}
    label: dict[tuple, NcclOp] = {}
    for r, seq in ops.items():
        pending = [o for o in seq if not o.done and o.kind not in ("send", "recv")][:limit]
        keys = [node[(o.rank, o.index)] for o in pending]
        pos[r] = {k: i for i, k in enumerate(keys)}
        firsts[r] = keys
        for k, o in zip(keys, pending):
            label.setdefault(k, o)
    out: list[str] = []
    seen: set[frozenset] = set()
    for r in sorted(firsts):
        for a, b in zip(firsts[r], firsts[r][1:]):
            pair = frozenset((a, b))
            if a == b or pair in seen:
                continue
            seen.add(pair)
            before = [q for q in pos if a in pos[q] and b in pos[q] and pos[q][a] < pos[q][b]]
            after = [q for q in pos if a in pos[q] and b in pos[q] and pos[q][b] < pos[q][a]]
            if not before or not after:
                continue
            if len(after) > len(before):  # name the odd ones out second
                a, b, before, after = b, a, after, before
            x, y = label[a], label[b]
            what_x = f"{x.kind} #{x.seq} (group {x.group_label})"
            what_y = f"{y.kind} #{y.seq} (group {y.group_label})"
            many = len(after) > 1
            out.append(f"rank{'s' if len(before) > 1 else ''} {_ranks(before)} issue{'' if len(before) > 1 else 's'} "
                       f"{what_x} before {what_y}, but rank{'s' if many else ''} {_ranks(after)} "
                       f"issue{'' if many else 's'} them the other way round: each side waits in the call the "
                       "other has not reached")
    return out


def _order_mismatches(ops: Mapping[int, tuple[NcclOp, ...]], front: Mapping[int, NcclOp | None],
                      node: Mapping[tuple[int, int], tuple[tuple[int, int], ...]]) -> tuple[list[str], list[str]]:
    """(order mismatches, blocked ranks): a rank whose front is a send/receive with a peer whose
    front is a send/receive with a third rank is blocked behind that peer, not out of order with it."""
    out: list[str] = []
    blocked: list[str] = []
    for r in sorted(front):
        o = front[r]
        if o is None or o.kind not in ("send", "recv"):
            continue
        q = o.peer
        other = front.get(q)
        if other is None:
            continue
        mine = node[(o.rank, o.index)]
        if any(k[0] == q for k in mine) and (q, other.index) in mine:
            continue  # both ends are at the same transfer: in flight, not out of order
        match = next((ops[q][k[1]] for k in mine if k[0] == q), None)
        if match is not None and match.index < other.index:
            continue  # the peer is past its side already: this end is late, not out of order
        verb = "sends to" if o.kind == "send" else "waits to receive from"
        later = (f"; rank {q} issues the matching {'receive' if o.kind == 'send' else 'send'} "
                 f"{match.index - other.index} op(s) later ({match.label})" if match is not None
                 else f"; rank {q} never issued the matching {'receive' if o.kind == 'send' else 'send'}")
        held = other.kind in ("send", "recv") and other.peer != r
        (blocked if held else out).append(f"rank {r} {verb} rank {q} ({o.label}) while rank {q} "
                                          f"{'is held up: it ' if held else ''}{_doing(other)}{later}")
    return out, blocked


def _doing(o: NcclOp) -> str:
    if o.kind == "send":
        return f"sends to rank {o.peer} ({o.label})"
    if o.kind == "recv":
        return f"waits to receive from rank {o.peer} ({o.label})"
    return f"waits in {o.kind} ({o.label})"


# ----------------------------------------------------------------------------------------------
# pptl's own partial timeline


def _as_run(timeline: Timeline, schedule: Schedule) -> tuple[dict[int, list[int]], Any, dict[int, int]] | None:
    """(issue order per rank, channel id per op, CUDA streams per rank) as ``pptl run`` executed ``schedule``,
    when ``timeline`` is its record (it names its message mode), else None. The run issues its SENDs (and,
    ``inline``, its RECVs) next to the ops they serve, and opens a communicator per channel
    (:mod:`pptl.run.program`): which messages meet, and which P2P ops wait for each other, follow those,
    not the plan's order and one communicator per pair of ranks. A rank's streams: one per lane and per
    channel (:func:`pptl.run.program.stream_keys`), and NCCL's own for each of its communicators."""
    from pptl.run.program import as_run, orders, stream_keys

    messages = str(timeline.meta.extra.get("messages"))
    prog = as_run(schedule, messages)
    if prog is None:
        return None
    ids: dict[Any, int] = {}
    channel = np.full(len(schedule.ops), -1, dtype=np.int64)
    for rp in prog.ranks:
        for i, ch in sorted(rp.channels.items()):
            channel[i] = ids.setdefault(ch, len(ids))
    streams = {rp.rank: len(set(stream_keys(prog, rp.rank, messages).values()) | {"compute"})
               + len(set(rp.channels.values())) for rp in prog.ranks}
    return orders(prog), channel, streams


def diagnose_timeline(timeline: Timeline, schedule: Schedule) -> Diagnosis:
    """Diagnose from the partial timeline a stopped ``pptl run`` wrote, with the plan that ran.

    Completed ops are the timeline's events (the interrupted step's); every other op of the plan
    is pending. The cycle is PP031's (:func:`pptl.checks.p2p.wait_edges`) among pending ops.
    """
    from pptl.checks.p2p import node_name, wait_edges
    from pptl.issue_order import program

    done = {e.op for e in timeline.events}
    ran = _as_run(timeline, schedule)
    prog, channel, streams = ran if ran is not None else (program(schedule), None, {})
    edges, rep = wait_edges(schedule, prog, "nccl", channel=channel)
    # A receive that completed got its data, so its send completed too (on gloo a send's end is only
    # noticed when the rank next polls it, which a stopped rank may never do).
    done |= {schedule.ops[j].id for i, j in rep.items() if schedule.ops[i].id in done}
    notes = []
    if not timeline.meta.extra.get("partial"):
        notes.append("the timeline holds a completed step, not the interrupted one: pending ops are those of "
                     "that step (was it written by a stopped run?)")
    failed = timeline.meta.extra.get("failed")
    if failed:
        notes.append(f"the run said: {failed}")
    if channel is not None:
        pairs = {(op.rank, op.peer) for op in schedule.ops if op.kind == "SEND"}
        used = len(set(channel[channel >= 0].tolist()))
        if used > len(pairs):
            notes.append(f"pptl run ran these messages on {used} communicators, more than one a sender and "
                         "receiver (it splits a pair's messages where their two orders disagree): each is "
                         "matched, and waits, on its own")
    ops: dict[int, tuple[NcclOp, ...]] = {}
    by_id: dict[str, NcclOp] = {}
    for r, seq in prog.items():
        row = []
        for k, i in enumerate(seq):
            op = schedule.ops[i]
            kind = {"SEND": "send", "RECV": "recv"}.get(op.kind, op.kind)
            o = NcclOp(r, k, "", kind, op.peer if op.kind in ("SEND", "RECV") else -1, k, 0, (),
                       "completed" if op.id in done else "scheduled", name=op.id, step=0)
            row.append(o)
            by_id[op.id] = o
        ops[r] = tuple(row)
    front = {r: next((o for o in v if not o.done), None) for r, v in ops.items()}
    merged = {v: k for k, v in rep.items()}
    pend = {i for i, op in enumerate(schedule.ops) if op.id not in done}
    g = nx.DiGraph()
    why: dict[tuple[int, int], str] = {}
    for u, v, text in edges:
        if u in pend and v in pend and (u, v) not in why:
            g.add_edge(u, v)
            why[(u, v)] = text
    try:
        found = nx.find_cycle(g)
        cycle = tuple((node_name(schedule, u, merged), why[(u, v)]) for u, v in found)
        names = tuple((schedule.ops[u].id,) + ((schedule.ops[merged[u]].id,) if u in merged else ()) for u, _ in found)
        ranks = tuple(sorted({schedule.ops[u].rank for u, _ in found}
                             | {schedule.ops[merged[u]].rank for u, _ in found if u in merged}))
    except nx.NetworkXNoCycle:
        cycle, ranks, names = (), (), ()
    nodes = {}
    for i, j in rep.items():  # RECV i meets SEND j
        a, b = by_id[schedule.ops[j].id], by_id[schedule.ops[i].id]
        nodes[(a.rank, a.index)] = nodes[(b.rank, b.index)] = ((a.rank, a.index), (b.rank, b.index))
    for v in ops.values():
        for o in v:
            nodes.setdefault((o.rank, o.index), ((o.rank, o.index),))
    p2p_front = {r: next((o for o in v if not o.done and o.kind in ("send", "recv")), None) for r, v in ops.items()}
    order, blocked = _order_mismatches(ops, p2p_front, nodes)
    cause = find_cause(EMPTY, ops, cycle_ranks=ranks, order=order, cycle=cycle, timeline=True)
    named, stuck = _named_host(timeline.meta.extra), _stuck_hosts(timeline.meta.extra)
    places = _places(schedule, prog, rep)
    if not cycle and timeline.meta.extra.get("messages") == "sync-send" and ran is not None:
        # a run that records which SENDs it kept off the compute stream held only the others (older runs: all)
        beside = set(timeline.meta.extra.get("sends_beside_compute") or ())
        cause = _held_send(schedule, prog, places, done, beside) or cause
    if not cycle and ran is not None and timeline.meta.extra.get("backend") == "nccl":  # a GPU to wait for
        cause = next((c for a, name in stuck if (c := _host_stopped(schedule, prog, places, done, a, name))), cause)
        if cause.kind == "pending":
            cause = _queues_shared(schedule, places, p2p_front, stuck, streams, timeline.meta.extra) or cause
    if cause.kind == "pending" and named is not None:  # where the run last saw the host its failure names
        cause = replace(cause, text=f"{cause.text}; pptl run last saw rank {named[0]}'s host at {named[1]}")
    return Diagnosis("timeline", ops, front, cycle, ranks, names, tuple(order), (), (), tuple(notes), tuple(blocked),
                     cause)


def _held_send(schedule: Schedule, prog: Mapping[int, Sequence[int]], places: _Places,
               done: set[str], beside: set[str]) -> Cause | None:
    """Under ``sync-send`` a rank's first pending op may be a SEND holding its compute stream until the peer
    posts the receive. Where the peer issues that receive after one of its RECVs whose SEND the first rank issues
    later still, neither host can get there: the receiver waits (its gate) for the sender's host, which stops once
    its launch queue fills behind the held SEND. No NCCL op is out of order, so no wait-for cycle shows it.
    ``beside``: ids of the SENDs the run kept off the compute stream (they hold nothing)."""
    ops = schedule.ops
    send_of, recv_of, at = places.send_of, places.recv_of, places.at
    for a, seq in prog.items():
        k_first = _front(schedule, seq, done)
        first = None if k_first is None else seq[k_first]
        if first is None or ops[first].kind != "SEND" or first not in recv_of or ops[first].id in beside:
            continue
        r = recv_of[first]
        b, kr = at[r]
        kb = _front(schedule, prog[b], done)
        for i in prog[b][kb:kr]:
            j = send_of.get(i)
            if ops[i].kind == "RECV" and j is not None and at[j][0] == a and at[j][1] > at[first][1]:
                return Cause("held_send", (a, b), (
                    f"rank {a}'s compute stream is held in {ops[first].id} (sync-send) until rank {b} posts "
                    f"{ops[r].id}, which rank {b} issues {kr - at[i][1]} op(s) after {ops[i].id}; that receive "
                    f"waits for rank {a}'s host to issue {ops[j].id}, {at[j][1] - at[first][1]} op(s) past the held "
                    f"send, and rank {a}'s host stops once its launch queue fills: the hosts wait on each other "
                    "(pptl run now runs such a send beside compute: pptl.run.program.held_sends)"))
    return None


@dataclass(frozen=True)
class _Places:
    """Where a run's ops stand and which messages meet, made once a diagnosis (:func:`_places`)."""

    send_of: Mapping[int, int]
    """RECV -> the SEND it meets."""
    recv_of: dict[int, int]
    """SEND -> its RECV."""
    at: dict[int, tuple[int, int]]
    """Op -> (rank, place in that rank's issue order)."""
    by_id: dict[str, int]
    """Op id -> op (what a run names a host's op by)."""

    def match(self, i: int, kind: str) -> int | None:
        """The other end of message op ``i`` (a SEND's RECV, a RECV's SEND)."""
        return self.recv_of.get(i) if kind == "SEND" else self.send_of.get(i)

    def host_at(self, rank: int, name: str) -> int | None:
        """Where in ``rank``'s issue order its op named ``name`` stands (None: not one of its ops)."""
        i = self.by_id.get(name)
        return self.at[i][1] if i is not None and i in self.at and self.at[i][0] == rank else None


def _places(schedule: Schedule, prog: Mapping[int, Sequence[int]], rep: Mapping[int, int]) -> _Places:
    return _Places(rep, {j: i for i, j in rep.items()}, {i: (r, k) for r, seq in prog.items() for k, i in enumerate(seq)},
                   {op.id: i for i, op in enumerate(schedule.ops)})


def _front(schedule: Schedule, seq: Sequence[int], done: set[str]) -> int | None:
    """Where in ``seq`` (a rank's issue order) its first op not done stands (None: every op done)."""
    return next((k for k, i in enumerate(seq) if schedule.ops[i].id not in done), None)


def _queues_shared(schedule: Schedule, places: _Places, p2p_front: Mapping[int, NcclOp | None],
                   hosts: Sequence[tuple[int, str]], streams: Mapping[int, int], extra: Mapping[str, Any]
                   ) -> Cause | None:
    """Every rank's first pending message (``p2p_front``) was posted by both hosts (each host stood past it and
    its match), none completed, and no wait-for cycle explains it: the GPUs stopped among work already queued. A
    rank with more streams than CUDA_DEVICE_MAX_CONNECTIONS (recorded by the run; CUDA's default where not)
    spreads them over shared hardware queues, where a message spinning for its peer holds what another stream
    queued behind it."""
    from pptl.run.options import CUDA_DEFAULT_CONNECTIONS

    ops = schedule.ops
    raw = extra.get("cuda_connections")
    said = isinstance(raw, int) and not isinstance(raw, bool) and 0 < raw <= 1024
    queues = raw if said else CUDA_DEFAULT_CONNECTIONS
    over = sorted((n, r) for r, n in streams.items() if n > queues)
    if not over:
        return None
    seen = {a: places.host_at(a, name) for a, name in hosts}
    fronts = []
    for a, o in p2p_front.items():
        if o is None:
            continue
        i = places.by_id[o.name]
        other = places.match(i, ops[i].kind)
        if other is None or seen.get(a) is None or o.index >= seen[a]:
            return None
        b, kb = places.at[other]
        if seen.get(b) is None or kb >= seen[b]:  # a host at a RECV may wait there, at its gate: not posted
            return None
        fronts.append((a, i, other))
    if not fronts:
        return None
    n, r = over[-1]
    a, i, other = fronts[0]
    where = "" if said else " (not recorded: CUDA's default)"
    return Cause("queues_shared", (r,) + tuple(sorted({f[0] for f in fronts} - {r})), (
        f"each of ranks {', '.join(str(f[0]) for f in sorted(fronts))} had posted its first pending message and "
        f"its peer the match (e.g. {ops[i].id} and {ops[other].id}), yet none completed, and no wait-for cycle "
        f"explains it: the GPUs stopped among work already queued. Rank {r} ran {n} CUDA streams (one per lane "
        f"and per channel, and NCCL's per communicator) over CUDA_DEVICE_MAX_CONNECTIONS={queues}{where} "
        "hardware queues: streams past them share a queue, where a message spinning for its peer holds what "
        "another stream queued behind it (pptl run now sets 32 where it is unset: pptl.run.options.CUDA_CONNECTIONS)"))


#: What ``pptl run`` says of a hang (pptl.run.launcher): the rank and the op its host last posted.
_STUCK = re.compile(r"rank (\d{1,6}) is stuck at op (.{1,300}?) \(step -?\d{1,9}\)")
_STOPS_AT = COMPUTE_KINDS | {"RECV"}  # a RECV allocates its buffer


def _named_host(extra: Mapping[str, Any]) -> tuple[int, str] | None:
    """(rank, op) of the host a run's failure names stuck (``failed``, read bounded), or None."""
    failed = extra.get("failed")
    m = _STUCK.search(failed[:2000]) if isinstance(failed, str) else None
    return None if m is None else (int(m.group(1)), m.group(2))


def _stuck_hosts(extra: Mapping[str, Any]) -> list[tuple[int, str]]:
    """(rank, op) where pptl run last saw each host: the one its failure names first (``failed``), then every
    rank's of ``hosts`` (runs that keep them), by rank. Both come from a file: bounded, and skipped when malformed."""
    named = _named_host(extra)
    out: list[tuple[int, str]] = [] if named is None else [named]
    hosts = extra.get("hosts")
    if isinstance(hosts, Mapping) and len(hosts) <= 4096:
        for r, at in hosts.items():
            if (isinstance(r, str) and r.isascii() and r.isdecimal() and len(r) <= 6 and isinstance(at, Mapping)
                    and isinstance(at.get("op"), str) and len(at["op"]) <= 300 and (int(r), at["op"]) not in out):
                out.append((int(r), at["op"]))
    return out[:1] + sorted(out[1:]) if named is not None else sorted(out)


def _host_stopped(schedule: Schedule, prog: Mapping[int, Sequence[int]], places: _Places,
                  done: set[str], a: int, name: str) -> Cause | None:
    """Rank ``a``'s host stopped issuing at op ``name`` (compute, or a RECV: it allocates its buffer) while
    its GPU had run every compute op issued before it, and a message of that rank stood pending for a peer
    whose front waits for this host. The host waited for its whole GPU (a kernel's first load, an allocation
    the caching allocator had no memory for), so also for the message spinning there: no NCCL op is out of
    order."""
    ops = schedule.ops
    seq = prog.get(a, ())
    k_x = places.host_at(a, name)
    if k_x is None or ops[seq[k_x]].kind not in _STOPS_AT:
        return None
    x = seq[k_x]
    if any(ops[i].kind in COMPUTE_KINDS and ops[i].id not in done for i in seq[:k_x]):
        return None  # its GPU was still behind: a full launch queue stops a host without any first use
    if any(ops[u].id not in done for u, v in schedule.deps if v == x and ops[u].kind == "RECV"):
        return None
    at = places.at
    for i in seq[:k_x]:
        if ops[i].id in done or ops[i].kind not in ("SEND", "RECV"):
            continue
        other = places.match(i, ops[i].kind)
        if other is None:
            continue
        b, kp = at[other]
        front = _front(schedule, prog[b], done)
        if front is None or kp <= front:
            continue
        f = prog[b][front]
        j = places.match(f, ops[f].kind)  # the peer's front needs op j of this host
        if j is None or at[j][0] != a or at[j][1] < k_x:
            continue
        return Cause("host_stopped", (a, b), (
            f"rank {a}'s host stopped at {ops[x].id} with its GPU done with every compute op before it, while "
            f"{ops[i].id} waited on that GPU for rank {b} to post {ops[other].id}, {kp - front} op(s) past rank {b}'s "
            f"front {ops[f].id}, which waits for rank {a}'s host to issue {ops[j].id}: a host that waits for its "
            "whole GPU (a kernel's first load, an allocation the caching allocator has no memory for) waits for "
            "that message too (pptl run now runs each rank's ops once before its first step: Executor.prime)"))
    return None
