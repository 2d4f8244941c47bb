"""The one sentence that leads a diagnosis: the root cause and the ranks, then the evidence.

Facts come from :mod:`pptl.diagnose.counts` (counts, sizes, sequence numbers) and the wait-for cycle.
They are ranked by how directly they explain a hang, so that the first line names what went wrong and
not what followed from it:

1. a rank left no dump while others wait for it (it exited or crashed); then dumps that list different
   members for a group some rank waits in (``new_group`` called with different ranks);
2. a pair of ranks disagrees on how many transfers there are, and the side with fewer went on past
   them (it skipped transfers, rather than not having reached them);
3. a collective issued on some ranks only (one rank's calls are another's with calls inserted);
4. collectives of another kind, size (inputs, outputs; an all_to_all's totals, not its per-rank splits) or
   dtype at one sequence number;
5. a send and its receive of different sizes or dtypes;
6. a rank that stopped issuing calls while a peer waits for its next one;
7. a wait-for cycle (calls issued in orders NCCL cannot satisfy);
8. what remains: counts that differ so far, collectives some member has not issued, calls that
   completed without a counterpart, a collective some members have not reached (still scheduled where
   others started it), pending calls.

The words come from the facts (ranks, groups, counts, kinds, sizes), never from what a run was meant
to show, so the same sentence serves dumps nobody here has seen.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from pptl.diagnose.counts import (
    CollectiveDiff,
    CollectiveGap,
    Counts,
    ExtraCollectives,
    GroupMembers,
    MissingDump,
    Orphan,
    PairCount,
    SizeMismatch,
    Stopped,
)
from pptl.diagnose.ops import NcclOp, dtypes_differ, ranks_text

__all__ = ["Cause", "PlanNext", "find_cause", "evidence"]


@dataclass(frozen=True)
class PlanNext:
    """With ``--plan``: what a rank should have issued after its last call."""

    op: str
    """The plan's next op on the rank (any lane)."""
    comm: str
    """The plan's next SEND/RECV on the rank ("" when none is left)."""


@dataclass(frozen=True)
class Cause:
    """The root cause of a diagnosis."""

    kind: str
    """missing_dump, group_members, p2p_count, extra_collective, collective_kind, collective_size, collective_dtype, p2p_size, stopped,
    cycle, held_send (a pptl run timeline: a sync-send SEND whose receive neither host can reach), host_stopped
    (a pptl run timeline: a host that waited for its whole GPU while a message spun there for a peer waiting on
    that host), queues_shared (a pptl run timeline: every first pending message posted on both sides, none done,
    more CUDA streams than hardware queues), p2p_behind,
    collective_missing, orphan, collective_state, pending, no_completion (dumps that record no completion, as
    gloo's: no wait can be shown), or none."""
    ranks: tuple[int, ...]
    """The ranks the sentence names, the one at fault first where there is one."""
    text: str


