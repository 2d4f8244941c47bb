"""The MoE seed figure with matplotlib: three close-up sections over the order grid (seeds 000-002).

Draws a :class:`~pptl.render.moe_figure.MoEFigure` (all positions come from it); sizes are in
inches so labels can be fitted exactly: a block's label goes inside (horizontal, else vertical),
else beside the block where its row is free, never on top of another block. The comparison view
draws two grids on one linear time axis, so the extra warmup forward shows by contrast.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pptl.errors import InputError
from pptl.render.base import Category, colour, text_colour
from pptl.render.moe_figure import SECTION_ROWS, DeviceRow, MoEFigure, Section
from pptl.render.options import DEFAULT_FONT_PT, MIN_PRINT_PT
from pptl.render.rc import pptl_figure

__all__ = ["MoEDraw", "moe_mpl_figure", "compare_mpl_figure"]

_ROW_IN = {"Computation": 0.30, "Communication": 0.34, "Offload": 0.26}
_GRID_ROW_IN = 0.3  # a split cell's half holds a 6-pt number
_MIN_BLOCK_PT = 2.0  # a 0.25-unit copy still shows as a block
_MIN_SECTION_IN = 0.6  # a close-up section's least width
_LEFT_MIN_IN = 0.95  # the left margin of the default figure (7 pt labels); larger fonts widen it
_EDGE_IN = 0.08  # the "Device k" heading's distance from the figure's left edge
_TICK_PAD_PT = 3.5  # matplotlib's gap between a y tick label and its axis


@dataclass(frozen=True)
class MoEDraw:
    """What the drawing needs besides the figure data."""

    width: float = 7.0
    height: float | None = None
    font: float = DEFAULT_FONT_PT
    dpi: int = 200
    title: str = ""
    legend: str = "bottom"


def _fmt_time(units: str) -> str:
    return "time" if units in ("", "unit") else f"time ({units})"


def _text_width_pt(text: str, size: float) -> float:
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    return TextToPath().get_text_width_height_descent(text, FontProperties(size=size), ismath=False)[0]


def _left_in(labels: list[str], heading: str, fs: float) -> float:
    """The left margin, inches: the widest row label beside its axis, or the bold heading from the
    figure's edge. A fixed margin cut "Communication" off at larger --font-size."""
    ticks = max(_text_width_pt(t, fs) for t in labels) + _TICK_PAD_PT
    head = _text_width_pt(heading, fs + 0.5) * 1.1 if heading else 0.0  # bold is up to a tenth wider
    return max(_LEFT_MIN_IN, _EDGE_IN + max(ticks, head) / 72)


def _section_heights(sec_tracks: list[tuple[int, ...]]) -> list[float]:
    out = []
    for j, row in enumerate(SECTION_ROWS):
        t = max(s[j] for s in sec_tracks) if sec_tracks else 1
        out.append(_ROW_IN[row] * (1 + 0.7 * (t - 1)))
    return out


