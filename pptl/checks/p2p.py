"""P2P semantics: how a RECV finds its SEND, and when waiting on each other hangs.

``pptl check --p2p MODE`` picks one of three models (``Context.p2p``; default ``nccl``):

- **nonblocking**: a SEND is posted and never waits for its RECV (buffered, like an eager
  ``isend``); a RECV matches the SEND of the same data (by identity, as tags would); a rank posts
  a SEND or RECV once the compute before it in its issue order has run.
- **nccl**: NCCL has no tags. Between two ranks, the k-th RECV a rank posts from a peer takes the
  k-th SEND that peer posts to it, whatever data it carries, so a reordered pair is an error even
  when nothing hangs (PP030). A send completes only together with its receive (NCCL's documented
  rule: ungrouped send/recv pairs that wait on each other deadlock), P2P ops towards one peer run
  in issue order on one stream, and each waits for the compute issued before it (the stream
  sync ProcessGroupNCCL does when it posts). This is torch's runtime on NCCL with one P2P
  communicator per pair of ranks; it is conservative for messages small enough to be buffered.
- **blocking**: every op of a rank, SEND and RECV included, waits for the one before it, and a
  SEND and its RECV meet (rendezvous): two ranks that both send to each other first deadlock.

The issue order is the rank's *program*: the order of a torch ``compute_comms`` CSV row (kept in
``schedule.meta["program_order"]`` by :mod:`pptl.formats.torch_csv`, and in plan files made from
it). These rules examine given issue orders only. A schedule without one (pptl's plans, whose
``send``/``recv`` lanes model streams, not an NCCL issue order) always has a safe one whenever its
DAG is acyclic: :func:`pptl.issue_order.program` derives it, and ``pptl export --to torch-csv
--comms`` writes it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from pptl.checks.base import Context, Violation
from pptl.checks.work_arrays import F, G, first_place, group_ids, items_of, sender_stages
from pptl.dag import graph_of, left_in_cycles
from pptl.ir import Schedule
from pptl.issue_order import given_sequences
from pptl.optable import FLOW_CODE, KIND_CODE, LANE_CODE, Columns

__all__ = [
    "fifo_order",
    "p2p_deadlock",
    "wait_edges",
    "node_name",
    "send_before_data",
    "recv_after_use",
]

_COMM = ("SEND", "RECV")
_COMM_SET = frozenset(_COMM)


def _ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th ... 11th, 12th, 13th ... 21st, 22nd, 23rd: 11 to 13 take "th" whatever their last digit."""
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# ----------------------------------------------------------------------------------------------
# Rules


