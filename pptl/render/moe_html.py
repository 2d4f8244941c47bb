"""The MoE seed figure in plotly (HTML): the same :class:`~pptl.render.moe_figure.MoEFigure` data as
the PNG, three sections side by side on their own time axes above the order grid of every device."""
from __future__ import annotations

import html as _html
from typing import Any

from pptl.render.base import colour, text_colour
from pptl.render.moe_figure import SECTION_ROWS, MoEFigure

__all__ = ["moe_figure_dict"]

_GAP = 0.03


def moe_figure_dict(f: MoEFigure, title: str = "") -> dict:
    """A plotly figure (as a dict) of the seed layout; hover names each block's op."""
    n = len(f.sections)
    weights = [max(1, sum(1 for b in s.blocks if b.row == "Computation")) + 1 for s in f.sections]
    avail = 1.0 - _GAP * (n - 1)
    doms, x = [], 0.0
    for w in weights:
        doms.append((x, x + avail * w / sum(weights)))
        x = doms[-1][1] + _GAP
    traces: list[dict] = []
    layout: dict[str, Any] = {"barmode": "overlay", "height": 330 + 34 * len(f.devices), "plot_bgcolor": "#FFFFFF",
                              "margin": {"l": 110, "r": 20, "t": 90 if title else 60, "b": 40},
                              "legend": {"orientation": "h", "y": -0.08, "yanchor": "top"}, "annotations": []}
    if title:
        layout["title"] = {"text": _html.escape(title), "x": 0.01}
    shown: set[str] = set()
    cats = {c.key: c for c in f.categories}
    for i, sec in enumerate(f.sections):
        ax = "" if i == 0 else str(i + 1)
        for b in sec.blocks:
            j = SECTION_ROWS.index(b.row)
            ntr = sec.tracks[j]
            cat = cats.get(b.cat)
            traces.append({
                "type": "bar", "orientation": "h", "x": [max(b.end - b.start, 1e-9)], "base": [b.start],
                "y": [j + (b.track + 0.5) / ntr - 0.5], "width": [0.8 / ntr], "xaxis": f"x{ax}", "yaxis": f"y{ax}",
                "name": cat.label if cat else b.cat, "legendgroup": b.cat, "showlegend": b.cat not in shown,
                "marker": {"color": colour(b.colour), "line": {"width": 0.5, "color": colour("edge")},
                           "pattern": {"shape": {"//": "/", "xx": "x"}.get(cat.hatch if cat else "", "")}},
                "text": [b.label], "textposition": "inside", "insidetextanchor": "middle", "textangle": 0,
                "textfont": {"color": colour(text_colour(b.colour)), "size": 11},
                "hovertemplate": f"{_html.escape(b.label)} {b.start:g}-{b.end:g}<extra></extra>",
            })
            shown.add(b.cat)
        layout[f"xaxis{ax}"] = {"domain": list(doms[i]), "range": [sec.t0, sec.t1], "anchor": f"y{ax}",
                                "title": {"text": "time" if f.units in ("", "unit") else f"time ({f.units})"}}
        layout[f"yaxis{ax}"] = {"domain": [0.5, 0.9], "range": [len(SECTION_ROWS) - 0.5, -0.5], "anchor": f"x{ax}",
                                "tickvals": list(range(len(SECTION_ROWS))), "fixedrange": True,
                                "ticktext": list(SECTION_ROWS) if i == 0 else [""] * len(SECTION_ROWS)}
        layout["annotations"].append({"text": f"<b>{sec.title}</b><br>{_html.escape(sec.what)}", "xref": "paper",
                                      "yref": "paper", "x": sum(doms[i]) / 2, "y": 0.92, "showarrow": False,
                                      "yanchor": "bottom"})
    layout["annotations"].append({"text": f"<b>Device {f.device}</b>", "xref": "paper", "yref": "paper", "x": -0.1,
                                  "y": 0.92, "showarrow": False, "xanchor": "left", "yanchor": "bottom"})
    g = str(n + 1)
    ys, xs, bases, offs, widths, cols, texts, inks = [], [], [], [], [], [], [], []
    for r, dev in enumerate(f.devices):
        for st in dev.steps:
            k = len(st.colours)
            for j, col in enumerate(st.colours):
                ys.append(r)
                bases.append(st.start)
                xs.append(st.end - st.start)
                offs.append(-0.4 + 0.75 * j / k)
                widths.append(0.75 / k)
                cols.append(colour(col))
                inks.append(colour(text_colour(col)))
                texts.append(st.texts[j])
        for a, b, _flow in dev.pp:
            ys.append(r)
            bases.append(a)
            xs.append(b - a)
            offs.append(0.37)
            widths.append(0.1)
            cols.append(colour("moe.pp"))
            inks.append("#000000")
            texts.append("")
    traces.append({"type": "bar", "orientation": "h", "x": xs, "base": bases, "y": ys, "offset": offs,
                   "width": widths, "xaxis": f"x{g}", "yaxis": f"y{g}", "showlegend": False,
                   "marker": {"color": cols, "line": {"width": 0.5, "color": "#FFFFFF"}}, "text": texts,
                   "textposition": "inside", "insidetextanchor": "middle", "textangle": 0,
                   "textfont": {"size": 10, "color": inks}, "hoverinfo": "skip"})
    layout[f"xaxis{g}"] = {"domain": [0, 1], "range": [f.t0, f.t1], "anchor": f"y{g}", "showticklabels": False}
    layout[f"yaxis{g}"] = {"domain": [0, 0.36], "range": [len(f.devices) - 0.5, -0.5], "anchor": f"x{g}",
                           "tickvals": list(range(len(f.devices))), "ticktext": [d.label for d in f.devices],
                           "fixedrange": True}
    layout["annotations"].append({"text": f"<b>{_html.escape(f.grid_title)}</b>", "xref": "paper", "yref": "paper",
                                  "x": 0, "y": 0.37, "showarrow": False, "xanchor": "left", "yanchor": "bottom"})
    layout["shapes"] = [{"type": "line", "xref": f"x{g}", "yref": "paper", "x0": p[2], "x1": p[2], "y0": 0,
                         "y1": 0.36, "line": {"dash": "dash", "width": 1, "color": colour("muted")}}
                        for p in f.phases[:-1]]
    return {"data": traces, "layout": layout}
