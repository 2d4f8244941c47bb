"""Boundaries of the MoE figure's steps and close-ups, the MoE order grid, the --time option and the hang
diagnosis's wording, each checked against numbers worked out by hand."""
from __future__ import annotations

import pytest

from pptl.diagnose.cause import _numel, find_cause
from pptl.diagnose.counts import EMPTY
from pptl.diagnose.ops import NcclOp
from pptl.errors import InputError
from pptl.planning import b_parts, costs_from_timeline
from pptl.render import parse_window
from pptl.render.moe_figure import Section, grid_caption, moe_figure
from pptl.render.moe_mpl import _section_weight
from pptl.render.moe_style import order_grid
from pptl.render.styles import chunk_colour
from pptl.timeline import Event, Timeline, TimelineMeta


def _sub(rank: int, start: float, end: float, mb: int, flow: str, kind: str = "ATTN", chunk: int = 0) -> Event:
    return Event(f"r{rank}/{kind} {flow} mb{mb} {start}", rank, "compute", start, end, kind, stage=rank, mb=mb,
                 chunk=chunk, flow=flow)


def test_a_forward_and_a_backward_that_overlap_without_interleaving_are_combined_1f1b() -> None:
    """F mb0 runs 0-2 and B mb1 runs 1-3 on rank 0: B starts (1) before F ends (2), so they are one paired
    step; the plan has vpp 1, so there is no interleaving and no extra warmup forward: "Combined 1F1B"."""
    tl = Timeline([_sub(0, 0, 2, 0, "F"), _sub(0, 1, 3, 1, "B")], TimelineMeta(vpp=1, pp=1))
    assert grid_caption(tl) == "Combined 1F1B"
    assert grid_caption(Timeline(tl.events, TimelineMeta(vpp=2, pp=1))) == "VPP + 1 warmup"


def test_a_close_up_ends_where_its_step_ends() -> None:
    """Rank 0 runs one forward step, 0-2, so the warmup close-up's window is [0, 2). An onload that starts at
    exactly 2 belongs after it (nothing drawn); one that starts at 1.5 is drawn clipped to 1.5-2. With no
    block in a row, each of the three rows still takes one track."""
    step = [_sub(0, 0, 2, 0, "F")]
    at_end = Event("r0/ONLOAD 2", 0, "h2d", 2.0, 3.0, "ONLOAD", stage=0, mb=5, flow="B")
    fig = moe_figure(Timeline(step + [at_end]))
    assert fig is not None
    (sec,) = fig.sections
    assert (sec.t0, sec.t1) == (0.0, 2.0)
    assert [b.row for b in sec.blocks] == ["Computation"]
    assert sec.tracks == (1, 1, 1)
    inside = Event("r0/ONLOAD 1.5", 0, "h2d", 1.5, 3.0, "ONLOAD", stage=0, mb=5, flow="B")
    fig = moe_figure(Timeline(step + [inside]))
    assert fig is not None
    assert [(b.row, b.start, b.end) for b in fig.sections[0].blocks if b.row == "Offload"] == [("Offload", 1.5, 2.0)]


def test_the_order_grid_marks_only_pp_transfers_that_take_time() -> None:
    """Two SENDs after rank 0's forward: one of no time (2-2), one of half a unit (2-2.5). Only the second
    is a PP mark on device 0's row: (2, 2.5, "F")."""
    step = [_sub(0, 0, 2, 0, "F")]
    sends = [Event("r0/SEND a", 0, "send", 2.0, 2.0, "SEND", stage=0, mb=0, flow="F"),
             Event("r0/SEND b", 0, "send", 2.0, 2.5, "SEND", stage=0, mb=1, flow="F")]
    fig = moe_figure(Timeline(step + sends))
    assert fig is not None
    assert fig.devices[0].pp == ((2.0, 2.5, "F"),)


def test_grid_cells_pair_only_a_backward_that_starts_before_the_forward_ends() -> None:
    """MoE sub-ops (no F/B op kinds) on rank 0: F mb0 0-2, then B mb1 2-4 (starts exactly as F ends: two
    cells, "1" then "2"); with B mb1 at 1.5-4 instead they overlap and share one cell ("1", "2")."""
    touching = order_grid(Timeline([_sub(0, 0, 2, 0, "F"), _sub(0, 2, 4, 1, "B")]))
    assert touching is not None
    assert [c.texts for c in touching.rows[0][1]] == [("1",), ("2",)]
    overlapping = order_grid(Timeline([_sub(0, 0, 2, 0, "F"), _sub(0, 1.5, 4, 1, "B")]))
    assert overlapping is not None
    assert [c.texts for c in overlapping.rows[0][1]] == [("1", "2")]


def test_an_fb_whose_backward_half_is_on_stage_0_is_shaded_as_chunk_0() -> None:
    """pp = 2, looped: rank 0 holds stages 0 (chunk 0) and 2 (chunk 1). An F&B running the forward of stage 2
    (chunk 1) with the backward of stage 0: the B half's chunk is 0 // 2 = 0, the F half's 1."""
    fb = Event("r0/FB", 0, "compute", 0.0, 2.0, "FB", stage=2, mb=3, chunk=1, pair=(0, 1, 0))
    grid = order_grid(Timeline([fb], TimelineMeta(pp=2, vpp=2)))
    assert grid is not None
    (cell,) = grid.rows[0][1]
    assert cell.colours == (chunk_colour("moe.forward", 1), chunk_colour("moe.backward", 0))
    assert cell.texts == ("4", "2")


