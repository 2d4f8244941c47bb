"""matplotlib figures: every example in every format, bounded sizes, one collection, fitting labels."""
from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest

from pptl.demo import default_fixtures_dir, example_files
from pptl.planning import load_timeline
from pptl.render import write_file
from pptl.render.layout import build_layout
from pptl.render.mpl import FigureOptions, figure, figure_from_layout, image_bytes
from pptl.render.samples import dualpipe_sample, moe_sample, scaled, weight_update_sample

EXAMPLES = example_files(default_fixtures_dir())
MAX_W_IN, MAX_H_IN, DPI = FigureOptions().width_in, FigureOptions().max_height_in, FigureOptions().dpi
SAMPLES = {"dualpipe": dualpipe_sample, "moe": moe_sample, "weight-update": weight_update_sample}


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def svg_size_pt(data: bytes) -> tuple[float, float]:
    head = data[:2000].decode()
    w = re.search(r'<svg[^>]*\swidth="([\d.]+)pt"', head)
    h = re.search(r'<svg[^>]*\sheight="([\d.]+)pt"', head)
    assert w and h, head[:300]
    return float(w.group(1)), float(h.group(1))


def pdf_size_pt(data: bytes) -> tuple[float, float]:
    m = re.search(rb"/MediaBox\s*\[\s*0 0 ([\d.]+) ([\d.]+)\s*\]", data)
    assert m
    return float(m.group(1)), float(m.group(2))


def _check_all_formats(fig) -> None:
    png = image_bytes(fig, "png")
    w, h = png_size(png)
    assert 0 < w <= MAX_W_IN * DPI and 0 < h <= MAX_H_IN * DPI
    svg = image_bytes(fig, "svg")
    sw, sh = svg_size_pt(svg)
    assert 0 < sw <= MAX_W_IN * 72 and 0 < sh <= MAX_H_IN * 72
    assert b"<path" in svg
    pdf = image_bytes(fig, "pdf")
    assert pdf.startswith(b"%PDF")
    pw, ph = pdf_size_pt(pdf)
    assert 0 < pw <= MAX_W_IN * 72 and 0 < ph <= MAX_H_IN * 72


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_in_png_svg_pdf(path: Path) -> None:
    _check_all_formats(figure(load_timeline(path)))


