"""NCCL calls matched by count and order: what one rank issued that its peers never did.

NCCL matches without tags. Per group and ordered pair of ranks, the k-th send of the sender meets the
k-th receive of the receiver; a collective meets its group's members at the same sequence number. So
the facts of a hang that is not a cycle are counts and positions:

- :class:`PairCount`: the sender issued more sends to a peer than the peer posted receives (or fewer).
- :class:`SizeMismatch`: the k-th send and the k-th receive of a pair move different element counts
  or element types.
- :class:`CollectiveGap`: a group's collective #s that some members issued and others never did.
- :class:`CollectiveDiff`: members issued collectives of another kind, size or dtype at one sequence number.
- :class:`ExtraCollectives`: one member's collectives of a group are another's with calls inserted
  (a collective issued on some ranks only, e.g. inside ``if rank == 0``).
- :class:`Orphan`: a call that *completed* although its counterpart was never issued: NCCL paired it
  with some other call of the peer on the same communicator (a send against an all_reduce), garbage in.
- :class:`Stopped`: a rank whose calls all completed while a peer waits for a call it never issued.
- :class:`MissingDump`: a member of a group with no dump, and the calls that wait for it.

Pure: no torch, no files. Notes: O(calls log calls) overall; the per-group alignment of
:class:`ExtraCollectives` trims the common prefix and suffix, then runs difflib (quadratic in the worst
case) on at most ``_ALIGN_LIMIT`` calls between them.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from pptl.diagnose.ops import NcclOp, a2a_unbalanced, dtypes_differ, sizes_differ, sizes_may_differ

__all__ = ["PairCount", "SizeMismatch", "CollectiveGap", "CollectiveDiff", "ExtraCollectives", "Orphan",
           "Stopped", "MissingDump", "GroupMembers", "Counts", "group_members", "EMPTY", "count_calls", "counts_dict"]

_ALIGN_LIMIT = 4096


@dataclass(frozen=True)
class PairCount:
    """Sends ``src`` issued to ``dst`` in ``group`` against the receives ``dst`` posted from ``src``."""

    group: str
    src: int
    dst: int
    sends: tuple[NcclOp, ...]
    recvs: tuple[NcclOp, ...]
    moved_on: bool
    """Every call of the side with fewer completed and its host issued more calls after them: it skipped
    the transfers rather than not having reached them (a host issues NCCL calls without waiting for them,
    unless something blocks it)."""

    @property
    def short(self) -> int:
        """The rank that issued fewer."""
        return self.dst if len(self.recvs) < len(self.sends) else self.src

    @property
    def unmatched(self) -> tuple[NcclOp, ...]:
        """The calls of the longer side beyond the shorter side's count."""
        n = min(len(self.sends), len(self.recvs))
        return self.sends[n:] if len(self.sends) > n else self.recvs[n:]


@dataclass(frozen=True)
class SizeMismatch:
    """The first send/receive pair of ``src -> dst`` whose element counts (or types) differ, and how many differ."""

    send: NcclOp
    recv: NcclOp
    count: int
    pairs: int
    """Matched pairs compared."""


@dataclass(frozen=True)
class CollectiveGap:
    """Collectives #first..#last of a group that ``issued`` ranks issued and ``missing`` never did."""

    group: str
    first: int
    last: int
    ops: tuple[NcclOp, ...]
    """The calls at #first, one per rank that issued it."""
    missing: tuple[int, ...]


