"""Static figures with matplotlib (PNG, SVG, PDF).

All blocks of a figure (and the idle bands behind busy rows) are ONE ``PolyCollection``, so a
100k-op plan draws in seconds; labels are drawn only where the text fits inside its block, and
the figure size is bounded (:class:`FigureOptions`). By default a figure is as wide as a paper column
(7 in) and no text is under 6 pt, so it prints readable at that width whatever the schedule's length:
blocks too narrow for a 6-pt label go without one. In vector formats, a collection of more than
``rasterize_above`` blocks is embedded as an image (text stays vector) so files stay openable.

The layout is computed in inches up front (no ``tight_layout``), which makes label fitting exact
and keeps drawing time independent of the number of ticks and texts.
"""
from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from pptl.errors import InputError
from pptl.formats._quote import counted
from pptl.render.layout import Grid, Layout, build_layout
from pptl.render.options import COLUMN_IN, DEFAULT_FONT_PT, MIN_PRINT_PT
from pptl.render.rc import PPTL_RC, pptl_figure, pptl_rc
from pptl.render.styles import Category, colour, text_colour
from pptl.timeline import Timeline

__all__ = ["FigureOptions", "figure", "figure_from_layout", "figure_options", "image_bytes", "IMAGE_FORMATS",
           "PPTL_RC", "pptl_rc", "pptl_figure"]

IMAGE_FORMATS = ("png", "svg", "pdf")

_GRID_ROW_IN = 0.4  # tall enough for the two numbers of a split (overlapped) cell
#: The thinnest row a figure draws, inches (2 px at the default 200 dpi): thinner rows merge, so a
#: plan with more rows than fit is refused rather than drawn with rows missing.
MIN_ROW_IN = 0.01
_LABEL_ROW_IN = 0.1  # a row as tall as a 6-pt label...
_MIN_MAIN_IN = 1.0  # ...while the rows together are under an inch
_MIN_PLOT_IN = 1.0  # the time axis's least width
_LINE_SPACING = 1.2


@dataclass(frozen=True)
class FigureOptions:
    style: str = "auto"
    dpi: int = 100
    width_in: float = COLUMN_IN
    """Width when ``size`` is not given (the height follows the content, up to ``max_height_in``)."""
    max_height_in: float = 30.0
    max_labels: int = 2500
    """Above this many fitting labels, only the widest blocks are labelled (text is slow to draw)."""
    rasterize_above: int = 20000
    row_in: float = 0.34
    """Preferred height of one row, inches (shrinks to keep the figure bounded)."""
    size: tuple[float, float] | None = None
    """Exact figure size in inches (width, height); None: ``width_in`` wide, as tall as the content."""
    font_size: float = DEFAULT_FONT_PT
    min_font: float = MIN_PRINT_PT
    """No derived text (ticks, notes, block labels) is smaller; labels that need less room are dropped."""
    title: str | None = None
    """None: the layout's title; "" draws none."""
    notes: bool = True
    """Per-row notes (bubble %)."""
    legend: str = "auto"
    """"auto" (the style's place), "bottom", "top", "right" or "none"."""


def figure_options(opts, lay: Layout) -> FigureOptions:
    """FigureOptions from the shared :class:`~pptl.render.options.RenderOptions` and the style's defaults."""
    from pptl.render.options import resolve_title

    seed = lay.style.seed
    fs = opts.font_size or DEFAULT_FONT_PT
    return FigureOptions(style=opts.style, dpi=opts.dpi, size=opts.size, font_size=fs,
                         min_font=min(MIN_PRINT_PT, fs),  # a smaller --font-size is the user's call
                         title=resolve_title(opts.title, seed, lay.title),
                         notes=(not seed) if opts.notes is None else opts.notes, legend=opts.legend)


@dataclass(frozen=True)
class _Box:
    """Axes rectangle in inches from the figure's bottom-left."""

    left: float
    bottom: float
    width: float
    height: float


def figure(tl: Timeline, options: FigureOptions = FigureOptions()):
    """A matplotlib ``Figure`` of ``tl`` in the chosen style (nothing is shown or saved)."""
    return figure_from_layout(build_layout(tl, options.style), options)


