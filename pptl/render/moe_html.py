"""The MoE seed figure in plotly (HTML): the same :class:`~pptl.render.moe_figure.MoEFigure` data as
the PNG, three sections side by side on their own time axes above the order grid of every device.

The page is responsive in width only: its height is fixed in pixels, so the figure's horizontal
bands (section titles, close-ups, their time axes, the grid's caption, the grid, the legend) are
sized in pixels (:class:`_Bands`) and only then turned into plotly's paper fractions. Sizes given
as fractions of the plot would shrink the room for tick labels and axis titles below what they
take, and they would be drawn over the grid. For the same reason the left margin is computed from
the widest label it holds, and the "Device k" heading is placed in pixels from the figure's edge.
"""
from __future__ import annotations

import html as _html
from dataclasses import dataclass
from typing import Any

from pptl.render.base import Category, colour, text_colour
from pptl.render.moe_figure import SECTION_ROWS, MoEFigure, Section

__all__ = ["moe_figure_dict"]

_GAP = 0.03
#: Font sizes (px) the page sets explicitly, so that the margins and bands below can be computed.
_FONT_PX = 12
_HEAD_PX = 13  # "Device k" and the grid's caption, bold
#: An upper bound of a character's width, in ems, over the fonts a browser may pick for plotly's
#: default family ("Open Sans", Verdana, Arial, sans-serif); Verdana and DejaVu Sans are the widest.
_EM_REGULAR = 0.62
_EM_BOLD = 0.70
_EDGE_PAD = 8  # px between the figure's left edge and the "Device k" heading
_TICK_PAD = 14  # px between a y tick label and its axis (plotly's tick gap, with some spare)
#: Plot width (px) the legend's rows are estimated for: a typical window; a narrower one wraps the
#: legend onto more rows, and plotly takes the extra room from the plot.
_TYPICAL_PLOT_PX = 1100
_LEGEND_ROW_PX = 22
_LEGEND_SWATCH_PX = 40  # swatch and gaps around one legend entry's text
_HATCH = {"//": "/", "xx": "x"}


def _text_px(text: str, size: float, bold: bool = False) -> float:
    """An upper bound of ``text``'s width in pixels at ``size`` px (no browser to measure it in)."""
    return len(text) * size * (_EM_BOLD if bold else _EM_REGULAR)


@dataclass(frozen=True)
class _Bands:
    """Pixel heights of the figure's horizontal bands, top to bottom."""

    top: int
    """Margin: the title, or room for plotly's mode bar."""
    head: int
    """The sections' two-line titles and the "Device k" heading."""
    sections: int
    """The close-ups' rows."""
    axis: int
    """The close-ups' tick labels and "time" title: they hang below the close-ups."""
    caption: int
    """The grid's title ("VPP + 1 warmup")."""
    grid: int
    """One row per device."""
    bottom: int
    """Margin: the legend."""

    @property
    def height(self) -> int:
        return self.top + self.plot + self.bottom

    @property
    def plot(self) -> int:
        return self.head + self.sections + self.axis + self.caption + self.grid

    def paper(self, px_from_bottom: float) -> float:
        """A height above the plot's bottom, in px, as plotly's paper fraction."""
        return px_from_bottom / self.plot

    @property
    def grid_domain(self) -> list[float]:
        return [0.0, self.paper(self.grid)]

    @property
    def caption_y(self) -> float:
        return self.paper(self.grid + 2)

    @property
    def section_domain(self) -> list[float]:
        low = self.grid + self.caption + self.axis
        return [self.paper(low), self.paper(low + self.sections)]

    @property
    def head_y(self) -> float:
        return self.paper(self.grid + self.caption + self.axis + self.sections + 4)


def _bands(f: MoEFigure, title: str, legend_rows: int) -> _Bands:
    tracks = max((t for s in f.sections for t in s.tracks), default=1)
    line = round(_FONT_PX * 1.3)
    return _Bands(
        top=70 if title else 40,
        head=2 * line + 10,
        sections=len(SECTION_ROWS) * (44 + 14 * (tracks - 1)),
        # tick length, tick labels, title standoff, title, and spare for a legend wrapped onto more
        # rows than estimated (plotly then shrinks the plot, these bands with it)
        axis=5 + line + 4 + line + 14,
        caption=round(_HEAD_PX * 1.3) + 8,
        grid=34 * len(f.devices),
        bottom=legend_rows * _LEGEND_ROW_PX + 16,
    )