def fifo_order(ctx: Context) -> list[Violation]:
    """PP030: under NCCL (or blocking) matching, the k-th RECV a rank posts from a peer is not
    the data of the k-th SEND that peer posts to it.

    NCCL has no tags: the transfer succeeds with the wrong micro-batch (or hangs on a size
    mismatch), so this is an error even when no cycle forms. One violation per pair of ranks (the
    first mismatch; later ones follow from it). Skipped under ``--p2p nonblocking``.
    Fixture: fixtures/invalid/p2p_nccl_reordered.csv. Notes: O(P2P ops).
    """
    if ctx.p2p == "nonblocking":
        return []
    if _program_arrays(ctx) is None:
        return []
    t = ctx.table
    col = t.columns
    send, recv, nth = _matched(ctx)
    if send.size == 0:
        return []
    s_sender, r_sender = sender_stages(col, send), sender_stages(col, recv)  # message_key of each side
    differ = (t.flow[send] != t.flow[recv]) | (col.direction[send] != col.direction[recv]) | \
        (s_sender != r_sender) | (col.mb[send] != col.mb[recv])
    bad = np.flatnonzero(differ)
    if bad.size == 0:
        return []
    la_rank = _lane_rank(ctx)
    src, dst = la_rank[send[bad]], la_rank[recv[bad]]
    # The first mismatch of each pair of ranks (matches are by pair, then k).
    new = np.ones(bad.size, dtype=bool)
    new[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    out = []
    for i, j, a, b, k in zip(send[bad][new].tolist(), recv[bad][new].tolist(), src[new].tolist(), dst[new].tolist(),
                             nth[bad][new].tolist()):
        ordinal = _ordinal(k + 1)
        si, rj = t.op(i), t.op(j)
        out.append(Violation(
            "PP030", f"{ctx.p2p} matches P2P in order per pair of ranks: rank {a}'s {ordinal} send to "
            f"rank {b} is {_short(si)} but rank {b}'s {ordinal} receive from rank {a} is "
            f"{_short(rj)}; the data would land in the wrong place (reorder one side)", (si.id, rj.id)))
    return out


def send_before_data(ctx: Context) -> list[Violation]:
    """PP032: in a rank's issue order, a SEND comes before the op that produces its data.

    The runtime would send a tensor that does not exist yet (torch raises, or sends stale memory).
    Only schedules with an issue order (torch compute_comms CSVs) are checked.
    Fixture: fixtures/invalid/p2p_send_before_data.csv. Notes: O(ops).
    """
    return _issue_positions(ctx)["SEND"]


def recv_after_use(ctx: Context) -> list[Violation]:
    """PP033: in a rank's issue order, a RECV comes after the op that needs its data.

    torch's runtime waits for a posted receive before that op and fails when there is none.
    Only schedules with an issue order (torch compute_comms CSVs) are checked.
    Fixture: fixtures/invalid/p2p_recv_after_use.csv. Notes: O(ops).
    """
    return _issue_positions(ctx)["RECV"]


def _issue_positions(ctx: Context) -> dict[str, list[Violation]]:
    """PP032 and PP033 in one pass, once per check run."""
    return ctx.once(_issue_positions_of)


def p2p_deadlock(ctx: Context) -> list[Violation]:
    """PP031: the schedule hangs under the chosen P2P model although its data order is fine.

    Builds the wait-for graph of the model (module docstring) over the given issue order: compute
    order, when each P2P op is posted, channel order per peer (nccl), rendezvous of each SEND with the RECV it matches
    (nccl, blocking), and the data needs; a cycle is a hang, printed op by op. Orderings such as a
    RECV deferred to just before its use on both sides of a pair pass torch's
    ``_simulate_comms_compute`` yet hang here under nccl.
    Fixtures: fixtures/invalid/p2p_nccl_hang.csv, p2p_nccl_defer_recv.csv (torch's own defer_pp_recv
    lowering), p2p_blocking_send_first.csv, p2p_blocking_ring.csv (hangs only under blocking).

    Notes: O(ops + edges) (Kahn's algorithm; ``nx.find_cycle`` only on what is left of a cycle).
    """
    s = ctx.schedule
    mode = ctx.p2p
    arrays = _program_arrays(ctx)
    if arrays is None or not ctx.kinds & _COMM_SET:
        return []
    seqs, lengths = arrays
    cols = ctx.table.columns
    matched = _matched(ctx)[:2] if mode != "nonblocking" else None
    left = _left_in_cycles(cols, _wait_arrays(s, cols, mode, seqs, lengths, matched)[:2], matched)
    if not left:
        return []
    # The explanation: the labelled edges among the ops left, and networkx's cycle through them.
    edges, rep = _labelled(s, cols, mode, seqs, lengths, np.arange(len(lengths)), matched)
    import networkx as nx  # only to find and print the cycle the cheap pass proved

    g = nx.DiGraph()
    how: dict[tuple[int, int], str] = {}
    for u, v, why in edges:
        if u in left and v in left:
            g.add_edge(u, v)
            how.setdefault((u, v), why)
    cycle = nx.find_cycle(g)
    merged = {v: k for k, v in rep.items()}
    steps = []
    for u, v in cycle:
        steps.append(f"{node_name(s, u, merged)} -> ({how[u, v]})")
    ranks = sorted({s.ops[u].rank for u, _ in cycle} | {s.ops[merged[u]].rank for u, _ in cycle if u in merged})
    text = " ".join(steps) + f" {node_name(s, cycle[0][0], merged)}"
    model = {"nccl": "NCCL P2P (a send completes with its receive; per-peer order)",
             "blocking": "blocking P2P (send and receive meet; one op at a time per rank)",
             "nonblocking": "non-blocking P2P"}[mode]
    ids = tuple(s.ops[u].id for u, _ in cycle)
    return [Violation("PP031", f"hangs under {model} across ranks {', '.join(map(str, ranks))}: {text}", ids)]


def wait_edges(schedule: Schedule, prog: dict[int, list[int]], mode: str = "nccl", *, channel: Any = None
               ) -> tuple[list[tuple[int, int, str]], dict[int, int]]:
    """The wait-for graph PP031 searches, for other views of the same model (``pptl diagnose``).

    ``channel``: per op, the id of the communicator its SEND or RECV runs on (both ends of a message
    share it; other ops any value), where a runtime opens more than one per pair of ranks (``pptl run``
    splits a pair's messages by flow when their two orders disagree): messages then match, and a rank's
    P2P ops wait for each other, per channel. None: one channel per pair of ranks and direction for the
    matching, and per pair of ranks for the waiting (one communicator, as torch's pipelining runs).

    Returns:
        (edges, merged): edges (u, v, why) mean v waits for u; a RECV that meets its SEND is merged
        into it (``merged`` maps the RECV to that SEND, so ``u``/``v`` are never merged RECVs).
    """
    from pptl.checks.work_arrays import lane_arrays

    cols = schedule.table.columns
    seqs = np.fromiter((i for seq in prog.values() for i in seq), dtype=np.int64)
    matched = _matched_pairs(cols, lane_arrays(schedule), channel)[:2] if mode != "nonblocking" else None
    return _labelled(schedule, cols, mode, seqs, [len(v) for v in prog.values()], np.asarray(list(prog)), matched,
                     channel)


def node_name(s: Schedule, u: int, merged: dict[int, int]) -> str:
    """An op id, or ``[SEND = RECV]`` for a merged pair (``merged`` as :func:`wait_edges` returns it,
    or inverted: SEND -> RECV)."""
    if u in merged:
        return f"[{s.ops[u].id} = {s.ops[merged[u]].id}]"
    return s.ops[u].id


def _labelled(s: Schedule, cols: Columns, mode: str, seqs: Any, lengths: list[int], ranks: Any,
              matched: tuple[Any, Any] | None, channel: Any = None) -> tuple[list[tuple[int, int, str]], dict[int, int]]:
    """The wait-for edges with why each exists, RECVs merged into the SENDs they meet, in the
    order a reader walks them (the facts, then each rank's issue order), and the merge (RECV ->
    SEND)."""
    u, v, why, key = _wait_arrays(s, cols, mode, seqs, lengths, matched, channel)
    node = np.arange(cols.n, dtype=np.int64)
    if matched is not None:
        node[matched[1]] = matched[0]
    o = np.lexsort((why, key))
    u, v, why = u[o], v[o], why[o]
    rank_at = np.repeat(np.asarray(ranks, dtype=np.int64), lengths)
    where = np.empty(cols.n, dtype=np.int64)
    where[seqs] = np.arange(seqs.size)
    edges = []
    for a, b, w in zip(node[u].tolist(), node[v].tolist(), zip(why.tolist(), v.tolist())):
        if a == b:
            continue
        code, own = w  # the label names the waiting op before its merge
        if code == _NEXT_ON_RANK:
            text = f"next on rank {int(rank_at[where[own]])}"
        elif code == _NEXT_P2P:
            text = f"next P2P between ranks {int(rank_at[where[own]])} and {int(cols.peer[own])}"
        else:
            text = _WHY[code]
        edges.append((a, b, text))
    rep = dict(zip(matched[1].tolist(), matched[0].tolist())) if matched is not None else {}
    return edges, rep


#: Why a wait-for edge exists (codes of :func:`_wait_arrays`).
_NEEDED, _POSTED, _NEXT_P2P, _NEXT_ON_RANK = 0, 1, 2, 3
_WHY = {_NEEDED: "needed by", _POSTED: "posted after"}


def _wait_arrays(s: Schedule, cols: Columns, mode: str, seqs: Any, lengths: list[int],
                 matched: tuple[Any, Any] | None, channel: Any = None) -> tuple[Any, Any, Any, Any]:
    """The wait-for edges of ``mode`` (before merging RECVs into their SENDs) as arrays (u, v, why,
    key): v waits for u; ``why`` a code of :data:`_WHY`; ``key`` the order a reader walks them in.

    - the data facts ("needed by"), but under positional matching a SEND -> RECV fact (the RECV
      meets whichever SEND is its match, not its data's);
    - blocking: each op of a rank waits for the one before it in the issue order;
    - otherwise each op waits for the compute op posted before it on its rank ("next on rank",
      or "posted after" for a P2P op), and under nccl each P2P op for the one before it towards
      the same peer (on the same ``channel`` where one is given).

    ``seqs``/``lengths``: every rank's issue order, one after the other (:func:`_program_arrays`);
    ``matched``: (SENDs, RECVs) that meet (:func:`_matched`), None under nonblocking."""
    du, dv = s.dep_arrays()
    if matched is not None and matched[0].size:
        keep = ~((cols.kind[du] == KIND_CODE["SEND"]) & (cols.kind[dv] == KIND_CODE["RECV"]))
        du, dv = du[keep], dv[keep]
    us, vs, whys, keys = [du], [dv], [np.full(du.size, _NEEDED)], [np.arange(du.size)]
    total = int(seqs.size)
    pos = np.arange(total, dtype=np.int64)
    first = np.repeat(np.cumsum([0] + lengths[:-1]).astype(np.int64), lengths)  # where each rank's sequence starts

    def add(at: Any, before: Any, why: Any) -> None:  # edges into seqs[at], walked after the facts
        us.append(seqs[before])
        vs.append(seqs[at])
        whys.append(np.broadcast_to(why, at.shape))
        keys.append(du.size + at)

    if mode == "blocking":
        ok = np.flatnonzero(pos[1:] > first[1:]) + 1
        add(ok, ok - 1, _NEXT_ON_RANK)
    else:
        comp = cols.lane[seqs] == LANE_CODE["compute"]
        # The last compute strictly before each position of its rank: compute -> compute is the
        # rank's chain, compute -> P2P op is "posted after".
        last = np.maximum.accumulate(np.where(comp, pos, -1))
        before = np.empty_like(last)
        if total:
            before[0] = -1
            before[1:] = last[:-1]
        ok = np.flatnonzero(before >= first)
        add(ok, before[ok], np.where(comp[ok], _NEXT_ON_RANK, _POSTED))
        if mode == "nccl":
            p2p = np.flatnonzero(~comp)
            rank_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)[p2p]
            peer = cols.peer[seqs[p2p]] if channel is None else np.asarray(channel)[seqs[p2p]]
            o = np.lexsort((p2p, peer, rank_of))  # per (rank, peer or channel), in issue order
            p2p, rank_of, peer = p2p[o], rank_of[o], peer[o]
            same = (rank_of[1:] == rank_of[:-1]) & (peer[1:] == peer[:-1])
            add(p2p[1:][same], p2p[:-1][same], _NEXT_P2P)
    return np.concatenate(us), np.concatenate(vs), np.concatenate(whys), np.concatenate(keys)


