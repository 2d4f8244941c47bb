"""Boundaries of the Chrome trace's args, PP044's list of missing sub-ops, the memory fit's peak
moment, an integer option with only a maximum, the V-shape memory target, the collective-count
diagnosis, the flight-recorder reader's wording for hostile values, and the figure's legend layout:
each against a number or a message worked out by hand (the docstrings say how)."""
from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from pptl.checks import run_checks
from pptl.commands._shared import Whole
from pptl.config import config_from_mapping
from pptl.diagnose.counts import ExtraCollectives, Orphan, _extra, _with_candidates
from pptl.diagnose.ops import NcclOp
from pptl.errors import InputError
from pptl.formats.chrome_trace import to_chrome
from pptl.formats.flight_recorder import find_dumps, loads_dump
from pptl.ir import Op, Schedule, ScheduleBuilder
from pptl.render.base import Category
from pptl.render.mpl import FigureOptions, _legend_columns, figure
from pptl.schedules.v_shape import _target
from pptl.timeline import Event, Timeline, TimelineMeta
from pptl.tune.memory import MemoryModel, _peak


def test_stage_0_and_micro_batch_0_stay_in_the_trace_args() -> None:
    """Only -1 means "none" for stage and micro-batch: the F of stage 0 mb 0 carries both zeros in
    its args, as Perfetto's selection panel shows them."""
    ev = [Event(op="r0/compute/F s0 mb0", rank=0, lane="compute", start=0.0, end=1.0, kind="F", stage=0, mb=0)]
    [x] = [e for e in to_chrome(Timeline(ev, TimelineMeta(source="measured", units="ms")))["traceEvents"]
           if e["ph"] == "X"]
    assert x["args"] == {"op": "r0/compute/F s0 mb0", "stage": 0, "mb": 0}


def _forward_with(*kinds: str) -> Schedule:
    # One MoE layer per chunk; rank 0's forward of stage 0 mb 0 has only the given layer-0 sub-ops.
    b = ScheduleBuilder()
    for kind in kinds:
        b.add(Op(kind=kind, rank=0, lane="compute", stage=0, mb=0, flow="F", sub=0))
    return Schedule("custom", 1, 1, 1, b.ops, b.lanes, meta={"layers_per_chunk": 1})


@pytest.mark.parametrize(("kinds", "lacks"), [
    (("ATTN",), "A2A_DISPATCH of layer 0, MLP of layer 0, A2A_COMBINE of layer 0"),
    (("ATTN", "MLP"), "A2A_DISPATCH of layer 0, A2A_COMBINE of layer 0"),
])
def test_a_forward_missing_three_sub_ops_names_all_three_and_no_more(kinds: tuple[str, ...], lacks: str) -> None:
    """A forward needs Attn, EP-D, MLP and EP-C per layer; with one layer and only Attn present,
    three are missing: the message names all three, in the forward's order, with no " and 0 more"."""
    [msg] = [v.message for v in run_checks(_forward_with(*kinds)) if v.code == "PP044"]
    assert msg == f"rank 0: the forward of stage 0 mb 0 lacks {lacks} (its layer needs every sub-op)"


def test_the_memory_fit_reads_the_first_moment_of_a_tied_peak() -> None:
    """Full activation 2 held from t=0 to t=1, then split activation 2 from t=2: with both scales 1
    the level is 2, 0, 2, so the peak 2 is reached twice; the fit reads (full, split, messages) at the
    first moment, (2, 0, 0), not the later (0, 2, 0)."""
    evs = [(0.0, 1, 2.0, 0.0, 0.0), (1.0, 0, -2.0, 0.0, 0.0), (2.0, 1, 0.0, 2.0, 0.0)]
    assert _peak(evs, MemoryModel()) == (2.0, (2.0, 0.0, 0.0))


def _raw_version(v: object) -> str:
    with pytest.raises(InputError) as e:
        loads_dump(pickle.dumps({"version": v, "entries": []}), source="d", rank=0)
    return str(e.value)


