"""Boundaries of the renderers (``pptl/render``, the figure layout aside) that hand-written mutants
(``/work/wt/_mutants/wave2_render.py``) showed no test held: colours and tags past the palette's
length, title numbers at 1e4 and 1e9, rows of ten ranks and more, bucket and micro-batch 0, the
terminal's exact fits (a label as wide as its run, the axis's words, the legend's line, the order
grid's row), the HTML's tick thinning at exactly its maximum, its size limits, hover and label
fitting, the PNG's least size, label choice and a smaller --font-size, the Pareto front's ties,
compare's and explain's figures, and the MoE figure's packing, reloads and legend columns.

Every expected value is worked out by hand in the test's docstring or comments, from the semantics
the module docstrings state, not read off the code's output.
"""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pptl.compare import Comparison, compare_timelines
from pptl.errors import InputError
from pptl.explain import Explanation, RankSplit
from pptl.render import output_format, parse_window
from pptl.render.base import PALETTE, GridCell, chunk_colour, title_number
from pptl.render.compare import overlay_figure, overlay_html
from pptl.render.diagnose_figure import diagnose_figure
from pptl.render.explain_figure import explain_figure
from pptl.render.html import HTML_WARN_BLOCKS, HtmlOptions, figure_dict, size_warning
from pptl.render.layout import Layout, build_layout
from pptl.render.moe_figure import block_kind, moe_figure
from pptl.render.moe_mpl import MoEDraw, compare_mpl_figure, moe_mpl_figure
from pptl.render.moe_style import order_grid
from pptl.render.mpl import FigureOptions, figure_from_layout, figure_options
from pptl.render.options import RenderOptions, parse_size, resolve_title
from pptl.render.pareto import pareto_figure, pareto_front
from pptl.render.samples import _ev, dualpipe_sample, moe_sample, scaled, weight_update_sample
from pptl.render.terminal import render_text
from pptl.timeline import Event, Timeline, TimelineMeta

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _tl(events: list[Event], family: str = "", pp: int = 0, mbs: int = 0, vpp: int = 1) -> Timeline:
    return Timeline(events, TimelineMeta(family=family, pp=pp, vpp=vpp, microbatches=mbs))


def _f(rank: int, start: float, end: float, mb: int = 0, kind: str = "F", chunk: int = 0, **kw: Any) -> Event:
    return _ev(rank, "compute", kind, start, end, stage=rank, mb=mb, chunk=chunk, **kw)


# ----------------------------------------------------------------------------------------------
# base: colours, tags, titles, rows


def test_extra_kinds_past_the_six_spare_colours_start_again_at_the_first() -> None:
    """Seven kinds the default style does not know (K0..K6, legend in name order) take the six spare
    colours extra.0..extra.5 in turn; the seventh wraps to extra.0, as "i % 6" says."""
    tl = _tl([_ev(0, "compute", f"K{i}", i, i + 1) for i in range(7)])
    cats = build_layout(tl, "default").categories
    assert [c.label for c in cats] == [f"K{i}" for i in range(7)]
    assert [c.colours for c in cats] == [(f"extra.{i}",) for i in (0, 1, 2, 3, 4, 5, 0)]


def test_seed_styles_wrap_their_spare_colours_too() -> None:
    """DualPipe's and the weight update's legends give unknown kinds extra.0..extra.5 and wrap the
    seventh to extra.0: there is no extra.6 (PALETTE has six spares), so no KeyError drawing it."""
    assert "extra.5" in PALETTE and "extra.6" not in PALETTE
    tl = _tl([_ev(0, "compute", f"K{i}", i, i + 1) for i in range(7)], family="dualpipe", pp=1)
    dp = [c for c in build_layout(tl, "dualpipe").categories if c.key.startswith("kind:")]
    assert [c.colours[0] for c in dp] == ["extra.0", "extra.1", "extra.2", "extra.3", "extra.4", "extra.5", "extra.0"]
    wu = [c for c in build_layout(tl, "weight-update").categories if c.key.startswith("kind:")]
    assert [c.colours[0] for c in wu] == [c.colours[0] for c in dp]


def test_chunk_shades_cycle_through_five_and_wrap_at_the_sixth() -> None:
    """Chunk c >= 1 takes shade ((c - 1) mod 5) + 1: chunks 1..5 shades c1..c5, chunk 6 c1 again,
    chunk 7 c2; chunk 0 is the base colour."""
    assert [chunk_colour("forward", c) for c in range(8)] == [
        "forward", "forward.c1", "forward.c2", "forward.c3", "forward.c4", "forward.c5", "forward.c1", "forward.c2"]