def _left_in_cycles(cols: Columns, edges: tuple[Any, Any], matched: tuple[Any, Any] | None) -> set[int]:
    """The nodes of the wait-for graph ``edges`` (RECVs merged into the SENDs they meet) that
    Kahn's algorithm cannot order: on or behind a cycle (empty when the schedule cannot hang)."""
    node = np.arange(cols.n, dtype=np.int64)
    if matched is not None:
        node[matched[1]] = matched[0]
    u, v = node[edges[0]], node[edges[1]]
    keep = u != v
    return set(left_in_cycles(graph_of(cols.n, u[keep], v[keep])))


def _program_arrays(ctx: Context) -> tuple[Any, list[int]] | None:
    """:func:`pptl.issue_order.given_sequences` once per check run."""
    return ctx.once(_program_arrays_of)


def _program_arrays_of(ctx: Context) -> tuple[Any, list[int]] | None:
    return given_sequences(ctx.schedule)


def _matched(ctx: Context) -> tuple[Any, Any, Any]:
    """(SENDs, RECVs, k): the k-th SEND from a rank to a peer and the k-th RECV that peer posts from
    it (each in its lane order), every pair of ranks by (src, dst), then by k (once per run)."""
    return ctx.once(_matched_of)


def _matched_of(ctx: Context) -> tuple[Any, Any, Any]:
    return _matched_pairs(ctx.table.columns, ctx.lane_arrays)


