"""The command line: exit codes, one-line errors, JSON contract."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_plan_flags_prints_metrics_table() -> None:
    result = runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "1f1b: pp=4 microbatches=8 makespan=33 bubble=27.3%"
    assert "makespan 33 · ops 160 · bubble 27.3%" in result.stdout
    assert "bubble per rank: textbook 9, simulated (max idle) 9; textbook formula: (p-1)(F+B)" in result.stdout


def test_plan_json_contract() -> None:
    result = runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8",
                                 "--cost", "F=1,B=3", "--output", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["makespan"] == 8 * 4 + 3 * 4
    assert [r["rank"] for r in data["ranks"]] == [0, 1, 2, 3]
    assert set(data["ranks"][0]) >= {"rank", "busy", "idle", "bubble_fraction", "peak_activation"}


def test_plan_config_file_and_output_file(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    result = runner.invoke(app, ["plan", str(FIXTURES / "interleaved.yaml"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["format"] == "pptl-plan"
    check = runner.invoke(app, ["check", str(out)])
    assert check.exit_code == 0, check.output
    assert check.stdout.strip().endswith("ok, 352 ops checked")


def test_plan_fewer_microbatches_than_stages() -> None:
    result = runner.invoke(app, ["plan", str(FIXTURES / "1f1b_few_microbatches.toml"), "--output", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["makespan"] == (3 + 7) * 3


@pytest.mark.parametrize(
    "args, line",
    [
        (["plan", "--schedule", "warp", "--pp", "2", "--microbatches", "2"],
         "error: unknown schedule 'warp'; known schedules: gpipe, 1f1b, interleaved-1f1b"),
        (["plan", "--schedule", "1f1b", "--pp", "2"], "error: --microbatches required with --schedule"),
        (["plan"], "error: give a config file or --schedule"),
        (["plan", "--schedule", "1f1b", "--pp", "2", "--microbatches", "2", "--cost", "F"],
         "error: --cost: got 'F', expected KIND=VALUE such as F=1"),
        (["plan", "--schedule", "1f1b", "--pp", "2", "--microbatches", "2", "--output", "xml"],
         "error: --output: got 'xml', expected one of text, json"),
        (["plan", "--schedule", "interleaved-1f1b", "--pp", "2", "--microbatches", "4"],
         "error: --vpp: got 1, expected at least 2 chunks per rank"),
        (["plan", str(FIXTURES / "bad" / "negative_pp.yaml")], "field 'pp': got -2, expected an integer >= 1"),
        (["check", str(FIXTURES / "bad" / "newer_plan.json")], "plan format version 99 is newer"),
        (["check", "no/such/file.json"], "error: no/such/file.json: no such file"),
        (["check", "fixtures/none-*.json"], "error: fixtures/none-*.json: no file matches"),
    ],
    ids=["unknown-schedule", "missing-mb", "nothing", "bad-cost", "bad-output", "family-rule", "bad-config",
         "newer-plan", "missing-file", "empty-glob"],
)
def test_bad_input_is_one_line_exit_2(args: list[str], line: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and line in err[0], err
    assert "Traceback" not in result.output


def test_unknown_option_is_usage_error() -> None:
    result = runner.invoke(app, ["plan", "--bogus"])
    assert result.exit_code == 2


def test_check_invalid_exits_1_and_names_violation() -> None:
    result = runner.invoke(app, ["check", str(FIXTURES / "invalid" / "deadlock_two_ranks.json")])
    assert result.exit_code == 1, result.output
    assert "PP007 error: deadlock across ranks 0, 1:" in result.stdout


def test_check_many_files_json() -> None:
    result = runner.invoke(app, ["check", str(FIXTURES / "1f1b.yaml"), str(FIXTURES / "invalid" / "missing.json"),
                                 "--output", "json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert [f["valid"] for f in data["files"]] == [True, False]
    assert data["files"][1]["violations"][0]["code"] == "PP003"
    assert data["valid"] is False


def test_check_memory_limit_flag() -> None:
    ok = runner.invoke(app, ["check", str(FIXTURES / "1f1b.yaml"), "--memory-limit", "4"])
    bad = runner.invoke(app, ["check", str(FIXTURES / "1f1b.yaml"), "--memory-limit", "3"])
    assert ok.exit_code == 0 and bad.exit_code == 1
    assert "PP009 error: rank 0 holds 4 activation units" in bad.stdout


def test_schedules_json_lists_families() -> None:
    result = runner.invoke(app, ["schedules", "--output", "json"])
    assert result.exit_code == 0
    names = [f["name"] for f in json.loads(result.stdout)]
    assert names[:3] == ["gpipe", "1f1b", "interleaved-1f1b"]


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.startswith("pptl 0.1.0")


def test_python_m_pptl_help() -> None:
    proc = subprocess.run([sys.executable, "-m", "pptl", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "plan" in proc.stdout and "check" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "pptl", "-h"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0


def test_plan_runs_checks_and_exits_1_when_invalid() -> None:
    result = runner.invoke(app, ["plan", str(FIXTURES / "invalid" / "over_memory.yaml")])
    assert result.exit_code == 1, result.output
    assert "PP009 error: rank 0 holds 5 activation units at t=4" in result.stdout


def test_plan_of_a_deadlocking_order_is_one_line_exit_1() -> None:
    result = runner.invoke(app, ["plan", str(FIXTURES / "invalid" / "moe_no_extra_warmup.yaml")])
    assert result.exit_code == 1, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: moe-1f1b-overlap with this config cannot run: deadlock across rank 3:")


def test_check_goes_on_past_an_unreadable_file() -> None:
    result = runner.invoke(app, ["check", str(FIXTURES / "bad" / "broken.yaml"), str(FIXTURES / "1f1b.yaml"),
                                 str(FIXTURES / "invalid" / "missing.json")])
    assert result.exit_code == 2, result.output
    assert result.stdout.splitlines()[0].endswith("1f1b.yaml: ok, 160 ops checked")
    assert "PP003 error: missing B for stage 0 mb 1" in result.stdout
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and "broken.yaml: not valid YAML" in line


def test_check_json_lists_unreadable_files() -> None:
    result = runner.invoke(app, ["check", str(FIXTURES / "bad" / "broken.yaml"), str(FIXTURES / "1f1b.yaml"),
                                 "--output", "json"])
    assert result.exit_code == 2, result.output
    data = json.loads(result.stdout)
    assert data["valid"] is False
    assert data["files"][0]["valid"] is True and "not valid YAML" in data["files"][1]["error"]


MEASURED = Path(__file__).resolve().parent / "data" / "runs" / "1f1b_cpu.measured.json"
DUMPS = FIXTURES / "flight_recorder" / "hang1_torch_csv"


@pytest.mark.parametrize("args,line", [
    (["explain", str(MEASURED), "-o", "{tmp}/noext"], "noext: cannot draw to a name with no suffix, expected .png, "
                                                       ".svg or .pdf"),
    (["explain", str(MEASURED), "-o", "{tmp}"], ": is a directory, expected a file name"),
    (["diagnose", str(DUMPS), "-o", "{tmp}/d.html"], "d.html: cannot draw to '.html', expected .png, .svg or .pdf"),
    (["tune", str(FIXTURES / "tune" / "uneven.yaml"), "--figure", "{tmp}/f"],
     "--figure {tmp}/f: cannot draw to a name with no suffix, expected .png, .svg or .pdf"),
    (["compare", str(FIXTURES / "1f1b.yaml"), str(MEASURED), "-o", "{tmp}/c.gif"],
     "c.gif: cannot draw to '.gif', expected .png, .svg, .pdf or .html"),
], ids=["explain-no-suffix", "explain-folder", "diagnose-html", "tune-figure-no-suffix", "compare-gif"])
def test_figure_paths_are_checked_first_in_one_line(tmp_path: Path, args: list[str], line: str) -> None:
    r = runner.invoke(app, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert r.exit_code == 2, r.output
    assert r.stderr.count("\n") == 1 and line.replace("{tmp}", str(tmp_path)) in r.stderr, r.stderr


@pytest.mark.parametrize("args,line", [
    (["explain", str(MEASURED), "--top", "-1"], "error: --top: got -1, expected an integer >= 0"),
    (["export", str(FIXTURES / "1f1b.yaml"), "--to", "torchtitan", "-o", "{tmp}/pp.toml.gz"],
     "error: -o {tmp}/pp.toml.gz: .gz output is for --to chrome"),
    (["export", str(FIXTURES / "1f1b.yaml"), "--to", "torchtitan", "-o", "{tmp}/pp.toml", "--comms"],
     "error: --comms applies to --to torch-csv only"),
], ids=["explain-negative-top", "torchtitan-gz", "torchtitan-comms"])
def test_new_commands_refuse_options_they_would_ignore(tmp_path: Path, args: list[str], line: str) -> None:
    r = runner.invoke(app, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == [line.replace("{tmp}", str(tmp_path))]
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


@pytest.mark.parametrize("command", ["explain", "diagnose", "tune", "serve", "export"])
def test_help_of_newer_commands_shows_no_raw_type_or_range(command: str) -> None:
    r = runner.invoke(app, [command, "--help"], env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.output
    assert "[x>=" not in r.stdout and "TEXT" not in r.stdout and "FLOAT" not in r.stdout, r.stdout


# ----------------------------------------------------------------------------------------------
# The typer app: imports, completion, progress, the one error boundary


def test_help_and_a_small_check_import_no_pydantic_and_no_library_for_help(tmp_path: Path) -> None:
    """typer 0.29+ needs pydantic, which the GPU hosts lack; --help loads none of the library, nor the
    markdown and traceback modules typer's help formatter imports for features pptl leaves off."""
    code = ("import sys; from typer.testing import CliRunner; from pptl.cli import app; r = CliRunner(); "
            "h = r.invoke(app, ['--help']); assert h.exit_code == 0, h.output; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'numpy', 'matplotlib', "
            "'networkx', 'yaml') or m in ('pptl.planning', 'pptl.schedules', 'rich.markdown', 'rich.traceback'))); "
            "assert r.invoke(app, ['plan', '-s', '1f1b', '--pp', '2', '-m', '2', '-o', sys.argv[1]]).exit_code == 0; "
            "assert r.invoke(app, ['check', sys.argv[1]]).exit_code == 0; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pydantic'))")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "p.json")], capture_output=True, text=True,
                          cwd=FIXTURES.parent, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[]", "[]"]


