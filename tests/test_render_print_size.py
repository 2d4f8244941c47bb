"""Paper-ready default figures: every text of every family's default PNG/PDF/SVG figure prints at
6 pt or more when the figure is scaled to a 7-inch column, computed from the figure's real size and
the font size of each drawn text artist (block labels, row names, ticks, legend, notes, grid)."""
from __future__ import annotations

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text

from pptl.demo import default_fixtures_dir
from pptl.planning import load_timeline, plain_counterpart
from pptl.render import static_figure
from pptl.render.options import RenderOptions

COLUMN_IN, MIN_PT = 7.0, 6.0
FAMILIES = {  # family -> its example config
    "gpipe": "gpipe.yaml", "1f1b": "1f1b.yaml", "interleaved-1f1b": "interleaved.yaml", "zb-h1": "zb_h1.yaml",
    "zb-h2": "zb_h2.yaml", "zbv": "zbv.yaml", "dualpipe": "dualpipe_seed.yaml", "dualpipev": "dualpipev.yaml",
    "moe-1f1b-overlap": "moe_seed.yaml", "weight-update": "weight_update_seed.yaml",
}


def printed_sizes(fig) -> list[tuple[float, str]]:
    """(points at a 7-inch column, text) of every visible, non-empty text the figure draws."""
    FigureCanvasAgg(fig).draw()  # tick labels exist only once the figure is laid out
    scale = COLUMN_IN / fig.get_size_inches()[0]
    return [(t.get_fontsize() * scale, t.get_text()) for t in fig.findobj(Text)
            if t.get_visible() and t.get_text().strip()]


@pytest.mark.parametrize("family", sorted(FAMILIES), ids=str)
def test_every_label_prints_at_6pt_in_a_7_inch_column(family: str) -> None:
    tl = load_timeline(default_fixtures_dir() / FAMILIES[family])
    assert tl.meta.family == family
    sizes = printed_sizes(static_figure(tl))
    labels = [t for _, t in sizes]
    assert len(labels) > 20 and any(t.isdigit() for t in labels)  # block labels are among them
    small = sorted((round(pt, 2), t) for pt, t in sizes if pt < MIN_PT - 1e-6)
    assert not small, f"{len(small)} texts under {MIN_PT} pt at {COLUMN_IN} in, e.g. {small[:5]}"


def test_moe_warmup_comparison_prints_at_6pt() -> None:
    path = default_fixtures_dir() / "moe_seed.yaml"
    tl = load_timeline(path)
    sizes = printed_sizes(static_figure(tl, compare=plain_counterpart(path)))
    assert min(pt for pt, _ in sizes) >= MIN_PT - 1e-6


def test_a_long_schedule_drops_labels_instead_of_shrinking_them() -> None:
    from pptl.render.samples import scaled

    fig = static_figure(scaled(2_000, ranks=8))
    sizes = printed_sizes(fig)
    assert fig.get_size_inches()[0] == pytest.approx(COLUMN_IN)
    assert min(pt for pt, _ in sizes) >= MIN_PT - 1e-6
    assert sum(t.isdigit() for _, t in sizes) < 250  # 2000 blocks, most far too narrow for a 6-pt number


def test_check_fails_on_a_wide_figure() -> None:
    # The measure itself: the same figure at twice the width with the same fonts prints them at half size.
    tl = load_timeline(default_fixtures_dir() / "1f1b.yaml")
    sizes = printed_sizes(static_figure(tl, RenderOptions(size=(14.0, 3.0))))
    assert min(pt for pt, _ in sizes) < MIN_PT