def test_chunk_tags_take_primes_up_to_chunk_four_then_its_number() -> None:
    """Without colour, chunk c of F is tagged F (c = 0), f, f', f'', f''' (c = 1..4: c - 1 primes),
    then f5: past four the number."""
    tl = _tl([_f(0, c, c + 1, chunk=c) for c in range(6)])
    tags = {c.key: c.tag for c in build_layout(tl, "default").categories}
    assert [tags["F"]] + [tags[f"F.c{c}"] for c in range(1, 6)] == ["F", "f", "f'", "f''", "f'''", "f5"]


def test_title_numbers_have_no_exponent_from_9999_5_up_to_1e9() -> None:
    """Four significant digits below 1e4 (9999.4 -> 9999); from 9999.5 those digits round to 10000,
    written whole, not "1e+04" (the bug: a makespan of 9999.7 was titled "makespan=1e+04"); whole
    numbers up to just under 1e9 (999,999,999.7 rounds to 1000000000); 1e9 itself is "1e+09"."""
    assert title_number(9999.4) == "9999"
    assert title_number(9999.5) == "10000"
    assert title_number(9999.7) == "10000"
    assert title_number(-9999.7) == "-10000"
    assert title_number(10000.0) == "10000"
    assert title_number(999_999_999.7) == "1000000000"
    assert title_number(1e9) == "1e+09"
    tl = _tl([_f(0, 0.0, 9999.7)], pp=1, mbs=1)
    assert "makespan=10000 " in build_layout(tl, "default").title


def test_default_rows_put_rank_ten_after_rank_nine() -> None:
    """Twelve ranks, one op each: rows rank 0, 1, ..., 11 in numeric order (as text, 10 and 11 would
    come between 1 and 2)."""
    tl = _tl([_f(r, r, r + 1) for r in range(12)])
    assert [r.spec.label for r in build_layout(tl, "default").rows] == [f"rank {r}" for r in range(12)]


def test_default_style_names_bucket_zero() -> None:
    """An op of a kind the default style does not know, with no micro-batch but bucket 0, is labelled
    by its label then its bucket: ("H2D", "b0"); bucket 0 is a bucket (only -1 means none)."""
    tl = _tl([_ev(0, "h2d", "H2D", 0, 1, bucket=0, label="H2D"), _ev(0, "h2d", "H2D", 1, 2, bucket=1, label="H2D")])
    assert build_layout(tl, "default").blocks.texts == [("H2D", "b0"), ("H2D", "b1")]


# ----------------------------------------------------------------------------------------------
# terminal


def _four_ops() -> Timeline:
    """Rank 0: F0 0-1, F1 1-2, B0 2-3.5, B1 3.5-5 (no idle: bubble 0.0%)."""
    return _tl([_f(0, 0, 1, 0), _f(0, 1, 2, 1), _f(0, 2, 3.5, 0, "B"), _f(0, 3.5, 5, 1, "B")], pp=1, mbs=2)


def test_terminal_exact_fits_at_21_columns() -> None:
    """At 21 columns: the label column is 3 wide ("r0" padded to the least 3), the bubble column 7,
    so 21 - 3 - 1 - 7 = 10 cells for a span of 5: 2 cells per unit.

    - F0 and F1 take 2 cells each and their plain text "F0"/"F1" is exactly 2 wide: it is drawn
      (a text fits when it is as wide as its run, not only when narrower);
    - B0 and B1 take 3 cells: "B0" with one cell to spare, which goes after it (pad // 2 = 0 before);
    - the axis: "0" and "5" leave a gap of 10 - 2 = 8 = len("time →") + 2, just room for the words
      with a space each side: "0 time → 5";
    - the legend "F=Forward" (9) + 2 + "B=Backward" (10) = 21 = the width: one line."""
    lines = render_text(_four_ops(), width=21).splitlines()
    assert lines[1] == "r0  F0F1B0 B1    0.0%"
    assert lines[2] == "    0 time → 5"
    assert lines[3] == "F=Forward  B=Backward"
    assert len(lines) == 4


def test_title_counts_chunks_per_rank_from_the_stages_run() -> None:
    """Two ranks running stages 0..3 (two chunks each, a V shape) under a meta that says vpp 1 (a
    timeline written before its meta said so): the title says vpp=2 = 4 stages // pp 2."""
    ev = [_ev(r, "compute", "F", s, s + 1, stage=st, mb=0, chunk=s)
          for s, (r, st) in enumerate([(0, 0), (1, 1), (1, 2), (0, 3)])]
    title = build_layout(_tl(ev, pp=2, mbs=1), "default").title
    assert " pp=2 vpp=2 " in title