@pytest.mark.parametrize("style", sorted(SAMPLES), ids=str)
def test_every_seed_style_in_png_svg_pdf(style: str) -> None:
    _check_all_formats(figure(SAMPLES[style](), FigureOptions(style=style)))


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"], ids=str)
def test_write_file_writes_a_non_empty_file(tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"fig{suffix}"
    assert write_file(dualpipe_sample(), out) == []
    assert out.stat().st_size > 1000


def test_blocks_are_one_collection() -> None:
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Rectangle

    tl = load_timeline(default_fixtures_dir() / "1f1b.yaml")
    fig = figure(tl)
    ax = fig.axes[0]
    colls = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(colls) == 1
    # every compute op plus one idle band per rank, all in that collection
    assert len(colls[0].get_paths()) == 2 * 4 * 8 + 4
    assert not [p for p in ax.patches if isinstance(p, Rectangle)]


def test_labels_only_where_they_fit() -> None:
    fig = figure(load_timeline(default_fixtures_dir() / "1f1b.yaml"))
    texts = [t.get_text() for t in fig.axes[0].texts if not t.get_text().startswith("bubble")]
    assert sorted(texts) == sorted(str(mb) for mb in range(8) for _ in range(8))  # every block has room

    big = scaled(20_000, ranks=8)
    fig = figure(big, FigureOptions(max_labels=300))
    labels = [t for t in fig.axes[0].texts if not t.get_text().startswith("bubble")]
    assert len(labels) <= 300  # 20k blocks at 700 px: most are far too narrow


def test_big_timeline_keeps_the_figure_bounded() -> None:
    tl = scaled(3_000, ranks=150)  # 150 rows: far more than fit at the preferred row height
    w, h = png_size(image_bytes(figure(tl), "png"))
    assert w <= MAX_W_IN * DPI and h <= MAX_H_IN * DPI


def test_vector_formats_rasterize_huge_collections() -> None:
    tl = scaled(4_000, ranks=8)
    lay = build_layout(tl)
    small = image_bytes(figure_from_layout(lay, FigureOptions(rasterize_above=1000)), "svg")
    full = image_bytes(figure_from_layout(lay, FigureOptions()), "svg")
    assert b"<image" in small and b"<image" not in full
    assert len(small) < len(full)


def test_dualpipe_figure_has_time_arrow_and_no_time_ticks() -> None:
    fig = figure(dualpipe_sample())
    ax = fig.axes[0]
    assert ax.get_xticks().size == 0
    assert "Time" in [t.get_text() for t in ax.texts]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["Device 0", "Device 1"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    # entries are stored column by column; the column count follows the width
    assert sorted(legend) == sorted(["Forward", "Backward", "Backward for input", "Backward for weights",
                                     "Overlapped forward & Backward"])


def test_moe_figure_has_grid_panel() -> None:
    fig = figure(moe_sample(), FigureOptions(style="moe"))
    assert len(fig.axes) == 2
    grid = fig.axes[1]
    assert grid.get_title(loc="left") == "VPP + 1 warmup"
    assert {t.get_text() for t in grid.texts} == {"1", "2", "3"}


def test_image_bytes_rejects_unknown_format() -> None:
    with pytest.raises(ValueError, match="format 'gif'"):
        image_bytes(figure(dualpipe_sample()), "gif")


def test_painted_blocks_follow_the_pixel_centres_by_hand() -> None:
    from pptl.render.mpl import _paint

    grey, red, blue, green, black = ((0.5, 0.5, 0.5, 1.0), (1.0, 0.0, 0.0, 1.0), (0.0, 0.0, 1.0, 1.0),
                                     (0.0, 1.0, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0))
    # 10 time units on 10 pixels, one row of depth 1 on 2 pixel rows. In drawing order: an idle
    # band over the whole row; A 0-4; B 3-6 (over A's last pixel, 3.5); C 8.2-8.4, over no pixel
    # centre (shown in pixel 8, its middle); D 0-1 on the top half only; E 9.6-9.7 under nothing
    # drawn after it but past every centre but 9.5 (pixel 9 is the band's: E is later: E shows).
    x0 = np.array([0.0, 0.0, 3.0, 8.2, 0.0, 9.6])
    x1 = np.array([10.0, 4.0, 6.0, 8.4, 1.0, 9.7])
    y0 = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    y1 = np.array([1.0, 1.0, 1.0, 1.0, 0.5, 1.0])
    face = np.array([grey, red, blue, green, black, red])
    img = _paint((2, 10), (0.0, 10.0, 1.0), x0, x1, y0, y1, face)
    g, r, b, gr, k = (np.rint(np.array(c) * 255).astype(np.uint8).tolist() for c in (grey, red, blue, green, black))
    assert img[1].tolist() == [r, r, r, b, b, b, g, g, gr, r]
    assert img[0].tolist() == [k, r, r, b, b, b, g, g, gr, r]


def test_a_huge_plan_is_painted_as_one_image_like_its_polygons() -> None:
    import io

    import matplotlib.image as mpimg

    # 1,600 blocks on 8 rows, about 3 px each (too narrow for outlines), painted once the plan
    # counts as huge: the image and the polygons differ only where a block edge cuts a pixel
    tl = scaled(1_600, ranks=8)
    lay = build_layout(tl)
    painted = figure_from_layout(lay, FigureOptions(rasterize_above=1_000))
    drawn = figure_from_layout(lay, FigureOptions())
    assert painted.axes[0].images and not drawn.axes[0].images
    a = mpimg.imread(io.BytesIO(image_bytes(painted, "png")))
    c = mpimg.imread(io.BytesIO(image_bytes(drawn, "png")))
    assert a.shape == c.shape
    differ = np.abs(a - c).max(axis=2) > 0.05
    assert 0 < differ.sum() and differ.mean() < 0.03  # 1.2% when written: pixels a block edge cuts