@dataclass(frozen=True)
class CollectiveDiff:
    """Members issued calls of different kinds or element counts at one sequence number of a group."""

    group: str
    seq: int
    ops: tuple[NcclOp, ...]
    reordered: bool = False
    """Every member issued the same calls in the group, in another order: an order fault, not a kind
    or size fault (the wait-for cycle explains it)."""
    totals: tuple[int, int] | None = None
    """An all_to_all whose members send (first) and receive (second) different numbers of elements in all
    (torchfrtrace's "Input/output mismatch"); its splits may differ per rank, its totals may not."""

    @property
    def what(self) -> str:
        """"kind" when the kinds differ, "size" when the element counts do (inputs, outputs, an
        all_to_all's totals), "dtype" when the element types do, else "state"."""
        if len({o.kind for o in self.ops}) > 1:
            return "kind"
        if sizes_differ(self.ops) or self.totals is not None or \
                (self.reordered and len({(o.numels, o.out_numels) for o in self.ops}) > 1):
            return "size"
        return "dtype" if _dtypes_differ(self.ops) else "state"


@dataclass(frozen=True)
class ExtraCollectives:
    """``rank``'s collectives of ``group`` are ``other``'s with ``extra`` inserted (not only at the end)."""

    group: str
    rank: int
    other: int
    extra: tuple[NcclOp, ...]
    counts: tuple[int, int]
    """(rank's count, other's count)."""
    met: tuple[tuple[NcclOp, NcclOp], ...]
    """(extra call, the call of ``other`` at its sequence number): what NCCL paired it with."""


@dataclass(frozen=True)
class Orphan:
    """A call that completed although ``peer`` never issued its counterpart; ``candidates``: the peer's
    calls that have no counterpart either (what NCCL may have paired it with)."""

    op: NcclOp
    peer: int
    candidates: tuple[NcclOp, ...]


@dataclass(frozen=True)
class Stopped:
    """A rank whose calls all completed while ``waiting`` (peers' calls) wait for calls it never issued."""

    rank: int
    last: NcclOp | None
    """Its last call (None: its dump holds no call at all)."""
    waiting: tuple[NcclOp, ...]


@dataclass(frozen=True)
class MissingDump:
    """A member of a group that left no dump, and the pending calls of other ranks that involve it."""

    rank: int
    waiting: tuple[NcclOp, ...]


@dataclass(frozen=True)
class GroupMembers:
    """Dumps that list different members for one group (``pg_config``): the ranks called ``new_group``
    with different rank lists, so their communicators differ and the group's calls cannot meet."""

    group: str
    label: str
    """The group's description where it has one, else its name."""
    views: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]
    """(members a dump lists, the ranks whose dump lists them), the most common first."""
    waiting: tuple[NcclOp, ...]
    """Calls of the group that did not complete."""


@dataclass(frozen=True)
class Counts:
    """Every count-and-order fact of one set of dumps."""

    pairs: tuple[PairCount, ...]
    """Only the pairs whose counts differ."""
    sizes: tuple[SizeMismatch, ...]
    gaps: tuple[CollectiveGap, ...]
    diffs: tuple[CollectiveDiff, ...]
    extra: tuple[ExtraCollectives, ...]
    orphans: tuple[Orphan, ...]
    stopped: tuple[Stopped, ...]
    missing: tuple[MissingDump, ...]
    states: tuple[CollectiveDiff, ...] = ()
    """One collective call (same kind and size on every member) in different states on its members
    (completed on one, started or only scheduled on another): torchfrtrace's state mismatch, which
    tells the rank that has not reached the call; a consequence of a hang more often than its cause."""
    members: tuple[GroupMembers, ...] = ()

    @property
    def mismatched(self) -> bool:
        """A fact that is wrong even when every call completed."""
        return bool(self.pairs or self.sizes or self.gaps or self.diffs or self.extra or self.orphans or self.members)


#: No facts (a view without NCCL calls, such as pptl's own timeline).
EMPTY = Counts((), (), (), (), (), (), (), ())