def test_terminal_order_grid_row_that_fits_exactly_is_drawn_whole() -> None:
    """The order grid's plain cells are "F1 " (flow letter, 1-based number, a space): 3 wide. Its
    row label "r0" and a space leave 20 - 3 = 17 columns at width 20: 17 // 3 = 5 cells fit, so a
    row of 5 steps is drawn whole, without "…"."""
    ev = [_f(0, i, i + 1, m, k) for i, (k, m) in enumerate([("F", 0), ("F", 1), ("F", 2), ("B", 0), ("B", 1)])]
    lines = render_text(_tl(ev, pp=1, mbs=3), width=20, style="moe").splitlines()
    assert lines[-1] == "r0 F1 F2 F3 B1 B2 "


def test_terminal_order_grid_row_too_long_keeps_room_for_the_ellipsis() -> None:
    """At width 21 the row has 21 - 3 = 18 columns: 6 cells of 3 would fill it, so a row of 7 steps
    shows 6 - 1 = 5 and "…" (21 columns at most: 3 + 15 + 1 = 19)."""
    ev = [_f(0, i, i + 1, m, k) for i, (k, m) in enumerate([("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0),
                                                            ("B", 1), ("B", 2)])]
    lines = render_text(_tl(ev, pp=1, mbs=4), width=21, style="moe").splitlines()
    assert lines[-1] == "r0 F1 F2 F3 F4 B1 …"


def test_weight_update_rule_only_between_buffer_rows_and_devices() -> None:
    """The dashed rule goes above Device 0 only where buffer rows (H2D, IPC) sit above it: a timeline
    of broadcasts and reloads alone has no rule; with an H2D copy, Device 0 gets it, Device 1 not."""
    bare = _tl([_ev(r, "comm", "BCAST", 0, 1, bucket=0, peer=0) for r in range(2)], family="weight-update")
    assert [(r.spec.label, r.spec.separator) for r in build_layout(bare, "weight-update").rows] == [
        ("Device 0", False), ("Device 1", False)]
    with_h2d = _tl(bare.events + [_ev(0, "h2d", "H2D", 0, 1, bucket=0)], family="weight-update")
    assert [(r.spec.label, r.spec.separator) for r in build_layout(with_h2d, "weight-update").rows] == [
        ("H2D Buffer", False), ("Device 0", True), ("Device 1", False)]


def test_weight_update_broadcast_side_follows_a_known_peer_before_its_label() -> None:
    """A broadcast's side is src where its peer (the bucket owner) is its own rank; the label is read
    only where the peer is unknown (-1). Rank 1 receiving from owner 0 is dst even where its label
    says "from src 0"; rank 0 (the owner) is src; an unknown peer with "src" in the label is src."""
    ev = [_ev(1, "comm", "BCAST", 0, 1, bucket=0, peer=0, label="from src 0"),
          _ev(0, "comm", "BCAST", 0, 1, bucket=0, peer=0, label="to all"),
          _ev(2, "comm", "BCAST", 0, 1, bucket=0, label="bcast src")]
    lay = build_layout(_tl(ev, family="weight-update"), "weight-update")
    cat_of = {int(lay.blocks.event[i]): lay.categories[int(lay.blocks.cat[i])].key for i in range(len(lay.blocks))}
    assert cat_of == {0: "bcast_dst", 1: "bcast_src", 2: "bcast_src"}


# ----------------------------------------------------------------------------------------------
# options


def test_render_options_take_their_range_ends() -> None:
    """--dpi 30..1200 and --font-size 4..30 points include both ends; one past each is refused; a
    device of 0 is a rank (only negative ones are refused)."""
    for dpi in (30, 1200):
        assert RenderOptions(dpi=dpi).dpi == dpi
    for dpi in (29, 1201):
        with pytest.raises(InputError, match="--dpi"):
            RenderOptions(dpi=dpi)
    for fs in (4.0, 30.0):
        assert RenderOptions(font_size=fs).font_size == fs
    for fs in (3.9, 30.1):
        with pytest.raises(InputError, match="--font-size"):
            RenderOptions(font_size=fs)
    assert RenderOptions(device=0).device == 0
    with pytest.raises(InputError, match="--device"):
        RenderOptions(device=-1)


def test_size_takes_one_and_sixty_inches() -> None:
    """--size W,H takes 1 to 60 inches each, both ends included."""
    assert parse_size("1,1") == (1.0, 1.0)
    assert parse_size("60,60") == (60.0, 60.0)
    assert parse_size("1x60") == (1.0, 60.0)
    for bad in ("0.9,5", "5,60.5"):
        with pytest.raises(InputError, match="--size"):
            parse_size(bad)


def test_title_option_words_in_any_case() -> None:
    """--title none/NONE draws no title, auto/AUTO the summary, "" the style's default (none for a
    seed style, the summary otherwise); any other text is the title as written."""
    assert resolve_title("NONE", False, "summary") == ""
    assert resolve_title("None", False, "summary") == ""
    assert resolve_title("AUTO", True, "summary") == "summary"
    assert resolve_title("", True, "summary") == ""
    assert resolve_title("", False, "summary") == "summary"
    assert resolve_title(" My plan ", True, "summary") == "My plan"


def test_time_window_must_not_be_empty_and_htm_is_html() -> None:
    """--time START:END needs START < END: 5:5 (an empty window) is refused, 5:5.5 taken; a .htm
    (any case) file is written as HTML."""
    assert parse_window("5:5.5") == (5.0, 5.5)
    with pytest.raises(InputError, match="--time"):
        parse_window("5:5")
    assert output_format("fig.htm") == "html"
    assert output_format("FIG.HTM") == "html"


# ----------------------------------------------------------------------------------------------
# HTML


def _ticks(tl: Timeline, most: int, style: str = "default") -> list[str]:
    ticks: list[str] = figure_dict(tl, HtmlOptions(style=style), max_ticks=most)["layout"]["yaxis"]["ticktext"]
    return ticks


def test_html_labels_every_row_up_to_exactly_the_most_ticks() -> None:
    """Four rank rows: at most 4 ticks labels all four; at most 3 labels every ceil(4 / 3) = 2nd
    row (ranks 0 and 2), never more than the most."""
    tl = _tl([_f(r, r, r + 1) for r in range(4)], pp=4, mbs=1)
    assert [t.split(" (")[0] for t in _ticks(tl, 4)] == ["rank 0", "rank 1", "rank 2", "rank 3"]
    assert [t.split(" (")[0] for t in _ticks(tl, 3)] == ["rank 0", "rank 2"]
    assert [t.split(" (")[0] for t in _ticks(tl, 2)] == ["rank 0", "rank 2"]
    assert [t.split(" (")[0] for t in _ticks(tl, 1)] == ["rank 0"]


def test_html_row_names_carry_their_idle_percent_and_one_device_its_heading() -> None:
    """Rank 0 busy 0-1 and rank 1 busy 1-4 of a makespan of 4: 75% and 25% idle, rounded to whole
    percent. A MoE timeline of one device: its first row carries the "Device 0" heading (the first
    row of a group, as there is none before it), the next rows not."""
    tl = _tl([_f(0, 0, 1), _f(1, 1, 4)], pp=2, mbs=1)
    assert _ticks(tl, 200) == ["rank 0 (75% idle)", "rank 1 (25% idle)"]
    moe = moe_sample(pp=1, steps=2)
    ticks = _ticks(moe, 200, "moe")
    assert ticks[0].startswith("<b>Device 0</b> · Computation (")
    assert ticks[1:] == ["Communication", "Offload"]


def test_html_size_limits_at_exactly_their_values() -> None:
    """The DualPipe sample draws 10 blocks (9 compute ops, the F&B one as two halves; its SEND has no
    row): a limit of 10 draws it, 9 refuses. Exactly HTML_WARN_BLOCKS (20,000) blocks give no
    warning: only more do (scaled(20000, ranks=4): 2 x 2500 micro-batches x 4 ranks)."""
    assert len(figure_dict(dualpipe_sample(), HtmlOptions(max_blocks=10))["data"]) > 0
    with pytest.raises(InputError, match="above the HTML limit of 9"):
        figure_dict(dualpipe_sample(), HtmlOptions(max_blocks=9))
    lay = build_layout(scaled(HTML_WARN_BLOCKS, ranks=4))
    assert len(lay.blocks) == HTML_WARN_BLOCKS
    assert size_warning(lay) is None


def test_html_outlines_blocks_up_to_5000_and_drops_them_above() -> None:
    """Up to 5000 blocks each bar has a 0.5 px outline; above, none (a plan that big draws faster
    without): scaled(5000, ranks=5) is 2 x 500 x 5 = 5000 blocks; scaled(5010, ranks=5) 2 x 501 x 5."""
    def widths(tl: Timeline) -> set[float]:
        return {t["marker"]["line"]["width"] for t in figure_dict(tl)["data"] if t["name"] != "Idle (bubble)"}
    assert widths(scaled(5000, ranks=5)) == {0.5}
    assert widths(scaled(5010, ranks=5)) == {0.0}


def test_html_block_text_fits_at_exactly_its_width() -> None:
    """A block's text is the first candidate whose 7 px per character plus 6 px fit its width at
    1100 px for the span; else the shortest, last. Span 0-110: 10 px per unit. An unknown kind's
    candidates are (label, bucket): "H2D" needs 3 x 7 + 6 = 27 px, the block 0-2.7 is 27 px: "H2D".
    The block 2.7-4.5 (18 px) holds neither "H2D" nor "b1" (20 px): the shortest, "b1"."""
    ev = [_ev(0, "h2d", "H2D", 0, 2.7, bucket=0, label="H2D"), _ev(0, "h2d", "H2D", 2.7, 4.5, bucket=1, label="H2D"),
          _ev(0, "compute", "F", 4.5, 110, mb=0)]
    bars = [t for t in figure_dict(_tl(ev))["data"] if t["name"] == "H2D"]
    assert bars[0]["text"] == ["H2D", "b1"]


def test_html_hover_names_zero_ids_and_lists_exactly_four_waits() -> None:
    """Hover rows: stage 0 and micro-batch 0 are numbers, not "-"; four waits (the most listed)
    are all listed, without a "(+0 more)"; five list four and "(+1 more)". A weight update's copy
    names bucket 0 and half 0."""
    ev = [_f(0, 0, 1, 0, waits_on=("a", "b", "c", "d")), _f(0, 1, 2, 1, waits_on=("a", "b", "c", "d", "e")),
          _ev(0, "ipc", "COPY", 2, 3, bucket=0, half=0)]
    data = figure_dict(_tl(ev))["data"]
    rows = {c[0]: c for t in data if "customdata" in t for c in t["customdata"]}
    first = rows[ev[0].op]
    assert (first[2], first[4]) == (0, "0")
    assert first[8] == "a<br>  b<br>  c<br>  d"
    assert rows[ev[1].op][8] == "a<br>  b<br>  c<br>  d<br>  (+1 more)"
    assert rows[ev[2].op][4] == "- · bucket 0 half 0"


def test_html_time_axis_of_zero_length_ops_spans_one_unit() -> None:
    """Every op zero-length at t = 3: the plan has no span, so the time axis shows 3 to 3 + 1
    rather than an empty range; an empty timeline 0 to 1."""
    tl = _tl([_ev(0, "compute", "F", 3, 3, mb=0), _ev(1, "compute", "F", 3, 3, mb=0)])
    assert figure_dict(tl)["layout"]["xaxis"]["range"] == [3.0, 4.0]
    assert figure_dict(_tl([]))["layout"]["xaxis"]["range"] == [0.0, 1.0]


# ----------------------------------------------------------------------------------------------
# matplotlib


def _two_ops() -> Timeline:
    """Rank 0: F0 0-1 and F1 1-4 (a narrow and a wide block, both wide enough for a label)."""
    return _tl([_f(0, 0, 1, 0), _f(0, 1, 4, 1)], pp=1, mbs=2)


def _least_size(lay: Layout, size: tuple[float, float]) -> tuple[float, float]:
    with pytest.raises(InputError, match="it needs at least --size") as err:
        figure_from_layout(lay, FigureOptions(size=size))
    w, h = str(err.value).rsplit("--size ", 1)[1].split(",")
    return float(w), float(h)


def test_png_takes_exactly_the_least_size_its_error_names() -> None:
    """A --size too small is refused naming the least size that draws; that size itself draws (the
    least is a size that fits, not one more than it), in height and in width."""
    lay = build_layout(_two_ops())
    for asked in ((7.0, 1.0), (1.0, 5.0)):
        w, h = _least_size(lay, asked)
        least = (w, max(h, asked[1]))
        fig = figure_from_layout(lay, FigureOptions(size=least))
        assert tuple(fig.get_size_inches()) == least


def test_png_keeps_the_widest_blocks_labels_when_labels_are_capped() -> None:
    """Both blocks hold their number ("0" on 0-1, "1" on 1-4); with at most one label, the widest
    block keeps its own: "1" at its middle, 2.5."""
    lay = build_layout(_two_ops())
    def labels(opt: FigureOptions) -> list[tuple[str, float]]:
        ax = figure_from_layout(lay, opt).axes[0]
        return [(t.get_text(), float(t.get_position()[0])) for t in ax.texts if not t.get_text().startswith("bubble")]
    assert labels(FigureOptions()) == [("0", 0.5), ("1", 2.5)]
    assert labels(FigureOptions(max_labels=1)) == [("1", 2.5)]


def test_png_options_keep_a_smaller_font_and_notes_off() -> None:
    """--font-size 4 (under the 6-pt print minimum) is the user's call: the least font of derived
    text becomes 4, not 6; at 8 it stays 6. --notes off turns a default style's bubble notes off; a
    seed style's are off unless asked."""
    lay = build_layout(_two_ops())
    assert figure_options(RenderOptions(font_size=4), lay).min_font == 4
    assert figure_options(RenderOptions(font_size=8), lay).min_font == 6
    assert figure_options(RenderOptions(notes=False), lay).notes is False
    assert figure_options(RenderOptions(), lay).notes is True
    dp = build_layout(dualpipe_sample())
    assert figure_options(RenderOptions(), dp).notes is False
    assert figure_options(RenderOptions(notes=True), dp).notes is True


# ----------------------------------------------------------------------------------------------
# the Pareto figure


def test_pareto_front_leaves_out_ties_and_the_slower_of_equal_memory() -> None:
    """(memory, step): (1, 5) and (2, 5) take the same time, the second with more memory: only the
    first is on the front. (1, 6) and (1, 5) use the same memory: only the faster, index 1. A point
    both smaller and faster than all others is the front alone."""
    assert pareto_front([(1.0, 5.0), (2.0, 5.0)]) == [0]
    assert pareto_front([(1.0, 6.0), (1.0, 5.0)]) == [1]
    assert pareto_front([(3.0, 2.0), (1.0, 9.0), (2.0, 4.0), (2.5, 4.0)]) == [1, 2, 0]
    assert pareto_front([]) == []


def _tune_result(mbs: list[int]) -> SimpleNamespace:
    results = [SimpleNamespace(step=10.0 * (k + 1), max_peak=5.0 + k, label=f"1f1b m{m}",
                               structure=SimpleNamespace(family="1f1b", microbatches=m)) for k, m in enumerate(mbs)]
    return SimpleNamespace(results=results, limit=None, best=results[0])


def test_pareto_figure_compares_per_micro_batch_only_across_counts() -> None:
    """Candidates of one micro-batch count (8, 8) are compared by step time; of two counts (8, 16)
    by step time per micro-batch (the ranking's key), as the y label says."""
    one = pareto_figure(_tune_result([8, 8])).axes[0]
    assert one.get_ylabel() == "predicted step time (unit)"
    assert [float(y) for y in one.collections[0].get_offsets()[:, 1]] == [10.0, 20.0]
    two = pareto_figure(_tune_result([8, 16])).axes[0]
    assert two.get_ylabel() == "predicted step time per micro-batch (unit)"
    assert [float(y) for y in two.collections[0].get_offsets()[:, 1]] == [10.0 / 8, 20.0 / 16]


# ----------------------------------------------------------------------------------------------
# compare's overlay


def _compared() -> Comparison:
    """Twelve ranks, one F each (rank r: planned r to r + 1, measured r to r + 0.5), and a RELOAD on
    rank 0 (planned 20-21, measured 20-20.5), both in ms: makespans 21 planned, 20.5 measured."""
    def tl(d: float, source: str) -> Timeline:
        ev = [_f(r, r, r + d) for r in range(12)] + [_ev(0, "compute", "RELOAD", 20, 20 + d)]
        return Timeline(ev, TimelineMeta(family="1f1b", pp=12, microbatches=1, units="ms", source=source))
    return compare_timelines(tl(1.0, "planned"), tl(0.5, "measured"))


def test_compare_overlay_rows_legend_and_signed_error() -> None:
    """Rows rank 0..11 in numeric order; the legend names the kinds it knows first (F: "Forward"),
    then others by name (RELOAD); the makespan error (21 - 20.5) / 20.5 = +2.4% keeps its sign."""
    ax = overlay_figure(_compared()).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"rank {r} compute" for r in range(12)]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["Forward", "RELOAD"]
    assert ax.get_title().endswith("makespan 20.5 vs planned 21 ms (+2.4%)")


