"""A schedule's ops as one table of numpy columns: what every schedule is stored as
(:attr:`pptl.ir.Schedule.table`), built, read, checked, simulated and written as, so that no
``Op`` object exists unless a message, a hover text, a test or the executor asks for one
(``schedule.ops`` is the view built on first read).

String fields (kind, lane, flow, label, cost) are stored as small integer codes into a tuple of
names per field, in first-seen order; integer fields as int64; ``pair`` as an (n, 3) array plus a
mask of the ops that have one; ``payload`` as float64. Fields every op leaves at its default are
still full columns (cheap, and no reader needs a special case).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from itertools import chain, repeat
from operator import add, attrgetter
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from pptl.op import Op

__all__ = ["OpTable", "Columns", "KIND_CODE", "LANE_CODE", "FLOW_CODE", "flat_lanes", "lane_edge_arrays", "edge_arrays",
           "encode", "group_ids", "first_of", "table_of"]

#: Kind codes of :class:`Columns` (0: any other kind).
KIND_CODE = {"F": 1, "B": 2, "I": 3, "W": 4, "FB": 5, "SEND": 6, "RECV": 7}
#: Lane codes (3: any other lane).
LANE_CODE = {"compute": 0, "send": 1, "recv": 2}
#: Flow codes (3: any other flow).
FLOW_CODE = {"": 0, "F": 1, "B": 2}

_I64 = np.int64
#: The integer fields, with their defaults.
INT_FIELDS = (("stage", -1), ("mb", -1), ("direction", 0), ("chunk", -1), ("peer", -1), ("sub", -1), ("bucket", -1),
              ("half", -1))
#: The string fields, with their defaults (kind and lane have none).
STR_FIELDS = (("kind", None), ("lane", None), ("flow", ""), ("label", ""), ("cost", ""))


def _is_set(p: object) -> bool:
    return p is not None


def encode(values: Sequence[str]) -> tuple[Any, tuple[str, ...]]:
    """(codes, names): ``names`` in first-seen order, ``codes[i]`` the position of ``values[i]``."""
    names = tuple(dict.fromkeys(values))
    code = {v: k for k, v in enumerate(names)}
    return np.fromiter(map(code.__getitem__, values), dtype=np.int32, count=len(values)), names


@dataclass(frozen=True, slots=True)
class Columns:
    """The fields the rules and the simulator branch on, in the fixed codes above, indexed like
    the table's rows (:attr:`OpTable.columns`): a rule compares with ``KIND_CODE["SEND"]``, not
    with a table's own first-seen codes."""

    kind: Any
    """int8 :data:`KIND_CODE` of each op."""
    rank: Any
    lane: Any
    """int8 :data:`LANE_CODE` of each op."""
    stage: Any
    mb: Any
    direction: Any
    peer: Any
    flow: Any
    """int8 :data:`FLOW_CODE` of each op."""

    @property
    def n(self) -> int:
        return int(self.kind.size)


