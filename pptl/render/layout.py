"""What every renderer draws, computed once: rows, blocks (as flat arrays), legend, title, grid.

A :class:`Layout` is independent of the drawing library; matplotlib, plotly and the terminal each
turn it into their own picture. Blocks are kept as parallel numpy arrays because plans reach
hundreds of thousands of ops and the renderers draw them as one collection.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pptl.render.base import Category, Grid, GridCell, RowSpec, Style, title_number
from pptl.render.styles import resolve_style
from pptl.timeline import Timeline

__all__ = ["Row", "Blocks", "GridCell", "Grid", "Layout", "build_layout", "title_line"]


@dataclass(frozen=True)
class Row:
    spec: RowSpec
    tracks: int
    """Stacked tracks (1 unless the row is packed and its ops overlap)."""
    bubble: float | None
    """Idle fraction of the rank's compute lane, where the row shows it."""


@dataclass
class Blocks:
    """Parallel arrays, one entry per drawn part (an FB op gives two)."""

    row: np.ndarray
    """Row index."""
    y0: np.ndarray
    y1: np.ndarray
    """Vertical extent inside the row, 0 = top, 1 = bottom (tracks folded in)."""
    start: np.ndarray
    end: np.ndarray
    cat: np.ndarray
    """Index into :attr:`Layout.categories`."""
    colour: list[str]
    """Semantic colour name of each block."""
    texts: list[tuple[str, ...]]
    event: np.ndarray
    """Index into the timeline's events."""
    track: np.ndarray
    """Track inside the row (terminal lines)."""

    def __len__(self) -> int:
        return len(self.row)


@dataclass
class Layout:
    style: Style
    title: str
    rows: list[Row]
    blocks: Blocks
    categories: list[Category]
    t0: float
    t1: float
    units: str
    grid: Grid | None
    timeline: Timeline
    """What was laid out; ``blocks.event`` indexes its events."""
    frames: np.ndarray | None = None
    """(row, y0, y1, start, end) per op drawn with one border around its parts (seed 004's F&B)."""

    @property
    def events(self) -> int:
        """Events in the timeline (some may not be drawn by the style)."""
        return len(self.timeline.events)

    @property
    def span(self) -> float:
        return self.t1 - self.t0

    def legend(self, *, min_width: bool = True) -> list[Category]:
        """The categories a legend lists: those whose blocks draw something, in legend order.

        A zero-cost op (a torch CSV's REDUCE_GRAD, exported with ``--comms``) keeps its category, as
        blocks index :attr:`categories`, but its block has no width: an entry for it would name
        something the figure does not show. A category with no block at all stays listed, as a seed
        style lists every kind of its family.

        Args:
            min_width: whether the renderer widens the blocks of a ``min_width`` category (the
                figures do; the terminal draws no zero-width block).
        """
        b = self.blocks
        used = set(b.cat.tolist())
        drawn = set(b.cat[b.end > b.start].tolist())
        if min_width:
            drawn |= {k for k in used if self.categories[k].min_width}
        return [c for k, c in enumerate(self.categories) if k in drawn or k not in used]


def title_line(tl: Timeline) -> str:
    """The figure title of ``tl``, as its family's style words it (:meth:`Style.title`)."""
    return resolve_style("auto", tl).title(tl)


