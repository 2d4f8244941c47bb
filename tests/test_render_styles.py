"""Figure styles: rows, legend, colours and labels of the default and the three seed styles."""
from __future__ import annotations

from pathlib import Path

import pytest

from pptl.errors import InputError
from pptl.render.layout import build_layout, title_line
from pptl.render.samples import dualpipe_sample, moe_sample, weight_update_sample
from pptl.render.styles import PALETTE, STYLE_NAMES, colour, resolve_style, text_colour
from pptl.schedules import FAMILIES
from pptl.timeline import Event, Timeline, TimelineMeta


def _blocks(lay, kind=None, rank=None):
    """(event, colour, texts, y0, y1) per block, for the events matching kind/rank."""
    out = []
    b = lay.blocks
    for i in range(len(b)):
        e = lay.timeline.events[int(b.event[i])]
        if (kind is None or e.kind == kind) and (rank is None or e.rank == rank):
            out.append((e, b.colour[i], b.texts[i], float(b.y0[i]), float(b.y1[i])))
    return out


_layout = build_layout


# -- selection --------------------------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(FAMILIES), ids=str)
def test_auto_picks_the_family_style(family: str) -> None:
    tl = Timeline([Event("x", 0, "compute", 0, 1, "F")], TimelineMeta(family=family))
    assert resolve_style("auto", tl).name == FAMILIES[family].style


@pytest.mark.parametrize("family", ["", "some-imported-trace", "torch"], ids=["empty", "unknown", "torch"])
def test_auto_falls_back_to_default(family: str) -> None:
    tl = Timeline([], TimelineMeta(family=family))
    assert resolve_style("auto", tl).name == "default"


def test_unknown_style_lists_the_known_ones() -> None:
    with pytest.raises(InputError, match=r"--style: got 'fancy', expected one of auto, default, dualpipe, moe, "
                                         r"weight-update"):
        resolve_style("fancy", Timeline([]))


@pytest.mark.parametrize("name", STYLE_NAMES[1:], ids=str)
def test_every_style_has_its_name(name: str) -> None:
    assert resolve_style(name, Timeline([])).name == name


def test_palette_is_hex_and_text_is_readable() -> None:
    assert all(len(v) == 7 and v.startswith("#") for v in PALETTE.values())
    assert text_colour("dualpipe.backward") == "text.light"  # dark green carries white numbers
    assert text_colour("wu.h2d") == "text.dark"  # white carries black text
    assert colour("#123456") == "#123456"


# -- default ----------------------------------------------------------------------------------


def test_default_rows_skip_lanes_that_never_take_time() -> None:
    tl = Timeline([Event("f", 0, "compute", 0, 1, "F", mb=0), Event("r", 0, "recv", 1, 1, "RECV"),
                   Event("s", 0, "send", 1, 1.5, "SEND", mb=0)], TimelineMeta(family="1f1b", pp=1))
    lay = _layout(tl, "default")
    assert [r.spec.label for r in lay.rows] == ["rank 0", "rank 0 send"]
    assert lay.rows[0].bubble == pytest.approx(0.5 / 1.5)


def test_default_chunks_get_their_own_shade_and_entry() -> None:
    tl = Timeline([Event("a", 0, "compute", 0, 1, "F", mb=0, chunk=0),
                   Event("b", 0, "compute", 1, 2, "F", mb=0, chunk=1)], TimelineMeta(vpp=2))
    lay = _layout(tl, "default")
    assert [c.label for c in lay.categories] == ["Forward (chunk 0)", "Forward (chunk 1)"]
    assert lay.blocks.colour == ["forward", "forward.c1"]
    assert [c.tag for c in lay.categories] == ["F", "f"]


def test_title_states_schedule_pp_vpp_microbatches_makespan_bubble() -> None:
    tl = dualpipe_sample()
    assert title_line(tl) == "dualpipe: pp=2 vpp=1 micro-batches=4 makespan=8 bubble=18.8%"