@dataclass(frozen=True, eq=False)
class OpTable:
    """Every op of a schedule, one column per :class:`pptl.ir.Op` field, indexed like ``schedule.ops``."""

    kind: Any
    kind_names: tuple[str, ...]
    rank: Any
    lane: Any
    lane_names: tuple[str, ...]
    stage: Any
    mb: Any
    direction: Any
    chunk: Any
    peer: Any
    sub: Any
    flow: Any
    flow_names: tuple[str, ...]
    label: Any
    label_names: tuple[str, ...]
    cost: Any
    cost_names: tuple[str, ...]
    pair: Any
    """(n, 3) int64: stage, mb, direction of the B half (rows without a pair hold -1)."""
    has_pair: Any
    """bool per op: whether ``pair`` is set."""
    payload: Any
    """float64 per op."""
    bucket: Any
    half: Any

    @property
    def n(self) -> int:
        return int(self.kind.size)

    # --- building -------------------------------------------------------------------------------

    @staticmethod
    def from_ops(ops: Sequence[Op]) -> OpTable:
        """The table of an ``Op`` list (one pass per field)."""
        n = len(ops)
        strs = {name: encode(list(map(attrgetter(name), ops))) for name, _ in STR_FIELDS}
        ints = {name: np.fromiter(map(attrgetter(name), ops), dtype=_I64, count=n)
                for name in ("rank", *(f for f, _ in INT_FIELDS))}
        pairs = list(map(attrgetter("pair"), ops))
        t = OpTable.of_columns(n, strs, ints, pairs, np.fromiter(map(attrgetter("payload"), ops), dtype=np.float64,
                                                               count=n))
        if isinstance(ops, list):
            t.__dict__["op_list"] = ops  # the rows' Op view is the list they came from
        return t

    @staticmethod
    def of_columns(n: int, strs: dict[str, tuple[Any, tuple[str, ...]]], ints: dict[str, Any],
                   pairs: Sequence[Sequence[int] | None] | None, payload: Any) -> OpTable:
        """A table from encoded string columns (:data:`STR_FIELDS`), int64 columns (rank and
        :data:`INT_FIELDS`; one left out is all default), the pairs (None: no op has one) and the
        payloads (None: all zero)."""
        ints = dict(ints)
        for name, default in INT_FIELDS:
            if name not in ints:
                ints[name] = np.full(n, default, dtype=_I64)
        pair = np.full((n, 3), -1, dtype=_I64)
        has_pair = np.zeros(n, dtype=bool)
        if pairs is not None:
            has_pair[:] = np.fromiter(map(_is_set, pairs), dtype=bool, count=n)
            if has_pair.any():
                pair[has_pair] = np.asarray([p for p in pairs if p is not None], dtype=_I64).reshape(-1, 3)
        return OpTable(
            kind=strs["kind"][0], kind_names=strs["kind"][1], rank=ints["rank"],
            lane=strs["lane"][0], lane_names=strs["lane"][1],
            stage=ints["stage"], mb=ints["mb"], direction=ints["direction"], chunk=ints["chunk"],
            peer=ints["peer"], sub=ints["sub"],
            flow=strs["flow"][0], flow_names=strs["flow"][1], label=strs["label"][0], label_names=strs["label"][1],
            cost=strs["cost"][0], cost_names=strs["cost"][1], pair=pair, has_pair=has_pair,
            payload=payload if payload is not None else np.zeros(n, dtype=np.float64),
            bucket=ints["bucket"], half=ints["half"])

    @staticmethod
    def concat(parts: Iterable[OpTable]) -> OpTable:
        """The ops of ``parts`` one after the other (codes re-numbered onto merged name tables)."""
        parts = list(parts)
        merged: dict[str, Any] = {}
        for name, _ in STR_FIELDS:
            names: dict[str, int] = {}
            codes = []
            for p in parts:
                own = getattr(p, f"{name}_names")
                remap = np.array([names.setdefault(v, len(names)) for v in own] or [0], dtype=np.int32)
                codes.append(remap[getattr(p, name)])
            merged[name] = np.concatenate(codes) if codes else np.zeros(0, dtype=np.int32)
            merged[f"{name}_names"] = tuple(names)
        for name in ("rank", *(f for f, _ in INT_FIELDS), "has_pair", "payload"):
            merged[name] = np.concatenate([getattr(p, name) for p in parts])
        merged["pair"] = np.concatenate([p.pair for p in parts]).reshape(-1, 3)
        return OpTable(**merged)

    # --- reading --------------------------------------------------------------------------------

    def strings(self, name: str) -> list[str]:
        """One string field as a list, op by op."""
        names = getattr(self, f"{name}_names")
        return list(map(names.__getitem__, getattr(self, name).tolist()))

    def ops(self) -> list[Op]:
        """The ``Op`` of every row (what ``schedule.ops`` is when something asks for it)."""
        n = self.n
        tl = np.ndarray.tolist
        pairs: list[tuple[int, ...] | None] | Iterable[None] = repeat(None, n)
        if self.has_pair.any():
            pairs = [tuple(p) if h else None for p, h in zip(tl(self.pair), tl(self.has_pair))]
        return list(map(Op, self.strings("kind"), tl(self.rank), self.strings("lane"), tl(self.stage), tl(self.mb),
                        tl(self.direction), tl(self.chunk), pairs,
                        tl(self.peer), self.strings("flow"), tl(self.sub), self.strings("label"), tl(self.payload),
                        self.strings("cost"), tl(self.bucket), tl(self.half)))

    def ids(self) -> list[str]:
        """``Op.id`` of every row, from the columns (no ``Op`` built): each part of the id is
        written once per distinct value, then joined row by row."""
        if not self.n:
            return []
        kind, lane, flow = self.strings("kind"), self.strings("lane"), self.strings("flow")
        rank = self.rank.tolist()
        # the head ("r0/compute/SEND_F") per distinct (rank, lane, kind, flow)
        cols = ((self.lane, self.lane_names), (self.kind, self.kind_names), (self.flow, self.flow_names))
        lo = int(self.rank.min())
        if (int(self.rank.max()) - lo + 1) * math.prod(len(names) for _, names in cols) < 1 << 62:
            key = self.rank.astype(np.int64) - lo
            for col, names in cols:
                key = key * len(names) + col
            _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        else:  # too many distinct names and ranks for one int64 key (a hostile file): rows as keys
            _, first, inv = np.unique(np.stack([self.rank, self.lane, self.kind, self.flow]), axis=1,
                                      return_index=True, return_inverse=True)
        heads = [f"r{rank[i]}/{lane[i]}/{kind[i]}" + (f"_{flow[i]}" if flow[i] else "") for i in first.tolist()]
        out = list(map(heads.__getitem__, inv.reshape(-1).tolist()))
        if any(self.label_names):
            out = list(map(add, out, [" " + x if x else "" for x in self.strings("label")]))
        for col, text in ((self.stage, " s{}"), (self.mb, " mb{}"), (self.sub, " #{}"), (self.bucket, " bucket{}"),
                          (self.half, " half{}")):
            if (col >= 0).any():
                out = list(map(add, out, _value_texts(col, text, _NATURAL)))
            if col is self.mb and (self.direction != 0).any():  # the id's order: stage, mb, direction, sub...
                out = list(map(add, out, _value_texts(self.direction, " d{}", _NONZERO)))
        if self.has_pair.any():
            pairs = [f" +B s{s} mb{m}" + (f" d{d}" if d else "") if h else ""
                     for (s, m, d), h in zip(self.pair.tolist(), self.has_pair.tolist())]
            out = list(map(add, out, pairs))
        for name, text in (("SEND", " ->r{}"), ("RECV", " <-r{}")):
            if name in self.kind_names:
                rows = (self.kind == self.kind_names.index(name)) & (self.peer >= 0)
                if rows.any():
                    out = list(map(add, out, _value_texts(np.where(rows, self.peer, -1), text, _NATURAL)))
        return out

    @cached_property
    def op_list(self) -> list[Op]:
        """:meth:`ops`, built once (what ``Schedule.ops`` reads)."""
        return self.ops()

    def built_ops(self) -> list[Op] | None:
        """:attr:`op_list` if it exists, else None (nothing built)."""
        return self.__dict__.get("op_list")

    def op(self, i: int) -> Op:
        """Row ``i`` as an ``Op`` (for a rule's message), without building the others."""
        p = tuple(self.pair[i].tolist()) if self.has_pair[i] else None
        return Op(self.kind_names[self.kind[i]], int(self.rank[i]), self.lane_names[self.lane[i]], int(self.stage[i]),
                  int(self.mb[i]), int(self.direction[i]), int(self.chunk[i]), p,
                  int(self.peer[i]), self.flow_names[self.flow[i]], int(self.sub[i]), self.label_names[self.label[i]],
                  float(self.payload[i]), self.cost_names[self.cost[i]], int(self.bucket[i]), int(self.half[i]))

    def kinds(self) -> frozenset[str]:
        """The kinds present."""
        # codes index kind_names: a count per code (np.unique would import numpy.ma, ~10 ms of start-up)
        present = np.flatnonzero(np.bincount(self.kind, minlength=len(self.kind_names))).tolist() if self.n else []
        return frozenset(self.kind_names[c] for c in present)

    def where(self, field: str, test: Any) -> Any:
        """bool per op: whether its string ``field`` is one of the names ``test`` (a set of
        names, or a function of a name); asked once per name, not per op."""
        names = getattr(self, f"{field}_names")
        hit = [(test(v) if callable(test) else v in test) for v in names]
        return np.array(hit or [False], dtype=bool)[getattr(self, field)]

    def code_of(self, field: str, table: dict[str, int], other: int) -> Any:
        """A string field re-coded through ``table`` (names not in it get ``other``)."""
        names = getattr(self, f"{field}_names")
        lut = np.array([table.get(v, other) for v in names] or [other], dtype=np.int8)
        return lut[getattr(self, field)]

    @cached_property
    def columns(self) -> Columns:
        """The fixed-code view (:class:`Columns`) the rules and the simulator read."""
        return Columns(kind=self.code_of("kind", KIND_CODE, 0), rank=self.rank, lane=self.code_of("lane", LANE_CODE, 3),
                       stage=self.stage, mb=self.mb, direction=self.direction, peer=self.peer,
                       flow=self.code_of("flow", FLOW_CODE, 3))


