"""The MoE overlap figure as a reader sees it: nothing clipped at the edge, no axis title over the
grid, a legend entry for every kind and chunk drawn (HTML and PNG, the seed figure and a --time window).

Expected sizes are reasoned by hand from the figure of fixtures/moe_overlap.yaml (pp=4, vpp=2):
close-ups of device 3, rows Computation/Communication/Offload, four device rows in the grid.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pptl.planning import load_timeline
from pptl.render import static_figure
from pptl.render.layout import build_layout
from pptl.render.moe_figure import moe_figure
from pptl.render.moe_html import moe_figure_dict
from pptl.render.options import RenderOptions
from pptl.render.samples import moe_sample

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "moe_overlap.yaml"

# Every kind the figure draws, chunk 1 included: the close-ups of device 3 show forwards of chunk 0
# only, but the grid draws the forwards of chunk 1 (darker), so the legend names them too.
LEGEND = ["Forward pass, chunk 0", "Forward pass, chunk 1 (darker)", "Backward pass, chunk 0",
          "Backward pass, chunk 1 (darker)", "PP communication", "EP dispatch/combine (forward)",
          "EP dispatch/combine (backward)", "Offload (to host)", "Onload (beside forwards)", "Load (cooldown)"]


@pytest.fixture(scope="module")
def tl():
    return load_timeline(FIXTURE)


@pytest.fixture(scope="module")
def data(tl):
    return moe_figure(tl)


@pytest.fixture(scope="module")
def page(data):
    return moe_figure_dict(data)


def _plot_px(layout: dict) -> tuple[float, float]:
    """(top margin, plot height) in px: the page's height is fixed, its width follows the window."""
    m = layout["margin"]
    return m["t"], layout["height"] - m["t"] - m["b"]


@pytest.mark.parametrize("device", [3, 123456], ids=["device-3", "long-device-number"])
@pytest.mark.parametrize("page_px", [700, 1600, 3000], ids=lambda w: f"{w}px")
def test_device_heading_sits_inside_the_left_margin_at_any_window_width(data, device: int, page_px: int) -> None:
    page = moe_figure_dict(replace(data, device=device))
    layout = page["layout"]
    head = next(a for a in layout["annotations"] if a["text"] == f"<b>Device {device}</b>")
    left = layout["margin"]["l"]
    plot_w = page_px - left - layout["margin"]["r"]
    assert head["xanchor"] == "left" and head["font"]["size"] == 13
    x = left + head["x"] * plot_w + head.get("xshift", 0)  # the heading's left edge, px from the page's
    # At most 0.7 em a bold character (Verdana/DejaVu Sans Bold, the widest fallbacks, measure ~0.6):
    # "Device 3" is 8 x 0.7 x 13 = 72.8 px, "Device 123456" 13 x 0.7 x 13 = 118.3 px.
    width = len(f"Device {device}") * 0.7 * 13
    assert 0 <= x and x + width <= left, (x, width, left)  # inside the page, left of the plot


def test_left_margin_holds_the_widest_row_label(page) -> None:
    # "Communication", 13 characters at most 0.62 em at 12 px = 96.7 px, beside its axis.
    assert page["layout"]["margin"]["l"] >= 96.7 + 10


def test_close_up_axis_titles_stay_above_the_grid_caption(page) -> None:
    layout = page["layout"]
    top, plot = _plot_px(layout)
    for ax in ("xaxis", "xaxis2", "xaxis3"):  # the three close-ups' time axes: what hangs below them
        assert layout[ax]["title"]["text"] == "time"
        assert layout[ax]["ticklen"] == 5 and layout[ax]["tickfont"]["size"] == 12
        assert layout[ax]["title"]["standoff"] == 4 and layout[ax]["title"]["font"]["size"] == 12
    bottom = top + (1 - layout["yaxis"]["domain"][0]) * plot  # the close-ups' x axis line, px from the top
    caption = next(a for a in layout["annotations"] if a["text"] == "<b>VPP + 1 warmup</b>")
    caption_top = top + (1 - caption["y"]) * plot - 13 * 1.3  # one 13 px line above its anchor
    # Below the axis line: ticks 5 px, tick labels one 12 px line (~15.6 px), standoff 4, the title
    # one 12 px line: 40.2 px that must not reach the caption.
    assert caption_top - bottom >= 5 + 15.6 + 4 + 15.6, (bottom, caption_top)
    grid_top = top + (1 - layout["yaxis4"]["domain"][1]) * plot
    assert grid_top >= top + (1 - caption["y"]) * plot  # the caption sits on the grid, not in it


def test_legend_lists_every_chunk_and_kind_drawn_in_figure_order(page) -> None:
    entries = sorted((t for t in page["data"] if t.get("showlegend", True)), key=lambda t: t.get("legendrank", 1000))
    assert [t["name"] for t in entries] == LEGEND
    groups = {t["legendgroup"] for t in entries}
    grid = [t for t in page["data"] if t.get("yaxis") == "y4"]
    # The grid is drawn per legend entry: clicking "Forward pass, chunk 1" hides its cells too.
    assert {t["legendgroup"] for t in grid} == {"F.c0", "F.c1", "B.c0", "B.c1", "pp"} <= groups
    assert all(t["legendgroup"] in groups for t in page["data"])


def test_png_legend_matches_the_html_legend(tl, page) -> None:
    fig = static_figure(tl, RenderOptions(dpi=60))
    texts = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert sorted(texts) == sorted(LEGEND)


def test_png_row_labels_are_not_cut_at_a_larger_font(tl) -> None:
    # At 11 pt "Communication" is ~87 pt (1.2 in) wide: more than the default 0.95 in margin.
    fig = static_figure(tl, RenderOptions(dpi=60, font_size=11, size=(14.0, 6.0)))
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # the figure is built without a canvas: give it one to measure on
    canvas.draw()
    r = canvas.get_renderer()
    labels = [t for ax in fig.axes for t in ax.get_yticklabels() if t.get_text()] + list(fig.texts)
    assert {t.get_text() for t in labels} >= {"Communication", "Device 3", "Device 0"}
    for t in labels:
        assert t.get_window_extent(r).x0 >= 0, t.get_text()


def test_time_window_legend_names_each_chunk_shade_drawn(tl) -> None:
    # --time draws the plan through the generic layout: its blocks come in chunk shades too.
    lay = build_layout(tl, "auto", window=(100.0, 200.0))
    assert [c.label for c in lay.categories] == [
        "Forward pass, chunk 0", "Forward pass, chunk 1 (darker)", "Backward pass, chunk 0",
        "Backward pass, chunk 1 (darker)", "PP communication", "EP dispatch/combine", "Offload / Onload"]
    shades = {(lay.categories[k].colours[0], c) for k, c in zip(lay.blocks.cat.tolist(), lay.blocks.colour)}
    assert all(legend == drawn for legend, drawn in shades), shades  # each block in its entry's colour
    assert {"moe.forward.c1", "moe.backward.c1"} <= {drawn for _legend, drawn in shades}


def test_one_chunk_needs_no_chunk_names() -> None:
    lay = build_layout(moe_sample(), "moe")  # chunk 0 only
    assert [c.label for c in lay.categories][:2] == ["Forward pass", "Backward pass"]