def test_title_is_worded_by_the_family_style_whatever_style_draws() -> None:
    # weight-update moves buckets, not micro-batches, and has no pipeline bubble: its style says so,
    # and a figure of it drawn in the default style keeps that title.
    tl = weight_update_sample()
    buckets = len({e.bucket for e in tl.events if e.bucket >= 0})
    want = f"weight-update: {tl.meta.pp} devices, {buckets} buckets, makespan={tl.makespan:g}"
    assert title_line(tl) == want
    assert build_layout(tl, "default").title == want
    assert "bubble" not in want and "bubble=" in resolve_style("default", tl).title(tl)


@pytest.mark.parametrize("fixture, wanted", [("moe_seed", True), ("moe_interleaved", False),
                                             ("moe_paired_step", False), ("interleaved", False)])
def test_the_family_style_decides_the_warmup_comparison(fixture: str, wanted: bool) -> None:
    # pptl demo draws the "+1 warmup" comparison where the MoE plan pairs F and B under interleaving.
    from pptl.planning import load_timeline

    tl = load_timeline(Path(__file__).resolve().parent.parent / "fixtures" / f"{fixture}.yaml")
    assert resolve_style("auto", tl).compares_warmup(tl) is wanted
    assert not resolve_style("default", tl).compares_warmup(tl)


# -- DualPipe (seed 004) ----------------------------------------------------------------------


def test_dualpipe_rows_and_legend_follow_seed_004() -> None:
    lay = _layout(dualpipe_sample(), "dualpipe")
    assert [r.spec.label for r in lay.rows] == ["Device 0", "Device 1"]
    assert [c.label for c in lay.categories] == ["Forward", "Backward", "Backward for input",
                                                  "Backward for weights", "Overlapped forward & Backward"]
    assert lay.categories[-1].colours == ("dualpipe.forward", "dualpipe.backward")
    assert lay.style.time_arrow
    assert not any(e.kind == "SEND" for e, *_ in _blocks(lay))  # P2P is not drawn


def test_dualpipe_overlapped_block_is_two_halves_side_by_side_under_one_border() -> None:
    lay = _layout(dualpipe_sample(), "dualpipe")
    halves = _blocks(lay, "FB")
    assert [(c, y0, y1) for _, c, _, y0, y1 in halves] == [("dualpipe.forward", 0.0, 1.0),
                                                           ("dualpipe.backward", 0.0, 1.0)]
    fb = [i for i in range(len(lay.blocks)) if lay.timeline.events[lay.blocks.event[i]].kind == "FB"]
    # the FB op runs 2..5: F takes the left half, B the right half
    assert [(lay.blocks.start[i], lay.blocks.end[i]) for i in fb] == [(2.0, 3.5), (3.5, 5.0)]
    assert lay.frames.tolist() == [[0.0, 0.0, 1.0, 2.0, 5.0]]  # one black border around both halves
    # F half: mb 1 of direction 0 is numbered; the B half belongs to direction 1: no number (as the seed).
    assert [t for _, _, t, _, _ in halves] == [("1",), ()]
    stacked = build_layout(dualpipe_sample(), "dualpipe", split="stack", reverse_ids=True)
    halves = _blocks(stacked, "FB")
    assert [(c, y0, y1) for _, c, _, y0, y1 in halves] == [("dualpipe.forward", 0.0, 0.5),
                                                           ("dualpipe.backward", 0.5, 1.0)]
    assert [t for _, _, t, _, _ in halves] == [("1",), ("0",)]  # --reverse-ids numbers direction 1 too


def test_dualpipe_numbers_only_the_forward_direction() -> None:
    lay = _layout(dualpipe_sample(), "dualpipe")
    texts = {(e.rank, e.kind, e.direction, e.stage): t for e, _, t, _, _ in _blocks(lay)}
    assert texts[(0, "F", 0, 0)] == ("0",)
    assert texts[(1, "F", 1, 0)] == ()
    assert texts[(1, "I", 0, 1)] == ("0",)