def _natural(v: int) -> bool:
    return v >= 0


def _nonzero(v: int) -> bool:
    return v != 0


_NATURAL, _NONZERO = _natural, _nonzero


def _value_texts(col: Any, text: str, shown: Callable[[int], bool]) -> list[str]:
    """``text.format(v)`` for each value ``v`` of the int column ``col`` where ``shown(v)``, else "";
    formatted once per distinct value."""
    lo, hi = int(col.min()), int(col.max())
    if hi - lo <= 4 * col.size:  # a small range: a list indexed by value
        table = [text.format(v) if shown(v) else "" for v in range(lo, hi + 1)]
        return list(map(table.__getitem__, (col - lo).tolist()))
    values, inv = np.unique(col, return_inverse=True)
    table = [text.format(v) if shown(v) else "" for v in values.tolist()]
    return list(map(table.__getitem__, inv.reshape(-1).tolist()))


def table_of(schedule: Any) -> OpTable:
    """A schedule's table (``schedule.table``, its storage)."""
    return schedule.table  # type: ignore[no-any-return]


def edge_arrays(edges: Sequence[tuple[int, int]]) -> tuple[Any, Any]:
    """(producers, consumers) of a list of index pairs, as two int64 arrays."""
    flat = np.fromiter(chain.from_iterable(edges), dtype=_I64, count=2 * len(edges))
    return flat[0::2], flat[1::2]


