"""The terminal view: a rich renderable that draws a timeline at the console's width.

One line per row track (a rank's lane, or a seed style's row), time scaled to the width left after
the labels, each cell coloured by the category of the op that covers most of it and showing its
micro-batch number where the number fits. A legend and each rank's bubble follow. Without colour
(``NO_COLOR``, a pipe, or the golden tests) blocks show their kind letter too (``F3``, ``B3``) and
idle cells are ``·``, so the picture still reads.

Example:
    >>> from rich.console import Console
    >>> Console(width=100).print(TimelineView(timeline))  # doctest: +SKIP
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.style import Style as RichStyle
from rich.text import Text

from pptl.render.layout import Grid, Layout, build_layout
from pptl.render.styles import Category, colour, text_colour
from pptl.timeline import Timeline

__all__ = ["TerminalOptions", "TimelineView", "render_text"]

_IDLE = "·"
_MAX_LABEL = 14


@dataclass(frozen=True)
class TerminalOptions:
    style: str = "auto"
    legend: bool = True
    grid: bool = True
    """Draw the style's order grid (MoE) under the timeline."""


class TimelineView:
    """A rich renderable of a timeline; it draws at ``options.max_width`` when printed."""

    def __init__(self, tl: Timeline, options: TerminalOptions = TerminalOptions(), *, layout: Layout | None = None):
        self.options = options
        self.layout = layout if layout is not None else build_layout(tl, options.style)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(min(40, options.max_width), options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lay = self.layout
        width = max(options.max_width, 20)
        plain = console.no_color or console.color_system is None
        label_w = min(max([len(_short(r)) for r in lay.rows] + [3]), _MAX_LABEL)
        bubble_w = 7 if any(r.bubble is not None for r in lay.rows) else 0
        cells = max(width - label_w - 1 - bubble_w, 8)
        yield Text(lay.title[:width], style="bold", no_wrap=True)
        lines = _track_lines(lay)
        for (row, track), items in lines:
            r = lay.rows[row]
            label = _short(r)[:label_w] if track == 0 else ""
            line = Text(f"{label:<{label_w}} ", no_wrap=True)
            line.append_text(_cells_line(lay, items, cells, plain))
            if bubble_w:
                line.append(f" {100 * r.bubble:5.1f}%" if (r.bubble is not None and track == 0) else " " * bubble_w,
                            style="dim")
            yield line
        yield _axis_line(lay, label_w, cells)
        legend = lay.legend(min_width=False) if self.options.legend else []
        if legend:
            yield from _legend(legend, width, plain)
        if self.options.grid and lay.grid is not None:
            yield from _grid_lines(lay.grid, width, plain)


def render_text(tl: Timeline, *, width: int = 100, style: str = "auto", colour_output: bool = False) -> str:
    """The terminal view as a string (no colour unless asked), for tests and plain output."""
    from io import StringIO

    buf = StringIO()
    console = Console(file=buf, width=width, color_system="truecolor" if colour_output else None,
                      force_terminal=colour_output, legacy_windows=False, highlight=False)
    console.print(TimelineView(tl, TerminalOptions(style=style)))
    return buf.getvalue()


def _short(r) -> str:
    return r.spec.short or r.spec.label


def _track_lines(lay: Layout) -> list[tuple[tuple[int, int], list[tuple[int, list[int]]]]]:
    """(row, track) -> [(event, [block indices])], in row order; every track gets a line."""
    b = lay.blocks
    per: dict[tuple[int, int], dict[int, list[int]]] = {}
    for i, (row, trk, ev) in enumerate(zip(b.row.tolist(), b.track.tolist(), b.event.tolist())):
        per.setdefault((row, trk), {}).setdefault(ev, []).append(i)
    out = []
    for row, r in enumerate(lay.rows):
        for trk in range(r.tracks):
            out.append(((row, trk), list(per.get((row, trk), {}).items())))
    return out


def _cells_line(lay: Layout, items: list[tuple[int, list[int]]], cells: int, plain: bool) -> Text:
    b = lay.blocks
    span = lay.span if lay.span > 0 else 1.0
    k = cells / span
    best = [0.0] * cells
    owner = [-1] * cells
    for n, (_ev, blocks) in enumerate(items):
        # halves side by side (DualPipe's F&B) each hold part of the op's span: draw the whole span
        s, e = float(min(b.start[i] for i in blocks)), float(max(b.end[i] for i in blocks))
        if e <= s:
            continue
        x0, x1 = (s - lay.t0) * k, (e - lay.t0) * k
        for c in range(max(int(math.floor(x0)), 0), min(int(math.ceil(x1)), cells)):
            ov = min(x1, c + 1) - max(x0, c)
            if ov > best[c]:
                best[c], owner[c] = ov, n
    line = Text(no_wrap=True)
    c = 0
    while c < cells:
        n = owner[c]
        run = c
        while run < cells and owner[run] == n:
            run += 1
        if n < 0:
            line.append(_IDLE * (run - c), style="dim")
        else:
            line.append_text(_run_text(lay, items[n][1], run - c, plain))
        c = run
    return line


def _run_text(lay: Layout, blocks: list[int], w: int, plain: bool) -> Text:
    """One op's cells: its text centred, its colour (split blocks: first colour, then second)."""
    b = lay.blocks
    cat = lay.categories[int(b.cat[blocks[0]])]
    parts = [b.texts[i][0] if b.texts[i] else "" for i in blocks]
    cands: list[str] = []
    if len(blocks) > 1:
        # An omitted id (DualPipe's reverse direction) shows as "-" so the other id keeps its side.
        joined = "/".join(p or "-" for p in parts)
        cands.append(f"{cat.tag}{joined}" if plain and cat.tag else joined)
    for t in b.texts[blocks[0]]:
        cands.append(_tagged(cat, t) if plain else t)
    if plain and cat.tag:
        cands.append(cat.tag)
    text = next((t for t in cands if t and len(t) <= w), "")
    pad = w - len(text)
    body = " " * (pad // 2) + text + " " * (pad - pad // 2)
    if plain:
        return Text(body)
    return _painted(body, [b.colour[i] for i in blocks])


def _painted(body: str, cols: list[str]) -> Text:
    """``body`` on its colours: one colour, or equal slices of several (a split block)."""
    out = Text()
    n = len(cols)
    for j, col in enumerate(cols):
        piece = body[j * len(body) // n:(j + 1) * len(body) // n]
        if piece:
            out.append(piece, style=RichStyle(bgcolor=colour(col), color=colour(text_colour(col))))
    return out


def _tagged(cat: Category, t: str) -> str:
    """``t`` with the category's tag, unless ``t`` already names the category ("H2D b3")."""
    if not cat.tag:
        return t
    if t.isdigit():
        return f"{cat.tag}{t}"
    head = t.split()[:1]  # a label may be blank (a measured timeline's event label "" or " ")
    if not head:
        return cat.tag
    return t if head == cat.label.split()[:1] else f"{cat.tag}:{t}"


def _axis_line(lay: Layout, label_w: int, cells: int) -> Text:
    left = f"{lay.t0:g}"
    unit = "" if lay.units in ("", "unit") else f" {lay.units}"
    right = f"{lay.t1:g}{unit}"
    mid = "time →"
    gap = cells - len(left) - len(right)
    if gap >= len(mid) + 2:
        a = (gap - len(mid)) // 2
        body = left + " " * a + mid + " " * (gap - len(mid) - a) + right
    else:
        body = (left + " " * max(gap, 1) + right)[:cells]
    return Text(" " * (label_w + 1) + body, style="dim", no_wrap=True)


def _legend(cats: list[Category], width: int, plain: bool) -> RenderResult:
    line = Text(no_wrap=True)
    for c in cats:
        entry = Text()
        if plain:
            entry.append(f"{c.tag}={c.label}" if c.tag else c.label)
        else:
            for col in c.colours:
                entry.append("█" * (2 // len(c.colours) or 1), style=RichStyle(color=colour(col)))
            entry.append(f" {c.label}")
        if line.cell_len and line.cell_len + 2 + entry.cell_len > width:
            yield line
            line = Text(no_wrap=True)
        if line.cell_len:
            line.append("  ")
        line.append_text(entry)
    if line.cell_len:
        yield line


def _grid_lines(grid: Grid, width: int, plain: bool) -> RenderResult:
    yield Text(grid.title[:width], style="bold", no_wrap=True)
    label_w = max((len(name) for name, _ in grid.rows), default=2)
    cell_w = max((len("/".join(c.texts)) + (len(c.colours) if plain else 0)
                  for _, cells in grid.rows for c in cells), default=1) + 1
    avail = width - label_w - 1
    for name, cells in grid.rows:
        line = Text(f"{name:<{label_w}} ", no_wrap=True)
        fits = avail // cell_w
        shown = cells if len(cells) <= fits else cells[: max(fits - 1, 0)]
        for cell in shown:
            txt = "/".join(cell.texts)
            if plain:
                # chunks >= 1 in lower case, as the timeline's tags do (f, b)
                flow = "".join(("F" if "forward" in col else "B").lower() if ".c" in col else
                               ("F" if "forward" in col else "B") for col in cell.colours)
                txt = f"{flow}{txt}"
                line.append(f"{txt:>{cell_w - 1}} ")
            else:
                line.append_text(_painted(f"{txt:^{cell_w - 1}}", list(cell.colours)))
                line.append(" ")
        if len(shown) < len(cells):
            line.append("…")
        yield line
