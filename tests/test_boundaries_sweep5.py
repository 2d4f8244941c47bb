"""Boundaries of the assembler's message lanes and lookups, interleaved 1F1B's group sizes and memory
formula, the duty fit bounded by the loss, the stage-layer list, gzip and YAML errors as a user reads
them (hand mutants 788 on; docs/testing.md lists them).

Every expected number here is worked out by hand in the test's docstring, not read back from the code.
"""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from pptl.config import Config, config_from_mapping
from pptl.errors import InputError
from pptl.fileio import read_bounded
from pptl.formats.structured import read_structured
from pptl.ir import Op
from pptl.schedules import build_schedule
from pptl.schedules._assemble import assemble
from pptl.schedules.interleaved import FAMILY as INTERLEAVED
from pptl.schedules.interleaved import group_sizes_that_fit
from pptl.whatif.duty import loss_bounded_range
from pptl.whatif.roles import layers_from_mapping

# --- the assembler ----------------------------------------------------------------------------------

def test_every_message_sits_on_its_rank_s_send_or_recv_lane() -> None:
    """1F1B at pp=2, m=3: rank 0 sends the 3 activations of stage 0 and receives the 3 gradients of
    stage 1; rank 1 the other way round. So each of the four message lanes holds 3 ops, for
    micro-batches 0, 1, 2 in order, and the 12 compute ops (3 F and 3 B per rank) and 12 messages are
    24 ops, each on exactly one lane."""
    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 3}))
    for rank in (0, 1):
        for lane in ("send", "recv"):
            assert [op.mb for op in s.lane_ops(rank, lane)] == [0, 1, 2], (rank, lane)
    placed = sorted(i for idx in s.lanes.values() for i in idx)
    assert placed == list(range(24))


def test_data_the_highest_rank_never_needs_still_gets_a_recv() -> None:
    """Rank 0 runs the F of stage 0, mb 0; rank 1 only the W of stage 1, mb 0, so stage 1 is placed
    on rank 1 and the activation goes there, though no F or B of rank 1 needs it. The RECV goes last
    on rank 1's recv lane (here its only op): one SEND on rank 0 to peer 1, one RECV on rank 1 from
    peer 0, both of mb 0 and flow F. Rank 1 is the highest rank, so the lookup of where it needs the
    data looks past every key it holds."""
    orders = {0: [Op(kind="F", rank=0, lane="compute", stage=0, mb=0)],
              1: [Op(kind="W", rank=1, lane="compute", stage=1, mb=0)]}
    s = assemble(Config(schedule="custom", pp=2, microbatches=1), "custom", orders, num_stages=2, microbatches=1)
    (send,) = s.lane_ops(0, "send")
    (recv,) = s.lane_ops(1, "recv")
    assert (send.kind, send.peer, send.mb, send.flow) == ("SEND", 1, 0, "F")
    assert (recv.kind, recv.peer, recv.mb, recv.flow, recv.stage) == ("RECV", 0, 0, "F", 1)


# --- interleaved 1F1B -------------------------------------------------------------------------------

@pytest.mark.parametrize("pp", [2, 4])
def test_a_group_of_exactly_pp_micro_batches_is_a_size_that_fits(pp: int) -> None:
    """With m = pp the only group size in pp..m is G = pp = m, and Megatron-Core accepts it (one
    group, no remainder): the list is [pp], not empty."""
    assert group_sizes_that_fit(pp, pp) == [pp]


def test_interleaved_memory_counts_the_forward_run_before_the_first_backward() -> None:
    """pp=2, V=2, m=4, G=pp=2: rank 0's warmup is 2(p-1) + (V-1)G = 2 + 2 = 4 forwards; the steady
    phase then starts with a fifth forward before the first backward, so rank 0 holds
    min(4 + 1, mV = 8) = 5 chunk activations (activation 1). The plan shows it: 5 F before the
    first B on rank 0's compute lane."""
    cfg = config_from_mapping({"schedule": "interleaved-1f1b", "pp": 2, "vpp": 2, "microbatches": 4})
    assert INTERLEAVED.memory(cfg) == 5.0
    kinds = [op.kind for op in build_schedule(cfg).lane_ops(0, "compute")]
    assert kinds.index("B") == 5


# --- the duty exponent bounded by the loss --------------------------------------------------------

def test_loss_bounds_give_nothing_where_f_and_b_of_the_first_stage_weigh_the_same() -> None:
    """One block a stage: the first stage's F runs 2 GEMMs, its B 4 - 1 = 3; the last stage's F 2 and
    B 4. F 4.0 and B 3.0 on stage 0 are 2.0 and 1.0 per GEMM, so at the last stage's GEMMs
    F' = 2.0 x 2 = 4.0 and B' = 1.0 x 4 = 4.0: k = F'/B' = 1, and the low end
    (r_B - k r_F) / (1 - k) has no value. The run bounds nothing: None (ranks busy 0.5 and 1.0,
    a spread of 2, well above 1.05)."""
    times = {(0, "F"): 4.0, (0, "B"): 3.0, (1, "F"): 4.0, (1, "B"): 6.0}
    assert loss_bounded_range(times, {0: 0, 1: 1}, {0: 0.5, 1: 1.0}, lambda s: 1) is None


# --- stage layers from a workload -----------------------------------------------------------------

def test_a_stage_layer_list_of_exactly_100_000_stages_is_kept() -> None:
    """stage_layers may list up to 100,000 stages: a list of exactly 100,000 threes gives stage 0 and
    stage 99,999 three blocks each, not the default of 1; one past the list (100,000) takes the
    default."""
    layers = layers_from_mapping({"stage_layers": [3] * 100_000})
    assert (layers(0), layers(99_999), layers(100_000)) == (3, 3, 1)


# --- files -----------------------------------------------------------------------------------------

def test_gzip_that_expands_to_exactly_the_limit_is_read(tmp_path: Path) -> None:
    """1,000 bytes of "a", gzipped (a few dozen bytes on disk), read with a limit of 1,000: the
    output is at the limit, not past it, so all 1,000 bytes come back; with a limit of 999 it is
    refused as decompressing past the limit."""
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(b"a" * 1000))
    assert read_bounded(p, 1000) == b"a" * 1000
    with pytest.raises(InputError, match="decompresses to more than the 999 bytes accepted"):
        read_bounded(p, 999)


@pytest.mark.parametrize("text, where", [("a: b: c\n", "line 1, column 5"),
                                         ("x: 1\na: b: c\n", "line 2, column 5")],
                         ids=["first-line", "second-line"])
def test_a_yaml_error_names_the_line_and_column_as_an_editor_counts_them(tmp_path: Path, text: str,
                                                                         where: str) -> None:
    """In "a: b: c" the second colon is the 5th character ("a", ":", " ", "b", ":"): a mapping
    value is not allowed there. An editor counts lines and columns from 1, so the error is at
    line 1, column 5 on the first line, and line 2, column 5 when a valid line comes first."""
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        read_structured(p)
    assert str(e.value) == f"{p}: not valid YAML at {where}: mapping values are not allowed here"
