"""The command line as users and CI scripts meet it: one wording per option, odd terminals, closed pipes."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import READER_GONE, app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CONFIG = str(FIXTURES / "1f1b.yaml")


@pytest.mark.parametrize("args,line", [
    (["--dpi", "nan"], "error: --dpi: got nan, expected an integer from 30 to 1200"),
    (["--dpi", "-1"], "error: --dpi: got -1, expected an integer from 30 to 1200"),
    (["--font-size", "inf"], "error: --font-size: got inf, expected a number from 4 to 30"),
    (["--font-size", "0"], "error: --font-size: got 0, expected a number from 4 to 30"),
], ids=["dpi-nan", "dpi-negative", "font-inf", "font-zero"])
def test_figure_numbers_are_refused_in_one_wording(tmp_path: Path, args: list[str], line: str) -> None:
    # The option's type knew no range, so NaN read "expected a number" and -1 "expected 30..1200"
    r = runner.invoke(app, ["render", CONFIG, "-o", str(tmp_path / "a.png"), *args])
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == [line] and r.stdout == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["nan", "0.5", "-inf"])
def test_slow_factor_is_refused_in_one_wording(value: str) -> None:
    r = runner.invoke(app, ["run", CONFIG, "--device", "cpu", "--slow-rank", "0", "--slow-factor", value])
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == [f"error: --slow-factor: got {value}, expected a number from 1 to 100"]


@pytest.mark.parametrize("columns", ["0", "-3"])
@pytest.mark.parametrize("args,expected", [
    (["plan", "-h"], "Usage: pptl plan"),
    (["--help"], "Usage: pptl"),
    (["render", CONFIG], "r0 "),
], ids=["command-help", "app-help", "terminal-drawing"])
def test_a_columns_of_zero_still_prints(columns: str, args: list[str], expected: str) -> None:
    # rich took COLUMNS=0 as a width of 0 and printed nothing at all, with exit 0
    r = runner.invoke(app, args, env={"COLUMNS": columns})
    assert r.exit_code == 0, r.output
    assert expected in r.stdout, repr(r.stdout)


def _with_closed_stdout(args: list[str]) -> subprocess.CompletedProcess[str]:
    """``pptl ARGS | true``: the reader of stdout is gone before pptl writes."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "pptl", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=ROOT)
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(args, proc.returncode, "", err)


@pytest.mark.parametrize("args", [
    ["check", CONFIG],  # plain lines: exit 1 would read as "invalid schedule"
    ["plan", CONFIG, "--output", "json"],
    ["schedules"],  # a rich table: rich exits 1 on a broken pipe by itself
    ["plan", "--help"],  # printed while the command line is parsed
], ids=["check-lines", "plan-json", "schedules-table", "help"])
def test_a_reader_that_leaves_early_gets_141_and_no_word(args: list[str]) -> None:
    r = _with_closed_stdout(args)
    assert (r.returncode, r.stderr) == (READER_GONE, ""), r.stderr


def test_a_broken_pipe_that_is_not_stdout_is_not_taken_for_a_reader_that_left(monkeypatch: pytest.MonkeyPatch) -> None:
    from pptl import planning

    def fail(*a: object, **k: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")  # a rank's pipe, say

    monkeypatch.setattr(planning, "check_file", fail)
    r = runner.invoke(app, ["check", CONFIG])
    assert r.exit_code != READER_GONE


@pytest.mark.parametrize("args,line", [
    (["--dpi", "200"], "error: --dpi shapes a figure file but the drawing goes to the terminal; add -o FILE.png "
                       "(or .svg, .pdf, .html) or drop it"),
    (["--size", "7,4", "--no-notes"], "error: --size, --notes/--no-notes shape a figure file but the drawing goes to "
                                      "the terminal; add -o FILE.png (or .svg, .pdf, .html) or drop them"),
    (["--title", "auto", "--legend", "none", "--split", "stack"],
     "error: --title, --legend, --split shape a figure file but the drawing goes to the terminal; add -o FILE.png "
     "(or .svg, .pdf, .html) or drop them"),
], ids=["dpi", "size-notes", "title-legend-split"])
def test_render_refuses_figure_options_the_terminal_drawing_would_ignore(args: list[str], line: str) -> None:
    # as it refuses --plotlyjs and --width where they change nothing, instead of drawing without them
    r = runner.invoke(app, ["render", CONFIG, *args])
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == [line] and r.stdout == ""


def test_render_options_that_shape_the_terminal_drawing_still_work() -> None:
    r = runner.invoke(app, ["render", CONFIG, "--style", "default", "--time", "0:20", "--width", "60"])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("1f1b: ")