def _legend_rows(cats: tuple[Category, ...], width_px: float = _TYPICAL_PLOT_PX) -> int:
    """Rows a horizontal legend of ``cats`` wraps onto in ``width_px`` (greedy, as plotly packs it)."""
    rows, used = 1, 0.0
    for c in cats:
        w = _LEGEND_SWATCH_PX + _text_px(c.label, _FONT_PX)
        if used and used + w > width_px:
            rows, used = rows + 1, 0.0
        used += w
    return rows


def _left_margin(f: MoEFigure) -> int:
    """The left margin: the widest row label beside its axis, or the "Device k" heading from the edge."""
    ticks = max(_text_px(t, _FONT_PX) for t in (*SECTION_ROWS, *(d.label for d in f.devices)))
    head = _text_px(f"Device {f.device}", _HEAD_PX, bold=True)
    return int(max(ticks + _TICK_PAD, head + 2 * _EDGE_PAD)) + 1


def _section_domains(f: MoEFigure) -> list[tuple[float, float]]:
    """Each section's share of the width: its compute blocks, plus one."""
    n = len(f.sections)
    weights = [max(1, sum(1 for b in s.blocks if b.row == "Computation")) + 1 for s in f.sections]
    avail = 1.0 - _GAP * (n - 1)
    doms, x = [], 0.0
    for w in weights:
        doms.append((x, x + avail * w / sum(weights)))
        x = doms[-1][1] + _GAP
    return doms


def _section_traces(sec: Section, ax: str, cats: dict[str, Category]) -> list[dict]:
    """One bar per block; the legend entries are separate (:func:`_legend_traces`)."""
    traces = []
    for b in sec.blocks:
        j = SECTION_ROWS.index(b.row)
        ntr = sec.tracks[j]
        cat = cats.get(b.cat)
        traces.append({
            "type": "bar", "orientation": "h", "x": [max(b.end - b.start, 1e-9)], "base": [b.start],
            "y": [j + (b.track + 0.5) / ntr - 0.5], "width": [0.8 / ntr], "xaxis": f"x{ax}", "yaxis": f"y{ax}",
            "name": cat.label if cat else b.cat, "legendgroup": b.cat, "showlegend": False,
            "marker": {"color": colour(b.colour), "line": {"width": 0.5, "color": colour("edge")},
                       "pattern": {"shape": _HATCH.get(cat.hatch if cat else "", "")}},
            "text": [b.label], "textposition": "inside", "insidetextanchor": "middle", "textangle": 0,
            "textfont": {"color": colour(text_colour(b.colour)), "size": 11},
            "hovertemplate": f"{_html.escape(b.label)} {b.start:g}-{b.end:g}<extra></extra>",
        })
    return traces


def _section_axes(f: MoEFigure, i: int, sec: Section, dom: tuple[float, float], bands: _Bands) -> dict[str, Any]:
    ax = "" if i == 0 else str(i + 1)
    unit = "time" if f.units in ("", "unit") else f"time ({f.units})"
    return {
        f"xaxis{ax}": {"domain": list(dom), "range": [sec.t0, sec.t1], "anchor": f"y{ax}", "ticklen": 5,
                       "tickfont": {"size": _FONT_PX},
                       "title": {"text": unit, "standoff": 4, "font": {"size": _FONT_PX}}},
        f"yaxis{ax}": {"domain": bands.section_domain, "range": [len(SECTION_ROWS) - 0.5, -0.5],
                       "anchor": f"x{ax}", "tickvals": list(range(len(SECTION_ROWS))), "fixedrange": True,
                       "tickfont": {"size": _FONT_PX},
                       "ticktext": list(SECTION_ROWS) if i == 0 else [""] * len(SECTION_ROWS)},
    }


def _grid_traces(f: MoEFigure, g: str) -> list[dict]:
    """The order grid, one trace per legend category, so a legend click hides its cells too."""
    key_of = {c.colours[0]: c.key for c in f.categories}
    per: dict[str, dict[str, list]] = {}

    def add(key: str, r: int, a: float, b: float, off: float, width: float, col: str, text: str, ink: str) -> None:
        t = per.setdefault(key, {k: [] for k in ("y", "base", "x", "offset", "width", "color", "text", "ink")})
        for k, v in zip(("y", "base", "x", "offset", "width", "color", "text", "ink"),
                        (r, a, b - a, off, width, colour(col), text, ink)):
            t[k].append(v)

    for r, dev in enumerate(f.devices):
        for st in dev.steps:
            k = len(st.colours)
            for j, col in enumerate(st.colours):
                add(key_of.get(col, col), r, st.start, st.end, -0.4 + 0.75 * j / k, 0.75 / k, col, st.texts[j],
                    colour(text_colour(col)))
        for a, b, _flow in dev.pp:
            add("pp", r, a, b, 0.37, 0.1, "moe.pp", "", "#000000")
    return [{"type": "bar", "orientation": "h", "x": t["x"], "base": t["base"], "y": t["y"], "offset": t["offset"],
             "width": t["width"], "xaxis": f"x{g}", "yaxis": f"y{g}", "name": key, "legendgroup": key,
             "showlegend": False, "marker": {"color": t["color"], "line": {"width": 0.5, "color": "#FFFFFF"}},
             "text": t["text"], "textposition": "inside", "insidetextanchor": "middle", "textangle": 0,
             "textfont": {"size": 10, "color": t["ink"]}, "hoverinfo": "skip"} for key, t in per.items()]


