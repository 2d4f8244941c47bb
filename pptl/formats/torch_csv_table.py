"""torch's schedule CSV read into numpy columns (large files): cells to arrays, arrays to an op table.

:mod:`pptl.formats.torch_csv` decides the placement, micro-batches and notes; this module does the
per-cell work on arrays so that a large file becomes a table-made schedule
(``Schedule.table``) without one ``Op`` per cell. Two ways in:

- :func:`cells_of_text`: the form torch writes (``0F0``, ``3SEND_B5``, ``(0F7;7B3)OVERLAP_F_B``,
  empty cells; ASCII, no quotes): one regex match validates the whole text, then the numbers are
  read from the bytes with numpy (digit runs summed by place value). Anything else returns None
  and the cell-by-cell reader runs, which names the bad cell.
- :func:`cells_of_rows`: the cell-by-cell reader's parsed rows (FSDP kinds, spaces, quotes...).

Both give the same :class:`Cells`; :func:`op_table` turns them into an
:class:`pptl.optable.OpTable` with the columns each cell's ``Op`` would hold.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from pptl.optable import OpTable

__all__ = ["Cells", "KINDS", "cells_of_text", "cells_of_rows", "op_table", "lanes_of", "program_of"]

_I64 = np.int64

#: The parsed kinds, by code (the cell-by-cell reader's kind strings; "FB" is an OVERLAP_F_B cell).
KINDS = ("F", "I", "B", "W", "FB", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "UNSHARD", "RESHARD", "REDUCE_GRAD")
_CODE = {k: i for i, k in enumerate(KINDS)}
FB = _CODE["FB"]
#: Per parsed kind: op kind, lane, issue-order letter, flow, step to the peer's stage (SEND_F goes
#: to the next stage, SEND_B to the previous one; RECVs come from the other side), in code order.
_OP_KIND = ("F", "I", "B", "W", "FB", "SEND", "RECV", "SEND", "RECV", "UNSHARD", "RESHARD", "REDUCE_GRAD")
_LANE = ("compute",) * 5 + ("send", "recv", "send", "recv") + ("compute",) * 3
_LETTER = b"c" * 5 + b"srsr" + b"c" * 3
_FLOW = ("",) * 5 + ("F", "F", "B", "B") + ("",) * 3
_STEP = np.array((0,) * 5 + (1, -1, -1, 1) + (0,) * 3, dtype=_I64)

# The whole text in the form torch writes: lines of comma-separated cells, each empty, an action
# with a micro-batch or an overlap of two. ASCII digits only (Python's \d also takes other scripts').
_ACT = r"[0-9]+(?:SEND_F|RECV_F|SEND_B|RECV_B|F|I|B|W)[0-9]+"
_CELL = rf"(?:{_ACT}|\([0-9]+[FB][0-9]+;[0-9]+[FB][0-9]+\)OVERLAP_F_B)?"
_TEXT = re.compile(rf"(?:{_CELL}(?:,{_CELL})*\n)*(?:{_CELL}(?:,{_CELL})*)?")
_MAX_DIGITS = 18  # a run of at most 18 digits fits an int64
_POW10 = 10 ** np.arange(_MAX_DIGITS, dtype=_I64)


@dataclass(frozen=True)
class Cells:
    """Every non-empty cell of a file, in file order (rank by rank): parsed kind code
    (:data:`KINDS`), stage, micro-batch, the B half of an overlap (-1 otherwise) and the rank."""

    kind: Any
    stage: Any
    mb: Any
    bstage: Any
    bmb: Any
    rank: Any

    @property
    def n(self) -> int:
        return int(self.kind.size)


def cells_of_text(text: str) -> tuple[Cells, int] | None:
    """(cells, number of ranks) of a file in the form torch writes, or None when it is in any
    other form or a number does not fit an int64 (then the cell-by-cell reader runs)."""
    if not text.isascii() or _TEXT.fullmatch(text) is None:
        return None
    b = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    digit = (b >= 48) & (b <= 57)
    edge = np.diff(digit.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts = np.flatnonzero(edge == 1)
    ends = np.flatnonzero(edge == -1)
    if starts.size == 0:
        return None
    lengths = ends - starts
    if int(lengths.max()) > _MAX_DIGITS:
        return None
    # Each digit times its place value, summed per run: the value of every number in the file.
    pos = np.flatnonzero(digit)
    place = np.repeat(ends - 1, lengths) - pos
    weighted = (b[pos].astype(_I64) - 48) * _POW10[place]
    offsets = np.zeros(starts.size, dtype=_I64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    values = np.add.reduceat(weighted, offsets)
    # The text matched _TEXT, so numbers come in pairs: an action's stage, then its micro-batch,
    # with the kind's letters between them (one letter, or six: SEND_F and the like).
    first, last = b[ends[0::2]], b[starts[1::2] - 1]
    long = (starts[1::2] - ends[0::2]) > 1
    kind: Any = np.select(
        [~long & (first == 70), ~long & (first == 73), ~long & (first == 66), ~long & (first == 87),
         long & (first == 83) & (last == 70), long & (first == 82) & (last == 70),
         long & (first == 83) & (last == 66)],
        [_CODE["F"], _CODE["I"], _CODE["B"], _CODE["W"], _CODE["SEND_F"], _CODE["RECV_F"], _CODE["SEND_B"]],
        _CODE["RECV_B"]).astype(np.int8)
    stage: Any = values[0::2]
    mb: Any = values[1::2]
    act_start = starts[0::2]
    before = np.where(act_start > 0, b[np.maximum(act_start - 1, 0)], 10)
    rank: Any = np.searchsorted(np.flatnonzero(b == 10), act_start).astype(_I64)
    opens = np.flatnonzero(before == 40)  # "(": the first action of an overlap; the next is its second
    bstage: Any = np.full(kind.size, -1, dtype=_I64)
    bmb: Any = np.full(kind.size, -1, dtype=_I64)
    if opens.size:
        k1, k2 = kind[opens], kind[opens + 1]
        if (k1 == k2).any():  # two F or two B: the cell-by-cell reader says what is wrong
            return None
        f = np.where(k1 == _CODE["F"], opens, opens + 1)
        bw = np.where(k1 == _CODE["F"], opens + 1, opens)
        bstage[opens], bmb[opens] = stage[bw], mb[bw]
        stage[opens], mb[opens] = stage[f], mb[f]
        kind[opens] = FB
        keep = np.ones(kind.size, dtype=bool)
        keep[opens + 1] = False
        kind, stage, mb, bstage, bmb, rank = (a[keep] for a in (kind, stage, mb, bstage, bmb, rank))
    return Cells(kind, stage, mb, bstage, bmb, rank), int(rank[-1]) + 1


def cells_of_rows(rows: Sequence[Sequence[tuple[str, int, int, int, int]]]) -> Cells | None:
    """The cells of the cell-by-cell reader's rows ((kind, stage, mb, B stage, B mb) per cell), or
    None when a number does not fit an int64."""
    n = sum(map(len, rows))
    flat = [c for row in rows for c in row]
    try:
        kind = np.fromiter((_CODE[c[0]] for c in flat), dtype=np.int8, count=n)
        stage = np.fromiter((c[1] for c in flat), dtype=_I64, count=n)
        mb = np.fromiter((c[2] for c in flat), dtype=_I64, count=n)
        bstage = np.fromiter((c[3] for c in flat), dtype=_I64, count=n)
        bmb = np.fromiter((c[4] for c in flat), dtype=_I64, count=n)
    except OverflowError:
        return None
    rank = np.repeat(np.arange(len(rows), dtype=_I64), [len(r) for r in rows])
    return Cells(kind, stage, mb, bstage, bmb, rank)


def observed_stages(cells: Cells) -> dict[int, int]:
    """Each stage a cell names (an overlap names two) and the first rank that names it."""
    fb = cells.kind == FB
    st = np.concatenate([cells.stage, cells.bstage[fb]])
    rk = np.concatenate([cells.rank, cells.rank[fb]])
    order = np.lexsort((rk, st))
    st, rk = st[order], rk[order]
    head = np.ones(st.size, dtype=bool)
    head[1:] = st[1:] != st[:-1]
    return dict(zip(st[head].tolist(), rk[head].tolist()))


def forwards(cells: Cells) -> tuple[list[int], int]:
    """(distinct forward micro-batches of each stage that runs a forward, highest forward index or -1)."""
    f = (cells.kind == _CODE["F"]) | (cells.kind == FB)
    st, mb = cells.stage[f], cells.mb[f]
    if not st.size:
        return [], -1
    order = np.lexsort((mb, st))
    st, mb = st[order], mb[order]
    new = np.ones(st.size, dtype=bool)
    new[1:] = (st[1:] != st[:-1]) | (mb[1:] != mb[:-1])
    st = st[new]
    _, counts = np.unique(st, return_counts=True)
    return counts.tolist(), int(mb.max())


def _lookup(keys: Any, fn: Callable[[int], int]) -> Any:
    """``fn`` of every key, calling it once per distinct key."""
    if not keys.size:
        return np.zeros(0, dtype=_I64)
    distinct, where = np.unique(keys, return_inverse=True)
    return np.array([fn(k) for k in distinct.tolist()], dtype=_I64)[where]


def _coded(codes: Any, names: Sequence[str]) -> tuple[Any, tuple[str, ...]]:
    """``names[codes]`` as (codes, names) with the names in first-seen order (as :func:`pptl.optable.encode`)."""
    words = [names[c] for c in range(len(names))]
    if not codes.size:
        return np.zeros(0, dtype=np.int32), ()
    present, first = np.unique(codes, return_index=True)
    order = present[np.argsort(first)]
    seen: dict[str, int] = {}
    lut = np.zeros(len(names), dtype=np.int32)
    for c in order.tolist():
        lut[c] = seen.setdefault(words[c], len(seen))
    return lut[codes], tuple(seen)


def op_table(cells: Cells, rank_of: Callable[[int], int], chunk_of: Callable[[int], int]) -> OpTable:
    """The ops of ``cells`` as columns: what ``torch_csv`` builds one ``Op`` per cell for."""
    n = cells.n
    k = cells.kind.astype(np.intp)
    comm = np.flatnonzero(_STEP[k] != 0)
    peer = np.full(n, -1, dtype=_I64)
    peer[comm] = _lookup(cells.stage[comm] + _STEP[k[comm]], rank_of)
    fb = k == FB
    strs = {"kind": _coded(k, _OP_KIND), "lane": _coded(k, _LANE), "flow": _coded(k, _FLOW),
            "label": (np.zeros(n, dtype=np.int32), ("",) if n else ()),
            "cost": (np.zeros(n, dtype=np.int32), ("",) if n else ())}
    ints = {"rank": cells.rank, "stage": cells.stage, "mb": cells.mb, "direction": np.zeros(n, dtype=_I64),
            "chunk": _lookup(cells.stage, chunk_of), "peer": peer, "sub": np.full(n, -1, dtype=_I64)}
    table = OpTable.of_columns(n, strs, ints, None, None)
    if fb.any():
        table.pair[fb, 0] = cells.bstage[fb]
        table.pair[fb, 1] = cells.bmb[fb]
        table.pair[fb, 2] = 0
        table.has_pair[fb] = True
    return table


def lanes_of(cells: Cells) -> dict[tuple[int, str], list[int]]:
    """Each (rank, lane)'s op indices in file order; a rank's lanes in the order its row first uses them."""
    lane = np.array([0, 0, 0, 0, 0, 1, 2, 1, 2, 0, 0, 0], dtype=_I64)[cells.kind.astype(np.intp)]
    names = ("compute", "send", "recv")
    group = cells.rank * 3 + lane
    order = np.argsort(group, kind="stable")
    g = group[order]
    if not g.size:
        return {}
    head = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    bounds = np.r_[head, g.size].tolist()
    firsts = order[head]
    flat = order.tolist()
    keys = [(r // 3, names[r % 3]) for r in g[head].tolist()]
    # by rank, then by where the row first uses the lane (as a dict filled cell by cell would be)
    by = sorted(range(len(keys)), key=lambda j: (keys[j][0], int(firsts[j])))
    return {keys[j]: flat[bounds[j]:bounds[j + 1]] for j in by}


def program_of(cells: Cells, pp: int) -> tuple[str, ...]:
    """Each rank's issue order as letters (c compute, s send, r recv), one per cell."""
    letters = np.frombuffer(_LETTER, dtype=np.uint8)[cells.kind.astype(np.intp)].tobytes().decode("ascii")
    counts = np.bincount(cells.rank, minlength=pp)
    ends = np.cumsum(counts).tolist()
    out = []
    start = 0
    for end in ends:
        out.append(letters[start:end])
        start = end
    return tuple(out)
