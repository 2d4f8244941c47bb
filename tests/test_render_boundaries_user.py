"""Figures looked at as a user would, at boundaries nobody built them on: each test pins a defect
seen in a rendered PNG or HTML page (and fails without its fix)."""
from __future__ import annotations

from pptl.compare import compare_timelines
from pptl.render.layout import build_layout
from pptl.timeline import Event, Timeline, TimelineMeta


def _tl(rows: list[tuple], units: str = "ms", source: str = "measured", pp: int = 2) -> Timeline:
    """rows: (op, rank, lane, kind, start, end, stage)."""
    events = [Event(op=r[0], rank=r[1], lane=r[2], kind=r[3], start=r[4], end=r[5], stage=r[6], mb=0)
              for r in rows]
    return Timeline(events, TimelineMeta(source=source, units=units, family="1f1b", pp=pp))


# A measured 1F1B step: rank 0 sends (its forward's output) before it receives (the gradient back);
# the ranks after it receive before they send. `pptl run` timelines look like this.
_MEASURED = [
    ("f0", 0, "compute", "F", 0, 1, 0), ("s0", 0, "send", "SEND", 1, 2, 0),
    ("r1", 1, "recv", "RECV", 0.5, 2, 1), ("f1", 1, "compute", "F", 2, 3, 1),
    ("s1", 1, "send", "SEND", 3, 4, 1), ("r2", 2, "recv", "RECV", 1, 4, 2),
    ("f2", 2, "compute", "F", 4, 5, 2), ("b2", 2, "compute", "B", 5, 7, 2),
    ("s2", 2, "send", "SEND", 7, 8, 2), ("rb1", 1, "recv", "RECV", 4, 8, 1),
    ("b1", 1, "compute", "B", 8, 10, 1), ("sb1", 1, "send", "SEND", 10, 11, 1),
    ("rb0", 0, "recv", "RECV", 2.5, 11, 0), ("b0", 0, "compute", "B", 11, 13, 0),
]


def test_measured_sub_lanes_are_in_one_order_on_every_rank():
    # before: `pptl render timeline.json` listed "rank 0 send" above "rank 0 recv" but "rank 1 recv"
    # above "rank 1 send" (each rank's own first use), so the eye matched rank 0's sends to the
    # others' receives; every rank now lists its sub-lanes in one order
    lay = build_layout(_tl(_MEASURED, pp=3))
    labels = [r.spec.label for r in lay.rows]
    assert [r.spec.rank for r in lay.rows] == sorted(r.spec.rank for r in lay.rows)
    orders = {}
    for r in lay.rows:
        orders.setdefault(r.spec.rank, []).append(r.spec.key[1])
    assert orders[0][0] == "compute"
    assert len({tuple(o) for o in orders.values() if len(o) == 3}) == 1, labels


def test_compare_legend_names_kinds_in_words_once_per_colour():
    # before: `pptl compare plan.json run.json -o cmp.png` had the legend "B  F  RECV  SEND": raw kind
    # codes, and two grey entries (SEND and RECV share the comm colour) for one kind of bar
    import matplotlib.colors as mc

    from pptl.render.compare import overlay_figure

    planned = _tl([r for r in _MEASURED], units="ms", source="planned", pp=3)
    cmp = compare_timelines(planned, _tl(_MEASURED, pp=3))
    fig = overlay_figure(cmp)
    legend = fig.axes[0].get_legend()
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels == ["Forward", "Backward", "Send / Recv"]
    colours = [mc.to_hex(h.get_facecolor()) for h in legend.legend_handles]
    assert len(set(colours)) == len(colours)


def test_html_of_thousands_of_ranks_labels_a_bounded_number_of_rows():
    # before: `pptl render` of a 2000-rank plan wrote an HTML page with 2000 y tick labels that
    # chromium had not drawn after two minutes (1000 labels: 41 s; plotly measures each label);
    # now it labels every k-th row, as the PNG does, and the page draws in seconds
    from pptl.render.html import figure_dict

    n = 2000
    rows = [(f"f{r}", r, "compute", "F", r, r + 1, r) for r in range(n)]
    fig = figure_dict(_tl(rows, units="unit", source="planned", pp=n))
    y = fig["layout"]["yaxis"]
    assert len(y["ticktext"]) == len(y["tickvals"]) <= 200
    assert y["ticktext"][0].startswith("rank 0 ") and y["ticktext"][1].startswith("rank 10 ")
    labelled = [int(t.split()[1]) for t in y["ticktext"]]
    assert labelled == sorted(labelled)  # ranks in numeric order, top to bottom
    assert y["range"] == [float(n), 0.0]  # every row is still drawn


def test_html_of_a_few_ranks_labels_every_row():
    from pptl.render.html import figure_dict

    rows = [(f"f{r}", r, "compute", "F", r, r + 1, r) for r in range(12)]
    y = figure_dict(_tl(rows, units="unit", source="planned", pp=12))["layout"]["yaxis"]
    assert [t.split(" (")[0] for t in y["ticktext"]] == [f"rank {r}" for r in range(12)]


def test_compare_legend_stays_off_the_bars():
    # before: the legend sat inside the axes at the upper right, over rank 0's planned outlines and
    # measured bars (a 2-rank run's figure showed it across the last backward's outline); it now
    # sits above the plot, under the title, and overlaps neither
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from pptl.render.compare import overlay_figure

    planned = _tl(_MEASURED, units="ms", source="planned", pp=3)
    fig = overlay_figure(compare_timelines(planned, _tl(_MEASURED, pp=3)))
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    ax = fig.axes[0]
    leg = ax.get_legend().get_window_extent(renderer)
    plot = ax.get_window_extent(renderer)
    title = ax.title.get_window_extent(renderer)
    assert leg.y0 >= plot.y1 - 0.5, (leg, plot)  # wholly above the plot area
    assert not leg.overlaps(title), (leg, title)
    full = fig.bbox
    assert full.x0 <= leg.x0 and leg.x1 <= full.x1 and leg.y1 <= full.y1  # not clipped by the figure
