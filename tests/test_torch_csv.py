"""torch.distributed.pipelining CSV: strict parsing, inference, round trips, export, CLI (no torch needed)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.checks import run_checks
from pptl.cli import app
from pptl.config import config_from_mapping
from pptl.errors import InputError
from pptl.formats.loader import load_any
from pptl.formats.torch_csv import Action, export_csv, load_csv_text, parse_action, to_rows
from pptl.schedules import build_schedule

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

FAMILIES = [
    ("gpipe", {}), ("1f1b", {}), ("interleaved-1f1b", {"vpp": 2}), ("zb-h1", {}), ("zb-h2", {}),
    ("zbv", {"vpp": 2}), ("dualpipev", {"vpp": 2}),
]


def _plan(name: str, pp: int, m: int, **kw):
    return build_schedule(config_from_mapping({"schedule": name, "pp": pp, "microbatches": m, **kw}))


def _errors(schedule, p2p: str = "nccl") -> list[str]:
    return [v.code for v in run_checks(schedule, p2p=p2p) if v.severity == "error"]


# ----------------------------------------------------------------------------------------------
# Parsing


@pytest.mark.parametrize("text,expected", [
    ("0F0", Action(0, "F", 0)),
    (" 3I5 ", Action(3, "I", 5)),
    ("3W5", Action(3, "W", 5)),
    ("2B0", Action(2, "B", 0)),
    ("1SEND_F1", Action(1, "SEND_F", 1)),
    ("2RECV_B0", Action(2, "RECV_B", 0)),
    ("0UNSHARD", Action(0, "UNSHARD")),
    ("0REDUCE_GRAD", Action(0, "REDUCE_GRAD")),
    ("(0F7;7B3)OVERLAP_F_B", Action(-1, "OVERLAP_F_B", None, (Action(0, "F", 7), Action(7, "B", 3)))),
    ("", None),
], ids=lambda v: repr(v) if isinstance(v, str) else None)
def test_parse_action_reads_every_torch_action(text: str, expected: Action | None) -> None:
    assert parse_action(text) == expected
    if expected is not None:
        assert str(expected) == text.strip()  # the writer prints what torch's __repr__ prints


@pytest.mark.parametrize("text,match", [
    ("2BW0", r"'2BW0' is not an action \(torch reads it as '2B' and drops the rest\)"),
    ("2F", r"F needs a micro-batch index, such as 2F0"),
    ("0UNSHARD3", r"UNSHARD takes no micro-batch"),
    ("F0", r"'F0' is not an action; expected \[stage\]"),
    ("(0F1;1I0)OVERLAP_F_B", r"must overlap one F and one B"),
    ("(0F1;1B0)OVERLAP", r"is not an overlapped action"),
], ids=["BW-suffix", "no-mb", "fsdp-with-mb", "no-stage", "overlap-with-I", "overlap-no-type"])
def test_parse_action_is_stricter_than_torch(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_action(text)


def test_bad_cell_is_one_line_input_error_with_file_and_line() -> None:
    with pytest.raises(InputError, match=r"^x\.csv:2: rank 1, step 4: '0BW0' is not an action"):
        load_csv_text("0F0,0SEND_F0\n1RECV_F0,1F0,1B0,1SEND_B0,0BW0\n", source="x.csv")


def test_bad_cells_become_violations_with_lines_when_reported() -> None:
    _, _, problems, lines = load_csv_text("0F0,0B0\n1F0,1BW0,1XX\n", report_problems=True)
    assert [(p.code, p.line) for p in problems] == [("PP001", 2), ("PP001", 2)]
    assert lines == [1, 2]


@pytest.mark.parametrize("text,match", [
    ("\n\n", r"no actions"),
    ('0F0,"1F0\n', r"^<csv>:1: not valid CSV: unexpected end of data"),
], ids=["empty", "unclosed-quote"])
def test_unusable_files_are_input_errors(text: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        load_csv_text(text)


# ----------------------------------------------------------------------------------------------
# Inference


def test_loop_placement_and_microbatches_are_inferred_and_noted() -> None:
    s, notes, _, _ = load_csv_text((FIXTURES / "csv/interleaved1f1b_pp4_v2_m8.csv").read_text())
    assert (s.pp, s.num_stages, s.microbatches, s.meta["placement"]) == (4, 8, 8, "loop")
    assert notes[1] == "placement: loop (stage s on rank s % 4, 2 per rank), 8 stages (inferred)"
    assert notes[2].startswith("micro-batches: 8 (inferred")
    assert {op.chunk for op in s.ops if op.stage == 5} == {1}


def test_v_placement_is_inferred_for_zbv() -> None:
    s, notes, _, _ = load_csv_text((FIXTURES / "csv/zbv_pp4_m8.csv").read_text())
    assert s.meta["placement"] == "v"
    assert notes[1] == "placement: V (rank r holds stages r and 7-r), 8 stages (inferred)"
    assert {(op.rank, op.chunk) for op in s.ops if op.stage == 6} == {(1, 1)}


def test_gap_in_microbatches_is_reported_not_accepted() -> None:
    # torch's validator counts 4 distinct forwards and accepts {0, 1, 2, 7} for 4 micro-batches.
    s, notes, _, _ = load_csv_text((FIXTURES / "csv/invalid/mb_gap.csv").read_text())
    assert s.microbatches == 4
    assert "indices go up to 7, so some are outside 0..3" in notes[2]
    codes = _errors(s)
    assert "PP003" in codes and "PP004" in codes


@pytest.mark.parametrize("counts,expected", [((3, 3, 4), 3), ((2, 3), 3), ((3, 2, 2), 2)],
                         ids=["most-common-not-largest", "tie-takes-larger", "most-common-smaller"])
def test_microbatches_are_the_most_common_forward_count(counts: tuple[int, ...], expected: int) -> None:
    """Stage s runs ``counts[s]`` forwards (mb 0..n-1): the stages that agree set the count, and the
    rest are reported against it (PP004 beyond it, PP003 short of it)."""
    text = "\n".join(",".join([f"{s}F{mb}" for mb in range(n)] + [f"{s}B{mb}" for mb in range(n)])
                     for s, n in enumerate(counts)) + "\n"
    s, notes, _, _ = load_csv_text(text)
    assert s.microbatches == expected, notes
    codes = set(_errors(s))
    assert ("PP004" in codes) == (max(counts) > expected), codes
    assert ("PP003" in codes) == (min(counts) < expected), codes


def test_overlapped_action_reads_the_same_with_b_first() -> None:
    """(0B0;0F1)OVERLAP_F_B and (0F1;0B0)OVERLAP_F_B are one FB: the F of mb 1 beside the B of mb 0."""
    f_first, _, _, _ = load_csv_text("0F0,(0F1;0B0)OVERLAP_F_B,0B1\n")
    b_first, _, _, _ = load_csv_text("0F0,(0B0;0F1)OVERLAP_F_B,0B1\n")
    [fb] = [op for op in b_first.ops if op.kind == "FB"]
    assert (fb.stage, fb.mb, fb.pair) == (0, 1, (0, 0, 0))
    assert b_first.ops == f_first.ops
    assert _errors(b_first) == []


def test_flags_override_inference() -> None:
    text = (FIXTURES / "csv/invalid/mb_gap.csv").read_text()
    s, notes, _, _ = load_csv_text(text, microbatches=8)
    assert s.microbatches == 8 and notes[2].startswith("micro-batches: 8 (from --microbatches")
    _, _, problems, _ = load_csv_text((FIXTURES / "csv/zbv_pp4_m8.csv").read_text(), placement="loop",
                                      report_problems=True)
    assert problems and problems[0].code == "PP036"
    assert problems[0].message == "stage 4 runs on rank 3, but loop placement puts it on rank 0"
    with pytest.raises(InputError, match=r"--placement: got 'zigzag', expected one of loop, v"):
        load_csv_text("0F0,0B0\n", placement="zigzag")


def test_compute_comms_maps_peers_flows_and_overlap() -> None:
    s, _, _, _ = load_csv_text((FIXTURES / "csv/dualpipev_pp4_m8_comms.csv").read_text())
    by_id = {op.id: op for op in s.ops}
    assert "r0/send/SEND_F s0 mb0 ->r1" in by_id
    assert "r0/recv/RECV_F s7 mb0 <-r1" in by_id
    fb = by_id["r0/compute/FB s0 mb7 +B s7 mb3"]
    assert (fb.kind, fb.pair, fb.chunk) == ("FB", (7, 3, 0), 0)
    assert {op.kind for op in s.ops} >= {"UNSHARD", "RESHARD", "REDUCE_GRAD"}
    assert s.meta["csv_format"] == "compute_comms" and len(s.meta["program_order"]) == 4
    assert _errors(s) == []


# ----------------------------------------------------------------------------------------------
# Round trips and export


@pytest.mark.parametrize("name,kw", FAMILIES, ids=[f[0] for f in FAMILIES])
@pytest.mark.parametrize("comms", [False, True], ids=["compute_only", "compute_comms"])
def test_round_trip_keeps_every_op(name: str, kw: dict, comms: bool) -> None:
    s = _plan(name, 4, 8, **kw)
    text, _ = export_csv(s, comms=comms)
    back, _, _, _ = load_csv_text(text)
    kept = sorted(op.id for op in s.ops if comms or op.lane == "compute")
    # compute_comms adds REDUCE_GRAD after each stage's last backward (as torch's lowering does)
    assert sorted(op.id for op in back.ops if op.kind != "REDUCE_GRAD") == kept
    assert (back.num_stages, back.microbatches) == (s.num_stages, s.microbatches)
    if not comms:  # the compute order of every rank survives unchanged
        for r in range(s.pp):
            assert [o.id for o in back.lane_ops(r, "compute")] == [o.id for o in s.lane_ops(r, "compute")]
    for mode in ("nonblocking", "nccl", "blocking"):
        assert _errors(back, mode) == [], mode


def test_compute_comms_export_places_send_after_producer_and_recv_before_use() -> None:
    rows, notes = to_rows(_plan("1f1b", 2, 2), comms=True)
    assert rows[0][:2] == ["0F0", "0SEND_F0"]
    assert rows[1][:2] == ["1RECV_F0", "1F0"]
    assert any("no NCCL hang" in n for n in notes)


def test_reimported_comms_file_exports_in_its_own_order() -> None:
    text = (FIXTURES / "csv/interleaved1f1b_pp4_v2_m8_comms.csv").read_text()
    s, _, _, _ = load_csv_text(text)
    again, _ = export_csv(s, comms=True)
    assert again == text


def test_compute_only_export_leaves_out_fsdp_actions_and_says_so() -> None:
    s, _, _, _ = load_csv_text((FIXTURES / "csv/dualpipev_pp4_m8_comms.csv").read_text())
    text, notes = export_csv(s)
    assert "UNSHARD" not in text and "SEND" not in text
    assert notes and notes[0].startswith("compute_only leaves out") and "UNSHARD" in notes[0]


@pytest.mark.parametrize("name,kw,match", [
    ("dualpipe", {}, r"has 2 directions; torch's CSV has one \(export dualpipev rather than dualpipe\)"),
    ("moe-1f1b-overlap", {"vpp": 2}, r"uses lane '(comm|d2h|h2d)'; torch's CSV has compute, send and recv only"),
], ids=["dualpipe", "moe"])
def test_export_refuses_what_torch_cannot_hold(name: str, kw: dict, match: str) -> None:
    try:
        s = _plan(name, 4, 8, **kw)
    except InputError as e:  # a family another helper owns may need other sizes
        pytest.skip(f"{name}: {e}")
    with pytest.raises(InputError, match=match):
        to_rows(s)


# ----------------------------------------------------------------------------------------------
# CLI


def test_check_csv_prints_notes_and_ok() -> None:
    r = runner.invoke(app, ["check", str(FIXTURES / "csv/zbv_pp4_m8_comms.csv")])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].endswith("note: torch CSV (compute_comms): 4 ranks, 408 actions")
    assert lines[-1].endswith("zbv_pp4_m8_comms.csv: ok, 408 ops checked")


def test_check_csv_text_output_names_the_line() -> None:
    path = FIXTURES / "csv/invalid/torch_1f1b_ir_pp4_m8.csv"
    r = runner.invoke(app, ["check", str(path)])
    assert r.exit_code == 1, r.output
    assert f"{path}:4: PP004 error: r3/compute/F s3 mb8: stage 3, mb 8" in r.stdout
    assert f"{path}: PP003 error: missing F for stage 3 mb 0" in r.stdout


def test_check_github_output_carries_file_and_line() -> None:
    path = FIXTURES / "csv/invalid/bw_typo.csv"
    r = runner.invoke(app, ["check", str(path), "--output", "github"])
    assert r.exit_code == 1, r.output
    first = r.stdout.splitlines()[0]
    assert first.startswith(f"::error file={path},line=1,title=PP001::malformed op: rank 0, step 5: '0BW0'")


def test_check_github_annotates_unreadable_files_and_goes_on(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("schedule: [")
    good = FIXTURES / "csv/gpipe_pp4_m6.csv"
    r = runner.invoke(app, ["check", str(bad), str(good), "--output", "github"])
    assert r.exit_code == 2, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"::error file={bad},line=1,title=input::not valid YAML")
    assert lines[1] == f"{good}: ok, 48 ops checked"


def test_check_json_output_has_lines() -> None:
    r = runner.invoke(app, ["check", str(FIXTURES / "csv/invalid/mb_gap.csv"), "--output", "json"])
    assert r.exit_code == 1, r.output
    v = json.loads(r.stdout)["files"][0]["violations"]
    assert {x["code"]: x.get("line") for x in v if x["code"] == "PP004"} == {"PP004": 1}


def test_check_placement_flag_reports_mismatch() -> None:
    r = runner.invoke(app, ["check", str(FIXTURES / "csv/zbv_pp4_m8.csv"), "--placement", "loop"])
    assert r.exit_code == 1, r.output
    assert "zbv_pp4_m8.csv:4: PP036 error: stage 4 runs on rank 3, but loop placement puts it on rank 0" in r.stdout


def test_check_many_files_and_globs() -> None:
    r = runner.invoke(app, ["check", str(FIXTURES / "csv/*.csv"), str(FIXTURES / "1f1b.yaml")])
    assert r.exit_code == 0, r.output
    assert r.stdout.count("ops checked") == len(list((FIXTURES / "csv").glob("*.csv"))) + 1


def test_plan_from_csv_prints_metrics_and_writes_plan(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    r = runner.invoke(app, ["plan", "--from", str(FIXTURES / "csv/interleaved1f1b_pp4_v2_m8.csv"), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0] == "torch-csv: pp=4 vpp=2 microbatches=8 makespan=57 bubble=15.8%"
    assert "note: placement: loop" in r.stderr
    again = load_any(out)
    assert again.kind == "plan" and again.schedule.meta["source_format"] == "torch-csv"


def test_plan_from_applies_cost_flags() -> None:
    r = runner.invoke(app, ["plan", "--from", str(FIXTURES / "csv/gpipe_pp4_m6.csv"), "--cost", "F=2,B=4",
                            "--output", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["makespan"] == (6 + 4 - 1) * (2 + 4)  # GPipe: (m + p - 1)(F + B)


def test_plan_from_rejects_mixing_with_a_family() -> None:
    r = runner.invoke(app, ["plan", "--from", str(FIXTURES / "csv/gpipe_pp4_m6.csv"), "--schedule", "1f1b"])
    assert r.exit_code == 2
    assert "error: --from takes the schedule from its file; drop the config, --schedule and --costs-from" in r.stderr


def test_export_to_torch_csv_stdout_and_file(tmp_path: Path) -> None:
    r = runner.invoke(app, ["export", str(FIXTURES / "1f1b.yaml"), "--to", "torch-csv"])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0].startswith("0F0,0F1,0F2,0F3,0B0")
    out = tmp_path / "s.csv"
    r = runner.invoke(app, ["export", str(FIXTURES / "1f1b.yaml"), "--to", "torch-csv", "--comms", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_text().startswith("0F0,0SEND_F0,")
    assert f"wrote {out}" in r.stderr


@pytest.mark.parametrize("args,match", [
    (["--to", "onnx"], "--to: got 'onnx', expected one of torch-csv, chrome"),
    (["--to", "chrome", "--comms"], "--comms applies to --to torch-csv only"),
    (["--to", "torch-csv", "-o", "x.csv.gz"], r"\.gz output is for --to chrome"),
], ids=["unknown-format", "comms-for-chrome", "gz-csv"])
def test_export_usage_errors(args: list[str], match: str) -> None:
    r = runner.invoke(app, ["export", str(FIXTURES / "1f1b.yaml"), *args])
    assert r.exit_code == 2
    assert r.stderr.startswith("error: ") and __import__("re").search(match, r.stderr), r.stderr


def test_compute_comms_export_reduces_each_stage_after_its_last_backward():
    # torch runs a compute_comms file as written: without REDUCE_GRAD it never divides the gradients by
    # the number of micro-batches (bench/torch_runtime.py measured them 8x too large at 8 micro-batches).
    import re

    from pptl.config import config_from_mapping
    from pptl.formats.torch_csv import export_csv
    from pptl.schedules import build_schedule

    for name, kw in (("1f1b", {}), ("zb-h1", {}), ("dualpipev", {"vpp": 2})):
        s = build_schedule(config_from_mapping({"schedule": name, "pp": 4, "microbatches": 8, **kw}))
        for r, line in enumerate(export_csv(s, comms=True)[0].splitlines()):
            cells = line.split(",")
            backward = [(i, int(m.group(1))) for i, c in enumerate(cells)
                        for m in re.finditer(r"(\d+)[BW]\d+", c)]
            for st in {st for _, st in backward}:
                at = [i for i, c in enumerate(cells) if c == f"{st}REDUCE_GRAD"]
                assert len(at) == 1, (name, r, st)
                assert max(i for i, x in backward if x == st) == at[0] - 1, (name, r, st)


def _reading(text: str, **kw):
    try:
        s, notes, problems, lines = load_csv_text(text, **kw)
    except InputError as e:
        return str(e)
    return (s.ops, list(s.lanes.items()), s.deps, s.meta, s.num_stages, s.microbatches, notes,
            [(p.code, p.message, p.line) for p in problems], lines)


def test_whole_line_reading_agrees_with_the_csv_module_and_parse_action() -> None:
    # Files without quotes or carriage returns are split by lines and commas and whole rows are
    # matched at once; "\r\n" sends the same text through the csv module and cell-by-cell parsing.
    import random

    from fuzzing import mutate_cells

    from pptl.formats.torch_csv import schedule_from_rows

    paths = sorted((FIXTURES / "csv").glob("**/*.csv"))
    rnd = random.Random(15)
    texts = [p.read_text() for p in paths]
    texts += [mutate_cells(t, rnd) for t in texts for _ in range(20)]
    texts += ["0F0,,0UNSHARD,(1B0;0F1)OVERLAP_F_B, 0B1\n\n", "0F0,0F" + "9" * 5000 + "\n", "0F0,0F0,\n,\n\n"]
    compared = 0
    for text in texts:
        for kw in ({}, {"report_problems": True}, {"placement": "loop", "report_problems": True}):
            fast = _reading(text, **kw)
            assert fast == _reading(text.replace("\n", "\r\n"), **kw), (text[:200], kw)
            compared += not isinstance(fast, str)
    assert compared > 100
    for p in paths[:4]:
        rows = [[a for a in map(parse_action, line.split(",")) if a is not None] for line in p.read_text().splitlines()]
        s, _, _ = schedule_from_rows(rows)
        assert s.ops == load_csv_text(p.read_text())[0].ops, p