def test_a_close_up_without_compute_blocks_is_as_wide_as_one_with_one_block() -> None:
    """Width share = max(1, compute blocks) + 1: no block gives 1 + 1 = 2; one block of length 1 in a window
    of length 1 gives max(2, 1/1) = 2 as well."""
    empty = Section("warmup", "t", 0.0, 1.0, "", (), (1, 1, 1))
    assert _section_weight(empty) == 2.0
    fig = moe_figure(Timeline([_sub(0, 0, 1, 0, "F")]))
    assert fig is not None
    assert _section_weight(fig.sections[0]) == 2.0


@pytest.mark.parametrize("text", ["1:2:3", "1", ":"])
def test_time_takes_exactly_two_numbers(text: str) -> None:
    """START:END is two numbers; "1:2:3" has three parts and is refused, not cut to 1:2."""
    with pytest.raises(InputError, match="--time"):
        parse_window(text)
    assert parse_window("1:2") == (1.0, 2.0)



def _b(stage: int, end: float) -> Event:
    return Event(f"r{stage}/compute/B s{stage} mb0", stage, "compute", 0.0, end, "B", stage=stage, mb=0)


def test_measured_costs_keep_stage_0s_own_means() -> None:
    """B took 4 ms on stage 0 and 2 ms on stage 1: the mean B is 3 ms, stage 0's own 4 ms, stage 1's 2."""
    costs = costs_from_timeline(Timeline([_b(0, 4.0), _b(1, 2.0)], TimelineMeta(source="measured", units="ms")))
    assert costs["B"] == 3.0
    assert {s: v["B"] for s, v in costs["stages"].items()} == {0: 4.0, 1: 2.0}


def test_the_i_and_w_parts_of_stage_0s_backward_are_kept() -> None:
    """Stage 0's B ran 4 ms with its I part ending at 1 ms (I 1, W 3); stage 1's ran 2 ms, I part 0.5 ms
    (I 0.5, W 1.5)."""
    events = [_b(0, 4.0), _b(1, 2.0)]
    extra = {"full_backward": "i-then-w", "b_input_ms": {events[0].op: 1.0, events[1].op: 0.5}}
    tl = Timeline(events, TimelineMeta(source="measured", units="ms", extra=extra))
    assert b_parts(tl) == {0: {"I": 1.0, "W": 3.0}, 1: {"I": 0.5, "W": 1.5}}


def test_a_call_of_no_elements_is_plural() -> None:
    """A send of one empty tensor (shape [0]) moves 0 elements: "of 0 elements", as English counts zero;
    shape [1] moves 1 element."""
    def send(shape: tuple[int, ...]) -> NcclOp:
        return NcclOp(rank=0, index=0, group="0", kind="send", peer=1, seq=1, nth=0, sizes=(shape,),
                      state="scheduled")

    assert _numel(send((0,))) == "of 0 elements"
    assert _numel(send((1,))) == "of 1 element"



def _call(rank: int, state: str) -> NcclOp:
    return NcclOp(rank=rank, index=0, group="0", kind="send", peer=rank ^ 1, seq=1, nth=0, sizes=((4,),), state=state,
                  name=f"r{rank}/send")


def test_one_rank_waiting_is_named_in_the_singular() -> None:
    """Rank 2 alone has a call not completed (rank 3's completed): "rank 2 waits in ..." with no "and more";
    ranks 2 and 3 both waiting: "ranks 2, 3 wait in ... and more"."""
    one = find_cause(EMPTY, {2: (_call(2, "started"),), 3: (_call(3, "completed"),)})
    assert one.kind == "pending"
    assert one.text.startswith("rank 2 waits in ") and " and more" not in one.text
    two = find_cause(EMPTY, {2: (_call(2, "started"),), 3: (_call(3, "started"),)})
    assert two.text.startswith("ranks 2, 3 wait in ") and " and more;" in two.text


def test_one_rank_off_the_plan_in_a_cycle_does_not_issue() -> None:
    """A wait-for cycle across ranks 0 and 1 with only rank 1 off the plan's order: "rank 1 does not
    issue"; with both off it: "ranks 0, 1 do not issue"."""
    ops = {0: (_call(0, "started"),), 1: (_call(1, "started"),)}
    one = find_cause(EMPTY, ops, cycle_ranks=(0, 1), order=("rank 0 waits for rank 1",), off_plan=(1,))
    assert one.kind == "cycle"
    assert "; rank 1 does not issue the plan's send/receive order" in one.text
    both = find_cause(EMPTY, ops, cycle_ranks=(0, 1), order=("rank 0 waits for rank 1",), off_plan=(0, 1))
    assert "; ranks 0, 1 do not issue the plan's send/receive order" in both.text