def find_cause(counts: Counts, ops: Mapping[int, tuple[NcclOp, ...]], *, cycle_ranks: Sequence[int] = (),
               order: Sequence[str] = (), plan_next: Mapping[int, PlanNext] | None = None,
               plan_pairs: Mapping[tuple[int, int], int] | None = None, off_plan: Sequence[int] = (),
               counterpart: Mapping[str, str] | None = None, cycle: Sequence[tuple[str, str]] = (),
               no_completion: bool = False, timeline: bool = False) -> Cause:
    """The first fact in the order of the module docstring.

    Args:
        order: the order-mismatch sentences of the wait-for analysis (the first one explains a cycle).
        plan_next: per rank, what the plan says comes after the rank's last call.
        plan_pairs: (src, dst) -> the plan's sends per step, to say which side follows the plan.
        off_plan: ranks whose send/receive order does not follow the plan's (``--plan``).
        counterpart: plan op id of a SEND or RECV -> the peer's op it meets (``--plan``).
        cycle: the wait-for cycle, (node, why the next node waits for it): named where no order
            sentence explains it (ranks stuck in collectives of different groups).
        no_completion: no call of any rank is past "scheduled" (gloo's dumps): a pending call proves no
            wait, so none is claimed; the facts that do not depend on state still lead.
        timeline: the ops come from a run's own timeline, not from dumps (how a cause not found is said).
    """
    cp = counterpart or {}
    for m in counts.missing:
        if m.waiting:
            return _missing(m, cp)
    for gm in counts.members:
        if gm.waiting:
            return _members(gm)
    skipped = [p for p in counts.pairs if p.moved_on]
    if skipped:
        return _pair(skipped[0], counts.pairs, plan_pairs or {})
    if counts.extra:
        return _extra(counts.extra[0])
    for want in ("kind", "size", "dtype"):
        d = next((d for d in counts.diffs if d.what == want and not d.reordered), None)
        if d is not None:
            return _diff(d)
    if counts.sizes:
        return _size(counts.sizes[0])
    if counts.stopped:
        return _stopped(counts.stopped[0], (plan_next or {}).get(counts.stopped[0].rank), cp)
    if cycle_ranks:
        odd = [r for r in off_plan if r in cycle_ranks]
        return Cause("cycle", tuple(cycle_ranks), f"wait-for cycle across ranks {ranks_text(cycle_ranks)}"
                     + (f": {order[0]}" if order else _cycle_words(cycle))
                     + (f"; rank{_s(len(odd))} {ranks_text(odd)} do{'' if len(odd) > 1 else 'es'} not issue "
                        "the plan's send/receive order (another schedule?)" if odd else ""))
    if counts.pairs:
        p = counts.pairs[0]
        return Cause("p2p_behind", (p.src, p.dst), _pair_words(p) + " so far")
    if counts.gaps:
        g = counts.gaps[0]
        return Cause("collective_missing", tuple(g.missing) + tuple(o.rank for o in g.ops), _gap_words(g))
    if counts.orphans:
        return Cause("orphan", (counts.orphans[0].op.rank, counts.orphans[0].peer), _orphan_words(counts.orphans[0]))
    if counts.states:
        return _behind(counts.states[0])
    if no_completion:
        gone = [m.rank for m in counts.missing]
        return Cause("no_completion", tuple(gone),
                     "no hang shown: the dumps record no completion (every call is 'scheduled', as gloo's dumps are), "
                     "so no rank can be shown waiting; the counts, kinds and sizes match"
                     + (f" (no dump from rank{_s(len(gone))} {ranks_text(gone)})" if gone else ""))
    pending = [next(o for o in v if not o.done) for _, v in sorted(ops.items()) if any(not o.done for o in v)]
    if pending:
        return Cause("pending", tuple(o.rank for o in pending),
                     f"rank{'s' if len(pending) > 1 else ''} {ranks_text(o.rank for o in pending)} "
                     f"wait{'' if len(pending) > 1 else 's'} in {pending[0].label}"
                     f"{' and more' if len(pending) > 1 else ''}; the {'timeline shows' if timeline else 'dumps show'} "
                     "no count, size, order or cycle that explains it ("
                     + ("" if timeline else "a rank outside the dumps, or ") + "a host blocked outside NCCL?)")
    for m in counts.missing:
        return Cause("missing_dump", (m.rank,), f"every call in the dumps completed, but rank {m.rank} left no dump")
    return Cause("none", (), "no hang: every call completed and the counts, sizes and kinds match")


def evidence(counts: Counts, plan_next: Mapping[int, PlanNext] | None = None) -> list[str]:
    """One line per fact, in the order of the module docstring."""
    out = [f"missing: rank {m.rank} left no dump" + (f"; waiting for it: {_some(m.waiting)}" if m.waiting else "")
           for m in counts.missing]
    for gm in counts.members:
        out.append(f"groups: {_members_words(gm)}")
    for p in counts.pairs:
        out.append(f"counts: group {_gl(p.sends or p.recvs)}, rank {p.src} -> rank {p.dst}: {len(p.sends)} send"
                   f"{_s(len(p.sends))}, {len(p.recvs)} receive{_s(len(p.recvs))}; without a counterpart: "
                   f"{_some(p.unmatched)}{_why_not_skipped(p)}")
    for e in counts.extra:
        met = "; ".join(f"{x.label} with {y.label} ({y.kind} {_numel(y)}, {y.state})" for x, y in e.met[:3])
        out.append(f"collectives: group {_gl(e.extra)}: rank {e.rank} issued {e.counts[0]}, rank {e.other} "
                   f"{e.counts[1]}; only rank {e.rank} issued {_some(e.extra)}"
                   + (f"; at the same sequence number NCCL paired {met}" if met else ""))
    for d in counts.diffs:
        out.append(f"collectives: group {_gl(d.ops)} #{d.seq}: "
                   + _by_value([(o.rank, f"{o.kind} {_numel_io(o, d)}{' ' + o.dtype if d.what == 'dtype' else ''} "
                                          f"({o.state})") for o in d.ops])[0]
                   + (" (the same calls in another order)" if d.reordered else f" ({d.what} differs)")
                   + _totals(d))
    for d in counts.states:
        out.append(f"collectives: group {_gl(d.ops)} #{d.seq}: "
                   + ", ".join(f"rank {o.rank} {o.kind} {o.state}" for o in d.ops) + " (state differs)")
    for g in counts.gaps:
        out.append(f"collectives: {_gap_words(g)}")
    for z in counts.sizes:
        out.append(f"sizes: {_size_words(z)}")
    for o in counts.orphans:
        out.append(f"completed without a counterpart: {_orphan_words(o)}")
    for st in counts.stopped:
        out.append(f"stopped: {_stopped(st, (plan_next or {}).get(st.rank)).text}")
    return out