def test_compare_page_counts_the_ops_it_lists() -> None:
    """13 ops matched: the top 20 lists all 13 ("13 of 13"), the top 5 lists 5 of 13."""
    cmp = _compared()
    assert "largest end-time errors (13 of 13 ops)" in overlay_html(cmp, top=20)
    assert "largest end-time errors (5 of 13 ops)" in overlay_html(cmp, top=5)


# ----------------------------------------------------------------------------------------------
# explain's and diagnose's figures


def test_explain_figure_labels_parts_over_six_percent_only() -> None:
    """Makespan 100: busy 78 ("78%"), a bubble of 6 and a transfer of 6 (exactly 6%: too thin for a
    label, only parts over 6% get one), a host gap of 10 ("10%", white on the host colour, as on
    busy)."""
    x = Explanation(units="unit", makespan=100.0, late=[], path=[],
                    ranks=[RankSplit(0, busy=78.0, idle=22.0, bubble=6.0, late_input=0.0, transfer=6.0, host=10.0,
                                     imbalance=0.0)])
    texts = [(t.get_text(), t.get_color()) for t in explain_figure(x).axes[0].texts]
    assert texts == [("78%", "white"), ("10%", "white")]


# ----------------------------------------------------------------------------------------------
# the MoE seed figure


def test_a_reload_from_the_first_cooldown_instant_is_a_load() -> None:
    """The cooldown starts at 5: a reload starting at 5 is already in it ("Load", its own colour),
    one starting at 4.9 is an "Onload" beside the forwards."""
    at = _ev(0, "h2d", "ONLOAD", 5.0, 6.0, mb=0, flow="B")
    before = _ev(0, "h2d", "ONLOAD", 4.9, 6.0, mb=1, flow="B")
    assert block_kind(at, "Onload", 5.0) == ("load", "moe.load")
    assert block_kind(before, "Onload", 5.0) == ("onload", "moe.onload")


