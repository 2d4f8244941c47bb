"""The torch CSV reader's notes, placement problems and limits, pinned where the sampled mutation run
(`make mutate-sample`, docs/testing.md) found no test. Each test names the mutants it was written
against; the expectations are worked out from the file by hand."""
from __future__ import annotations

import pytest

from pptl.config import MAX_OPS
from pptl.errors import InputError
from pptl.formats.torch_csv import Action, load_csv_text, schedule_from_rows

_MB_NOTE = "micro-batches: 1 (inferred: the number of distinct forwards per stage; override with --microbatches)"


def test_one_rank_file_says_rank_not_ranks_and_keeps_its_source() -> None:
    # _n 1 (always plural) and _table_schedule 80 (the config's source dropped)
    s, notes, problems, lines = load_csv_text("0F0,0B0\n", source="one.csv")
    assert notes == ["torch CSV (compute_only): 1 rank, 2 actions",
                     "placement: loop (stage s on rank s % 1, 1 per rank), 1 stage (inferred)", _MB_NOTE]
    assert (problems, lines) == ([], [1])
    assert s.config is not None and s.config.source == "one.csv"


def test_v_placement_asked_of_a_loop_file_names_each_misplaced_stage() -> None:
    # _placer 6 (V places nothing), _layout 91 (the asked placement forgotten: "inferred"),
    # _placement_note 20 (the file's own look left out). pp = 2, stages 0..3 in loop order: V puts
    # stage 2 on rank 2*2-1-2 = 1 and stage 3 on rank 0, the file has them on ranks 0 and 1.
    _, notes, problems, _ = load_csv_text("0F0,2F0,2B0,0B0\n1F0,3F0,3B0,1B0\n", placement="v",
                                          report_problems=True)
    assert notes[1] == "placement: V (rank r holds stages r and 3-r), 4 stages (from --placement; the file looks loop)"
    assert [(v.code, v.message, v.line) for v in problems] == [
        ("PP036", "stage 2 runs on rank 0, but v placement puts it on rank 1", 1),
        ("PP036", "stage 3 runs on rank 1, but v placement puts it on rank 0", 2)]


def test_v_placement_says_nothing_of_stages_beyond_its_two_per_rank() -> None:
    # _placer 8: V holds stages 0..2*pp-1; on one rank stages 2 and 3 are outside it, so V names no
    # rank for them and no placement problem is reported (the mutant put them on ranks -1 and -2)
    _, notes, problems, _ = load_csv_text("0F0,1F0,2F0,3F0,3B0,2B0,1B0,0B0\n", placement="v", report_problems=True)
    assert problems == []
    assert notes[1] == "placement: V (rank r holds stages r and 1-r), 4 stages (from --placement; the file looks loop)"


def test_stages_times_microbatches_over_the_limit_is_refused() -> None:
    # _layout 86 (`/` for `*`): 2 stages x (MAX_OPS // 2 + 1) micro-batches is one unit of work
    # past the limit, though the quotient is tiny
    m = MAX_OPS // 2 + 1
    with pytest.raises(InputError) as e:
        load_csv_text("0F0,0B0\n1F0,1B0\n", source="big.csv", microbatches=m)
    assert str(e.value) == (f"big.csv: 2 stages (highest stage index 1) x {m} micro-batches is more than the "
                            f"{MAX_OPS:,} units of work pptl checks")


def test_actions_without_a_micro_batch_get_none_on_both_readers() -> None:
    # _parsed 34 (-1 for "no micro-batch" turned into +1): the cell-by-cell reader (a space sends
    # the text there) and an action list give UNSHARD micro-batch -1, as the one-pass reader does
    for s in (load_csv_text("0F0, 0UNSHARD,0B0\n")[0],
              schedule_from_rows([[Action(0, "F", 0), Action(0, "UNSHARD"), Action(0, "B", 0)]])[0],
              load_csv_text("0F0,0UNSHARD,0B0\n")[0]):
        assert [(op.kind, op.mb, op.id) for op in s.ops] == [
            ("F", 0, "r0/compute/F s0 mb0"), ("UNSHARD", -1, "r0/compute/UNSHARD s0"), ("B", 0, "r0/compute/B s0 mb0")]