# ----------------------------------------------------------------------------------------------


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _gl(ops: Sequence[NcclOp]) -> str:
    return ops[0].group_label if ops else "?"


def _some(ops: Sequence[NcclOp], k: int = 3) -> str:
    shown = ", ".join(f"{o.label} ({o.state})" for o in ops[:k])
    return shown + (f" and {len(ops) - k} more" if len(ops) > k else "")


def _numel(o: NcclOp) -> str:
    n = sum(o.numels)
    return f"of {n} element{_s(n)}" if o.sizes else "(no sizes recorded)"


def _noun(p: PairCount, n: int) -> str:
    """What the pair's transfers carry, as the plan names them on either end (``--plan``), else "message"."""
    flows = {o.flow for o in p.sends + p.recvs if o.flow}
    what = {"F": "activation", "B": "gradient"}.get(next(iter(flows)), "message") if len(flows) == 1 else "message"
    return f"{n} {what}{_s(n)}"


def _side(o: NcclOp, counterpart: Mapping[str, str]) -> str:
    """`` (the plan's other end: OP)`` where the plan names what the peer should have issued."""
    return f" (the plan's other end: {counterpart[o.name]})" if o.name in counterpart else ""


def _why_not_skipped(p: PairCount) -> str:
    """Why the short side may only be behind (the count is then not the cause by itself)."""
    if p.moved_on:
        return ""
    mine = p.recvs if p.short == p.dst else p.sends
    if not mine:
        return f" (rank {p.short} issued none)"
    if not all(o.done for o in mine):
        return f" (rank {p.short}'s last one has not completed: it may be held up rather than short)"
    return f" (rank {p.short} issued nothing after its last one of this pair)"


def _missing(m: MissingDump, counterpart: Mapping[str, str]) -> Cause:
    waiters = sorted({o.rank for o in m.waiting})
    first = m.waiting[0]
    more = f" (and {len(m.waiting) - 1} more pending call{_s(len(m.waiting) - 1)})" if len(m.waiting) > 1 else ""
    return Cause("missing_dump", (m.rank, *waiters),
                 f"rank {m.rank} left no dump and rank{_s(len(waiters))} {ranks_text(waiters)} "
                 f"wait{'' if len(waiters) > 1 else 's'} for it in {first.label}{_side(first, counterpart)}{more}: "
                 f"rank {m.rank} exited, crashed or was killed before the others timed out (its log says why)")


def _members_words(gm: GroupMembers) -> str:
    return f"the dumps disagree on the members of group {gm.label}: " + ", ".join(
        f"rank{_s(len(rs))} {ranks_text(rs)} list{'' if len(rs) > 1 else 's'} "
        f"{'ranks ' + ranks_text(m) if m else 'no rank'}" for m, rs in gm.views)


def _members(gm: GroupMembers) -> Cause:
    waiters = sorted({o.rank for o in gm.waiting})
    odd = [r for _, rs in gm.views[1:] for r in rs]
    rest = list(gm.views[0][1])
    return Cause("group_members", tuple(dict.fromkeys([*odd, *rest, *waiters])),
                 f"{_members_words(gm)} (new_group called with different ranks: the communicators differ, so the "
                 f"group's calls cannot meet); rank{_s(len(waiters))} {ranks_text(waiters)} "
                 f"wait{'' if len(waiters) > 1 else 's'} in {gm.waiting[0].label}"
                 + (f" and {len(gm.waiting) - 1} more" if len(gm.waiting) > 1 else ""))


def _pair_words(p: PairCount) -> str:
    ns, nr = len(p.sends), len(p.recvs)
    g = _gl(p.sends or p.recvs)
    if ns > nr:
        return (f"rank {p.src} sent {_noun(p, ns)} to rank {p.dst} (group {g}), which posted "
                f"{'only ' if nr else ''}{nr} receive{_s(nr)}")
    return (f"rank {p.dst} posted {nr} receive{_s(nr)} from rank {p.src} (group {g}), which sent "
            f"{'only ' if ns else ''}{_noun(p, ns)}")


