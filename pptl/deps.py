"""The data facts of pipeline training, derived from the ops alone (never from their order).

Work items are named by a *role* and a place: ``("F", d, s, mb)`` is the forward of micro-batch
``mb`` at stage ``s`` of direction ``d``; ``"G"`` is its input gradient (produced by B, I, or the B
half of FB); ``"W"`` its weight gradient (B, W, or the B half of FB).

Facts:

- F(d, s, mb) needs F(d, s-1, mb).
- G(d, s, mb) needs F(d, s, mb) and G(d, s+1, mb) (the last stage starts from the loss).
- W(d, s, mb) needs G(d, s, mb) when they are separate ops (I then W).
- Across ranks, data goes producer -> SEND -> RECV -> consumer; when the schedule has no
  SEND/RECV for a crossing (a compute-only schedule), the edge is direct.
- A message of flow ``F`` goes from stage ``s`` to ``s + 1`` of its direction, one of flow ``B``
  from ``s`` to ``s - 1``; a SEND and the RECV of its data share
  :func:`pptl.messages.message_key`.
- When two ops do the same work (an invalid schedule), the first one (lowest index) is its producer.

The facts are derived on the op table with numpy key joins: each work item (role, direction,
stage, mb) and each message (kind, flow, direction, sender's stage, mb) is packed into one int64;
"the first op producing X" is a sort plus a first-of-run; every consumer looks its producer up
with ``searchsorted``. A clear per-op statement of the same rules lives in tests/deps_oracle.py.

Notes:
    O(n log n) in numpy (0.05 s at 391k ops).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pptl.errors import InputError
from pptl.messages import sender_stage
from pptl.optable import KIND_CODE, OpTable

if TYPE_CHECKING:
    from pptl.op import Op

__all__ = ["roles", "training_deps", "facts_of_table"]

_I64 = np.int64
_Key = tuple[str, int, int, int]


def roles(op: Op) -> list[_Key]:
    """The work items an op produces, as (role, direction, stage, mb) (for one op's message)."""
    k = op.kind
    if k == "F":
        return [("F", op.direction, op.stage, op.mb)]
    if k == "B":
        return [("G", op.direction, op.stage, op.mb), ("W", op.direction, op.stage, op.mb)]
    if k == "I":
        return [("G", op.direction, op.stage, op.mb)]
    if k == "W":
        return [("W", op.direction, op.stage, op.mb)]
    if k == "FB" and op.pair is not None:
        s, m, d = op.pair
        return [("F", op.direction, op.stage, op.mb), ("G", d, s, m), ("W", d, s, m)]
    return []


def training_deps(ops: list[Op], num_stages: int) -> list[tuple[int, int]]:
    """(producer, consumer) index pairs for every training fact among ``ops`` (sorted, distinct):
    :func:`facts_of_table` of their table. Missing producers add no edge: the checker reports
    missing work separately."""
    u, v = facts_of_table(OpTable.from_ops(ops), num_stages)
    return list(zip(u.tolist(), v.tolist()))


def facts_of_table(table: OpTable, num_stages: int) -> tuple[Any, Any]:
    """The facts of an :class:`pptl.optable.OpTable` as (producers, consumers) int64 arrays,
    sorted by (producer, consumer).

    The last result is kept: ``pptl plan -o`` derives the facts of one table when building the
    schedule and again when writing it (to find the extra ones); the second call returns the very
    arrays of the first.

    Raises:
        InputError: the places (direction, stage, mb) are too many and too spread to be keyed
            in an int64 (only a hostile file gets there: millions of distinct values in each).
    """
    global _last
    last = _last
    if last is not None and last[0] is table and last[1] == num_stages:
        return last[2]
    n = table.n
    if n == 0:
        return np.zeros(0, dtype=_I64), np.zeros(0, dtype=_I64)
    k = table.code_of("kind", KIND_CODE, 0)
    flows: dict[str, int] = {"F": 0, "B": 1}
    for value in table.flow_names:
        flows.setdefault(value, len(flows))
    lut = np.array([flows[v] for v in table.flow_names] or [0], dtype=_I64)
    fl = lut[table.flow]
    e = _dep_keys(k, table.rank, table.stage, table.mb, table.direction, fl, flows, table.has_pair & (k == 5),
                  table.pair[:, 0], table.pair[:, 1], table.pair[:, 2], num_stages)
    _last = (table, num_stages, (e // n, e % n))
    return _last[2]


_last: tuple[OpTable, int, tuple[Any, Any]] | None = None


def _dep_keys(k: Any, r: Any, st: Any, m: Any, d: Any, fl: Any, flows: dict[str, int], has_pair: Any, ps: Any,
              pm: Any, pd: Any, num_stages: int) -> Any:
    """The facts as sorted, distinct ``producer * n + consumer`` keys."""
    n = int(k.size)
    idx = np.arange(n, dtype=_I64)
    fb = k == 5
    fbp = fb & has_pair

    # Pack (direction, stage, mb) with room for stage +-1 into one int64.
    used = np.concatenate([np.flatnonzero(~fbp), np.flatnonzero(fbp)])
    all_d = np.concatenate([d[used], pd[fbp]])
    all_s = np.concatenate([st[used], ps[fbp]])
    all_m = np.concatenate([m[used], pm[fbp]])
    d0, s0, m0 = int(all_d.min()), int(all_s.min()) - 1, int(all_m.min())
    D = int(all_d.max()) - d0 + 1
    S = int(all_s.max()) + 2 - s0 + 1
    M = int(all_m.max()) - m0 + 1

    def pack(dd: Any, ss: Any, mm: Any) -> tuple[Any, Any]:
        """Packed keys, and which of them are inside the packed range (others match nothing)."""
        ok = (dd >= d0) & (dd < d0 + D) & (ss >= s0) & (ss < s0 + S) & (mm >= m0) & (mm < m0 + M)
        return ((dd - d0) * S + (ss - s0)) * M + (mm - m0), ok

    if len(flows) * D * S * M >= 1 << 62:
        # Values spread too far for their span: key by their ranks among the values present
        # instead (a stage's neighbours s - 1 and s + 1 included, so every look-up finds its key).
        axes = (np.unique(all_d), np.unique(np.concatenate([all_s - 1, all_s, all_s + 1])), np.unique(all_m))
        D, S, M = (a.size for a in axes)
        if len(flows) * D * S * M >= 1 << 62:
            raise InputError(f"{n} ops name too many distinct directions, stages and micro-batches to relate them "
                             "(at most about 2**60 combinations)")

        def pack(dd: Any, ss: Any, mm: Any) -> tuple[Any, Any]:  # noqa: F811 (the wide case)
            (pd_, okd), (ps_, oks), (pm_, okm) = (_rank_in(a, x) for a, x in zip(axes, (dd, ss, mm)))
            return (pd_ * S + ps_) * M + pm_, okd & oks & okm

    def table(keys: Any, where: Any) -> tuple[Any, Any]:
        """Sorted unique keys and the first (lowest) op index producing each."""
        order = np.lexsort((where, keys))
        keys, where = keys[order], where[order]
        first = np.ones(keys.size, dtype=bool)
        first[1:] = keys[1:] != keys[:-1]
        return keys[first], where[first]

    def lookup(tab: tuple[Any, Any], dd: Any, ss: Any, mm: Any) -> Any:
        q, ok = pack(dd, ss, mm)
        return lookup_packed(tab, q, ok)

    def lookup_packed(tab: tuple[Any, Any], q: Any, ok: Any = True) -> Any:
        keys, vals = tab
        if keys.size == 0:
            return np.full(q.size, -1, dtype=_I64)
        pos = np.searchsorted(keys, q)
        pos[pos >= keys.size] = 0
        hit = ok & (keys[pos] == q)
        return np.where(hit, vals[pos], -1)

    fwd = (k == 1) | fbp
    grad_own = (k == 2) | (k == 3)

    def producers(own: Any, with_pair: bool) -> tuple[Any, Any]:
        keys, ok = pack(d[own], st[own], m[own])
        where = idx[own]
        if with_pair:
            pk, _ = pack(pd[fbp], ps[fbp], pm[fbp])
            keys, where = np.concatenate([keys, pk]), np.concatenate([where, idx[fbp]])
        return table(keys, where)

    prod_f = producers(fwd, False)
    prod_g = producers(grad_own, True)  # no fact reads a W, so W producers are not indexed
    # Messages are keyed as pptl.messages.message_key keys them: by the sender's stage, on both ends.
    comm_tabs: dict[tuple[int, int], tuple[Any, Any]] = {}
    for kc in (6, 7):
        for name, fc in flows.items():
            sel = (k == kc) & (fl == fc)
            if sel.any():
                ss = st[sel] if kc == 6 else sender_stage(name, st[sel])
                comm_tabs[(kc, fc)] = table(pack(d[sel], ss, m[sel])[0], idx[sel])
    empty = (np.zeros(0, dtype=_I64), np.zeros(0, dtype=_I64))
    last = num_stages - 1
    us: list[Any] = []
    vs: list[Any] = []

    def add(u: Any, v: Any) -> None:
        us.append(u)
        vs.append(v)

    def link(src: Any, dst: Any, fc: int, dd: Any, s_src: Any, mm: Any) -> None:
        same = r[src] == r[dst]
        send = lookup(comm_tabs.get((6, fc), empty), dd, s_src, mm)
        recv = lookup(comm_tabs.get((7, fc), empty), dd, s_src, mm)
        direct = same | ((send < 0) & (recv < 0))
        add(src[direct], dst[direct])
        cross = ~direct
        s_ok = cross & (send >= 0)
        r_ok = cross & (recv >= 0)
        add(src[s_ok], send[s_ok])
        add(recv[r_ok], dst[r_ok])
        both = s_ok & r_ok
        add(send[both], recv[both])

    # F (and the F half of FB) needs F of the previous stage.
    i = idx[fwd]
    prev = st[fwd] - 1
    sel = (prev >= 0) & (prev <= last)
    i, prev, dd, mm = i[sel], prev[sel], d[fwd][sel], m[fwd][sel]
    src = lookup(prod_f, dd, prev, mm)
    ok = (src >= 0) & (src != i)
    link(src[ok], i[ok], 0, dd[ok], prev[ok], mm[ok])

    # G needs F of its own stage and G of the next: B and I for themselves, FB for its B half.
    gi = np.concatenate([idx[grad_own], idx[fbp]])
    gd = np.concatenate([d[grad_own], pd[fbp]])
    gs = np.concatenate([st[grad_own], ps[fbp]])
    gm = np.concatenate([m[grad_own], pm[fbp]])
    sel = (gs >= 0) & (gs <= last)
    src = lookup(prod_f, gd[sel], gs[sel], gm[sel])
    ok = (src >= 0) & (src != gi[sel])
    add(src[ok], gi[sel][ok])
    nxt = gs + 1
    sel = (nxt >= 0) & (nxt <= last)
    src = lookup(prod_g, gd[sel], nxt[sel], gm[sel])
    ok = (src >= 0) & (src != gi[sel])
    link(src[ok], gi[sel][ok], 1, gd[sel][ok], nxt[sel][ok], gm[sel][ok])

    # W needs G of its stage.
    w = k == 4
    sel = w & (st >= 0) & (st <= last)
    src = lookup(prod_g, d[sel], st[sel], m[sel])
    ok = (src >= 0) & (src != idx[sel])
    add(src[ok], idx[sel][ok])

    # Every message (first of its key) hangs off its producer (SEND) or its SEND (RECV).
    f_code = 0
    for (kc, fc), (keys, first) in comm_tabs.items():
        if kc == 6:
            src = lookup(prod_f if fc == f_code else prod_g, d[first], st[first], m[first])
            ok = src >= 0
            add(src[ok], first[ok])
        else:
            send = lookup_packed(comm_tabs.get((6, fc), empty), keys)
            ok = send >= 0
            add(send[ok], first[ok])

    u = np.concatenate(us) if us else np.zeros(0, dtype=_I64)
    v = np.concatenate(vs) if vs else np.zeros(0, dtype=_I64)
    keep = u != v
    e = np.sort(u[keep] * n + v[keep])  # sort and drop repeats: faster here than np.unique's hash table
    if e.size:
        e = e[np.concatenate(([True], e[1:] != e[:-1]))]
    return e


def _rank_in(values: Any, x: Any) -> tuple[Any, Any]:
    """The position of each of ``x`` in the sorted distinct ``values``, and whether it is there."""
    at = np.minimum(np.searchsorted(values, x), values.size - 1)
    return at, values[at] == x
