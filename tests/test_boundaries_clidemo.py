"""Boundaries of the CLI's error contract, the demo, diagnose's plan names, the structure and order
rules and the weight-update metadata, against values worked out by hand (never by the code under test).

Each test pins a place where a one-character slip changes the answer and no other test looked: an
example named in upper case, the second figure format of a comparison, a pipeline's sends towards
rank 0, a rank equal to pp, a one-rank deadlock's wording, COLUMNS=0, a path the system refuses
(exit 2, one line), an Abort (130), a metadata integer at exactly its bound, a MoE layer's bytes. See /work/wt/_mutants/wave4_clidemo.py.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pptl.checks import run_checks
from pptl.cli import app
from pptl.commands._shared import Abort
from pptl.config import Workload, config_from_mapping
from pptl.demo import example_files, run_demo
from pptl.diagnose.ops import NcclOp
from pptl.diagnose.plan_names import plan_next, plan_pairs
from pptl.ir import Op, Schedule
from pptl.run.moe_model import layer_bytes, offload_bytes, split_tokens
from pptl.schedules import build_schedule
from pptl.schedules._weight_update_meta import WeightUpdateMeta

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
runner = CliRunner()


def _one_f_one_b(pp: int, m: int) -> Schedule:
    return build_schedule(config_from_mapping({"schedule": "1f1b", "pp": pp, "microbatches": m}))


def _relabelled(s: Schedule, op_id: str, **change: Any) -> Schedule:
    """``s`` with the op ``op_id`` given other field values."""
    lanes: dict[tuple[int, str], list[Op]] = {
        k: [replace(s.ops[i], **change) if s.ops[i].id == op_id else s.ops[i] for i in v] for k, v in s.lanes.items()}
    return s.with_lanes(lanes)


# ----------------------------------------------------------------------------------------------
# pptl/demo.py


def test_an_example_with_an_upper_case_suffix_is_an_example(tmp_path: Path) -> None:
    # The suffixes are matched without case: A.YAML, b.Toml and c.json are three examples; notes.TXT is none.
    for name in ("A.YAML", "b.Toml", "c.json", "notes.TXT"):
        (tmp_path / name).write_text("schedule: gpipe\npp: 2\nmicrobatches: 2\n")
    assert [p.name for p in example_files(tmp_path)] == ["A.YAML", "b.Toml", "c.json"]


@pytest.mark.parametrize("style", ["auto", "default"])
def test_demo_comparison_figure_is_written_as_png_and_pdf(tmp_path: Path, style: str) -> None:
    # A moe-1f1b-overlap config pairs F and B: besides its own PNG, PDF and HTML it gets
    # <name>_compare_warmup in the two paper formats, PNG and PDF: five files in all. In pptl's default
    # style too: the comparison, a figure of the MoE style alone, is drawn in the family's style (it
    # failed the example with "--compare-warmup: draws moe-1f1b-overlap plans only (use --style moe)").
    fx = tmp_path / "fx"
    fx.mkdir()
    (fx / "m.yaml").write_text("schedule: moe-1f1b-overlap\npp: 2\nvpp: 2\nmicrobatches: 4\n")
    (item,) = run_demo(tmp_path / "out", fixtures=fx, style=style)
    assert item.ok, item.error
    assert item.style == ("moe" if style == "auto" else "default")
    assert [Path(f).name for f in item.files] == ["m.png", "m.pdf", "m.html", "m_compare_warmup.png",
                                                  "m_compare_warmup.pdf"]
    assert all(Path(f).is_file() for f in item.files)


def test_demo_with_one_failing_example_counts_one_of_two_and_exits_1(tmp_path: Path) -> None:
    # Two examples, one of an unknown schedule: the good one is drawn, the bad one reported in its
    # row, "1 of 2 examples drawn", exit 1 (a failed run), no traceback.
    fx = tmp_path / "fx"
    fx.mkdir()
    (fx / "a_good.yaml").write_text("schedule: gpipe\npp: 2\nmicrobatches: 2\n")
    (fx / "b_bad.yaml").write_text("schedule: nonsense\npp: 2\nmicrobatches: 2\n")
    out = tmp_path / "out"
    result = runner.invoke(app, ["demo", "--out", str(out), "--fixtures", str(fx)])
    assert result.exit_code == 1, result.output
    assert f"1 of 2 examples drawn into {out}" in result.stdout
    assert "Traceback" not in result.output
    assert (out / "a_good.png").is_file() and not (out / "b_bad.png").exists()


def test_demo_fixtures_path_too_long_for_the_system_is_bad_input_in_one_line(tmp_path: Path) -> None:
    # A 300-character name is past the file system's 255: the system refuses it before any reader,
    # which is bad input (exit 2) in one line, not a traceback and not a failed run (1).
    result = runner.invoke(app, ["demo", "--fixtures", "x" * 300, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: xxx") and "too long" in lines[0]


# ----------------------------------------------------------------------------------------------
# pptl/cli.py


def test_columns_of_zero_is_ignored_and_the_help_is_printed() -> None:
    # COLUMNS=0 is no width: it is forgotten (rich would take it as a width of 0 and print nothing),
    # so `pptl --help` still shows its usage line and lists the commands, exit 0.
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "0"})
    assert result.exit_code == 0
    assert "Usage: pptl" in result.stdout
    assert "plan" in result.stdout and "diagnose" in result.stdout


def test_an_abort_exits_130_in_one_word(monkeypatch: pytest.MonkeyPatch) -> None:
    # click's Abort (what an interrupted prompt raises; typer turns an EOF into one) reaches pptl's
    # boundary: 128 + SIGINT (2) = 130, the shell's code for an interrupted tool, and one word on
    # stderr; not 1, which a script would read as an invalid schedule.
    def aborted(name: str) -> Any:
        raise Abort()

    monkeypatch.setattr("pptl.cli._command", aborted)
    result = runner.invoke(app, ["plan"])
    assert result.exit_code == 130
    assert result.stderr == "interrupted\n"


# ----------------------------------------------------------------------------------------------
# pptl/diagnose/plan_names.py


def test_plan_pairs_count_the_sends_towards_rank_0() -> None:
    # 1F1B, pp=2, 3 micro-batches: rank 0 sends each micro-batch's activation to rank 1 (3 sends) and
    # rank 1 sends each one's gradient back to rank 0 (3 sends); peer 0 is a peer like any other.
    assert plan_pairs(_one_f_one_b(2, 3)) == {(0, 1): 3, (1, 0): 3}


def test_plan_pairs_with_two_digit_ranks() -> None:
    # 1F1B, pp=12, 2 micro-batches: each rank r < 11 sends 2 activations to r+1, each r > 0 two
    # gradients to r-1: 22 pairs, each 2.
    want = {(r, r + 1): 2 for r in range(11)} | {(r, r - 1): 2 for r in range(1, 12)}
    assert plan_pairs(_one_f_one_b(12, 2)) == want


def _called(rank: int, index: int, kind: str, peer: int, name: str) -> NcclOp:
    return NcclOp(rank=rank, index=index, group="0", kind=kind, peer=peer, seq=index + 1, nth=0, sizes=((4,),),
                  state="completed", name=name)


def test_plan_next_after_a_ranks_last_plan_op_is_nothing_and_elsewhere_the_op_after() -> None:
    # 1F1B, pp=2, m=2. Rank 1's last plan op is its SEND_B of mb 1: a rank stopped there has nothing
    # left to issue (no entry, no crash). Rank 0 stopped after its RECV_B of mb 0 should run B of mb 0
    # next, and its next call is the RECV_B of mb 1 (F0, F1, then B0, B1 on rank 0).
    s = _one_f_one_b(2, 2)
    ops = {0: (_called(0, 0, "send", 1, "r0/send/SEND_F s0 mb0 ->r1"),
               _called(0, 1, "recv", 1, "r0/recv/RECV_B s0 mb0 <-r1")),
           1: (_called(1, 0, "send", 0, "r1/send/SEND_B s1 mb1 ->r0"),)}
    got = plan_next(ops, s, [0, 1])
    assert list(got) == [0]
    assert (got[0].op, got[0].comm) == ("r0/compute/B s0 mb0", "r0/recv/RECV_B s0 mb1 <-r1")


# ----------------------------------------------------------------------------------------------
# pptl/checks/structure.py, pptl/checks/order.py


def test_an_op_on_rank_equal_to_pp_is_malformed() -> None:
    # pp = 2: ranks 0..1. Rank 1's F of stage 1 mb 0 relabelled rank 2 is outside the pipeline.
    bad = _relabelled(_one_f_one_b(2, 2), "r1/compute/F s1 mb0", rank=2)
    assert [v.message for v in run_checks(bad) if v.code == "PP001"] == [
        "malformed op r2/compute/F s1 mb0: rank 2 is outside 0..1"]


def test_a_forward_with_micro_batch_minus_one_is_malformed() -> None:
    # Micro-batches count from 0: an F of mb -1 has no micro-batch (its id drops the "mb" part).
    bad = _relabelled(_one_f_one_b(2, 2), "r1/compute/F s1 mb0", mb=-1)
    assert [v.message for v in run_checks(bad) if v.code == "PP001"] == [
        "malformed op r1/compute/F s1: F needs a stage and a micro-batch"]


def test_an_op_on_the_last_rank_of_twelve_is_not_malformed() -> None:
    # pp = 12: rank 11 is the last valid rank; the valid plan reports no PP001.
    assert [v for v in run_checks(_one_f_one_b(12, 2)) if v.code == "PP001"] == []


def test_a_deadlock_on_one_rank_says_rank_not_ranks() -> None:
    # fixtures/invalid/b_before_f.json lists rank 0's B of mb 1 before its F of mb 1: a cycle on rank 0
    # alone (the lane's order one way, the data need the other), worded "rank 0", exit 1 (invalid).
    result = runner.invoke(app, ["check", str(FIXTURES / "invalid" / "b_before_f.json")])
    assert result.exit_code == 1
    pp007 = [line for line in result.stdout.splitlines() if "PP007" in line]
    assert len(pp007) == 1
    assert pp007[0].split("PP007 error: ", 1)[1] == (
        "deadlock across rank 0: r0/compute/B s0 mb1 -> (next on lane) r0/compute/F s0 mb1 -> (needed by) "
        "r0/compute/B s0 mb1")


def test_order_violations_are_listed_in_lane_order(tmp_path: Path) -> None:
    # One rank, one stage, 1 micro-batch, lane W, I, F: the W (position 0) comes before its I
    # (position 1), and the I before its F (position 2). Listed by the earlier op's position: the
    # W's report first, though backwards are looked at before weight gradients.
    ops = [{"kind": k, "stage": 0, "mb": 0} for k in ("W", "I", "F")]
    plan = {"format": "pptl-plan", "version": 1, "config": None,
            "schedule": {"family": "hand-written", "pp": 1, "num_stages": 1, "microbatches": 1, "directions": 1,
                         "meta": {}},
            "lanes": [{"rank": 0, "lane": "compute", "ops": ops}]}
    path = tmp_path / "wif.json"
    path.write_text(json.dumps(plan))
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 1
    pp006 = [line.split("PP006 error: ", 1)[1] for line in result.stdout.splitlines() if "PP006" in line]
    assert pp006 == [
        "r0/compute/W s0 mb0 comes before r0/compute/I s0 mb0 on rank 0, but a weight gradient needs its input gradient",
        "r0/compute/I s0 mb0 comes before r0/compute/F s0 mb0 on rank 0, but a backward needs its forward"]


# ----------------------------------------------------------------------------------------------
# pptl/schedules/_weight_update_meta.py


def test_weight_update_bytes_of_exactly_two_to_the_62_are_read() -> None:
    # The byte fields' bound is 2**62 = 4611686018427387904, inclusive; a bucket's bytes too.
    top = 4611686018427387904
    bucket = {"owner": 0, "round": 0, "bytes": top, "tensors": 1, "largest": top, "half": 0}
    meta = WeightUpdateMeta.from_meta({"weight_update": {"model_bytes": top, "buckets": [bucket]}})
    assert meta.model_bytes == top
    assert meta.buckets is not None and meta.buckets[0].bytes == top


def test_weight_update_largest_tensor_is_read_back() -> None:
    # largest_tensor is the last plain key before the buckets: a file's value of 7 reads back as 7
    # and writes out again.
    meta = WeightUpdateMeta.from_meta({"weight_update": {"bucket_size": 64, "largest_tensor": 7}})
    assert (meta.bucket_size, meta.largest_tensor) == (64, 7)
    assert meta.to_meta() == {"weight_update": {"bucket_size": 64, "largest_tensor": 7}}


# ----------------------------------------------------------------------------------------------
# pptl/run/moe_model.py


def test_moe_layer_and_offload_bytes_by_hand() -> None:
    # 64 tokens x 256 wide in bfloat16 (2 bytes). A layer keeps x (1 width), u_a (ATTN_WIDTH = 2),
    # r (1) and u_e (EXPERT_WIDTH = 1): 5 x 64 x 256 x 2 = 163840 bytes; its Offload moves r and u_e:
    # 2 x 64 x 256 x 2 = 65536 bytes.
    w = Workload(hidden=256, tokens=64, dtype="bfloat16")
    assert layer_bytes(w) == 163840
    assert offload_bytes(w) == 65536


def test_moe_tokens_split_evenly_or_refused() -> None:
    # 64 tokens over 4 expert ranks: 16 each; over 3 (64 = 3 x 21 + 1) or 128 (more ranks than tokens): refused.
    assert split_tokens(64, 4) == 16
    assert split_tokens(12, 12) == 1
    for ep in (3, 128):
        with pytest.raises(ValueError, match=f"not divisible by ep = {ep}"):
            split_tokens(64, ep)