@pptl_figure
def figure_from_layout(lay: Layout, options: FigureOptions = FigureOptions()):
    """The figure of ``lay`` (see :func:`figure`).

    Raises:
        InputError: ``options.size`` is smaller than the content needs (the message names the
            least size), or the rows cannot all be drawn ``MIN_ROW_IN`` tall within the height cap.
    """
    from matplotlib.figure import Figure

    opt = options
    k = opt.font_size / 9.0  # every text band scales with the font
    title = lay.title if opt.title is None else opt.title
    notes = opt.notes and any(r.bubble is not None for r in lay.rows)
    row_w = np.array([_row_weight(r.tracks) for r in lay.rows] or [1.0])
    label_chars = max([len(r.spec.label) for r in lay.rows] + [4])
    group_chars = max([len(r.spec.group) for r in lay.rows] + [0])
    left = 0.15 + k * (0.075 * label_chars + (0.085 * group_chars + 0.15 if group_chars else 0.0))
    right = 0.95 * k if notes else 0.3
    where = lay.style.legend_at if opt.legend == "auto" else opt.legend
    legend = lay.legend() if where != "none" else []
    ncat = len(legend)
    if where == "right" and ncat:
        right += k * (0.6 + 0.068 * max(len(c.label) for c in legend))
    least_w = left + right + _MIN_PLOT_IN
    if ncat and where in ("bottom", "top", "top right"):  # one legend column at least
        least_w = max(least_w, 0.6 + k * max(0.6 + 0.068 * len(c.label) for c in legend))
    least_w = _up(least_w)
    width = opt.size[0] if opt.size else opt.width_in

    # The bands above and below the rows, at the width drawn (the title wraps and the legend's
    # columns follow it).
    at = max(width, least_w)
    lines = _wrap(title, at - 0.4, opt.font_size + 2) if title else []
    title_h = 0.55 * k + _line_in(opt.font_size + 2) * (len(lines) - 1) if lines else 0.15
    legend_cols = _legend_columns(legend, (at - 0.6) / k) if where in ("bottom", "top", "top right") else 1
    legend_h = k * (0.3 * -(-ncat // legend_cols) + 0.05) if ncat else 0.0
    top_band = title_h + (legend_h if where in ("top right", "top") else 0.0)
    axis_band = (0.45 if lay.style.time_arrow else 0.55) * k
    bottom_band = (legend_h if where == "bottom" else 0.0) + 0.1
    grid_rows = len(lay.grid.rows) if lay.grid else 0
    grid_band = (0.45 + _GRID_ROW_IN * grid_rows + 0.1) if grid_rows else 0.0
    fixed = top_band + axis_band + bottom_band + grid_band
    # The rows' least height: MIN_ROW_IN each, and a few rows as tall as their labels.
    main_least = max(row_w.sum() * MIN_ROW_IN, min(row_w.sum() * _LABEL_ROW_IN, _MIN_MAIN_IN))
    least_h = _up(fixed + main_least)
    if opt.size and (width < least_w or opt.size[1] < least_h):
        # The least size nearest the one asked: the same width where that is wide enough.
        raise InputError(f"--size {opt.size[0]:g},{opt.size[1]:g}: too small for this figure ({counted(len(lay.rows), 'row')}"
                         f"{', a title' if title else ''}{', a legend' if ncat else ''}); it needs at least "
                         f"--size {at:g},{least_h:g}")
    max_h = opt.size[1] if opt.size else opt.max_height_in
    if fixed + main_least > max_h:
        fit = int((max_h - fixed) / MIN_ROW_IN)
        raise InputError(f"{len(lay.rows)} rows do not fit a figure {max_h:g} in tall (at most about {fit:,} rows "
                         f"at {MIN_ROW_IN:g} in each; rows any thinner would merge); draw it as HTML (-o FILE.html) "
                         "or in the terminal")
    row_in = opt.row_in * max(k, 0.8)
    if opt.size or fixed + row_w.sum() * row_in > max_h:
        row_in = (max_h - fixed) / row_w.sum()
    main_h = row_w.sum() * row_in
    height = opt.size[1] if opt.size else min(fixed + main_h, opt.max_height_in)

    fig = Figure(figsize=(width, height), dpi=opt.dpi)
    main = _Box(left, bottom_band + grid_band + axis_band, width - left - right, main_h)
    ax = fig.add_axes(_frac(main, width, height))
    tops = np.concatenate([[0.0], np.cumsum(row_w)[:-1]])
    _draw_blocks(ax, lay, tops, row_w, main, opt)
    _draw_rows(ax, lay, tops, row_w, main, opt.font_size, notes, opt.min_font)
    _draw_time_axis(ax, lay, opt.font_size, opt.min_font)
    if lines:
        # the first line's middle where a one-line title's is, the others below it
        top = 0.3 * k - _line_in(opt.font_size + 2) / 2
        fig.text(0.2 / width, 1 - top / height, "\n".join(lines), fontsize=opt.font_size + 2, fontweight="bold",
                 va="top", linespacing=_LINE_SPACING)
    if ncat:
        _draw_legend(fig, legend, where, legend_cols, width, height, bottom_band, opt.font_size, title_h)
    if lay.grid is not None and grid_rows:
        ncells = max((len(cells) for _, cells in lay.grid.rows), default=1)
        # Cells are steps, not time: keep them square-ish like the seeds' grid, not stretched.
        gbox = _Box(left, bottom_band + 0.1, min(width - left - right, 0.36 * max(ncells, 1)),
                    _GRID_ROW_IN * grid_rows)
        _draw_grid(fig.add_axes(_frac(gbox, width, height)), lay.grid, gbox, opt)
    return fig


#: The most pixels a PNG may have (a 1 GiB RGBA canvas), and on a side (Agg's own bound is 2**16): --dpi 1200
#: with --size 60,60, both in range, asked for 72000 x 72000 and ended in a traceback from matplotlib.
MAX_PNG_PIXELS = 2 ** 28
MAX_PNG_SIDE = 2 ** 16 - 1


def image_bytes(fig, fmt: str) -> bytes:
    """Encode ``fig`` as png, svg or pdf (no timestamps, so equal figures give equal files).

    Raises:
        InputError: a PNG of more pixels than :data:`MAX_PNG_PIXELS` (or a side over :data:`MAX_PNG_SIDE`).
    """
    fmt = fmt.lower()
    if fmt not in IMAGE_FORMATS:
        raise ValueError(f"format {fmt!r}: expected one of {IMAGE_FORMATS}")
    if fmt == "png":
        w_in, h_in = (float(x) for x in fig.get_size_inches())
        w, h = round(w_in * fig.dpi), round(h_in * fig.dpi)
        if w * h > MAX_PNG_PIXELS or max(w, h) > MAX_PNG_SIDE:
            raise InputError(f"a {w_in:.3g} x {h_in:.3g} inch figure at {fig.dpi:g} dpi is a {w:,} x {h:,} pixel PNG, "
                             f"more than the {MAX_PNG_PIXELS:,} pixels (or {MAX_PNG_SIDE:,} a side) pptl draws; lower "
                             "--dpi or --size, or draw to .svg or .pdf")
    import matplotlib

    meta = {"png": {"Software": "pptl"}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}[fmt]
    buf = io.BytesIO()
    # Text stays text: TrueType (Type 42) fonts in PDF, <text> elements in SVG, so a paper's
    # editor can search and restyle the labels.
    with matplotlib.rc_context({**PPTL_RC, "pdf.fonttype": 42, "ps.fonttype": 42, "svg.fonttype": "none"}):
        fig.savefig(buf, format=fmt, dpi=fig.dpi, metadata=meta)
    return buf.getvalue()


# -- sizing -------------------------------------------------------------------------------------


def _up(inches: float) -> float:
    """Rounded up to a tenth of an inch, as the least size is named to the user."""
    return float(np.ceil(inches * 10 - 1e-9) / 10)


def _line_in(fontsize: float) -> float:
    return fontsize * _LINE_SPACING / 72


def _wrap(text: str, width_in: float, fontsize: float) -> list[str]:
    """``text`` in bold at ``fontsize`` broken into lines of at most ``width_in`` (measured, as the
    title is drawn): at spaces, and inside a word only when the word alone is too wide."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    prop = FontProperties(size=fontsize, weight="bold")
    t2p = TextToPath()

    def fits(s: str) -> bool:
        return t2p.get_text_width_height_descent(s, prop, ismath=False)[0] / 72 <= width_in

    lines: list[str] = []
    for para in text.split("\n"):
        cur = ""
        for word in para.split(" "):
            trial = f"{cur} {word}" if cur else word
            if fits(trial):
                cur = trial
                continue
            if cur:
                lines.append(cur)
            cur = word
            while len(cur) > 1 and not fits(cur):
                # the longest head that fits (at least one character), by bisection: a prefix is never
                # narrower than its own prefix, and measuring every length made a 1000-character word 50 s
                lo, hi = 1, len(cur) - 1
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    lo, hi = (mid, hi) if fits(cur[:mid]) else (lo, mid - 1)
                lines.append(cur[:lo])
                cur = cur[lo:]
        lines.append(cur)
    return lines


def _row_weight(tracks: int) -> float:
    # A packed row with k tracks grows, but less than k-fold, so one busy row cannot eat the figure.
    return 1.0 + 0.55 * (tracks - 1)


def _legend_columns(cats: list[Category], avail_in: float) -> int:
    """As many columns as fit side by side (entries sized by their text)."""
    widths = [0.6 + 0.068 * len(c.label) for c in cats]
    for ncol in range(len(widths), 1, -1):
        if sum(max(widths[c::ncol]) for c in range(ncol)) <= avail_in:
            return ncol
    return 1


def _row_major(items: list, ncol: int) -> list:
    """Reorder so matplotlib's column-first legend reads left to right, row by row."""
    nrow = -(-len(items) // ncol)
    grid = [items[r * ncol:(r + 1) * ncol] for r in range(nrow)]
    return [grid[r][c] for c in range(ncol) for r in range(nrow) if c < len(grid[r])]


def _frac(b: _Box, w: float, h: float) -> list[float]:
    return [b.left / w, b.bottom / h, b.width / w, b.height / h]


# -- drawing ------------------------------------------------------------------------------------


def _rgba(names: list[str]) -> np.ndarray:
    from matplotlib.colors import to_rgba_array

    uniq = sorted(set(names))
    table = to_rgba_array([colour(n) for n in uniq])
    pos = {n: i for i, n in enumerate(uniq)}
    return table[np.fromiter((pos[n] for n in names), dtype=np.int64, count=len(names))]


def _draw_blocks(ax, lay: Layout, tops: np.ndarray, row_w: np.ndarray, box: _Box, opt: FigureOptions) -> None:
    from matplotlib.collections import PolyCollection

    b = lay.blocks
    n = len(b)
    t0, t1 = lay.t0, lay.t1 if lay.t1 > lay.t0 else lay.t0 + 1.0
    # Idle bands first: they sit below the blocks in the same collection.
    bands = [i for i, r in enumerate(lay.rows) if r.bubble is not None and lay.style.idle_band]
    y_top = tops[b.row] + row_w[b.row] * (0.1 + 0.8 * b.y0)
    y_bot = tops[b.row] + row_w[b.row] * (0.1 + 0.8 * b.y1)
    px_per_t = box.width * opt.dpi / (t1 - t0)
    ends = b.end
    min_cats = [k for k, c in enumerate(lay.categories) if c.min_width]
    if min_cats and n:  # short copies: at least 5 px at 100 dpi, so the row reads at figure scale
        ends = np.where(np.isin(b.cat, min_cats), np.maximum(b.end, b.start + 5.0 * opt.dpi / 100 / px_per_t), b.end)
    xs0 = np.concatenate([np.full(len(bands), t0), b.start])
    xs1 = np.concatenate([np.full(len(bands), t1), ends])
    ys0 = np.concatenate([tops[bands] + row_w[bands] * 0.1, y_top]) if bands else y_top
    ys1 = np.concatenate([tops[bands] + row_w[bands] * 0.9, y_bot]) if bands else y_bot
    verts = np.empty((len(xs0), 4, 2))
    verts[:, 0, 0] = verts[:, 3, 0] = xs0
    verts[:, 1, 0] = verts[:, 2, 0] = xs1
    verts[:, 0, 1] = verts[:, 1, 1] = ys0
    verts[:, 2, 1] = verts[:, 3, 1] = ys1
    face = _rgba(["idle"] * len(bands) + b.colour)
    px_per_t = box.width * opt.dpi / (t1 - t0)
    width_px = np.concatenate([np.zeros(len(bands)), (b.end - b.start) * px_per_t])
    must_edge = np.array([bool(c.edge) for c in lay.categories] or [False])
    edged = np.concatenate([np.zeros(len(bands), bool), must_edge[b.cat] if n else np.zeros(0, bool)])
    # Outlines only where a block is wide enough to show fill inside them (and always for white ones).
    lw = np.where((width_px >= 4.0) | edged, 0.5, 0.0)
    x_hi = t1 + 0.005 * (t1 - t0)  # the last block's right edge stays inside the axes
    y_sum = float(row_w.sum())
    no_frames = lay.frames is None or not len(lay.frames)
    if n > opt.rasterize_above and not lw.any() and no_frames:
        # Too many blocks, none wide enough for an outline: paint the pixels directly (what an
        # embedded raster would hold anyway), instead of asking matplotlib for 100k polygons.
        shape = (max(1, round(box.height * opt.dpi)), max(1, round(box.width * opt.dpi)))
        image = _paint(shape, (t0, x_hi, y_sum), xs0, xs1, ys0, ys1, face)
        ax.imshow(image, extent=(t0, x_hi, y_sum, 0.0), origin="upper", interpolation="nearest", aspect="auto",
                  resample=False)
    else:
        # One width for all when they agree: matplotlib scales a dash pattern per width given.
        widths = float(lw[0]) if lw.size and (lw == lw[0]).all() else lw
        coll = PolyCollection(verts, facecolors=face, edgecolors=colour("edge"), linewidths=widths,
                              antialiaseds=False)
        if n > opt.rasterize_above:
            coll.set_rasterized(True)
        ax.add_collection(coll)
    if lay.frames is not None and len(lay.frames):
        f = lay.frames
        r = f[:, 0].astype(int)
        fy0 = tops[r] + row_w[r] * (0.1 + 0.8 * f[:, 1])
        fy1 = tops[r] + row_w[r] * (0.1 + 0.8 * f[:, 2])
        fv = np.stack([np.stack([f[:, 3], fy0], 1), np.stack([f[:, 4], fy0], 1), np.stack([f[:, 4], fy1], 1),
                       np.stack([f[:, 3], fy1], 1)], 1)
        ax.add_collection(PolyCollection(fv, facecolors="none", edgecolors="#000000", linewidths=1.0))
    ax.set_xlim(t0, x_hi)
    ax.set_ylim(y_sum, 0.0)
    _draw_labels(ax, lay, y_top, y_bot, px_per_t, box.height * opt.dpi / max(row_w.sum(), 1e-9), opt)


def _paint(shape: tuple[int, int], bounds: tuple[float, float, float], x0: np.ndarray, x1: np.ndarray,
           y0: np.ndarray, y1: np.ndarray, face: np.ndarray) -> np.ndarray:
    """An RGBA image (``shape`` = rows, columns of pixels) of the rectangles ``x0..x1`` by
    ``y0..y1`` (axes data: time from ``bounds[0]`` to ``bounds[1]``, rows from 0 down to
    ``bounds[2]``) filled with ``face``, later ones over earlier ones, as the polygon collection
    draws them without antialiasing: a pixel takes the colour of the rectangle over its centre; a
    rectangle over no pixel centre still shows in the pixel that holds its middle.

    Rectangles sharing their pixel rows (one block row, or one idle band) are painted together:
    for each pixel column, the latest-starting rectangle that covers it (else the one reaching
    furthest right among those started), by two sorted searches; no loop over rectangles."""
    h, w = shape
    lo, hi, depth = bounds
    face = np.rint(np.asarray(face) * 255).astype(np.uint8)
    image = np.zeros((h, w, 4), dtype=np.uint8)
    drawn = np.full((h, w), -1, dtype=np.int64)  # which rectangle each pixel shows
    px0 = (x0 - lo) / (hi - lo) * w
    px1 = (x1 - lo) / (hi - lo) * w
    top = np.clip(np.rint(y0 / depth * h), 0, h).astype(np.int64)
    bottom = np.clip(np.rint(y1 / depth * h), 0, h).astype(np.int64)
    centres = np.arange(w) + 0.5
    band_key = top * (h + 1) + bottom
    order = np.lexsort((np.arange(len(px0)), px0, band_key))  # by band, then start, then drawing order
    keys = band_key[order]
    cuts = np.flatnonzero(np.diff(keys)) + 1
    for rows in np.split(order, cuts):
        r0, r1 = int(top[rows[0]]), int(bottom[rows[0]])
        if r1 <= r0:
            continue
        starts, ends = px0[rows], px1[rows]
        reach = np.maximum.accumulate(ends)
        # the latest position whose own end is the running furthest end
        furthest = np.maximum.accumulate(np.where(ends >= reach, np.arange(len(rows)), 0))
        k = np.searchsorted(starts, centres, side="right") - 1
        ok = k >= 0
        kk = np.where(ok, k, 0)
        use = np.where(ends[kk] > centres, kk, furthest[kk])
        ok &= ends[use] > centres
        owner = np.where(ok, rows[use], -1)
        # a rectangle over no pixel centre shows in the pixel of its middle, unless one drawn after it covers that
        middle = np.clip(np.floor((starts + ends) * 0.5), 0, w - 1).astype(np.int64)
        shown = owner[middle] < rows
        owner[middle[shown]] = rows[shown]
        # over what other rows of rectangles (bands of other pixel rows) left, where drawn after them
        over = owner[None, :] > drawn[r0:r1]
        image[r0:r1] = np.where(over[..., None], face[np.maximum(owner, 0)][None, :, :], image[r0:r1])
        drawn[r0:r1] = np.where(over, owner[None, :], drawn[r0:r1])
    return image


def _draw_labels(ax, lay: Layout, y_top: np.ndarray, y_bot: np.ndarray, px_per_t: float, px_per_y: float,
                 opt: FigureOptions) -> None:
    b = lay.blocks
    if not len(b):
        return
    h_px = (y_bot - y_top) * px_per_y
    fs = float(np.clip(np.median(h_px) * 0.5 * 72 / opt.dpi, opt.min_font, max(opt.font_size, opt.min_font)))
    width_of = _TextWidths(fs, opt.dpi)
    w_px = (b.end - b.start) * px_per_t
    ok = (h_px >= fs * opt.dpi / 72 * 1.05) & (w_px >= width_of("0") + 2)
    picks: list[tuple[float, int, str]] = []
    for i in np.nonzero(ok)[0].tolist():
        for t in b.texts[i]:
            if t and width_of(t) + 4 <= w_px[i]:
                picks.append((w_px[i], i, t))
                break
    picks = _apart(picks, b, y_top, y_bot, px_per_t, width_of)
    if len(picks) > opt.max_labels:
        picks.sort(reverse=True)
        picks = picks[: opt.max_labels]
    for _, i, t in picks:
        ax.text((b.start[i] + b.end[i]) / 2, (y_top[i] + y_bot[i]) / 2, t, ha="center", va="center",
                fontsize=fs, color=colour(text_colour(b.colour[i])), clip_on=True)


def _apart(picks: list[tuple[float, int, str]], b, y_top: np.ndarray, y_bot: np.ndarray, px_per_t: float,
           width_of) -> list[tuple[float, int, str]]:
    """The labels that stand clear: blocks of one row can overlap (a measured lane's transfers run
    at once), and labels drawn over each other, or crossed by another block's edge, read as neither
    ("0123"). A label whose box holds an edge of another block of its row (and track) is left out;
    of labels whose boxes touch, the leftmost is kept."""
    if not picks:
        return picks
    _, group = np.unique(np.stack([b.row, y_top, y_bot], 1), axis=0, return_inverse=True)
    group = group.ravel()
    edges = np.concatenate([b.start, b.end]) * px_per_t
    edge_group = np.concatenate([group, group])
    order = np.lexsort((edges, edge_group))
    edges, edge_group = edges[order], edge_group[order]
    first = np.searchsorted(edge_group, np.arange(group.max() + 1), side="left")
    last = np.searchsorted(edge_group, np.arange(group.max() + 1), side="right")
    keyed = []
    for pick in picks:
        i, t = pick[1], pick[2]
        centre = (b.start[i] + b.end[i]) / 2 * px_per_t
        half = width_of(t) / 2 + 2  # a few pixels between labels
        g = int(group[i])
        row_edges = edges[first[g]:last[g]]
        # its own block's edges lie on or outside the box (the label fits inside with a margin)
        inside = np.searchsorted(row_edges, centre + half - 0.5) - np.searchsorted(row_edges, centre - half + 0.5,
                                                                                   side="right")
        if inside <= 0:
            keyed.append((g, centre - half, centre + half, pick))
    keyed.sort(key=lambda k: (k[0], k[1]))
    kept: list[tuple[float, int, str]] = []
    last_group, right = -1, -np.inf
    for g, lo, hi, pick in keyed:
        if g != last_group:
            last_group, right = g, -np.inf
        if lo >= right:
            kept.append(pick)
            right = hi
    return kept


class _TextWidths:
    """Rendered width in pixels of a label at one font size; labels repeat, so each is measured once."""

    def __init__(self, fontsize: float, dpi: int) -> None:
        from matplotlib.font_manager import FontProperties
        from matplotlib.textpath import TextToPath

        self._prop = FontProperties(size=fontsize)
        self._t2p = TextToPath()
        self._scale = dpi / 72
        self._cache: dict[str, float] = {}

    def __call__(self, text: str) -> float:
        w = self._cache.get(text)
        if w is None:
            w = self._t2p.get_text_width_height_descent(text, self._prop, ismath=False)[0] * self._scale
            self._cache[text] = w
        return w


def _draw_rows(ax, lay: Layout, tops: np.ndarray, row_w: np.ndarray, box: _Box, fs: float = DEFAULT_FONT_PT,
               notes: bool = True, min_fs: float = MIN_PRINT_PT) -> None:
    import matplotlib.transforms as mtransforms

    centers = tops + row_w / 2
    # Hundreds of ranks: label every k-th row so the labels stay legible instead of overprinting.
    row_px = box.height * 72 / max(float(row_w.sum()), 1e-9) * float(row_w.min()) if len(row_w) else 12.0
    step = max(1, int(np.ceil(10.0 / max(row_px, 1e-9))))
    shown = list(range(0, len(lay.rows), step))
    ax.set_yticks(centers[shown], [lay.rows[i].spec.label for i in shown],
                  fontsize=fs if step == 1 else max(fs - 2, min_fs))
    ax.tick_params(axis="y", length=0)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    blend = mtransforms.blended_transform_factory(ax.transAxes, ax.transData)
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(lay.rows):
        if r.spec.group:
            groups.setdefault(r.spec.group, []).append(i)
        if r.spec.separator:
            ax.axhline(tops[i], color=colour("muted"), lw=0.8, ls="--")
        if notes and r.bubble is not None and i % step == 0:
            ax.text(1.005, centers[i], f"bubble {100 * r.bubble:.1f}%", transform=blend,
                    fontsize=max(fs - 1, min_fs),
                    color=colour("muted"), va="center", ha="left")
    label_w = (max([len(r.spec.label) for r in lay.rows] + [4]) * 0.075 + 0.15) * fs / 9
    for name, idx in groups.items():
        y = (tops[idx[0]] + tops[idx[-1]] + row_w[idx[-1]]) / 2
        ax.text(-(label_w + 0.1) / box.width, y, name, transform=blend, fontsize=fs, fontweight="bold",
                va="center", ha="right")


def _draw_time_axis(ax, lay: Layout, fs: float = DEFAULT_FONT_PT, min_fs: float = MIN_PRINT_PT) -> None:
    if lay.style.time_arrow:
        ax.set_xticks([])
        ax.spines["bottom"].set_visible(False)
        ax.annotate("", xy=(1.0, -0.03), xytext=(0.0, -0.03), xycoords="axes fraction",
                    arrowprops={"arrowstyle": "-|>", "color": colour("text.dark"), "lw": 1.2})
        ax.text(0.5, -0.045, "Time", transform=ax.transAxes, ha="center", va="top", fontsize=fs + 1)
        return
    unit = "" if lay.units in ("", "unit") else f" ({lay.units})"
    ax.set_xlabel(f"time{unit}", fontsize=fs)
    ax.tick_params(axis="x", labelsize=max(fs - 1, min_fs))


def _draw_legend(fig, cats: list[Category], where: str, ncol: int, width: float, height: float,
                 bottom_band: float, fs: float = 9.0, top_in: float = 0.55) -> None:
    if not cats:
        return
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=colour(c.colours[0]), edgecolor=colour(c.edge or "edge"), linewidth=0.6,
                     label=c.label, hatch=c.hatch or None) for c in cats]
    handler_map = {h: _SplitHandler(c) for h, c in zip(handles, cats) if len(c.colours) > 1}
    handles = _row_major(handles, ncol)
    kw = {"handles": handles, "handler_map": handler_map, "ncol": ncol, "fontsize": fs, "frameon": False}
    if where == "top right":
        fig.legend(loc="upper right", bbox_to_anchor=(1 - 0.2 / width, 1 - top_in / height), **kw)
    elif where == "top":
        fig.legend(loc="upper center", bbox_to_anchor=(0.5, 1 - top_in / height), **kw)
    elif where == "right":
        fig.legend(loc="center right", bbox_to_anchor=(1 - 0.05 / width, 0.5), **kw)
    else:
        fig.legend(loc="lower center", bbox_to_anchor=(0.5, 0.05 / height), **kw)


class _SplitHandler:
    """Legend swatch of a split block: first colour on top and second below, or left and right under
    one black border (seed 004's overlapped F&B)."""

    def __init__(self, cat: Category) -> None:
        self.cat = cat

    def legend_artist(self, legend, orig_handle, fontsize, handlebox):
        from matplotlib.patches import Rectangle

        x, y = handlebox.xdescent, handlebox.ydescent
        w, h = handlebox.width, handlebox.height
        tr = handlebox.get_transform()
        a, b = colour(self.cat.colours[0]), colour(self.cat.colours[1])
        if self.cat.split == "side":
            top = Rectangle((x, y), w / 2, h, facecolor=a, edgecolor="none", transform=tr)
            bot = Rectangle((x + w / 2, y), w / 2, h, facecolor=b, edgecolor="none", transform=tr)
            frame = Rectangle((x, y), w, h, facecolor="none", edgecolor="#000000", lw=1.0, transform=tr)
        else:
            top = Rectangle((x, y + h / 2), w, h / 2, facecolor=a, edgecolor="none", transform=tr)
            bot = Rectangle((x, y), w, h / 2, facecolor=b, edgecolor="none", transform=tr)
            frame = Rectangle((x, y), w, h, facecolor="none", edgecolor=colour("edge"), lw=0.6, transform=tr)
        for p in (top, bot, frame):
            handlebox.add_artist(p)
        return frame


def _draw_grid(ax, grid: Grid, box: _Box, opt: FigureOptions) -> None:
    """The order panel: equal-width cells, a split cell for an overlapped step."""
    from matplotlib.collections import PolyCollection

    ncols = max((len(cells) for _, cells in grid.rows), default=1) or 1
    verts, faces, texts = [], [], []
    for r, (_, cells) in enumerate(grid.rows):
        for c, cell in enumerate(cells):
            k = len(cell.colours)
            for j, col in enumerate(cell.colours):
                y0 = r + 0.1 + 0.8 * j / k
                y1 = r + 0.1 + 0.8 * (j + 1) / k
                verts.append([(c, y0), (c + 1, y0), (c + 1, y1), (c, y1)])
                faces.append(col)
                if j < len(cell.texts):
                    texts.append((c + 0.5, (y0 + y1) / 2, cell.texts[j], col, k))
    if verts:
        ax.add_collection(PolyCollection(np.array(verts, dtype=float), facecolors=_rgba(faces),
                                         edgecolors=colour("text.light"), linewidths=0.8))
    ax.set_xlim(0, ncols)
    ax.set_ylim(len(grid.rows), 0)
    ax.set_yticks([r + 0.5 for r in range(len(grid.rows))], [name for name, _ in grid.rows], fontsize=opt.font_size)
    ax.set_xticks([])
    ax.tick_params(axis="y", length=0)
    for s in ax.spines.values():
        s.set_visible(False)
    ax.set_title(grid.title, loc="left", fontsize=opt.font_size + 1, fontweight="bold")
    cell_px = box.width * opt.dpi / ncols
    row_px = box.height * opt.dpi / max(len(grid.rows), 1)
    for x, y, t, col, k in texts:
        fs = min(opt.font_size, row_px * 0.8 / k * 0.6 * 72 / opt.dpi)
        if fs >= opt.min_font and len(t) * fs * opt.dpi / 72 * 0.62 + 2 <= cell_px:
            ax.text(x, y, t, ha="center", va="center", fontsize=fs, color=colour(text_colour(col)))