def count_calls(ops: Mapping[int, tuple[NcclOp, ...]], groups: Mapping[str, tuple[int, ...]],
                wrapped: frozenset[int] = frozenset()) -> Counts:
    """The facts of :mod:`pptl.diagnose.counts` for the ranks that left a dump (``ops``) in ``groups``
    (group name -> global member ranks).

    ``wrapped``: ranks whose ring buffer wrapped (their oldest calls are gone). Their sends and receives
    are not counted (a pair's counts would differ by what each buffer lost; P2P calls carry no number
    that both ends share); their collectives are, from the sequence numbers both still hold.
    """
    p2p: dict[tuple[str, int, int], tuple[list[NcclOp], list[NcclOp]]] = {}
    coll: dict[str, dict[int, list[NcclOp]]] = {}
    for r in sorted(ops):
        for o in ops[r]:
            if o.is_p2p and (r in wrapped or o.peer in wrapped):
                continue
            if o.kind == "send":
                p2p.setdefault((o.group, r, o.peer), ([], []))[0].append(o)
            elif o.kind == "recv":
                p2p.setdefault((o.group, o.peer, r), ([], []))[1].append(o)
            else:
                coll.setdefault(o.group, {}).setdefault(r, []).append(o)
    pairs, sizes, orphans_p2p = _pairs(ops, p2p)
    gaps, diffs, states, orphans_coll = _collectives(ops, coll, groups)
    extra = tuple(e for g in sorted(coll) if (e := _extra(g, coll[g])) is not None)
    orphans = _with_candidates(orphans_p2p + orphans_coll, _ahead(ops, p2p, coll))
    missing = _missing(ops, groups)
    stopped = _stopped(ops, pairs, gaps)
    return Counts(pairs, sizes, gaps, diffs, extra, orphans, stopped, missing, states)


def _dtypes_differ(calls: "tuple[NcclOp, ...] | list[NcclOp]") -> bool:
    """Members that record their dtypes disagree on them (NCCL reduces or moves them as one type)."""
    return len({o.dtypes for o in calls if o.dtypes}) > 1


def _last_index(ops: tuple[NcclOp, ...]) -> int:
    return ops[-1].index if ops else -1


def _pairs(ops: Mapping[int, tuple[NcclOp, ...]], p2p: Mapping[tuple[str, int, int], tuple[list[NcclOp], list[NcclOp]]]
           ) -> tuple[tuple[PairCount, ...], tuple[SizeMismatch, ...], list[tuple[NcclOp, int]]]:
    pairs: list[PairCount] = []
    sizes: list[SizeMismatch] = []
    orphans: list[tuple[NcclOp, int]] = []
    for (g, src, dst), (sends, recvs) in sorted(p2p.items()):
        if src == dst or src not in ops or dst not in ops:
            continue  # a rank's send to itself; or one end left no dump (MissingDump says so)
        n = min(len(sends), len(recvs))
        bad = [(s, r) for s, r in zip(sends, recvs)
               if (s.sizes and r.sizes and s.numels != r.numels) or dtypes_differ(s, r)]
        if bad:
            sizes.append(SizeMismatch(bad[0][0], bad[0][1], len(bad), n))
        if len(sends) == len(recvs):
            continue
        short, mine = (dst, recvs) if len(recvs) < len(sends) else (src, sends)
        # skipped, not blocked: every call of the pair completed and the host issued more after them
        moved_on = bool(mine) and all(o.done for o in mine) and mine[-1].index < _last_index(ops[short])
        pc = PairCount(g, src, dst, tuple(sends), tuple(recvs), moved_on)
        pairs.append(pc)
        orphans += [(o, short) for o in pc.unmatched if o.done]
    return tuple(pairs), tuple(sizes), orphans


