"""Interactive HTML with plotly: one self-contained file that works offline (plotly.js embedded).

One horizontal bar trace per category (so a legend click toggles a kind), with numeric bases on a
numeric time axis (no date axes, no layout shapes: those do not scale). Hover names the op's id,
kind, stage, chunk, micro-batch, start, end, duration and what it waits on. Zoom acts on the time
axis only. plotly is imported inside the functions, so the rest of pptl never pays for it.

Big timelines: above :data:`HTML_WARN_BLOCKS` blocks a browser gets slow (each bar is an SVG
path), and above :data:`HTML_MAX_BLOCKS` we refuse and point to the Chrome-trace export, which
Perfetto opens at any size.
"""
from __future__ import annotations

import html as _html
from dataclasses import dataclass
from typing import Any

import numpy as np

from pptl.errors import InputError
from pptl.render.layout import Grid, Layout, build_layout
from pptl.render.styles import colour, text_colour
from pptl.timeline import Timeline

__all__ = ["HtmlOptions", "HTML_WARN_BLOCKS", "HTML_MAX_BLOCKS", "PLOTLYJS_MODES", "size_warning", "figure_dict",
           "html_document", "write_plotlyjs", "PLOTLY_CONFIG"]

#: plotly.js's config of every page pptl writes. The pages are offline: no button may send the
#: figure (the user's plan) to Plotly's cloud, whatever plotly's defaults (older ones show it).
PLOTLY_CONFIG: dict[str, Any] = {"displaylogo": False, "scrollZoom": True, "responsive": True,
                                 "showSendToCloud": False,
                                 "modeBarButtonsToRemove": ["sendDataToCloud"], "plotlyServerURL": ""}

#: How a page gets plotly.js (``--plotlyjs``).
PLOTLYJS_MODES = ("inline", "directory")

HTML_WARN_BLOCKS = 20_000
HTML_MAX_BLOCKS = 250_000
HTML_MAX_TICKS = 200
"""Row labels on the y axis at most; more rows label every k-th (hover still names each op)."""
_CHROME_HINT = ("write a Chrome trace with 'pptl export FILE --to chrome -o trace.json' and open it in Perfetto "
                "(ui.perfetto.dev), or draw a PNG with -o")


@dataclass(frozen=True)
class HtmlOptions:
    style: str = "auto"
    max_blocks: int = HTML_MAX_BLOCKS
    max_waits: int = 4
    """Dependencies listed per op in the hover text (the rest are counted)."""
    plotlyjs: str = "inline"
    """inline: plotly.js inside the page (one file that opens offline); directory: the page loads
    plotly.min.js from its own folder (see :func:`write_plotlyjs`), ~4.6 MB less per page."""


def size_warning(lay: Layout) -> str | None:
    """A one-line warning for a timeline big enough to make a browser slow, else None."""
    n = len(lay.blocks)
    if n <= HTML_WARN_BLOCKS:
        return None
    return f"{n} blocks: the HTML will be slow in a browser (above {HTML_WARN_BLOCKS}); to browse it, {_CHROME_HINT}"


def html_document(tl: Timeline, options: HtmlOptions = HtmlOptions(), *, layout: Layout | None = None,
                  render: Any = None, moe: Any = None) -> str:
    """The whole HTML page as a string; ``moe`` (from ``write_file``) draws the MoE seed layout.

    Raises:
        InputError: more blocks than ``options.max_blocks`` (the message points to the Chrome trace).
    """
    import plotly.io as pio

    lay = layout if layout is not None else build_layout(tl, options.style)
    fig = figure_dict(tl, options, layout=lay)
    if render is not None:
        from pptl.render.options import resolve_title

        title = resolve_title(render.title, lay.style.seed, lay.title)
        fig["layout"]["title"]["text"] = _html.escape(title)
        if moe is not None:
            from pptl.render.moe_html import moe_figure_dict

            fig = moe_figure_dict(moe[0], title)
    page = pio.to_html(fig, validate=False, include_plotlyjs=True if options.plotlyjs == "inline" else "directory",
                       full_html=True,
                       config=dict(PLOTLY_CONFIG))
    title = f"<title>{_html.escape(lay.title)}</title>"
    return page.replace("</head>", title + "</head>", 1)