def _pair(p: PairCount, pairs: Sequence[PairCount], plan_pairs: Mapping[tuple[int, int], int]) -> Cause:
    text = _pair_words(p)
    ns, nr = len(p.sends), len(p.recvs)
    back = next((q for q in pairs if (q.group, q.src, q.dst) == (p.group, p.dst, p.src)), None)
    if back is not None:
        text += (f"; rank {p.dst} sent {_noun(back, len(back.sends))} back and rank {p.src} "
                 f"posted {len(back.recvs)} receive{_s(len(back.recvs))}")
    hi, lo = max(ns, nr), min(ns, nr)
    text += f" (the ranks disagree on the number of transfers, {hi} vs {lo}: micro-batches, vpp or schedule differ?"
    planned = plan_pairs.get((p.src, p.dst))
    if planned in (ns, nr) and ns != nr:
        follows = p.src if planned == ns else p.dst
        text += f" rank {follows}'s {planned} is the plan's"
    return Cause("p2p_count", (p.src, p.dst), text + ")")


def _extra(e: ExtraCollectives) -> Cause:
    x = e.extra[0]
    more = f" and {len(e.extra) - 1} more" if len(e.extra) > 1 else ""
    text = (f"rank {e.rank} issued {x.kind} {_numel(x)} (#{x.seq}, group {x.group_label}){more} that rank {e.other} "
            f"never issued: a collective issued on rank {e.rank} only ({e.counts[0]} vs {e.counts[1]} collectives "
            "in the group)")
    if e.met:
        y = e.met[0][1]
        text += f"; NCCL paired it with rank {e.other}'s {y.kind} {_numel(y)} ({y.state})"
    return Cause("extra_collective", (e.rank, e.other), text)


def _diff(d: CollectiveDiff) -> Cause:
    parts, ranks = _by_value([(o.rank, f"{o.kind} {_numel_io(o, d)}" + (f" {o.dtype}" if d.what == "dtype" else ""))
                              for o in d.ops])
    what = {"kind": "a collective of another kind", "size": "collectives of different sizes",
            "dtype": "collectives of different dtypes"}[d.what]
    return Cause(f"collective_{d.what}", ranks,
                 f"{what} at one sequence number: collective #{d.seq} of group {_gl(d.ops)} is {parts}{_totals(d)}")


def _numel_io(o: NcclOp, d: CollectiveDiff) -> str:
    """``of N elements``, and what it writes where only the members' outputs differ, or an all_to_all's
    totals do (``of 32 elements into 96``)."""
    outs_differ = len({x.numels for x in d.ops}) == 1 and len({x.out_numels for x in d.ops if x.out_sizes}) > 1
    if o.out_sizes and (d.totals is not None or outs_differ):
        return f"{_numel(o)} into {sum(o.out_numels)}"
    return _numel(o)


def _totals(d: CollectiveDiff) -> str:
    """An all_to_all whose splits do not add up (torchfrtrace: total input numel vs total output numel)."""
    if d.totals is None:
        return ""
    return (f"; the members send {d.totals[0]} elements in all but receive {d.totals[1]} (an all_to_all's splits "
            "may differ per rank, their totals may not)")


def _by_value(items: Sequence[tuple[int, str]]) -> tuple[str, tuple[int, ...]]:
    """``rank 0 X, rank 1 Y``; where several ranks share a value, ``ranks 0-9, 11 X, rank 10 Y: rank 10
    differs from the other 11`` (torchfrtrace's culprit). Also the ranks, the odd ones first."""
    by: dict[str, list[int]] = {}
    for r, t in items:
        by.setdefault(t, []).append(r)
    if all(len(rs) == 1 for rs in by.values()):
        return ", ".join(f"rank {r} {t}" for r, t in items), tuple(r for r, _ in items)
    parts = sorted(by.items(), key=lambda kv: kv[1][0])
    text = ", ".join(f"rank{_s(len(rs))} {ranks_text(rs)} {t}" for t, rs in parts)
    sizes = sorted((len(rs) for rs in by.values()), reverse=True)
    odd = sorted(r for rs in by.values() if len(rs) < sizes[0] for r in rs)
    if sizes[0] > sizes[1]:
        rest = sizes[0]
        text += (f": rank{_s(len(odd))} {ranks_text(odd)} differ{'' if len(odd) > 1 else 's'} from the other "
                 f"{rest}")
    ranks = tuple(r for rs in sorted(by.values(), key=lambda rs: (len(rs), rs[0])) for r in rs)
    return text, ranks