def test_moe_close_up_puts_a_copy_that_starts_as_another_ends_on_its_track() -> None:
    """The sample's steady close-up (rank 1, step 3 at 9-12.9): the Onload 9.2-10.0 ends exactly when
    the Offload 10.0-11.2 starts, so they share the Offload row's one track (tracks 1, 1, 1)."""
    fig_data = moe_figure(moe_sample())
    assert fig_data is not None
    steady = next(s for s in fig_data.sections if s.key == "steady")
    copies = [(b.label, b.start, b.end, b.track) for b in steady.blocks if b.row == "Offload"]
    assert copies == [("Onload", 9.2, 10.0, 0), ("Offload", 10.0, 11.2, 0)]
    assert steady.tracks == (1, 1, 1)


def test_moe_legend_has_five_columns_from_nine_inches() -> None:
    """The legend takes 3 columns under 9 inches and 5 from 9 on: at 8.9 three, at exactly 9 five."""
    fig_data = moe_figure(moe_sample())
    assert fig_data is not None
    assert moe_mpl_figure(fig_data, MoEDraw(width=8.9)).legends[0]._ncols == 3
    assert moe_mpl_figure(fig_data, MoEDraw(width=9.0)).legends[0]._ncols == 5


def test_moe_figure_takes_exactly_the_least_size_its_error_names() -> None:
    """A height too small is refused naming the least size; that size draws."""
    fig_data = moe_figure(moe_sample())
    assert fig_data is not None
    with pytest.raises(InputError, match="it needs at least --size") as err:
        moe_mpl_figure(fig_data, MoEDraw(width=7.0, height=1.0))
    w, h = (float(v) for v in str(err.value).rsplit("--size ", 1)[1].split(","))
    assert tuple(moe_mpl_figure(fig_data, MoEDraw(width=w, height=h)).get_size_inches()) == (w, h)