def every_kth(vals: list, text: list, most: int) -> tuple[list, list]:
    """Tick values and labels thinned to every k-th, at most ``most``: plotly measures every tick label, in
    time that grows faster than the rows (1000 labels took 40 s to load, 2000 over two minutes); every row
    is still drawn and its blocks still tell their rank on hover (the PNG labels every k-th row too)."""
    step = max(1, -(-len(vals) // most))
    return vals[::step], text[::step]


def figure_dict(tl: Timeline, options: HtmlOptions = HtmlOptions(), *, layout: Layout | None = None,
                max_ticks: int = HTML_MAX_TICKS) -> dict:
    """The plotly figure as a plain dict (no validation pass: it is built to the schema here); at most
    ``max_ticks`` row labels (:func:`every_kth`)."""
    lay = layout if layout is not None else build_layout(tl, options.style)
    n = len(lay.blocks)
    if n > options.max_blocks:
        raise InputError(f"{n} blocks is above the HTML limit of {options.max_blocks}; {_CHROME_HINT}")
    row_w = np.array([1.0 + 0.55 * (r.tracks - 1) for r in lay.rows] or [1.0])
    tops = np.concatenate([[0.0], np.cumsum(row_w)[:-1]])
    centers = tops + row_w / 2
    traces = _idle_trace(lay, tops, row_w, centers) + _block_traces(lay, tops, row_w, centers, options) \
        + _frame_trace(lay, tops, row_w, centers)
    ticktext = [r.spec.label if r.bubble is None else f"{r.spec.label} ({100 * r.bubble:.0f}% idle)"
                for r in lay.rows]
    groups = [f"<b>{r.spec.group}</b> · {t}" if r.spec.group and (i == 0 or lay.rows[i - 1].spec.group != r.spec.group)
              else t for i, (r, t) in enumerate(zip(lay.rows, ticktext))]
    unit = "" if lay.units in ("", "unit") else f" ({lay.units})"
    used = set(lay.blocks.cat.tolist())
    split = any(len(lay.categories[k].colours) > 1 for k in used)
    # Split blocks put a number in each half: rows get taller so both halves can hold text.
    row_px = 44 if split else 30
    main_h = max(260, int(row_w.sum() * row_px) + 170)
    grid_h = 48 * len(lay.grid.rows) if lay.grid else 0  # split cells need room for two numbers
    gap = 90 if grid_h else 0  # room for the time axis title between the timeline and the grid
    layout: dict[str, Any] = {
        "title": {"text": _html.escape(lay.title), "x": 0.01, "font": {"size": 15}},
        "barmode": "overlay",
        "hovermode": "closest",
        "dragmode": "zoom",
        "height": main_h + gap + grid_h,
        "plot_bgcolor": "#FFFFFF",
        "margin": {"l": 10, "r": 20, "t": 95, "b": 50},
        # Above the plot, under the title: below it would collide with the axis title and grid.
        "legend": {"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom",
                   "itemclick": "toggle", "itemdoubleclick": "toggleothers"},
        "uniformtext": {"mode": "hide", "minsize": 7},
        "xaxis": {"title": {"text": "Time →" if lay.style.time_arrow else f"time{unit}"},
                  "range": [lay.t0, lay.t1 if lay.t1 > lay.t0 else lay.t0 + 1], "zeroline": False,
                  "showgrid": True, "gridcolor": "#EEEEEE", "showticklabels": not lay.style.time_arrow},
        "yaxis": {**dict(zip(("tickvals", "ticktext"), every_kth(centers.tolist(), groups, max_ticks))),
                  "autorange": False,
                  "range": [float(row_w.sum()), 0.0], "fixedrange": True, "automargin": True},
    }
    if grid_h:
        plot_h = main_h + gap + grid_h - 95 - 50  # minus the top and bottom margins
        frac = grid_h / plot_h
        layout["yaxis"]["domain"] = [(grid_h + gap) / plot_h, 1.0]
        layout["xaxis"]["anchor"] = "y"
        traces += _grid_traces(lay.grid)
        layout["xaxis2"] = {"domain": [0, 1], "anchor": "y2", "showticklabels": False, "showgrid": False,
                            "zeroline": False, "fixedrange": True}
        ncells = max((len(cells) for _, cells in lay.grid.rows), default=1)
        # Cells are steps, not time: a fixed minimum range keeps a short grid from stretching.
        layout["xaxis2"]["range"] = [-0.05, max(ncells, 24)]
        layout["yaxis2"] = {"domain": [0, min(frac, 1.0)], "anchor": "x2", "autorange": "reversed",
                            "fixedrange": True, "tickvals": list(range(len(lay.grid.rows))),
                            "ticktext": [name for name, _ in lay.grid.rows], "automargin": True}
        layout["annotations"] = [{"text": f"<b>{_html.escape(lay.grid.title)}</b>", "xref": "paper", "yref": "paper",
                                  "x": 0, "y": min(frac, 1.0), "xanchor": "left", "yanchor": "bottom",
                                  "showarrow": False, "font": {"size": 13}}]
    seps = [float(tops[i]) for i, r in enumerate(lay.rows) if r.spec.separator]
    if seps:  # a dashed rule between row groups (seed 003: buffers above, devices below)
        layout["shapes"] = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": y, "y1": y,
                             "line": {"dash": "dash", "width": 1, "color": colour("muted")}} for y in seps]
    return {"data": traces, "layout": layout}