def _collectives(ops: Mapping[int, tuple[NcclOp, ...]], coll: Mapping[str, Mapping[int, list[NcclOp]]],
                 groups: Mapping[str, tuple[int, ...]]
                 ) -> tuple[tuple[CollectiveGap, ...], tuple[CollectiveDiff, ...], tuple[CollectiveDiff, ...],
                            list[tuple[NcclOp, int]]]:
    gaps: list[CollectiveGap] = []
    diffs: list[CollectiveDiff] = []
    states: list[CollectiveDiff] = []
    orphans: list[tuple[NcclOp, int]] = []
    for g in sorted(coll):
        members = [r for r in groups.get(g, sorted(coll[g])) if r in ops]
        if len(members) < 2:
            continue
        by_seq: dict[tuple[int, int], dict[int, NcclOp]] = {}
        for r, seq in coll[g].items():
            for o in seq:
                by_seq.setdefault(o.match_seq, {})[r] = o
        # a ring buffer that wrapped lost its oldest calls: only what a rank could still hold is missing
        first = {r: min((o.match_seq for o in coll[g].get(r, ())), default=(0, 0)) for r in members}
        keys = {r: sorted((o.kind, o.numels, o.out_numels, o.dtypes) for o in coll[g].get(r, ())) for r in members}
        reordered = all(k == keys[members[0]] for k in keys.values())
        run: CollectiveGap | None = None
        for key in sorted(by_seq):
            here = by_seq[key]
            s = key[1]
            missing = tuple(r for r in members if r not in here and key >= first[r])
            if missing:
                # a run goes on within one numbering (match_seq[0] is -epoch) at the next number
                if run is not None and run.missing == missing and (run.ops[0].match_seq[0], run.last) == (key[0], s - 1):
                    run = CollectiveGap(g, run.first, s, run.ops, missing)
                else:
                    if run is not None:
                        gaps.append(run)
                    run = CollectiveGap(g, s, s, tuple(here[r] for r in sorted(here)), missing)
                orphans += [(o, missing[0]) for o in here.values() if o.done]
            calls = [here[r] for r in sorted(here)]
            totals = a2a_unbalanced(calls) if not missing and len(calls) == len(members) else None
            if len({o.kind for o in calls}) > 1 or sizes_differ(calls) or _dtypes_differ(calls) or \
                    totals is not None or _reorder_of_splits(calls, reordered):
                diffs.append(CollectiveDiff(g, s, tuple(calls), reordered, totals))
            elif len({o.state for o in calls}) > 1:
                states.append(CollectiveDiff(g, s, tuple(calls)))
        if run is not None:
            gaps.append(run)
    return tuple(gaps), tuple(diffs), tuple(states), orphans


def _reorder_of_splits(calls: list[NcclOp], reordered: bool) -> bool:
    """Calls whose sizes may differ per rank (all_to_all splits) that differ here, not all completed, where
    every member issued the same calls in another order: two different calls met (as torchfrtrace, an
    all_to_all's splits are no fault by themselves)."""
    return (reordered and sizes_may_differ(calls[0].kind)[0] and not all(o.done for o in calls)
            and len({(o.numels, o.out_numels) for o in calls}) > 1)


