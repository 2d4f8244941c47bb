"""What a new user meets in the first hour, each found by trying it: typos refused by name, usage
errors on one line, the same fault worded the same by every command, readable --help, HTML that
shares plotly.js, torchtitan config lines."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from typer.testing import CliRunner

from pptl.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
KNOWN_COSTS = "known keys: F, B, I, W, FB (op kinds)"


def _one_line(args: list[str], code: int, line: str, cwd: Path | None = None) -> None:
    """Through the real entry point: exit ``code`` and exactly ``line`` on stderr."""
    r = subprocess.run([sys.executable, "-m", "pptl", *args], capture_output=True, text=True, cwd=cwd or ROOT, env=ENV)
    assert r.returncode == code, r.stdout + r.stderr
    assert r.stderr.splitlines() == [line], r.stderr


def _plan(tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / "plan.json"
    r = runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8", "-o", str(out), *extra])
    assert r.exit_code == 0, r.output
    return out


# ----------------------------------------------------------------------------------------------
# Typos name the key and the known ones


def test_cost_flag_typo(tmp_path: Path) -> None:
    _one_line(["plan", "-s", "1f1b", "--pp", "4", "-m", "8", "--cost", "X=2"], 2,
              f"error: --cost X=2: unknown cost key 'X'; {KNOWN_COSTS}")
    _one_line(["plan", str(FIXTURES / "1f1b.yaml"), "--cost", "F=1,Bw=3"], 2,
              f"error: --cost Bw=3: unknown cost key 'Bw'; {KNOWN_COSTS}")


def test_yaml_cost_typo(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("schedule: 1f1b\npp: 4\nmicrobatches: 8\ncosts: {F: 1, Bwd: 2}\n")
    _one_line(["plan", "c.yaml"], 2, f"error: c.yaml: field 'costs': unknown cost key 'Bwd'; {KNOWN_COSTS}", tmp_path)
    _one_line(["check", "c.yaml"], 2, f"error: c.yaml: field 'costs': unknown cost key 'Bwd'; {KNOWN_COSTS}", tmp_path)


def test_options_on_a_family_without_options(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("schedule: 1f1b\npp: 4\nmicrobatches: 8\noptions: {foo: 1}\n")
    _one_line(["plan", "c.yaml"], 2, "error: c.yaml: field 'options.foo' is unknown; schedule '1f1b' takes no options "
              "(families with options: interleaved-1f1b, v-half, v-min, weight-update, moe-1f1b-overlap)", tmp_path)


def test_families_with_options_and_their_cost_keys_still_plan() -> None:
    for name in ("moe_overlap.yaml", "weight_update_seed.yaml", "zb_h1.yaml", "dualpipe_seed.yaml"):
        r = runner.invoke(app, ["plan", str(FIXTURES / name), "--output", "json"])
        assert r.exit_code == 0, (name, r.output)


# ----------------------------------------------------------------------------------------------
# check: limits, missing files, folders, the same fault worded as plan words it


def test_check_refuses_a_negative_memory_limit_like_plan(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    _one_line(["check", str(plan), "--memory-limit", "-1"], 2, "error: --memory-limit: got -1, expected a number >= 0")
    _one_line(["plan", "-s", "1f1b", "--pp", "4", "-m", "8", "--memory-limit", "-1"], 2,
              "error: --memory-limit: got -1, expected a number >= 0")


def test_check_reports_missing_files_one_by_one_and_checks_the_rest(tmp_path: Path) -> None:
    _plan(tmp_path)
    r = subprocess.run([sys.executable, "-m", "pptl", "check", "plan.json", "nosuch.json", "other.json"],
                       capture_output=True, text=True, cwd=tmp_path, env=ENV)
    assert r.returncode == 2
    assert r.stdout.splitlines() == ["plan.json: ok, 160 ops checked"]
    assert r.stderr.splitlines() == ["error: nosuch.json: no such file", "error: other.json: no such file"]


def test_check_a_folder_says_plans_not_traces(tmp_path: Path) -> None:
    (tmp_path / "plans").mkdir()
    _one_line(["check", "plans"], 2, "error: plans: is a folder; pptl check takes plan, config and schedule files "
              "(to check every plan in it, pass 'plans/*.json')", tmp_path)


def test_binary_file_worded_the_same_by_check_and_plan(tmp_path: Path) -> None:
    (tmp_path / "bin.json").write_bytes(b"\x00\x01\xff")
    _one_line(["check", "bin.json"], 2, "error: bin.json: not UTF-8 text", tmp_path)
    _one_line(["plan", "bin.json"], 2, "error: bin.json: not UTF-8 text", tmp_path)


def test_yaml_errors_carry_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("schedule: 1f1b\npp: [4\nmicrobatches: 8\n")
    _one_line(["plan", "bad.yaml"], 2, "error: bad.yaml: not valid YAML at line 3, column 13: expected ',' or ']', "
              "but got ':'", tmp_path)


# ----------------------------------------------------------------------------------------------
# plan: messages about what the user set, bounded work, tables that fit


def test_group_size_message_names_what_the_user_set() -> None:
    _one_line(["plan", "--schedule", "interleaved-1f1b", "--pp", "4", "--vpp", "2", "-m", "3"], 2,
              "error: --microbatches: got 3, expected at least pp=4 for schedule 'interleaved-1f1b': "
              "give at least 4 micro-batches (its micro-batch group, --group-size, is pp unless set and must lie "
              "between pp and microbatches)")
    _one_line(["plan", "--schedule", "interleaved-1f1b", "--pp", "4", "--vpp", "2", "-m", "3", "--group-size", "4"],
              2, "error: --group-size: got 4, expected at most microbatches=3 (Megatron-Core's group "
              "rule: G in [pp, microbatches]) for schedule 'interleaved-1f1b'")


def test_huge_pipeline_refused_before_any_work() -> None:
    _one_line(["plan", "--schedule", "1f1b", "--pp", "100000", "-m", "8"], 2,
              "error: pp=100000 x vpp=1 x microbatches=8 would plan about 4,800,000 ops, more than the "
              "2,000,000 pptl plans; reduce pp or microbatches")


def test_tables_beyond_a_screenful_of_ranks_are_summarised() -> None:
    r = runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", "40", "-m", "8"])
    assert r.exit_code == 0, r.output
    rows = [line.split("│")[0].strip() for line in r.output.splitlines() if "│" in line]
    assert rows == [str(i) for i in range(8)] + ["…"] + [str(i) for i in range(32, 40)]
    assert "24 middle ranks summarised in the … row (ranges); --output json lists every rank" in r.output
    small = runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", "32", "-m", "8"])
    assert "…" not in small.output and "summarised" not in small.output


def test_textbook_bubble_line_reads_value_first() -> None:
    r = runner.invoke(app, ["plan", "--schedule", "interleaved-1f1b", "--pp", "4", "--vpp", "2", "-m", "8"])
    assert ("bubble per rank: textbook 9, simulated (max idle) 9; textbook formula: (p-1)(F+B) with F, B of one "
            "chunk (as costs are given), i.e. (p-1)(F+B)/V of a whole rank") in r.output


def test_zbv_title_counts_its_two_chunks_per_rank(tmp_path: Path) -> None:
    r = runner.invoke(app, ["plan", "--schedule", "zbv", "--pp", "4", "-m", "8", "-o", str(tmp_path / "z.json")])
    assert r.output.splitlines()[0].startswith("zbv: pp=4 vpp=2 microbatches=8 ")
    data = json.loads((tmp_path / "z.json").read_text())
    assert data["timeline"]["meta"]["vpp"] == 2


# ----------------------------------------------------------------------------------------------
# Usage errors of the CLI library: one line, the value echoed, exit 2


@pytest.mark.parametrize("args,line", [
    (["plan", "--schedule", "1f1b", "--pp", "4.5", "-m", "2"], "error: --pp: got 4.5, expected an integer >= 1"),
    (["plan", "--pp=x"], "error: --pp: got 'x', expected an integer >= 1"),
    (["check"], "error: Missing argument 'FILES...' (see 'pptl check --help')"),
    (["nocmd"], "error: No such command 'nocmd' (see 'pptl --help')"),
    (["run", "plan.json", "--gpus", "0"], "error: --gpus: got 0, expected an integer >= 1"),
], ids=["float-for-int", "equals-form", "missing-argument", "unknown-command", "gpus-0"])
def test_usage_errors_are_one_line(args: list[str], line: str) -> None:
    _one_line(args, 2, line)


def test_usage_errors_through_clirunner_too() -> None:
    r = runner.invoke(app, ["run", "x.json", "--gpus", "0"])
    assert r.exit_code == 2
    assert r.output == "error: --gpus: got 0, expected an integer >= 1\n"


def test_help_names_values_plainly() -> None:
    check = runner.invoke(app, ["check", "--help"]).output
    plan = runner.invoke(app, ["plan", "--help"]).output
    top = runner.invoke(app, ["--help"]).output
    for text in (check, plan):
        assert "<list[str]>" not in text
    assert "Usage: pptl check [OPTIONS] {FILES...}" in check  # typer's braces: required
    assert "nonblocking|nccl|blocking" in check and "text|json|github" in check
    assert "KIND=VALUE" in plan and "Usage: pptl plan [OPTIONS] [CONFIG]" in plan
    assert "--version" in top and "--install-completion" in top and "-h" in top and "│ check " in top
    export = runner.invoke(app, ["export", "--help"], env={"COLUMNS": "160"}).output
    assert "torch-csv|chrome|torchtitan" in export and "its [parallelism] lines" in export


# ----------------------------------------------------------------------------------------------
# demo and render: one folder policy, -o, plotly.js once per folder


def test_demo_and_render_refuse_a_missing_parent_folder_alike(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    gone = tmp_path / "nonexistent"
    _one_line(["demo", "--out", str(gone / "xx")], 2, f"error: {gone / 'xx'}: folder {gone} does not exist")
    _one_line(["render", str(plan), "-o", str(gone / "x.png")], 2, f"error: {gone / 'x.png'}: folder {gone} does not "
              "exist")
    assert not gone.exists()


def test_demo_takes_o_and_shares_one_plotly_js(tmp_path: Path) -> None:
    examples = tmp_path / "fx"
    examples.mkdir()
    for name in ("1f1b.yaml", "gpipe.yaml"):
        (examples / name).write_text((FIXTURES / name).read_text())
    out = tmp_path / "out"
    r = runner.invoke(app, ["demo", "-o", str(out), "--fixtures", str(examples)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == ["1f1b.html", "1f1b.pdf", "1f1b.png", "gpipe.html", "gpipe.pdf",
                                                     "gpipe.png", "plotly.min.js"]
    page = (out / "1f1b.html").read_text()
    assert 'src="plotly.min.js"></script>' in page and len(page) < 500_000
    inline = tmp_path / "inline"
    r = runner.invoke(app, ["demo", "-o", str(inline), "--fixtures", str(examples), "--plotlyjs", "inline"])
    assert r.exit_code == 0 and not (inline / "plotly.min.js").exists()
    assert len((inline / "1f1b.html").read_bytes()) > 3_000_000


def test_render_plotlyjs_directory_writes_the_library_once(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    for name in ("a.html", "b.html"):
        r = runner.invoke(app, ["render", str(plan), "-o", str(tmp_path / name), "--plotlyjs", "directory"])
        assert r.exit_code == 0, r.output
    js = tmp_path / "plotly.min.js"
    assert js.stat().st_size > 3_000_000
    assert 'src="plotly.min.js"></script>' in (tmp_path / "b.html").read_text()
    r = runner.invoke(app, ["render", str(plan), "-o", str(tmp_path / "c.html"), "--plotlyjs", "cdn"])
    assert r.exit_code == 2 and "--plotlyjs: got 'cdn', expected one of inline, directory" in r.output


# ----------------------------------------------------------------------------------------------
# torchtitan


@pytest.mark.parametrize("family,extra,name,v", [
    ("zbv", [], "ZBVZeroBubble", True), ("1f1b", [], "1F1B", False),
    ("interleaved-1f1b", ["--vpp", "2"], "Interleaved1F1B", False), ("dualpipev", [], "DualPipeV", True),
])
def test_export_torchtitan_writes_parallelism_lines_and_the_csv(tmp_path: Path, family: str, extra: list[str],
                                                                name: str, v: bool) -> None:
    plan = tmp_path / "p.json"
    assert runner.invoke(app, ["plan", "-s", family, "--pp", "4", "-m", "8", *extra, "-o", str(plan)]).exit_code == 0
    r = runner.invoke(app, ["export", str(plan), "--to", "torchtitan", "-o", str(tmp_path / "pp.toml")])
    assert r.exit_code == 0, r.output
    cfg = tomllib.loads((tmp_path / "pp.toml").read_text())
    assert cfg["parallelism"] == {"pipeline_parallel_degree": 4, "pipeline_parallel_schedule": name,
                                  "pipeline_parallel_schedule_csv": str(tmp_path / "pp.csv"),
                                  "pipeline_parallel_microbatch_size": 1}
    assert cfg["training"] == {"local_batch_size": 8}
    rows = (tmp_path / "pp.csv").read_text().splitlines()
    assert len(rows) == 4 and "SEND" not in rows[0]  # compute_only: what torchtitan's _load_csv(path) reads
    back = runner.invoke(app, ["check", str(tmp_path / "pp.csv")])
    assert back.exit_code == 0, back.output


def test_export_torchtitan_needs_o_and_refuses_dualpipe(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    _one_line(["export", str(plan), "--to", "torchtitan"], 2,
              "error: --to torchtitan writes two files: give -o pp.toml (the CSV goes beside it, or --csv PATH)")
    dp = tmp_path / "dp.json"
    assert runner.invoke(app, ["plan", "-s", "dualpipe", "--pp", "4", "-m", "8", "-o", str(dp)]).exit_code == 0
    r = runner.invoke(app, ["export", str(dp), "--to", "torchtitan", "-o", str(tmp_path / "x.toml"),
                            "--csv", str(tmp_path / "s.csv")])
    assert r.exit_code == 2 and "torch's CSV has one (export dualpipev rather than dualpipe)" in r.output
    assert not (tmp_path / "x.toml").exists() and not (tmp_path / "s.csv").exists()


@pytest.mark.parametrize("name,hint", [
    ("best.png", "draw the plan with pptl render PLAN.json -o FIGURE"),
    ("best.HTML", "draw the plan with pptl render PLAN.json -o FIGURE"),
    ("best.csv", "write torch's CSV with pptl export PLAN.json --to torch-csv"),
])
def test_plan_refuses_to_write_a_plan_under_a_figures_name(tmp_path: Path, name: str, hint: str) -> None:
    """A new user's first try, `pptl plan ... -o best.png`, wrote JSON into a .png; now one line, exit 2,
    and no file."""
    out = tmp_path / name
    _one_line(["plan", "--schedule", "1f1b", "--pp", "2", "--microbatches", "4", "-o", str(out)], 2,
              f"error: {out}: a plan is written as .json (or .json.gz); {hint}")
    assert not out.exists()
    assert _plan(tmp_path).exists()  # .json still writes