def _idle_trace(lay: Layout, tops: np.ndarray, row_w: np.ndarray, centers: np.ndarray) -> list[dict]:
    rows = [i for i, r in enumerate(lay.rows) if r.bubble is not None and lay.style.idle_band]
    if not rows:
        return []
    span = lay.span if lay.span > 0 else 1.0
    return [{
        "type": "bar", "orientation": "h", "name": "Idle (bubble)", "legendrank": 2000,
        "x": [span] * len(rows), "base": [lay.t0] * len(rows), "y": centers[rows].tolist(),
        "width": (row_w[rows] * 0.8).tolist(), "marker": {"color": colour("idle"), "line": {"width": 0}},
        "hoverinfo": "skip",
    }]


def _block_traces(lay: Layout, tops: np.ndarray, row_w: np.ndarray, centers: np.ndarray,
                  options: HtmlOptions) -> list[dict]:
    b = lay.blocks
    events = lay.timeline.events
    many = len(b) > 5000
    px_per_t = 1100.0 / (lay.span if lay.span > 0 else 1.0)  # plot width at a typical window size
    traces = []
    for k, cat in enumerate(lay.categories):
        idx = np.nonzero(b.cat == k)[0]
        if idx.size == 0:
            continue
        rows = b.row[idx]
        y_top = tops[rows] + row_w[rows] * (0.1 + 0.8 * b.y0[idx])
        height = row_w[rows] * 0.8 * (b.y1[idx] - b.y0[idx])
        cols = [colour(b.colour[i]) for i in idx.tolist()]
        uniform = len(set(cols)) == 1
        edge_w = 0.8 if cat.edge else (0.0 if many else 0.5)
        custom = [_hover_row(events[e], options.max_waits) for e in b.event[idx].tolist()]
        traces.append({
            "type": "bar", "orientation": "h", "name": cat.label, "legendgroup": cat.key,
            "x": (b.end[idx] - b.start[idx]).tolist(), "base": b.start[idx].tolist(),
            "y": centers[rows].tolist(), "offset": (y_top - centers[rows]).tolist(), "width": height.tolist(),
            "marker": {"color": cols[0] if uniform else cols,
                       "line": {"width": edge_w, "color": colour(cat.edge or "edge")}},
            "text": [_fitting(b.texts[i], (b.end[i] - b.start[i]) * px_per_t) for i in idx.tolist()],
            "textposition": "inside", "insidetextanchor": "middle", "textangle": 0, "constraintext": "inside",
            "textfont": {"color": (colour(text_colour(b.colour[int(idx[0])])) if uniform else
                                   [colour(text_colour(b.colour[i])) for i in idx.tolist()]), "size": 11},
            "customdata": custom,
            "hovertemplate": _HOVER,
        })
        if len(cat.colours) > 1:  # a two-colour block: the legend swatch shows both colours (half and half)
            traces[-1]["showlegend"] = False
            traces.append({"type": "bar", "orientation": "h", "x": [None], "y": [None], "name": cat.label,
                           "legendgroup": cat.key, "hoverinfo": "skip",
                           "marker": {"color": colour(cat.colours[0]), "line": {"width": 1, "color": "#000000"},
                                      "pattern": {"shape": "|" if cat.split == "side" else "-", "size": 20,
                                                  "solidity": 0.5, "fgcolor": colour(cat.colours[1]),
                                                  "bgcolor": colour(cat.colours[0])}}})
    return traces


