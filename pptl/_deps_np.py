"""The training facts of :mod:`pptl.deps`, derived with numpy key joins (large schedules).

Same rules and same result as ``pptl.deps._training_deps_loop`` (tests compare the two): each
work item (role, direction, stage, mb) and each message (kind, flow, direction, sender's stage, mb) is
packed into one int64; "the first op producing X" is a sort plus a first-of-run; every consumer
looks its producer up with ``searchsorted``. Returns None when the indices are too wide to pack,
and the caller falls back to the loop.

Notes:
    O(n log n) in numpy; about 20x faster than the loop at 100k ops.
"""
from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from pptl.messages import sender_stage

if TYPE_CHECKING:
    from pptl.ir import Op
    from pptl.optable import OpTable

__all__ = ["deps_of_ops", "deps_of_columns", "deps_of_table"]

_I64 = np.int64
_FIELDS = attrgetter("kind", "rank", "stage", "mb", "direction", "flow", "pair")
_KIND_CODE = {"F": 1, "B": 2, "I": 3, "W": 4, "FB": 5, "SEND": 6, "RECV": 7}


def deps_of_ops(ops: Sequence[Op], num_stages: int) -> list[tuple[int, int]] | None:
    if not ops:
        return []
    kind, rank, stage, mb, direction, flow, pair = zip(*map(_FIELDS, ops))
    return deps_of_columns(kind, rank, stage, mb, direction, flow, pair, num_stages)


def deps_of_columns(kind: Sequence[str], rank: Sequence[int], stage: Sequence[int], mb: Sequence[int],
                    direction: Sequence[int], flow: Sequence[str], pair: Sequence[tuple[int, int, int] | None],
                    num_stages: int) -> list[tuple[int, int]] | None:
    n = len(kind)
    if n == 0:
        return []
    get = _KIND_CODE.get
    k = np.fromiter(map(get, kind, (0,) * n), dtype=np.int8, count=n)
    fb = k == 5
    has_pair = np.zeros(n, dtype=bool)
    ps = np.zeros(n, dtype=_I64)
    pm = np.zeros(n, dtype=_I64)
    pd = np.zeros(n, dtype=_I64)
    if fb.any():
        for i in np.flatnonzero(fb).tolist():
            p = pair[i]
            if p is not None:
                has_pair[i] = True
                ps[i], pm[i], pd[i] = p
    # Flow codes: only messages read theirs; "F" and "B" are the two a consumer looks up. Every
    # distinct flow gets a code (those of compute ops too: no message carries them, so no table
    # is built for them), found with one C-level pass instead of a Python loop over the messages.
    flows: dict[str, int] = {"F": 0, "B": 1}
    for value in set(flow):
        flows.setdefault(value, len(flows))
    fl = np.fromiter(map(flows.__getitem__, flow), dtype=_I64, count=n)
    e = _dep_keys(k, np.array(rank, dtype=_I64), np.array(stage, dtype=_I64), np.array(mb, dtype=_I64),
                  np.array(direction, dtype=_I64), fl, flows, has_pair, ps, pm, pd, num_stages)
    if e is None:
        return None
    return list(zip((e // n).tolist(), (e % n).tolist()))


def deps_of_table(table: OpTable, num_stages: int) -> tuple[Any, Any] | None:
    """The facts of an :class:`pptl.optable.OpTable` as (producers, consumers) int64 arrays,
    sorted by (producer, consumer), or None when the indices are too wide to pack.

    The last result is kept: ``pptl plan -o`` derives the facts of one table when building the
    schedule and again when writing it (to find the extra ones); the second call returns the very
    arrays of the first.
    """
    global _last
    last = _last
    if last is not None and last[0] is table and last[1] == num_stages:
        return last[2]
    out = _facts_of_table(table, num_stages)
    _last = (table, num_stages, out)
    return out


_last: tuple[OpTable, int, tuple[Any, Any] | None] | None = None


def _facts_of_table(table: OpTable, num_stages: int) -> tuple[Any, Any] | None:
    n = table.n
    if n == 0:
        return np.zeros(0, dtype=_I64), np.zeros(0, dtype=_I64)
    k = table.code_of("kind", _KIND_CODE, 0)
    flows: dict[str, int] = {"F": 0, "B": 1}
    for value in table.flow_names:
        flows.setdefault(value, len(flows))
    lut = np.array([flows[v] for v in table.flow_names] or [0], dtype=_I64)
    fl = lut[table.flow]
    e = _dep_keys(k, table.rank, table.stage, table.mb, table.direction, fl, flows, table.has_pair & (k == 5),
                  table.pair[:, 0], table.pair[:, 1], table.pair[:, 2], num_stages)
    if e is None:
        return None
    return e // n, e % n


def _dep_keys(k: Any, r: Any, st: Any, m: Any, d: Any, fl: Any, flows: dict[str, int], has_pair: Any, ps: Any,
              pm: Any, pd: Any, num_stages: int) -> Any:
    """The facts as sorted, distinct ``producer * n + consumer`` keys (None: indices too wide)."""
    n = int(k.size)
    idx = np.arange(n, dtype=_I64)
    fb = k == 5
    fbp = fb & has_pair

    # Pack (direction, stage, mb) with room for stage +-1; give up if that overflows int64.
    used = np.concatenate([np.flatnonzero(~fbp), np.flatnonzero(fbp)])
    all_d = np.concatenate([d[used], pd[fbp]])
    all_s = np.concatenate([st[used], ps[fbp]])
    all_m = np.concatenate([m[used], pm[fbp]])
    d0, s0, m0 = int(all_d.min()), int(all_s.min()) - 1, int(all_m.min())
    D = int(all_d.max()) - d0 + 1
    S = int(all_s.max()) + 2 - s0 + 1
    M = int(all_m.max()) - m0 + 1
    if len(flows) * D * S * M >= 1 << 62:
        return None

    def pack(dd: Any, ss: Any, mm: Any) -> tuple[Any, Any]:
        """Packed keys, and which of them are inside the packed range (others match nothing)."""
        ok = (dd >= d0) & (dd < d0 + D) & (ss >= s0) & (ss < s0 + S) & (mm >= m0) & (mm < m0 + M)
        return ((dd - d0) * S + (ss - s0)) * M + (mm - m0), ok

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