def test_a_64_bit_version_is_shown_by_its_digits() -> None:
    """2**63 = 9223372036854775808 has bit_length 64: still a 64-bit number, shown by its digits;
    only wider integers are summarised by their width."""
    assert _raw_version(2**63) == "d: field 'version': got 9223372036854775808, expected a 2.x flight-recorder format"
    assert _raw_version(2**64) == "d: field 'version': got an integer of 65 bits, expected a 2.x flight-recorder format"


def test_a_40_character_value_is_shown_whole_without_a_length() -> None:
    """Strings are cut at 40 characters: one of exactly 40 is shown whole, with no "(40 characters)";
    one of 41 shows its first 40 and the length."""
    assert _raw_version("v" * 40) == f"d: field 'version': got '{'v' * 40}', expected a 2.x flight-recorder format"
    assert _raw_version("v" * 41) == (f"d: field 'version': got '{'v' * 40}'... (41 characters), "
                                      "expected a 2.x flight-recorder format")


def test_an_empty_list_is_described_in_the_plural() -> None:
    """English: "a list of 0 items", "a list of 1 item"."""
    assert _raw_version([]) == "d: field 'version': got a list of 0 items, expected a 2.x flight-recorder format"
    assert _raw_version([2]) == "d: field 'version': got a list of 1 item, expected a 2.x flight-recorder format"


def test_a_16_character_version_is_read() -> None:
    """Versions up to 16 characters are read: "2.10.1234567890a" is 2 + 3 + 10 + 1 = 16."""
    d = loads_dump(pickle.dumps({"version": "2.10.1234567890a", "entries": []}), source="d", rank=0)
    assert (d.version, d.entries) == ("2.10.1234567890a", ())


@pytest.mark.parametrize(("others", "note"), [
    (["a.log"], "skipped 1 file not named nccl_trace_rank_<rank>: a.log"),
    (["a.log", "b.log", "c.log", "d.log"], "skipped 4 files not named nccl_trace_rank_<rank>: a.log, b.log, c.log, d.log"),
    (["a.log", "b.log", "c.log", "d.log", "e.log"],
     "skipped 5 files not named nccl_trace_rank_<rank>: a.log, b.log, c.log, d.log, ..."),
])
def test_skipped_files_are_counted_and_named_up_to_four(tmp_path: Path, others: list[str], note: str) -> None:
    """A folder with one dump and n other files: the note names up to four of them, and adds ", ..."
    only when a fifth was left out; one file is "1 file"."""
    (tmp_path / "nccl_trace_rank_0").touch()
    for name in others:
        (tmp_path / name).touch()
    assert find_dumps([tmp_path]).note == note


@pytest.mark.parametrize(("memory", "target"), [
    (0.5, (2.0, "0.5x of 1F1B's")),
    (0.4, (1.6, "0.4x of 1F1B's; any V order holds both chunks of a micro-batch on rank 0 as its forward turns, "
                "0.5x of 1F1B's")),
])
def test_a_v_target_of_exactly_two_chunks_needs_no_excuse(memory: float, target: tuple[float, str]) -> None:
    """pp=2, m=2: 1F1B holds min(2, 2) = 2 micro-batches of two chunks, 4 chunks. A share of 0.5 is
    2 chunks, exactly the two of one micro-batch that any V order holds: reachable, no excuse. A share
    of 0.4 is 1.6 chunks, under those two: the note says the least is 2 / 4 = 0.5x."""
    cfg = config_from_mapping({"schedule": "v-min", "pp": 2, "microbatches": 2, "options": {"memory": memory}})
    assert _target("min")(cfg) == target


def test_an_integer_with_only_a_maximum_takes_the_maximum() -> None:
    """Whole(max=5): 5 is taken, and 6 is refused with a message that says 5 is allowed ("<= 5")."""
    w = Whole(max=5)
    assert w.convert("5", None, None) == 5
    with pytest.raises(Exception) as e:
        w.convert("6", None, None)
    assert e.value.message == "got 6, expected an integer <= 5"