def _legend_traces(f: MoEFigure) -> list[dict]:
    """One entry per category of the figure, in its order, as the PNG lists them. The entries are
    empty traces: a legend taken from the close-ups' traces would miss what only the grid draws
    (the forwards of chunk 1, when no close-up shows one)."""
    return [{"type": "bar", "orientation": "h", "x": [None], "y": [None], "name": c.label, "legendgroup": c.key,
             "legendrank": 1000 + k, "showlegend": True, "hoverinfo": "skip",
             "marker": {"color": colour(c.colours[0]), "line": {"width": 0.5, "color": colour("edge")},
                        "pattern": {"shape": _HATCH.get(c.hatch, "")}}}
            for k, c in enumerate(f.categories)]


def moe_figure_dict(f: MoEFigure, title: str = "") -> dict:
    """A plotly figure (as a dict) of the seed layout; hover names each block's op."""
    bands = _bands(f, title, _legend_rows(f.categories))
    left = _left_margin(f)
    doms = _section_domains(f)
    cats = {c.key: c for c in f.categories}
    traces: list[dict] = []
    layout: dict[str, Any] = {
        "barmode": "overlay", "height": bands.height, "plot_bgcolor": "#FFFFFF", "font": {"size": _FONT_PX},
        "margin": {"l": left, "r": 20, "t": bands.top, "b": bands.bottom},
        "legend": {"orientation": "h", "x": 0, "y": 0, "yanchor": "top", "traceorder": "normal"},
        "annotations": []}
    if title:
        layout["title"] = {"text": _html.escape(title), "x": 0.01}
    for i, sec in enumerate(f.sections):
        traces += _section_traces(sec, "" if i == 0 else str(i + 1), cats)
        layout.update(_section_axes(f, i, sec, doms[i], bands))
        layout["annotations"].append({"text": f"<b>{sec.title}</b><br>{_html.escape(sec.what)}", "xref": "paper",
                                      "yref": "paper", "x": sum(doms[i]) / 2, "y": bands.head_y, "showarrow": False,
                                      "yanchor": "bottom"})
    # In pixels from the figure's left edge: a paper fraction left of the plot would move with the
    # window's width, out of the margin in a wide window.
    layout["annotations"].append({"text": f"<b>Device {f.device}</b>", "xref": "paper", "yref": "paper", "x": 0,
                                  "xshift": _EDGE_PAD - left, "y": bands.head_y, "showarrow": False,
                                  "xanchor": "left", "yanchor": "bottom", "font": {"size": _HEAD_PX}})
    g = str(len(f.sections) + 1)
    traces += _grid_traces(f, g) + _legend_traces(f)
    layout[f"xaxis{g}"] = {"domain": [0, 1], "range": [f.t0, f.t1], "anchor": f"y{g}", "showticklabels": False}
    layout[f"yaxis{g}"] = {"domain": bands.grid_domain, "range": [len(f.devices) - 0.5, -0.5], "anchor": f"x{g}",
                           "tickvals": list(range(len(f.devices))), "ticktext": [d.label for d in f.devices],
                           "tickfont": {"size": _FONT_PX}, "fixedrange": True}
    layout["annotations"].append({"text": f"<b>{_html.escape(f.grid_title)}</b>", "xref": "paper", "yref": "paper",
                                  "x": 0, "y": bands.caption_y, "showarrow": False, "xanchor": "left",
                                  "yanchor": "bottom", "font": {"size": _HEAD_PX}})
    layout["shapes"] = [{"type": "line", "xref": f"x{g}", "yref": "paper", "x0": p[2], "x1": p[2], "y0": 0,
                         "y1": bands.grid_domain[1], "line": {"dash": "dash", "width": 1, "color": colour("muted")}}
                        for p in f.phases[:-1]]
    return {"data": traces, "layout": layout}