# -- MoE (seeds 000-002) ----------------------------------------------------------------------


def test_moe_rows_per_device() -> None:
    lay = _layout(moe_sample(), "moe")
    assert [(r.spec.group, r.spec.label) for r in lay.rows] == [
        ("Device 0", "Computation"), ("Device 0", "Communication"), ("Device 0", "Offload"),
        ("Device 1", "Computation"), ("Device 1", "Communication"), ("Device 1", "Offload")]
    assert [r.spec.separator for r in lay.rows] == [False, False, False, True, False, False]


@pytest.mark.parametrize(("kind", "flow", "want"), [
    ("ATTN", "F", "moe.forward"), ("ATTN", "B", "moe.backward"), ("MLP", "B", "moe.backward"),
    ("WGRAD", "B", "moe.backward"), ("A2A_DISPATCH", "F", "moe.ep"), ("A2A_COMBINE", "B", "moe.ep"),
    ("PP", "F", "moe.pp"), ("OFFLOAD", "F", "moe.offload"), ("ONLOAD", "B", "moe.offload"),
], ids=lambda v: str(v))
def test_moe_colours(kind: str, flow: str, want: str) -> None:
    lay = _layout(moe_sample(), "moe")
    got = {c for e, c, *_ in _blocks(lay, kind) if e.flow == flow}
    assert got == {want}


def test_moe_colours_are_blue_red_green_yellow() -> None:
    def hue(name: str) -> str:
        r, g, b = (int(colour(name)[i:i + 2], 16) for i in (1, 3, 5))
        return max((("red", r), ("green", g), ("blue", b)), key=lambda t: t[1])[0] if min(r, g, b) < 0xC0 or \
            abs(r - g) > 40 else "white"

    assert hue("moe.forward") == "blue"
    assert hue("moe.backward") == "red"
    assert hue("moe.pp") == "green"
    r, g, b = (int(colour("moe.ep")[i:i + 2], 16) for i in (1, 3, 5))
    assert r > 0xE0 and g > 0xC0 and b < 0x80  # yellow


def test_moe_blocks_carry_the_figure_labels() -> None:
    lay = _layout(moe_sample(), "moe")
    labels = {t[0] for _, _, t, _, _ in _blocks(lay) if t}
    assert labels == {"Attn", "MLP", "WGrad", "EP-D", "EP-C", "PP", "Offload", "Onload"}
    assert [c.label for c in lay.categories] == ["Forward pass", "Backward pass", "PP communication",
                                                  "EP dispatch/combine", "Offload / Onload"]


def test_moe_grid_orders_blocks_one_based() -> None:
    lay = _layout(moe_sample(pp=2, steps=3, vpp=2), "moe")
    g = lay.grid
    assert g is not None and g.title == "VPP + 1 warmup"
    assert [name for name, _ in g.rows] == ["r0", "r1"]
    # F of mb 0 alone, then each step overlaps F of mb i with B of mb i-1: split cells.
    cells = g.rows[0][1]
    assert [(c.colours, c.texts) for c in cells] == [
        (("moe.forward",), ("1",)),
        (("moe.forward", "moe.backward"), ("2", "1")),
        (("moe.forward", "moe.backward"), ("3", "2")),
    ]


def test_moe_grid_from_training_ops_uses_chunk_shades() -> None:
    ev = [Event("a", 0, "compute", 0, 1, "F", stage=0, mb=0, chunk=0),
          Event("b", 0, "compute", 1, 2, "F", stage=2, mb=0, chunk=1),
          Event("c", 0, "compute", 2, 4, "FB", stage=0, mb=1, chunk=0, pair=(2, 0, 0)),
          Event("d", 0, "compute", 4, 5, "W", stage=0, mb=0, chunk=0)]
    lay = _layout(Timeline(ev, TimelineMeta(pp=2, vpp=2)), "moe")
    cells = lay.grid.rows[0][1]
    assert [(c.colours, c.texts) for c in cells] == [
        (("moe.forward",), ("1",)), (("moe.forward.c1",), ("1",)),
        (("moe.forward", "moe.backward.c1"), ("2", "1"))]  # W is not a pass of its own
    assert lay.grid.title == "VPP + 1 warmup"