def test_moe_warmup_comparison_axis_starts_at_zero() -> None:
    """Both plans of the comparison span 0 to 12.9: the shared time axis is ticked from its start,
    0, in steps of 2.5 (six ticks at most) up to 12.5."""
    plus, plain = moe_figure(moe_sample()), moe_figure(moe_sample(vpp=1))
    assert plus is not None and plain is not None
    fig = compare_mpl_figure(plain, plus, MoEDraw())
    assert [t.get_text() for t in fig.axes[-1].get_xticklabels()] == ["0", "2.5", "5", "7.5", "10", "12.5"]


def test_diagnose_figure_names_cycle_ops_alternately_above_and_below() -> None:
    """Two ranks, two P2P calls each, all four in the wait-for cycle, placed by issue order (op k at
    k to k + 0.9, centre k + 0.45). Each rank's names alternate: its first above the row (rank r at
    y = r - 0.42), its second below (r + 0.42), so neighbours do not overprint. A name is the call's
    kind and micro-batch: "r0/send/SEND_F s0 mb3 ->r1" -> "SEND_F mb3"."""
    a, b = "r0/send/SEND_F s0 mb3 ->r1", "r0/recv/RECV_B s0 mb2 <-r1"
    c, d = "r1/send/SEND_B s1 mb2 ->r0", "r1/recv/RECV_F s1 mb3 <-r0"
    def op(label: str, index: int) -> SimpleNamespace:
        return SimpleNamespace(label=label, index=index, done=False)
    diag: Any = SimpleNamespace(ops={0: (op(a, 0), op(b, 1)), 1: (op(c, 0), op(d, 1))}, cycle_ops=((a, d), (c, b)),
                                cycle=(("x", "waits on rank 0"), ("y", "waits on rank 1")), cycle_ranks=(0, 1),
                                hung=True, no_completion=False)
    texts = [(t.get_text(), *(round(float(v), 6) for v in t.get_position()))
             for t in diagnose_figure(diag).axes[0].texts if t.get_text()]
    assert texts == [("SEND_F mb3", 0.45, -0.42), ("RECV_B mb2", 1.45, 0.42),
                     ("SEND_B mb2", 0.45, 0.58), ("RECV_F mb3", 1.45, 1.42)]