def build_layout(tl: Timeline, style: Style | str = "auto", *, window: tuple[float, float] | None = None,
                 split: str = "side", reverse_ids: bool = False) -> Layout:
    """Place every event of ``tl`` on the style's rows.

    Args:
        tl: a planned or measured timeline.
        style: a style name (``auto`` asks the family) or a :class:`Style`.
        window: draw only this time range (blocks are clipped to it), like the seed figures that show
            one steady step; the title, bubbles and order grid still describe the whole timeline.
        split, reverse_ids: DualPipe's overlapped block ("side" or "stack") and whether reverse-direction
            blocks carry numbers (see :class:`pptl.render.options.RenderOptions`).

    Notes:
        O(events log events) (packing sorts each packed row by start).
    """
    st = resolve_style(style, tl) if isinstance(style, str) else style
    st = st.with_options(split=split, reverse_ids=reverse_ids)
    specs = st.rows(tl)
    row_index = {s.key: i for i, s in enumerate(specs)}
    bubbles = {s.rank: s.bubble_fraction for s in tl.rank_stats()}

    # Collect parts per row; packed rows get their tracks after sorting by start.
    raw: list[tuple[int, int, float, float, object]] = []  # (row, event, start, end, parts)
    lo, hi = window if window is not None else (float("-inf"), float("inf"))
    for i, e in enumerate(tl.events):
        if window is not None and not (e.end > lo and e.start < hi or lo <= e.start == e.end <= hi):
            continue
        key = st.row_of(e)
        r = row_index.get(key) if key is not None else None
        if r is None:
            continue
        raw.append((r, i, max(e.start, lo), min(e.end, hi), st.parts(e)) if window is not None else
                   (r, i, e.start, e.end, st.parts(e)))
    tracks_of = [1] * len(specs)
    track = [0] * len(raw)
    packed = [i for i, s in enumerate(specs) if s.pack]
    if packed:
        by_row: dict[int, list[int]] = {}
        for j, item in enumerate(raw):
            if specs[item[0]].pack:
                by_row.setdefault(item[0], []).append(j)
        for r, js in by_row.items():
            js.sort(key=lambda j: (raw[j][2], raw[j][3]))
            ends: list[float] = []
            for j in js:
                s, e = raw[j][2], raw[j][3]
                for t, last in enumerate(ends):
                    if last <= s + 1e-12:
                        ends[t] = max(e, s)
                        track[j] = t
                        break
                else:
                    track[j] = len(ends)
                    ends.append(max(e, s))
            tracks_of[r] = max(1, len(ends))

    fixed = [j for j, item in enumerate(raw) if item[4] and item[4][0].track >= 0]
    for j in fixed:  # styles that give each stream its own sub-row
        r = raw[j][0]
        track[j] = raw[j][4][0].track
        tracks_of[r] = max(tracks_of[r], track[j] + 1)
    keys_used: dict[str, None] = {}
    rows_a, y0, y1, start, end, cat_keys, colours, texts, ev, trk = [], [], [], [], [], [], [], [], [], []
    frames: list[tuple[float, float, float, float, float]] = []
    for j, (r, i, s, e, parts) in enumerate(raw):
        n = tracks_of[r]
        t = track[j]
        if parts and parts[0].frame:
            frames.append((r, (t + min(p.lo for p in parts)) / n, (t + max(p.hi for p in parts)) / n, s, e))
        for p in parts:
            keys_used.setdefault(p.cat)
            rows_a.append(r)
            y0.append((t + p.lo) / n)
            y1.append((t + p.hi) / n)
            start.append(s if p.x0 <= 0.0 else s + (e - s) * p.x0)
            end.append(e if p.x1 >= 1.0 else s + (e - s) * p.x1)
            cat_keys.append(p.cat)
            colours.append(p.colour)
            texts.append(p.texts)
            ev.append(i)
            trk.append(t)
    cats = st.categories(tl, set(keys_used))
    if isinstance(style, str) and style != "auto" and st.name != resolve_style("auto", tl).name:
        # A seed style lists all its kinds for its own family, as the seed does; forced onto another
        # family's timeline, its legend would name kinds the figure does not draw.
        cats = [c for c in cats if c.key in keys_used]
    cat_pos = {c.key: k for k, c in enumerate(cats)}
    missing = [k for k in keys_used if k not in cat_pos]
    for k in missing:  # a style that forgot a key still gets a legend entry
        cat_pos[k] = len(cats)
        cats.append(Category(k, k, ("other",)))
    cat_idx = np.fromiter((cat_pos[k] for k in cat_keys), dtype=np.int32, count=len(cat_keys))
    colours = [c or cats[ci].colours[0] for c, ci in zip(colours, cat_idx.tolist())]
    blocks = Blocks(
        row=np.asarray(rows_a, dtype=np.int32), y0=np.asarray(y0, dtype=float), y1=np.asarray(y1, dtype=float),
        start=np.asarray(start, dtype=float), end=np.asarray(end, dtype=float), cat=cat_idx, colour=colours,
        texts=texts, event=np.asarray(ev, dtype=np.int64), track=np.asarray(trk, dtype=np.int32),
    )
    rows = [Row(s, tracks_of[i], bubbles.get(s.rank) if (s.bubble and st.show_bubble) else None)
            for i, s in enumerate(specs)]
    t0, t1 = (tl.start, tl.start + tl.makespan) if window is None else window
    n = title_number
    title = title_line(tl) if window is None else f"{title_line(tl)} · window {n(t0)}-{n(t1)}"
    if window is not None and (t0 >= tl.start + tl.makespan or t1 <= tl.start):
        title = f"{title_line(tl)} · window {n(t0)}-{n(t1)}, outside the step ({n(tl.start)}-{n(tl.start + tl.makespan)})"
    return Layout(st, title, rows, blocks, cats, t0, t1, tl.meta.units, st.grid(tl), tl,
                  np.asarray(frames, dtype=float).reshape(-1, 5))