def _call(rank: int, index: int, kind: str, seq: int, numel: int, peer: int = -1) -> NcclOp:
    return NcclOp(rank=rank, index=index, group="0", kind=kind, peer=peer, seq=seq, nth=0, sizes=((numel,),),
                  state="completed")


def test_an_extra_collective_between_exactly_two_ranks_is_named() -> None:
    """Rank 0 issued all-reduce(4), broadcast(2), all-reduce(8); rank 1 only the two all-reduces.
    Common prefix 1 call, common suffix 1 call, nothing of rank 1's between them: rank 0's broadcast
    is the extra call, 3 calls against 2, and NCCL met it with rank 1's call of sequence number 1,
    the all-reduce(8)."""
    r0 = [_call(0, 0, "allreduce", 0, 4), _call(0, 1, "broadcast", 1, 2), _call(0, 2, "allreduce", 2, 8)]
    r1 = [_call(1, 0, "allreduce", 0, 4), _call(1, 1, "allreduce", 1, 8)]
    assert _extra("0", {0: r0, 1: r1}) == ExtraCollectives("0", 0, 1, (r0[1],), (3, 2), ((r0[1], r1[1]),))


def test_an_unmatched_send_lists_three_candidates_in_issue_order() -> None:
    """Rank 0's send to rank 1 was never matched; rank 1 ran five calls ahead. The one at index 0 is
    a send to rank 0 (the same kind to the same peer: not a candidate); of the four left, the first
    three by issue index (1, 2, 3) are listed, whatever order they came in."""
    o = _call(0, 0, "send", 0, 4, peer=1)
    ahead = [_call(1, i, "send" if i == 0 else "recv", i, 4, peer=0 if i == 0 else 2) for i in (4, 2, 0, 3, 1)]
    by_index = {c.index: c for c in ahead}
    assert _with_candidates([(o, 1)], {1: ahead}) == (Orphan(o, 1, (by_index[1], by_index[2], by_index[3])),)


@pytest.mark.parametrize(("avail", "ncol"), [(None, 3), (2.2, 2), (1.0, 1)])
def test_legend_columns_that_fill_the_width_exactly_all_fit(avail: float | None, ncol: int) -> None:
    """An entry is 0.6 in plus 0.068 in per character: "ab" is 0.736 in, three are 2.208 in. Given
    exactly that width (summed as the layout sums it), all three sit on one row; at 2.2 in two
    columns of 0.736 (1.472 in) fit; at 1.0 in one."""
    cats = [Category(key=f"k{i}", label="ab", colours=("forward",)) for i in range(3)]
    w = 0.6 + 0.068 * 2
    assert _legend_columns(cats, w + w + w if avail is None else avail) == ncol


@pytest.mark.parametrize(("width", "rows"), [(3.0, 3), (5.0, 2), (6.0, 1)])
def test_a_legend_row_left_part_full_still_gets_its_height(width: float, rows: int) -> None:
    """An F, an I and a W: the legend reads "Forward" (7 characters, 0.6 + 0.068 * 7 = 1.076 in),
    "Backward for input" (18: 1.824 in), "Backward for weights" (20: 1.96 in). At font size 9 the
    legend has width - 0.6 in: all three (4.86 in) fit from 5.46 in; two columns (1.96 + 1.824 =
    3.784 in) from 4.384 in, so at 5.0 in the three entries take two rows, the second half full.
    Each row adds 0.3 in, plus 0.05 in once: the bottom legend adds 0.3 * rows + 0.05 in to the height
    the same figure has without it."""
    ev = [Event(op=f"r0/compute/{k} s0 mb0", rank=0, lane="compute", start=float(i), end=i + 1.0, kind=k, stage=0,
                mb=0) for i, k in enumerate("FIW")]
    tl = Timeline(ev, TimelineMeta(source="measured", units="ms"))

    def height(legend: str) -> float:
        return float(figure(tl, FigureOptions(width_in=width, legend=legend, font_size=9, title="")).get_size_inches()[1])

    assert height("bottom") - height("none") == pytest.approx(0.3 * rows + 0.05)