def _matched_pairs(col: Columns, la: Any, channel: Any = None) -> tuple[Any, Any, Any]:
    """:func:`_matched` of a schedule's columns and lane arrays: per pair of ranks (or per ``channel``,
    as :func:`wait_edges` takes it), SENDs in the sender's lane order, RECVs in the receiver's."""
    kind = col.kind[la.op]
    se = np.flatnonzero(kind == KIND_CODE["SEND"])
    re = np.flatnonzero(kind == KIND_CODE["RECV"])
    if se.size == 0 or re.size == 0:
        none = np.zeros(0, dtype=np.int64)
        return none, none, none
    # Channel ids sort like (src, dst): group_ids keeps the order of its columns.
    if channel is None:
        chan, size = group_ids(*[np.concatenate([la.rank[se], col.peer[la.op[re]]]),
                                np.concatenate([col.peer[la.op[se]], la.rank[re]])])
    else:
        ch = np.asarray(channel)
        chan, size = group_ids(np.concatenate([ch[la.op[se]], ch[la.op[re]]]))
    sides = []
    for entries, ch in ((se, chan[:se.size]), (re, chan[se.size:])):
        o = np.argsort(ch * la.op.size + entries)  # unique keys: by channel, then lane order
        counts = np.bincount(ch, minlength=size)
        starts = np.cumsum(counts) - counts
        sorted_ch = ch[o]
        k = np.arange(o.size, dtype=np.int64) - starts[sorted_ch]
        sides.append((la.op[entries[o]], sorted_ch, k, counts, starts))
    (s_op, s_ch, s_k, _, _), (r_op, _, _, r_counts, r_starts) = sides
    ok = s_k < r_counts[s_ch]
    return s_op[ok], r_op[r_starts[s_ch[ok]] + s_k[ok]], s_k[ok]