def _size_words(z: SizeMismatch) -> str:
    typed = dtypes_differ(z.send, z.recv)
    a, b = (f"{o.shape} {o.dtype}" if typed else o.shape for o in (z.send, z.recv))
    n, m = sum(z.send.numels), sum(z.recv.numels)
    what = f"{n} vs {m} elements" if n != m else f"{n} elements of {z.send.dtype} vs {z.recv.dtype}"
    return (f"rank {z.send.rank} sends {a} to rank {z.recv.rank} ({z.send.label}), which receives "
            f"{b} ({z.recv.label}): {what} ({z.count} of {z.pairs} transfer{_s(z.pairs)} of the pair differ)")


def _size(z: SizeMismatch) -> Cause:
    what = "sizes" if z.send.numels != z.recv.numels else "dtypes"
    return Cause("p2p_size", (z.send.rank, z.recv.rank), f"a send and its receive of different {what}: " + _size_words(z))


def _stopped(st: Stopped, nxt: PlanNext | None, counterpart: Mapping[str, str] | None = None) -> Cause:
    waiters = sorted({o.rank for o in st.waiting})
    last = f"its last call {st.last.label} completed" if st.last is not None else "its dump holds no call"
    text = (f"rank {st.rank} stopped issuing: {last}, and rank{_s(len(waiters))} "
            f"{ranks_text(waiters)} wait{'' if len(waiters) > 1 else 's'} for it in {st.waiting[0].label}")
    if nxt is None and counterpart:
        text += _side(st.waiting[0], counterpart)
    if nxt is not None and nxt.comm:
        text += f"; the plan's next call on rank {st.rank} is {nxt.comm}"
        if nxt.op != nxt.comm:
            text += f" (after {nxt.op})"
    elif nxt is not None:
        text += f"; the plan's next op on rank {st.rank} is {nxt.op}"
    return Cause("stopped", (st.rank, *waiters), text)


_STATE_ORDER = {"scheduled": 0, "started": 1, "completed": 2}


def _behind(d: CollectiveDiff) -> Cause:
    low = min(_STATE_ORDER.get(o.state, 0) for o in d.ops)
    slow = [o.rank for o in d.ops if _STATE_ORDER.get(o.state, 0) == low]
    ahead = [o for o in d.ops if _STATE_ORDER.get(o.state, 0) > low]
    x = d.ops[0]
    many = len(slow) > 1
    return Cause("collective_state", (*slow, *(o.rank for o in ahead)),
                 f"rank{_s(len(slow))} {ranks_text(slow)} {'have' if many else 'has'} not reached {x.kind} #{d.seq} "
                 f"(group {x.group_label}; {d.ops[[o.rank for o in d.ops].index(slow[0])].state}) that rank"
                 f"{_s(len(ahead))} {ranks_text(o.rank for o in ahead)} {'are' if len(ahead) > 1 else 'is'} in "
                 f"({ahead[0].state}): {'their' if many else 'its'} stream is held up by earlier work, or "
                 f"{'their hosts' if many else 'its host'} stopped feeding it")


def _cycle_words(cycle: Sequence[tuple[str, str]], shown: int = 4) -> str:
    """``: B waits for A (why); A waits for B (why)``: the calls of a cycle no order sentence explains."""
    if not cycle:
        return ""
    n = len(cycle)
    steps = [f"{cycle[(k + 1) % n][0]} waits for {cycle[k][0]} ({cycle[k][1]})" for k in range(min(n, shown))]
    return ": " + "; ".join(steps) + (f"; and {n - shown} more" if n > shown else "")


def _gap_words(g: CollectiveGap) -> str:
    seqs = f"#{g.first}" if g.first == g.last else f"#{g.first}-#{g.last}"
    issued = ", ".join(f"rank {o.rank} {o.kind} {_numel(o)} ({o.state})" for o in g.ops)
    return (f"group {_gl(g.ops)} {seqs}: issued by {issued}; never by rank{_s(len(g.missing))} "
            f"{ranks_text(g.missing)}")


def _orphan_words(o: Orphan) -> str:
    many = len(o.candidates) > 1
    c = (f": NCCL may have paired it with rank {o.peer}'s {_some(o.candidates)}, which ran while "
         f"{'their' if many else 'its'} own counterpart{'s' if many else ''} had not started" if o.candidates else "")
    return f"{o.op.label} completed although rank {o.peer} never issued its counterpart{c}"