@pptl_figure
def moe_mpl_figure(fig_data: MoEFigure, d: MoEDraw):
    """A matplotlib Figure of the seed layout: sections on top, the grid of every device below."""
    from matplotlib.figure import Figure

    fs = d.font
    left = _left_in([*SECTION_ROWS, *(dev.label for dev in fig_data.devices)], f"Device {fig_data.device}", fs)
    right = 0.08
    gap = 0.1
    heights = _section_heights([s.tracks for s in fig_data.sections])
    sec_h = sum(heights)
    grid_h = _GRID_ROW_IN * len(fig_data.devices)
    ncat = len(fig_data.categories)
    legend_cols = 3 if d.width < 9 else 5
    legend_h = 0.0 if d.legend == "none" else (fs / 72 * 1.6) * -(-ncat // legend_cols) + 0.1
    title_h = 0.3 if d.title else 0.05
    head_h = fs / 72 * 2.6  # section title + what it shows
    tick_h = fs / 72 * 3.2
    cap_h = fs / 72 * 2.2
    natural = title_h + head_h + sec_h + tick_h + cap_h + grid_h + 0.15 + legend_h
    # each section as wide as its two-line title; the legend's columns side by side
    titles = sum(max(_MIN_SECTION_IN, max(_text_width_pt(t, fs) for t in (sec.title, sec.what)) / 72) + gap
                 for sec in fig_data.sections)
    _fits(d, max(left + right + titles, _legend_width(list(fig_data.categories), legend_cols, fs, d)), natural)
    height = d.height or natural
    fig = Figure(figsize=(d.width, height), dpi=d.dpi)
    if d.title:
        fig.text(0.1 / d.width, 1 - 0.18 / height, d.title, fontsize=fs + 2, fontweight="bold", va="center")
    avail = d.width - left - right - gap * (len(fig_data.sections) - 1)
    weights = [_section_weight(s) for s in fig_data.sections]
    widths = [avail * w / sum(weights) for w in weights]
    xs = np.concatenate([[left], left + np.cumsum([w + gap for w in widths])])[:-1]
    sec_bottom = height - title_h - head_h - sec_h
    for j, (sec, x, w) in enumerate(zip(fig_data.sections, xs, widths)):
        ax = fig.add_axes([x / d.width, sec_bottom / height, w / d.width, sec_h / height])
        _draw_section(ax, sec, heights, w, fs, fig_data.units, first=j == 0)
        ax.set_title(f"{sec.title}\n{sec.what}", fontsize=fs, loc="center", pad=2)
    # "Device k" over the section row labels: the close-ups are of one device.
    fig.text(_EDGE_IN / d.width, (sec_bottom + sec_h + 0.04) / height, f"Device {fig_data.device}",
             fontsize=fs + 0.5, fontweight="bold", va="bottom", ha="left")
    grid_top = sec_bottom - tick_h - cap_h
    gax = fig.add_axes([left / d.width, (grid_top - grid_h) / height, (d.width - left - right) / d.width,
                        grid_h / height])
    bounds = [(x, x + w) for x, w in zip(xs, widths)]
    _draw_grid(gax, fig_data, bounds, left, fs)
    fig.text(left / d.width, (grid_top + 0.03) / height, fig_data.grid_title, fontsize=fs + 0.5,
             fontweight="bold", va="bottom", ha="left")
    if d.legend != "none":
        _legend(fig, list(fig_data.categories), legend_cols, fs, d, height, legend_h)
    return fig


def _fits(d: MoEDraw, least_w: float, least_h: float) -> None:
    """Refuse a --size under what the layout needs: its bands are in inches, so a smaller figure
    would draw them over each other or fail to draw at all."""
    import math

    w, h = math.ceil(least_w * 10 - 1e-9) / 10, math.ceil(least_h * 10 - 1e-9) / 10
    if d.width < w or (d.height is not None and d.height < h):
        given = f"{d.width:g},{d.height:g}" if d.height is not None else f"{d.width:g},(auto)"
        raise InputError(f"--size {given}: too small for this figure; it needs at least --size "
                         f"{max(d.width, w):g},{h:g}")


def _legend_width(cats: list[Category], ncol: int, fs: float, d: MoEDraw) -> float:
    """Inches the legend's widest row takes (:func:`_legend`'s spacing), 0 without a legend."""
    if d.legend == "none" or not cats:
        return 0.0
    em = fs / 72
    cols = [cats[c::ncol] for c in range(min(ncol, len(cats)))]
    return sum((1.6 + 0.5 + 1.2) * em + max(_text_width_pt(c.label, fs) for c in col) / 72 for col in cols) + 0.2


def _section_weight(sec: Section) -> float:
    """A section's share of the width: its compute blocks, plus one, or, where the step's window
    also holds idle compute time (its first all-to-all runs while the previous step still
    computes), the window's length in compute blocks, so blocks keep the width of the other
    sections' and their labels; at most twice the block count, so a long wait in a measured step
    cannot squeeze the other sections."""
    comp = [b.end - b.start for b in sec.blocks if b.row == "Computation" and b.end > b.start]
    base = max(1.0, len(comp)) + 1.0
    if not comp:
        return base
    typical = float(np.median(comp))
    return min(2 * base, max(base, (sec.t1 - sec.t0) / typical)) if typical > 0 else base


def _draw_section(ax, sec: Section, heights: list[float], width_in: float, fs: float, units: str,
                  first: bool) -> None:
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import MaxNLocator

    tops = np.concatenate([[0.0], np.cumsum(heights)])
    pad = 0.04 * max(sec.t1 - sec.t0, 1e-9)  # blocks at the window's edges keep room for their labels
    lo, hi = sec.t0 - pad, sec.t1 + pad
    pt_per_t = width_in * 72 / (hi - lo)
    min_t = _MIN_BLOCK_PT / pt_per_t
    ax.set_xlim(lo, hi)
    ax.set_ylim(tops[-1], 0)
    free: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for b in sec.blocks:
        free.setdefault((b.row, b.track), []).append((b.start, max(b.end, b.start + min_t)))
    for b in sec.blocks:
        j = SECTION_ROWS.index(b.row)
        ntr = sec.tracks[j]
        h = heights[j] * 0.8 / ntr
        y0 = tops[j] + heights[j] * 0.1 + h * b.track
        end = max(b.end, b.start + min_t)
        cat_hatch = _HATCH.get(b.cat, "")
        ax.add_patch(Rectangle((b.start, y0), end - b.start, h, facecolor=colour(b.colour),
                               edgecolor=colour("edge"), lw=0.5, hatch=cat_hatch or None))
        _label(ax, b, y0, h, end, pt_per_t, fs, free[(b.row, b.track)], (lo, hi))
    ax.set_yticks([(tops[j] + tops[j + 1]) / 2 for j in range(len(SECTION_ROWS))],
                  list(SECTION_ROWS) if first else [""] * len(SECTION_ROWS), fontsize=fs)
    ax.tick_params(axis="y", length=0)
    for y in tops[1:-1]:
        ax.axhline(y, color=colour("grid"), lw=0.5)
    ax.xaxis.set_major_locator(MaxNLocator(3))
    ax.tick_params(axis="x", labelsize=fs - 0.5, length=2, pad=1)
    ax.set_xlabel(_fmt_time(units), fontsize=fs - 0.5, labelpad=1)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


_HATCH = {"onload": "////", "load": "xxx"}


def _label(ax, b, y0: float, h: float, end: float, pt_per_t: float, fs: float,
           row_blocks: list[tuple[float, float]], window: tuple[float, float]) -> None:
    """Inside (horizontal, else vertical), else beside where the row is free; a label placed beside
    joins ``row_blocks`` so the next one does not overprint it."""
    w_pt = (end - b.start) * pt_per_t
    h_pt = h * 72
    tw = _text_width_pt(b.label, fs)
    ink = colour(text_colour(b.colour))
    bbox = {"facecolor": colour(b.colour), "edgecolor": "none", "pad": 0.3} if b.cat in _HATCH else None
    if tw + 2 <= w_pt and fs * 1.1 <= h_pt:
        ax.text((b.start + end) / 2, y0 + h / 2, b.label, ha="center", va="center", fontsize=fs, color=ink, bbox=bbox)
        return
    if tw + 2 <= h_pt and fs * 1.05 <= w_pt:
        ax.text((b.start + end) / 2, y0 + h / 2, b.label, ha="center", va="center", fontsize=fs, color=ink,
                rotation=90, bbox=bbox)
        return
    # Beside the block, where its row (track) is free: right first, then left.
    need = (tw + 3) / pt_per_t
    right_free = min([s for s, _e in row_blocks if s >= end - 1e-9] + [window[1]]) - end
    left_free = b.start - max([e for _s, e in row_blocks if e <= b.start + 1e-9] + [window[0]])
    if right_free >= need:
        ax.text(end + 1.5 / pt_per_t, y0 + h / 2, b.label, ha="left", va="center", fontsize=fs,
                color=colour("text.dark"))
        row_blocks.append((end, end + need))
    elif left_free >= need:
        ax.text(b.start - 1.5 / pt_per_t, y0 + h / 2, b.label, ha="right", va="center", fontsize=fs,
                color=colour("text.dark"))
        row_blocks.append((b.start - need, b.start))
    else:
        _label_smaller(ax, b, y0, h, end, w_pt, h_pt, fs - 1, ink, bbox)


def _label_smaller(ax, b, y0: float, h: float, end: float, w_pt: float, h_pt: float, small: float, ink: str,
                   bbox: dict | None) -> None:
    """One point smaller inside (horizontal, else vertical), where neither the block nor its row had
    room: a close-up whose window also holds other steps' time draws its blocks a little narrower."""
    if small < MIN_PRINT_PT:
        return  # no room anywhere; an overprinted label would be worse (--size wider, or the HTML hover, shows it)
    sw = _text_width_pt(b.label, small)
    if sw + 2 <= w_pt and small * 1.1 <= h_pt:
        ax.text((b.start + end) / 2, y0 + h / 2, b.label, ha="center", va="center", fontsize=small, color=ink,
                bbox=bbox)
    elif sw + 2 <= h_pt and small * 1.05 <= w_pt:
        ax.text((b.start + end) / 2, y0 + h / 2, b.label, ha="center", va="center", fontsize=small, color=ink,
                rotation=90, bbox=bbox)


def grid_map(fig_data: MoEFigure, bounds: list[tuple[float, float]], left: float):
    """Time -> inches from the grid's left edge: each phase of the close-up device under its section.
    The first phase also takes the time before it, the last the time after it (other devices)."""
    phases = list(fig_data.phases)
    xs_t = [fig_data.t0] + [p[2] for p in phases[:-1]] + [fig_data.t1]
    xs_in = [bounds[0][0] - left] + [(bounds[i][1] + bounds[i + 1][0]) / 2 - left for i in range(len(bounds) - 1)] \
        + [bounds[-1][1] - left]
    if len(xs_t) != len(xs_in):  # fewer phases than sections cannot happen; stay linear if it does
        xs_t, xs_in = [fig_data.t0, fig_data.t1], [xs_in[0], xs_in[-1]]
    return lambda t: np.interp(t, xs_t, xs_in)


def _draw_grid(ax, fig_data: MoEFigure, bounds: list[tuple[float, float]], left: float, fs: float) -> None:
    m = grid_map(fig_data, bounds, left)
    _grid_rows(ax, list(fig_data.devices), m, fs, highlight=(fig_data.device, fig_data.sections))
    total = bounds[-1][1] - left
    ax.set_xlim(0, total)
    for (_n, _a, b), (x0, x1) in zip(fig_data.phases[:-1], zip(bounds[:-1], bounds[1:])):
        ax.axvline(float(m(b)), color=colour("muted"), lw=0.6, ls="--")
    ax.set_xticks([])


def _grid_rows(ax, devices: list[DeviceRow], m, fs: float, highlight=None) -> None:
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Rectangle

    verts, faces = [], []
    texts = []
    for r, dev in enumerate(devices):
        for st in dev.steps:
            x0, x1 = float(m(st.start)), float(m(st.end))
            k = len(st.colours)
            for j, col in enumerate(st.colours):
                y0, y1 = r + 0.08 + 0.72 * j / k, r + 0.08 + 0.72 * (j + 1) / k
                verts.append([(x0, y0), (x1, y0), (x1, y1), (x0, y1)])
                faces.append(colour(col))
                texts.append((x0, x1, (y0 + y1) / 2, st.texts[j], col, k))
        for a, b, _flow in dev.pp:  # PP transfers: green marks under the row's cells
            x0, x1 = float(m(a)), float(m(b))
            x1 = max(x1, x0 + 0.02)
            verts.append([(x0, r + 0.82), (x1, r + 0.82), (x1, r + 0.95), (x0, r + 0.95)])
            faces.append(colour("moe.pp"))
    if verts:
        ax.add_collection(PolyCollection(np.array(verts, dtype=float), facecolors=faces,
                                         edgecolors=colour("text.light"), linewidths=0.4))
    ax.set_ylim(len(devices), 0)
    ax.set_yticks([r + 0.45 for r in range(len(devices))], [d.label for d in devices], fontsize=fs)
    ax.tick_params(axis="y", length=0)
    for s in ax.spines.values():
        s.set_visible(False)
    for x0, x1, y, t, col, k in texts:
        size = max(fs - 0.5 if k == 1 else fs - 1.5, min(MIN_PRINT_PT, fs))  # >= 6 pt printed at 7 in
        if (x1 - x0) * 72 >= _text_width_pt(t, size) + 1.5:
            ax.text((x0 + x1) / 2, y, t, ha="center", va="center", fontsize=size, color=colour(text_colour(col)))
    if highlight is not None:  # outline the steps the close-ups show, so each section points at its cell
        rank, sections = highlight
        r = next((i for i, d in enumerate(devices) if d.rank == rank), None)
        if r is not None:
            for sec in sections:
                for st in devices[r].steps:
                    if st.start >= sec.t0 - 1e-9 and st.start < sec.t1 and st.phase == sec.key:
                        x0, x1 = float(m(st.start)), float(m(st.end))
                        ax.add_patch(Rectangle((x0, r + 0.05), x1 - x0, 0.78, facecolor="none",
                                               edgecolor=colour("text.dark"), lw=1.0))
                        break


def _legend(fig, cats: list[Category], ncol: int, fs: float, d: MoEDraw, height: float, legend_h: float) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=colour(c.colours[0]), edgecolor=colour("edge"), linewidth=0.5, label=c.label,
                     hatch=c.hatch or None) for c in cats]
    nrow = -(-len(handles) // ncol)
    grid = [handles[r * ncol:(r + 1) * ncol] for r in range(nrow)]
    ordered = [grid[r][c] for c in range(ncol) for r in range(nrow) if c < len(grid[r])]
    loc = "upper center" if d.legend == "top" else "lower center"
    y = 1 - 0.02 if d.legend == "top" else 0.04 / height
    fig.legend(handles=ordered, loc=loc, ncol=ncol, fontsize=fs, frameon=False, bbox_to_anchor=(0.5, y),
               handlelength=1.6, columnspacing=1.2, handletextpad=0.5, borderaxespad=0.1)


@pptl_figure
def compare_mpl_figure(plain: MoEFigure, plus: MoEFigure, d: MoEDraw):
    """Plain interleaved over "VPP + 1 warmup": two grids on one time axis (the extra forward shows)."""
    from matplotlib.figure import Figure

    fs = d.font
    left = _left_in([dev.label for dev in (*plain.devices, *plus.devices)], "", fs)
    right = 0.08
    n1, n2 = len(plain.devices), len(plus.devices)
    cap = fs / 72 * 2.4
    legend_h = 0.0 if d.legend == "none" else fs / 72 * 1.6 * 2 + 0.15
    title_h = 0.3 if d.title else 0.05
    tick_h = fs / 72 * 3.4
    natural = title_h + 2 * cap + _GRID_ROW_IN * (n1 + n2) + tick_h + legend_h + 0.1
    cats = [c for c in plus.categories if c.key[:2] in ("F.", "B.") or c.key == "pp"]
    _fits(d, max(left + right + _MIN_SECTION_IN, _legend_width(cats, 3 if d.width < 9 else 5, fs, d)), natural)
    height = d.height or natural
    fig = Figure(figsize=(d.width, height), dpi=d.dpi)
    if d.title:
        fig.text(0.1 / d.width, 1 - 0.18 / height, d.title, fontsize=fs + 2, fontweight="bold", va="center")
    t1 = max(plain.t1, plus.t1)
    t0 = min(plain.t0, plus.t0)
    w_in = d.width - left - right
    m = lambda t: (np.asarray(t, dtype=float) - t0) / (t1 - t0) * w_in  # noqa: E731 - one linear axis
    top = height - title_h
    axes = []
    for data in (plain, plus):
        h = _GRID_ROW_IN * len(data.devices)
        ax = fig.add_axes([left / d.width, (top - cap - h) / height, w_in / d.width, h / height])
        _grid_rows(ax, list(data.devices), m, fs)
        ax.set_xlim(0, w_in)
        ax.set_xticks([])
        fig.text(left / d.width, (top - cap + 0.03) / height, f"{data.grid_title}: makespan {data.t1 - data.t0:g}",
                 fontsize=fs + 0.5, fontweight="bold", va="bottom", ha="left")
        axes.append(ax)
        top -= cap + h
    from matplotlib.ticker import MaxNLocator

    ticks = MaxNLocator(6).tick_values(t0, t1)
    ticks = [t for t in ticks if t0 <= t <= t1]
    axes[-1].set_xticks([float(m(t)) for t in ticks], [f"{t:g}" for t in ticks], fontsize=fs - 0.5)
    axes[-1].tick_params(axis="x", length=2, pad=1)
    axes[-1].set_xlabel(_fmt_time(plus.units), fontsize=fs - 0.5, labelpad=1)
    cats = [c for c in plus.categories if c.key[:2] in ("F.", "B.") or c.key == "pp"]
    if d.legend != "none":
        _legend(fig, cats, 3 if d.width < 9 else 5, fs, d, height, legend_h + fs / 72 * 1.6)
    return fig