def _extra(group: str, per_rank: Mapping[int, list[NcclOp]]) -> ExtraCollectives | None:
    """The longest rank's collectives against the shortest's, aligned by (kind, element counts): the
    common prefix and suffix first (linear), difflib only on what lies between (at most _ALIGN_LIMIT)."""
    counts = {r: len(v) for r, v in per_rank.items()}
    if len(counts) < 2 or len(set(counts.values())) < 2:
        return None
    long_r = min(counts, key=lambda r: (-counts[r], r))
    short_r = min(counts, key=lambda r: (counts[r], r))
    # from the first number both still hold (a wrapped buffer lost the oldest)
    first = max(min(o.match_seq for o in per_rank[short_r]) if per_rank[short_r] else (0, 0),
                min(o.match_seq for o in per_rank[long_r]))
    a = [o for o in per_rank[short_r] if o.match_seq >= first]
    b = [o for o in per_rank[long_r] if o.match_seq >= first]
    if len(b) <= len(a):
        return None  # from the first number both hold, the long rank issued no more: nothing was inserted
    ka, kb = [(o.kind, o.numels) for o in a], [(o.kind, o.numels) for o in b]
    p = 0
    while p < len(ka) and ka[p] == kb[p]:
        p += 1
    if p == len(ka):
        return None  # the short rank's calls are a prefix of the long one's: it is behind, not missing a call
    q = 0
    while q < len(ka) - p and ka[-1 - q] == kb[-1 - q]:
        q += 1
    mid_a, mid_b = ka[p:len(ka) - q], kb[p:len(kb) - q]
    if not mid_a:
        picked = list(range(p, len(kb) - q))
    elif len(mid_b) <= _ALIGN_LIMIT:
        codes = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False).get_opcodes()
        if any(tag in ("replace", "delete") for tag, *_ in codes):
            return None  # not the same calls with some added: CollectiveDiff says how they differ
        picked = [p + k for tag, _, _, j1, j2 in codes if tag == "insert" for k in range(j1, j2)]
    else:
        return None
    extra = tuple(b[k] for k in picked)
    at = {o.match_seq: o for o in a}
    met = tuple((o, at[o.match_seq]) for o in extra if o.match_seq in at)
    return ExtraCollectives(group, long_r, short_r, extra, (counts[long_r], counts[short_r]), met)


def _ahead(ops: Mapping[int, tuple[NcclOp, ...]], p2p: Mapping[tuple[str, int, int], tuple[list[NcclOp], list[NcclOp]]],
           coll: Mapping[str, Mapping[int, list[NcclOp]]]) -> dict[int, list[NcclOp]]:
    """Per rank, its calls that started or completed while their counterpart had not started (never
    issued, or still queued): they ran against something else."""
    out: dict[int, list[NcclOp]] = {}

    def ran(o: NcclOp) -> bool:
        return o.state in ("started", "completed")

    for (_, src, dst), (sends, recvs) in p2p.items():
        if src == dst or src not in ops or dst not in ops:
            continue
        for k in range(max(len(sends), len(recvs))):
            s = sends[k] if k < len(sends) else None
            r = recvs[k] if k < len(recvs) else None
            for me, other in ((s, r), (r, s)):
                if me is not None and ran(me) and (other is None or not ran(other)):
                    out.setdefault(me.rank, []).append(me)
    for per_rank in coll.values():
        by_seq: dict[tuple[int, int], list[NcclOp]] = {}
        for seq in per_rank.values():
            for o in seq:
                by_seq.setdefault(o.match_seq, []).append(o)
        for s_, calls in by_seq.items():
            behind = [o for o in calls if not ran(o)] or len(calls) < len(per_rank)
            if behind:
                for o in calls:
                    if ran(o):
                        out.setdefault(o.rank, []).append(o)
    return out


def _with_candidates(found: list[tuple[NcclOp, int]], ahead: Mapping[int, list[NcclOp]]) -> tuple[Orphan, ...]:
    out = []
    for o, peer in found:
        cands = sorted((c for c in ahead.get(peer, ()) if c.kind != o.kind or c.peer != o.rank), key=lambda c: c.index)
        out.append(Orphan(o, peer, tuple(cands[:3])))
    return tuple(out)


def _missing(ops: Mapping[int, tuple[NcclOp, ...]], groups: Mapping[str, tuple[int, ...]]) -> tuple[MissingDump, ...]:
    absent = sorted({m for members in groups.values() for m in members} - set(ops))
    out = []
    for m in absent:
        waiting = tuple(o for r in sorted(ops) for o in ops[r] if not o.done and
                        (o.peer == m if o.is_p2p else m in groups.get(o.group, ())))
        out.append(MissingDump(m, waiting))
    return tuple(out)