def test_terminal_tags_only_labels_that_do_not_name_their_kind() -> None:
    """Without colour a block's text gets its kind's tag unless the text already names the kind: the
    weight update's "H2D b0" stays as it is (legend H2D), its copy's "b0" becomes "C:b0"; the MoE
    forward's "Attn" becomes "F:Attn" (legend "Forward pass")."""
    wu = render_text(weight_update_sample(ranks=2, buckets=2), width=100)
    assert "H2D b0" in wu and "H:H2D" not in wu and "C:b0" in wu
    moe = render_text(moe_sample(pp=1, steps=2), width=100)
    assert "F:Attn" in moe


def test_terminal_split_block_of_odd_width_keeps_its_last_cell() -> None:
    """F0 0-1.25 and an overlapped FB 1.25-2.5 at 21 columns: 10 cells for a span of 2.5, 5 cells
    each. In colour, the FB's text " 1/0 " is painted in two slices, 5 // 2 = 2 cells of forward
    and the other 3 of backward: all 5 cells drawn, so the row is 21 wide like the others."""
    tl = _tl([_f(0, 0, 1.25, 0), _f(0, 1.25, 2.5, 1, "FB", pair=(0, 0, 0))], pp=1, mbs=2)
    lines = [_ANSI.sub("", line) for line in render_text(tl, width=21, colour_output=True).splitlines()]
    assert lines[1] == "r0  " + "  0  " + " 1/0 " + "   0.0%"


