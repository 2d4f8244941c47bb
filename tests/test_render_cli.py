"""`pptl render`: terminal by default, files with -o / --html, one-line errors with exit 2."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl import planning
from pptl.cli import app
from pptl.config import load_config
from pptl.render.samples import weight_update_sample

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CONFIG = str(FIXTURES / "1f1b.yaml")


def test_terminal_by_default_at_the_given_width() -> None:
    result = runner.invoke(app, ["render", CONFIG, "--width", "70"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "1f1b: pp=4 vpp=1 micro-batches=8 makespan=33 bubble=27.3%"
    assert all(len(line) <= 70 for line in lines)
    assert "F=Forward  B=Backward" in lines


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf", ".html"], ids=str)
def test_out_file_by_suffix(tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"fig{suffix}"
    result = runner.invoke(app, ["render", CONFIG, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stderr.strip() == f"wrote {out}"
    assert out.stat().st_size > 1000
    assert result.stdout == ""


def test_html_flag_writes_next_to_the_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["render", CONFIG, "--html"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "1f1b.html").stat().st_size > 1_000_000
    assert result.stderr.strip() == "wrote 1f1b.html"


def test_plan_and_timeline_files_render(tmp_path: Path) -> None:
    result = planning.plan(load_config(CONFIG))
    plan_file = tmp_path / "plan.json"
    planning.write_plan(result, plan_file)
    tl_file = tmp_path / "tl.json"
    tl_file.write_text(json.dumps(weight_update_sample().to_dict()))
    r1 = runner.invoke(app, ["render", str(plan_file), "--width", "80"])
    assert r1.exit_code == 0, r1.output
    assert r1.stdout.splitlines()[0].startswith("1f1b: pp=4")
    r2 = runner.invoke(app, ["render", str(tl_file), "--width", "80"])
    assert r2.exit_code == 0, r2.output
    assert "H2D buf" in r2.stdout  # the weight-update style, chosen from the timeline's family


def test_style_option_overrides_auto() -> None:
    result = runner.invoke(app, ["render", CONFIG, "--style", "dualpipe", "--width", "80"])
    assert result.exit_code == 0, result.output
    assert "Dev 0" in result.stdout and "r0" not in result.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--style", "fancy"], "error: --style: got 'fancy', expected one of auto, default, dualpipe, moe, weight-update"),
    (["-o", "x.txt"], "error: x.txt: cannot draw to '.txt', expected one of .png, .svg, .pdf, .html"),
    (["--html", "-o", "x.png"], "error: --html writes HTML but -o x.png is not .html; drop --html or name a .html file"),
    (["--width", "10"], "error: --width: got 10, expected an integer from 40 to 1000"),
], ids=["style", "suffix", "html-vs-png", "width"])
def test_usage_errors_exit_2_with_one_line(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["render", CONFIG, *args])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == message


def test_missing_file_and_missing_folder(tmp_path: Path) -> None:
    r1 = runner.invoke(app, ["render", str(tmp_path / "nope.yaml")])
    assert r1.exit_code == 2 and len(r1.stderr.strip().splitlines()) == 1
    assert "nope.yaml" in r1.stderr
    r2 = runner.invoke(app, ["render", CONFIG, "-o", str(tmp_path / "no" / "fig.png")])
    assert r2.exit_code == 2
    assert "does not exist" in r2.stderr


def test_bad_config_is_one_line() -> None:
    result = runner.invoke(app, ["render", str(FIXTURES / "bad" / "unknown_schedule.yaml")])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1


def test_time_window(tmp_path: Path) -> None:
    result = runner.invoke(app, ["render", CONFIG, "--time", "10:20", "--width", "80"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].endswith("· window 10-20")
    assert any(line.strip().startswith("10 ") and line.rstrip().endswith("20") for line in lines)
    bad = runner.invoke(app, ["render", CONFIG, "--time", "20:10"])
    assert bad.exit_code == 2
    assert bad.stderr.strip() == ("error: --time: got '20:10', expected START:END with START < END "
                                  "(e.g. --time 80:110)")