def _stopped(ops: Mapping[int, tuple[NcclOp, ...]], pairs: tuple[PairCount, ...],
             gaps: tuple[CollectiveGap, ...]) -> tuple[Stopped, ...]:
    waiting: dict[int, list[NcclOp]] = {}
    for pc in pairs:
        if not pc.moved_on:
            waiting.setdefault(pc.short, []).extend(o for o in pc.unmatched if not o.done)
    for gap in gaps:
        for m in gap.missing:
            waiting.setdefault(m, []).extend(o for o in gap.ops if not o.done)
    out = []
    for r in sorted(waiting):
        seq = ops.get(r, ())
        if r in ops and all(o.done for o in seq) and waiting[r]:
            out.append(Stopped(r, seq[-1] if seq else None,
                               tuple(sorted(waiting[r], key=lambda o: (o.rank, o.index)))))
    return tuple(out)


def group_members(views: Mapping[str, Mapping[tuple[int, ...], list[int]]], labels: Mapping[str, str],
                  ops: Mapping[int, tuple[NcclOp, ...]]) -> tuple[GroupMembers, ...]:
    """The groups whose dumps disagree on their members. ``views``: group -> members (sorted) -> the ranks
    whose dump lists them."""
    out = []
    for g in sorted(views):
        if len(views[g]) < 2:
            continue
        vs = tuple(sorted(((m, tuple(sorted(rs))) for m, rs in views[g].items()), key=lambda v: (-len(v[1]), v[1])))
        waiting = tuple(o for r in sorted(ops) for o in ops[r] if o.group == g and not o.done)
        out.append(GroupMembers(g, labels.get(g, g), vs, waiting))
    return tuple(out)


def counts_dict(c: Counts, plan_next: Mapping[int, Any], op: Callable[[NcclOp], dict[str, Any]]) -> dict[str, Any]:
    """The facts as JSON fields (``op`` renders one call); ``plan_next``: rank -> PlanNext."""

    def ops_(xs: tuple[NcclOp, ...]) -> list[dict[str, Any]]:
        return [op(o) for o in xs]

    return {
        "p2p_counts": [{"group": p.group, "src": p.src, "dst": p.dst, "sends": len(p.sends), "recvs": len(p.recvs),
                        "short": p.short, "moved_on": p.moved_on, "unmatched": ops_(p.unmatched)} for p in c.pairs],
        "p2p_sizes": [{"src": z.send.rank, "dst": z.recv.rank, "send": op(z.send), "recv": op(z.recv),
                       "send_elements": sum(z.send.numels), "recv_elements": sum(z.recv.numels),
                       "differ": z.count, "pairs": z.pairs} for z in c.sizes],
        "collective_gaps": [{"group": g.group, "first": g.first, "last": g.last, "issued": ops_(g.ops),
                             "missing_ranks": list(g.missing)} for g in c.gaps],
        "collective_diffs": [{"group": d.group, "seq": d.seq, "differs": d.what, "reordered": d.reordered,
                              "ops": ops_(d.ops),
                              **({"total_in": d.totals[0], "total_out": d.totals[1]} if d.totals else {})}
                             for d in c.diffs + c.states],
        "extra_collectives": [{"group": e.group, "rank": e.rank, "other": e.other, "counts": list(e.counts),
                               "extra": ops_(e.extra), "met": [[op(x), op(y)] for x, y in e.met]} for e in c.extra],
        "orphans": [{"op": op(o.op), "peer": o.peer, "candidates": ops_(o.candidates)} for o in c.orphans],
        "stopped": [{"rank": s.rank, "last": op(s.last) if s.last is not None else None, "waiting": ops_(s.waiting),
                     "plan_next": ({"op": plan_next[s.rank].op, "comm": plan_next[s.rank].comm}
                                   if s.rank in plan_next else None)} for s in c.stopped],
        "missing_dumps": [{"rank": m.rank, "waiting": ops_(m.waiting)} for m in c.missing],
        "group_members": [{"group": m.group, "views": [{"members": list(v), "ranks": list(rs)} for v, rs in m.views],
                           "waiting": ops_(m.waiting)} for m in c.members],
    }