def _lane_rank(ctx: Context) -> Any:
    """The rank of the lane each op is listed on (-1: none)."""
    la = ctx.lane_arrays
    out = np.full(ctx.n, -1, dtype=np.int64)
    out[la.op] = la.rank
    return out


def _issue_positions_of(ctx: Context) -> dict[str, list[Violation]]:
    """PP032 and PP033: per rank, the first place in its issue order where each unit of work is
    made, against the place of each SEND (it carries what its stage made) and RECV (it feeds the
    op making F, or G, at its stage)."""
    prog = _program_arrays(ctx)
    out: dict[str, list[Violation]] = {"SEND": [], "RECV": []}
    if prog is None:
        return out
    seqs, lengths = prog
    t = ctx.table
    col = t.columns
    starts = np.cumsum([0] + lengths[:-1]).astype(np.int64)
    rank_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    comp = np.flatnonzero(col.lane[seqs] == LANE_CODE["compute"])
    flow = col.flow[seqs]
    p2p = np.flatnonzero((col.lane[seqs] != LANE_CODE["compute"]) & ((flow == FLOW_CODE["F"]) | (flow == FLOW_CODE["B"])))
    made = items_of(ctx.work_arrays, seqs[comp], (F, G))
    at_made = comp[made.op]  # places in seqs: one rank's grow with position
    q = seqs[p2p]
    q_role = np.where(col.flow[q] == FLOW_CODE["F"], F, G)
    at = first_place(made, rank_of[at_made], at_made, (rank_of[p2p], q_role, col.direction[q], col.stage[q], col.mb[q]))
    kind = col.kind[q]
    early = (at >= 0) & (kind == KIND_CODE["SEND"]) & (at > p2p)
    late = (at >= 0) & (kind == KIND_CODE["RECV"]) & (at < p2p)
    for name, code, sel, how in (("SEND", "PP032", early, "before {other} (step {at}) produces its data"),
                                 ("RECV", "PP033", late, "after {other} (step {at}) needed its data")):
        for place, there in zip(p2p[sel].tolist(), at[sel].tolist()):
            rank = int(rank_of[place])
            op, other = t.op(int(seqs[place])), t.op(int(seqs[there]))
            step, at_step = place - int(starts[rank]), there - int(starts[rank])
            out[name].append(Violation(
                code, f"rank {rank} issues {_short(op)} at step {step}, " + how.format(other=other.id, at=at_step),
                (op.id, other.id)))
    return out


def _short(op) -> str:
    if op.kind in _COMM:  # the direction, where not 0: two messages may differ in nothing else
        return f"{op.kind}_{op.flow} stage {op.stage} mb {op.mb}" + (f" (direction {op.direction})" if op.direction else "")
    return op.id