@pytest.mark.parametrize("words,completions", [
    ("pptl pl", ["plan"]),
    ("pptl s", ["schedules", "serve"]),
    ("pptl check --p2p n", ["nonblocking", "nccl"]),
    ("pptl export x --to t", ["torch-csv", "torchtitan"]),
], ids=["command", "two-commands", "choice", "export-to"])
def test_shell_completion_completes_commands_and_choices(words: str, completions: list[str]) -> None:
    """What the script `pptl --install-completion` installs asks: bash passes the words typed so far."""
    assert "--install-completion" in runner.invoke(app, ["--help"]).output
    env = {"_PPTL_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
    r = runner.invoke(app, [], env=env, prog_name="pptl")
    assert r.exit_code == 0 and r.output.split() == completions, r.output


def test_every_command_has_help_and_short_h() -> None:
    from pptl.cli import COMMANDS

    for name in COMMANDS:
        long, short = runner.invoke(app, [name, "--help"]), runner.invoke(app, [name, "-h"])
        assert long.exit_code == 0 and long.output == short.output, name
        assert f"Usage: pptl {name} " in long.output, name


def test_progress_shows_on_a_terminal_only_and_never_beside_json(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console
    from rich.status import Status

    from pptl.commands import _shared

    monkeypatch.setattr(_shared, "err", Console(file=io.StringIO(), force_terminal=True))
    with _shared.progress("tuning") as shown:
        assert isinstance(shown, Status)
    with _shared.progress("tuning", json_output=True) as quiet:
        assert not isinstance(quiet, Status)
    monkeypatch.setattr(_shared, "err", Console(file=io.StringIO(), force_terminal=False))
    with _shared.progress("tuning") as quiet:
        assert not isinstance(quiet, Status)
        quiet.update("still quiet")


def test_tune_in_a_pipe_prints_results_without_progress(tmp_path: Path) -> None:
    out = tmp_path / "best.json"
    r = runner.invoke(app, ["tune", str(FIXTURES / "tune" / "uneven.yaml"), "--top", "1", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [f"wrote {out}"]


@pytest.mark.parametrize("error,code", [("InputError", 2), ("InvalidScheduleError", 1), ("RunError", 1)])
def test_the_boundary_gives_each_pptl_error_its_code_and_one_line(monkeypatch: pytest.MonkeyPatch, error: str,
                                                                  code: int) -> None:
    import pptl.errors
    from pptl import planning

    def fail(*a: object, **k: object) -> None:
        raise getattr(pptl.errors, error)("first line\nsecond line")

    monkeypatch.setattr(planning, "check_file", fail)
    r = runner.invoke(app, ["check", str(FIXTURES / "1f1b.yaml")])
    assert r.exit_code == code
    assert r.stderr == "error: first line\\nsecond line\n"


def test_memory_over_a_limit_of_one_unit_reads_singular(tmp_path: Path) -> None:
    # 1F1B pp 4 under a limit of 0.5: each rank is over it at its first forward, holding 1 unit
    plan = tmp_path / "a.json"
    assert runner.invoke(app, ["plan", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8", "-o", str(plan)]).exit_code == 0
    r = runner.invoke(app, ["check", str(plan), "--memory-limit", "0.5"])
    assert r.exit_code == 1
    assert "PP009 error: rank 0 holds 1 activation unit at t=0 (when r0/compute/F s0 mb0 starts), over the limit 0.5; " \
           "peak 4" in r.stdout


def test_check_of_an_empty_name_is_not_called_a_folder() -> None:
    r = runner.invoke(app, ["check", ""])
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == ["error: '': an empty file name; pptl check takes plan, config and schedule files"]


def test_render_window_outside_the_step_says_so() -> None:
    # fixtures/1f1b.yaml runs 0-33: a window of 100-200 draws every rank idle, and the title says why
    r = runner.invoke(app, ["render", str(FIXTURES / "1f1b.yaml"), "--time", "100:200"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0].endswith("· window 100-200, outside the step (0-33)")
    inside = runner.invoke(app, ["render", str(FIXTURES / "1f1b.yaml"), "--time", "10:20"], env={"COLUMNS": "200"})
    assert inside.stdout.splitlines()[0].endswith("· window 10-20")