def _frame_trace(lay: Layout, tops: np.ndarray, row_w: np.ndarray, centers: np.ndarray) -> list[dict]:
    """One black border around the whole of each framed op (seed 004's overlapped F&B cell: two halves
    inside one shared border), drawn over the halves as empty bars, as the PNG does."""
    f = lay.frames
    if f is None or not len(f):
        return []
    r = f[:, 0].astype(int)
    y0 = tops[r] + row_w[r] * (0.1 + 0.8 * f[:, 1])
    y1 = tops[r] + row_w[r] * (0.1 + 0.8 * f[:, 2])
    # Frames belong to the two-colour category: hiding it from the legend hides its borders too.
    group = next((c.key for c in lay.categories if len(c.colours) > 1), "frame")
    return [{"type": "bar", "orientation": "h", "name": "frame", "legendgroup": group, "showlegend": False,
             "x": (f[:, 4] - f[:, 3]).tolist(), "base": f[:, 3].tolist(), "y": centers[r].tolist(),
             "offset": (y0 - centers[r]).tolist(), "width": (y1 - y0).tolist(),
             "marker": {"color": "rgba(0,0,0,0)", "line": {"width": 1.5, "color": "#000000"}},
             "hoverinfo": "skip"}]


def _fitting(texts: tuple[str, ...], width_px: float) -> str:
    """The longest label candidate that fits the block at the first view, else the shortest
    (plotly hides what does not fit, and shows it once the user zooms in)."""
    for t in texts:
        if len(t) * 7.0 + 6 <= width_px:
            return t
    return texts[-1] if texts else ""


_HOVER = ("<b>%{customdata[0]}</b><br>kind %{customdata[1]} · stage %{customdata[2]} · chunk %{customdata[3]}"
          " · mb %{customdata[4]}<br>start %{customdata[5]} · end %{customdata[6]} · duration %{customdata[7]}"
          "<br>waits on: %{customdata[8]}<extra></extra>")


def _hover_row(e: Any, max_waits: int) -> list:
    w = list(e.waits_on)
    waits = "<br>  ".join(_html.escape(x) for x in w[:max_waits]) if w else "nothing"
    if len(w) > max_waits:
        waits += f"<br>  (+{len(w) - max_waits} more)"
    mb = str(e.mb) if e.mb >= 0 else "-"
    if e.pair is not None:
        mb += f" (+B mb {e.pair[1]})"
    if e.direction:
        mb += f" dir {e.direction}"
    if e.bucket >= 0:  # a weight update's work item: a bucket, through an IPC half
        mb += f" · bucket {e.bucket}" + (f" half {e.half}" if e.half >= 0 else "")
    return [_html.escape(e.op), e.kind, e.stage if e.stage >= 0 else "-", e.chunk if e.chunk >= 0 else "-", mb,
            f"{e.start:g}", f"{e.end:g}", f"{e.duration:g}", waits]


def _grid_traces(grid: Grid) -> list[dict]:
    ys, xs, offs, widths, cols, texts, inks = [], [], [], [], [], [], []
    for r, (_, cells) in enumerate(grid.rows):
        for c, cell in enumerate(cells):
            k = len(cell.colours)
            for j, col in enumerate(cell.colours):
                ys.append(r)
                xs.append(c)
                offs.append(-0.4 + 0.8 * j / k)
                widths.append(0.8 / k)
                cols.append(colour(col))
                inks.append(colour(text_colour(col)))
                texts.append(cell.texts[j] if j < len(cell.texts) else "")
    if not ys:
        return []
    return [{
        "type": "bar", "orientation": "h", "name": grid.title, "showlegend": False, "xaxis": "x2", "yaxis": "y2",
        "x": [0.94] * len(ys), "base": xs, "y": ys, "offset": offs, "width": widths,
        "marker": {"color": cols, "line": {"width": 0}}, "text": texts, "textposition": "inside",
        "insidetextanchor": "middle", "textangle": 0, "textfont": {"size": 9, "color": inks}, "hoverinfo": "skip",
    }]


def write_plotlyjs(folder: Any) -> Any:
    """``folder/plotly.min.js`` for pages written with ``plotlyjs="directory"`` (they load it by that
    relative name); written once, and again only when its content differs (another plotly version)."""
    from pathlib import Path

    from plotly.offline import get_plotlyjs

    from pptl.fileio import atomic_write

    target = Path(folder) / "plotly.min.js"
    data = get_plotlyjs().encode("utf-8")
    if not (target.is_file() and target.stat().st_size == len(data) and target.read_bytes() == data):
        atomic_write(target, data)
    return target