def test_moe_rows_rule_between_devices_and_skip_zero_time_transfers() -> None:
    """Devices 2 and 3 (a measured run need not start at rank 0), a forward each and a PP send and
    receive of no duration: the rows are the two Computation rows only (zero-time transfers add no
    Communication row), and the dashed rule goes between the devices, not above the first."""
    tl = _tl([_ev(2, "compute", "F", 0, 1, stage=0, mb=0, flow="F"), _ev(2, "send", "SEND", 1, 1, stage=0, mb=0, flow="F"),
              _ev(3, "recv", "RECV", 1, 1, stage=1, mb=0, flow="F"), _ev(3, "compute", "F", 1, 2, stage=1, mb=0, flow="F")],
             family="moe", pp=2)
    assert [(r.spec.key, r.spec.separator) for r in build_layout(tl, "moe").rows] == [
        ((2, "Computation"), False), ((3, "Computation"), True)]


def test_moe_order_grid_caption_and_the_b_halfs_chunk() -> None:
    """The grid says "VPP + 1 warmup" only under interleaving (vpp 2), "Order of work" for vpp 1. An
    FB cell's B half belongs to stage 2's chunk: with pp 2 and looped placement, 2 // 2 = chunk 1,
    drawn in chunk 1's backward shade; numbers 1-based (mb 4 -> "5", mb 1 -> "2")."""
    assert order_grid(moe_sample(vpp=1)) is not None
    assert [order_grid(moe_sample(vpp=v)).title for v in (1, 2)] == ["Order of work", "VPP + 1 warmup"]  # type: ignore[union-attr]
    grid = order_grid(_tl([_ev(0, "compute", "FB", 0, 1, stage=0, mb=4, chunk=0, pair=(2, 1, 0))], "moe", 2, vpp=2))
    assert grid is not None
    assert grid.rows == [("r0", [GridCell(("moe.forward", "moe.backward.c1"), ("5", "2"))])]


@pytest.mark.parametrize("name,title", [
    ("interleaved_g13.partial.json",
     "no wait-for cycle: rank 1's compute held in a send rank 0 receives too late (sync-send)"),
    ("interleaved_g13_alone_first_f.partial.json",
     "no wait-for cycle: rank 1's host waited for its GPU, where a message waited for rank 0")])
def test_diagnose_figure_names_what_held_a_hang_without_a_cycle(name: str, title: str) -> None:
    # the two real pptl run hangs with no wait-for cycle (tests/data/hangs_pptl_run): the picture alone says
    # which rank held the run and on whom, as the text's first line does
    from pptl.diagnose import diagnose_timeline
    from pptl.formats.loader import load_any

    data = Path(__file__).resolve().parent / "data" / "hangs_pptl_run"
    plan = "interleaved_g13_plan.json" if name == "interleaved_g13.partial.json" else "interleaved_g13_alone_plan.json"
    diag = diagnose_timeline(load_any(str(data / name)).timeline, load_any(str(data / plan)).schedule)
    assert diag.cause.ranks == (1, 0)
    assert diagnose_figure(diag).axes[0].get_title(loc="left") == title