def flat_lanes(lanes: Mapping[tuple[int, str], Sequence[int]]) -> tuple[list[tuple[int, str]], Any, Any]:
    """Every lane entry in one pass: (the lanes in ``lanes`` order, the op index of each entry,
    lane after lane in run order, the lane (position in the first) of each entry)."""
    keys = list(lanes)
    lengths = np.fromiter(map(len, map(lanes.__getitem__, keys)), dtype=_I64, count=len(keys))
    total = int(lengths.sum()) if keys else 0
    op = np.fromiter(chain.from_iterable(map(lanes.__getitem__, keys)), dtype=_I64, count=total)
    return keys, op, np.repeat(np.arange(len(keys), dtype=_I64), lengths)


def lane_edge_arrays(lanes: Mapping[tuple[int, str], Sequence[int]]) -> tuple[Any, Any]:
    """Consecutive ops on each (rank, lane), as (earlier, later) int64 arrays."""
    _, op, lane = flat_lanes(lanes)
    same = lane[:-1] == lane[1:]
    return op[:-1][same], op[1:][same]


#: Ids spread over at most this many slots (times the rows) are used as they are, not compressed.
_DENSE_SLACK = 4


def group_ids(*cols: Any) -> tuple[Any, int]:
    """(ids, size): one id in ``0..size-1`` per row, equal where the rows of ``cols`` are equal.

    Ids come from the columns' values themselves when they pack into a range not much larger than
    the rows (then ``size`` may exceed the number of distinct rows), else from ``np.unique``.
    """
    n = int(cols[0].size) if cols else 0
    if n == 0:
        return np.zeros(0, dtype=_I64), 0
    cols = tuple(np.asarray(c).astype(_I64, copy=False) for c in cols)  # narrow codes would wrap below
    lows = [int(c.min()) for c in cols]
    spans = [int(c.max()) - lo + 1 for c, lo in zip(cols, lows)]
    size = 1
    for s in spans:
        size *= s  # Python ints: no overflow while deciding
    if size >= 2**62:
        _, inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        return inv.astype(_I64), int(inv.max()) + 1
    packed = np.zeros(n, dtype=_I64)
    for c, lo, s in zip(cols, lows, spans):
        packed *= s
        packed += c - lo
    if size <= _DENSE_SLACK * n + 1024:
        return packed, size
    uniq, inv = np.unique(packed, return_inverse=True)
    return inv.reshape(-1).astype(_I64), int(uniq.size)


def first_of(ids: Any, size: int, rows: Any) -> Any:
    """Per id, the least of ``rows`` (positions, op indices...) with that id, else -1."""
    none = np.iinfo(_I64).max
    out = np.full(size, none, dtype=_I64)
    np.minimum.at(out, ids, rows)
    out[out == none] = -1
    return out
