"""One assembler: the families' compute orders become a schedule as an op table
(``Schedule.table``), with no ``Op`` object built.

The rules, written as numpy key joins:

- every work item (role F, G or W of a compute op; an FB op with a pair has F and G) places its
  (direction, stage) on the first rank that works on it, ranks in the order they were given;
- an F item of stage s < last sends to the rank of stage s+1, a G item of stage s > 0 to the
  rank of s-1, unless that rank is its own; SENDs go on the sender's ``send`` lane in the order
  their data is produced (senders by rank);
- each receiving rank's RECVs go on its ``recv`` lane sorted by the position of the first op of
  that rank that needs the data (activations before gradients at one position; data no op needs
  last), ties in sending order; receiving ranks' lanes follow in the order they first receive;
- the facts are :func:`pptl.deps.facts_of_table`'s (sorted (producer, consumer) arrays).

Notes:
    O(n log n) in numpy. With the families' orders as columns, ``build_schedule`` at pp 64, V 2,
    512 micro-batches (391k ops) takes 0.13 s instead of 0.96 s (2026-11-26, docs/benchmarks.md).
"""
from __future__ import annotations

from itertools import chain
from typing import Any, Mapping, Sequence

import numpy as np

from pptl.config import Config
from pptl.deps import facts_of_table
from pptl.errors import InputError
from pptl.ir import Facts, Op, Schedule
from pptl.optable import OpTable, encode
from pptl.schedules._order import Order

__all__ = ["assemble"]

_I64 = np.int64
_KIND_ROLE = {"F": 0, "B": 1, "I": 1, "W": 2, "FB": 0}
"""Role of a compute kind's own item: 0 F (activations), 1 G (input gradient), 2 W (weight gradient)."""
_FAR = 1 << 60
"""The receive position of data no op of the receiving rank needs (after every real one)."""


def assemble(cfg: Config, family: str, orders: Mapping[int, Sequence[Op] | Order], *, num_stages: int,
             microbatches: int, directions: int = 1, meta: dict[str, Any] | None = None, comm: bool = True) -> Schedule:
    """Build a :class:`Schedule` from each rank's compute order (a list of ops, or their columns):
    its op table, lanes and facts, with no ``Op`` object built.

    SENDs go on the producer's ``send`` lane in the order their data is produced; RECVs on the
    consumer's ``recv`` lane in the order their data is needed. Stages on one rank pass data
    locally (no SEND/RECV). With ``comm=False`` only compute lanes are built.

    Raises:
        ValueError: a rank's order lists an op of another rank or lane (misuse).
        InputError: the places are too spread to key in an int64 (a hostile order only).
    """
    ranks = sorted(orders)
    compute = OpTable.concat([_order_table(orders[r], r) for r in ranks]) if ranks else _order_table([], 0)
    lengths = [len(orders[r]) for r in ranks]
    lanes: dict[tuple[int, str], list[int]] = {}
    at = 0
    for r, k in zip(ranks, lengths):
        if k:
            lanes[(r, "compute")] = list(range(at, at + k))
        at += k
    table = compute
    if comm and compute.n:
        msgs = _messages(compute, ranks, lengths, list(orders), num_stages, at, lanes)
        if msgs is not None:
            table = OpTable.concat([compute, msgs])
    return Schedule(family, cfg.pp, num_stages, microbatches, lanes=lanes, directions=directions, config=cfg,
                    meta=dict(meta or {}), table=table, facts=Facts(*facts_of_table(table, num_stages)))


def _order_table(order: Sequence[Op] | Order, rank: int) -> OpTable:
    """One rank's compute order as a table."""
    if not isinstance(order, Order):
        t = OpTable.from_ops(list(order))
        if t.n and (set(t.lane_names) != {"compute"} or (t.rank != rank).any()):
            raise ValueError(f"assemble: rank {rank}'s order lists an op of another rank or lane")
        return t
    n = len(order)
    zeros = np.zeros(n, dtype=np.int32)
    strs = {"kind": encode(list(order.kind)), "lane": (zeros, ("compute",)), "flow": (zeros, ("",)),
            "label": (zeros, ("",)), "cost": (zeros, ("",))}
    ints = {name: np.fromiter(getattr(order, name), dtype=_I64, count=n) for name in ("stage", "mb", "direction", "chunk")}
    ints["rank"] = np.full(n, rank, dtype=_I64)
    return OpTable.of_columns(n, strs, ints, order.pair, None)