# -- weight update (seed 003) -----------------------------------------------------------------


def test_weight_update_rows_follow_seed_003() -> None:
    lay = _layout(weight_update_sample(), "weight-update")
    assert [r.spec.label for r in lay.rows] == ["H2D Buffer", "IPC Buffer", "Device 0", "Device 1", "Device 2",
                                                 "Device 3"]
    assert [r.spec.separator for r in lay.rows] == [False, False, True, False, False, False]
    assert lay.style.legend_at == "top right"
    assert all(r.bubble is None for r in lay.rows)


def test_weight_update_legend_and_colours() -> None:
    lay = _layout(weight_update_sample(), "weight-update")
    labels = [c.label for c in lay.categories]
    assert [x for x in labels if not x.startswith("IPC copy")] == ["H2D", "Broadcast (src)", "Reload weights", "Broadcast (dst)"]
    by_label = {c.label: c for c in lay.categories}
    assert colour(by_label["H2D"].colours[0]) == "#FFFFFF" and by_label["H2D"].edge == "edge"
    src = {c for e, c, *_ in _blocks(lay, "BCAST") if e.peer == e.rank}
    dst = {c for e, c, *_ in _blocks(lay, "BCAST") if e.peer != e.rank}
    assert src == {"wu.bcast_src"} and dst == {"wu.bcast_dst"}
    assert {c for _, c, *_ in _blocks(lay, "RELOAD")} == {"wu.reload"}


def test_weight_update_blocks_name_their_bucket_and_copies_keep_their_half() -> None:
    # The bucket is read from Event.bucket (mb is -1 on every weight-update event), the IPC row's
    # sub-row from Event.half; the default style names the bucket the same way.
    tl = weight_update_sample()
    style = resolve_style("weight-update", tl)
    by = {(e.kind, e.rank, e.bucket): e for e in tl.events}
    assert all(e.mb == -1 and e.sub == -1 for e in tl.events)
    assert style.parts(by[("H2D", 3, 3)])[0].texts == ("H2D b3", "H2D", "b3")
    assert [style.parts(by[("COPY", g % 4, g)])[0].track for g in range(4)] == [0, 1, 0, 1]
    assert style.parts(by[("RELOAD", 1, 2)])[0].texts == ("Reload weights b2", "Reload weights", "b2")
    assert resolve_style("default", tl).parts(by[("BCAST", 0, 1)])[0].texts == ("Broadcast (dst)", "b1")


def test_packed_rows_stack_overlapping_ops() -> None:
    lay = _layout(weight_update_sample(), "weight-update")
    dev0 = lay.rows[2]
    assert dev0.tracks == 2  # broadcast of bucket g+1 overlaps the reload of bucket g
    spans = [(y0, y1) for e, _, _, y0, y1 in _blocks(lay, rank=0) if e.lane in ("comm", "compute")]
    assert {s for s in spans} == {(0.0, 0.5), (0.5, 1.0)}


# -- time window --------------------------------------------------------------------------------


def test_window_clips_blocks_and_keeps_whole_schedule_stats() -> None:
    tl = weight_update_sample()
    whole = build_layout(tl, "weight-update")
    lay = build_layout(tl, "weight-update", window=(3.0, 6.0))
    assert (lay.t0, lay.t1) == (3.0, 6.0)
    assert lay.blocks.start.min() >= 3.0 and lay.blocks.end.max() <= 6.0
    assert 0 < len(lay.blocks) < len(whole.blocks)
    assert lay.title == whole.title + " · window 3-6"