def _messages(t: OpTable, ranks: list[int], lengths: list[int], given_order: list[int], num_stages: int, at: int,
              lanes: dict[tuple[int, str], list[int]]) -> OpTable | None:
    """The SEND and RECV ops of the compute table ``t`` (ops from index ``at`` on), their lanes
    added to ``lanes``; None when there are none.

    Raises:
        InputError: the indices are too wide to pack.
    """
    n = t.n
    role_of = np.array([_KIND_ROLE.get(k, -1) for k in t.kind_names], dtype=np.int8)
    role = role_of[t.kind]
    fb = t.kind_names.index("FB") if "FB" in t.kind_names else -1
    own = (role >= 0) & ((t.kind != fb) | t.has_pair)  # an FB with no pair does no work
    starts = np.repeat(np.cumsum([0] + lengths[:-1]), lengths).astype(_I64)
    g = np.arange(n, dtype=_I64)
    pos = g - starts
    # The items, in each rank's order (an FB's G right after its F).
    paired = np.flatnonzero(own & (t.kind == fb))
    it_g = np.concatenate([g[own], paired])
    it_role = np.concatenate([role[own], np.ones(paired.size, dtype=np.int8)])
    it_d = np.concatenate([t.direction[own], t.pair[paired, 2]])
    it_s = np.concatenate([t.stage[own], t.pair[paired, 0]])
    it_mb = np.concatenate([t.mb[own], t.pair[paired, 1]])
    if paired.size:
        order = np.argsort(2 * it_g + np.concatenate([np.zeros(it_g.size - paired.size, _I64),
                                                      np.ones(paired.size, _I64)]), kind="stable")
        it_g, it_role, it_d, it_s, it_mb = (a[order] for a in (it_g, it_role, it_d, it_s, it_mb))
    it_rank = t.rank[it_g]
    it_pos = pos[it_g]
    if it_g.size == 0:
        return None

    # Pack (rank, role, direction, stage, mb) into one int64, with room for stage +-1.
    lo = [min(ranks), 0, int(it_d.min()), int(it_s.min()) - 1, int(it_mb.min())]
    hi = [max(ranks), 2, int(it_d.max()), int(it_s.max()) + 1, int(it_mb.max())]
    width = [h - low + 1 for h, low in zip(hi, lo)]
    if float(np.prod(np.asarray(width, dtype=np.float64))) >= float(1 << 62):
        raise InputError(f"assemble: the stages and micro-batches ({lo[3] + 1}..{hi[3] - 1}, {lo[4]}..{hi[4]}) "
                         "are too spread to relate")

    def pack(*cols: Any, fields: tuple[int, ...]) -> Any:
        key = np.zeros(cols[0].size, dtype=_I64)
        for col, f in zip(cols, fields):
            key = key * width[f] + (col - lo[f])
        return key

    def first(keys: Any, prio: Any, vals: Any) -> tuple[Any, Any]:
        """Sorted distinct keys, each with the value of its lowest-``prio`` entry."""
        o = np.lexsort((prio, keys))
        keys, vals = keys[o], vals[o]
        head = np.ones(keys.size, dtype=bool)
        head[1:] = keys[1:] != keys[:-1]
        return keys[head], vals[head]

    def lookup(tab: tuple[Any, Any], q: Any, missing: int) -> Any:
        keys, vals = tab
        p = np.searchsorted(keys, q)
        p[p >= keys.size] = 0
        return np.where(keys[p] == q, vals[p], missing)

    # Placement: (direction, stage) -> the first rank, in the order given, that has an item on it.
    rank_prio = {r: k for k, r in enumerate(given_order)}
    prio = np.asarray([rank_prio[r] for r in ranks], dtype=_I64)[np.searchsorted(np.asarray(ranks), it_rank)]
    items = np.arange(it_g.size, dtype=_I64)
    place = first(pack(it_d, it_s, fields=(2, 3)), prio * it_g.size + items, it_rank)

    last = num_stages - 1
    fwd = (it_role == 0) & (it_s < last)
    grad = (it_role == 1) & (it_s > 0)
    sending = fwd | grad
    m_from = it_rank[sending]
    m_role = it_role[sending]
    m_d, m_s, m_mb = it_d[sending], it_s[sending], it_mb[sending]
    m_to_stage = np.where(m_role == 0, m_s + 1, m_s - 1)
    m_to = lookup(place, pack(m_d, m_to_stage, fields=(2, 3)), -1)
    keep = (m_to >= 0) & (m_to != m_from)
    m_from, m_role, m_d, m_s, m_mb, m_to_stage, m_to = (a[keep] for a in (m_from, m_role, m_d, m_s, m_mb,
                                                                          m_to_stage, m_to))
    k = m_from.size
    if k == 0:
        return None
    # Where the receiver first needs the data: its first F or G item of the same role and place.
    need_items = it_role != 2
    need = first(pack(it_rank[need_items], it_role[need_items], it_d[need_items], it_s[need_items],
                      it_mb[need_items], fields=(0, 1, 2, 3, 4)), it_pos[need_items], it_pos[need_items])
    wanted = lookup(need, pack(m_to, m_role, m_d, m_to_stage, m_mb, fields=(0, 1, 2, 3, 4)), _FAR)
    sent = np.arange(k, dtype=_I64)
    first_time = np.full(max(ranks) - min(ranks) + 1, k, dtype=_I64)
    np.minimum.at(first_time, m_to - min(ranks), sent)
    recv = np.lexsort((sent, 2 * wanted + m_role, first_time[m_to - min(ranks)]))
    flow = m_role.astype(np.int32)  # codes into ("F", "B"): activations go forward, gradients back

    # RECVs (lanes by receiving rank, in the order found above), then SENDs (by sending rank).
    r_rank = m_to[recv]
    s_rank = m_from
    both = np.concatenate([r_rank, s_rank])
    for base, col, lane in ((at, r_rank, "recv"), (at + k, s_rank, "send")):
        bounds = np.flatnonzero(np.diff(col)) + 1
        for lo_i, hi_i in zip(chain([0], bounds.tolist()), chain(bounds.tolist(), [k])):
            lanes[(int(col[lo_i]), lane)] = list(range(base + lo_i, base + hi_i))
    kind = np.concatenate([np.zeros(k, np.int32), np.ones(k, np.int32)])
    ints = {"rank": both, "stage": np.concatenate([m_to_stage[recv], m_s]),
            "mb": np.concatenate([m_mb[recv], m_mb]), "direction": np.concatenate([m_d[recv], m_d]),
            "chunk": np.full(2 * k, -1, _I64), "peer": np.concatenate([m_from[recv], m_to]),
            "sub": np.full(2 * k, -1, _I64)}
    zeros = np.zeros(2 * k, np.int32)
    strs = {"kind": (kind, ("RECV", "SEND")), "lane": (kind, ("recv", "send")),
            "flow": (np.concatenate([flow[recv], flow]), ("F", "B")), "label": (zeros, ("",)), "cost": (zeros, ("",))}
    return OpTable.of_columns(2 * k, strs, ints, None, None)

