"""`pptl demo`: every example config drawn as PNG + HTML, a table of what was written."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.demo import default_fixtures_dir, example_files, run_demo
from pptl.errors import InputError
from pptl.formats.structured import read_structured
from pptl.schedules import FAMILIES, get_family

runner = CliRunner()


@pytest.fixture
def examples(tmp_path: Path) -> Path:
    d = tmp_path / "fixtures"
    (d / "invalid").mkdir(parents=True)
    (d / "bad").mkdir()
    (d / "one.yaml").write_text("schedule: 1f1b\npp: 2\nmicrobatches: 3\n")
    (d / "two.toml").write_text('schedule = "gpipe"\npp = 2\nmicrobatches = 2\n')
    (d / "invalid" / "skipped.yaml").write_text("schedule: nonsense\n")
    (d / "bad" / "skipped.yaml").write_text("schedule: nonsense\n")
    (d / "notes.txt").write_text("not an example")
    return d


def test_examples_are_top_level_configs_only(examples: Path) -> None:
    assert [p.name for p in example_files(examples)] == ["one.yaml", "two.toml"]


def test_repository_examples_cover_every_style() -> None:
    names = [p.name for p in example_files(default_fixtures_dir())]
    assert names and not any(n.startswith(("invalid", "bad")) for n in names)
    styles = {f.style for f in FAMILIES.values()}
    drawn = {get_family(read_structured(p)["schedule"]).style for p in example_files(default_fixtures_dir())}
    assert drawn == styles  # every figure style (the seeds' included) has an example in fixtures/


def test_run_demo_writes_png_and_html(examples: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"  # created; a missing parent is refused (tests/test_cli_first_hour.py)
    items = run_demo(out, fixtures=examples)
    assert [(i.fixture, i.family, i.style, i.ok) for i in items] == [("one.yaml", "1f1b", "default", True),
                                                                    ("two.toml", "gpipe", "default", True)]
    for i in items:
        assert [Path(f).suffix for f in i.files] == [".png", ".pdf", ".html"]
        assert all(Path(f).stat().st_size > 1000 for f in i.files)
    assert sorted(p.name for p in out.iterdir()) == ["one.html", "one.pdf", "one.png", "plotly.min.js", "two.html",
                                                     "two.pdf", "two.png"]


def test_cli_demo_prints_the_table(examples: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["demo", "--out", str(out), "--fixtures", str(examples)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split("┃")[0].strip() == "example"
    row = next(line for line in lines if line.startswith("one.yaml"))
    # the same numbers as `pptl plan --schedule 1f1b --pp 2 --microbatches 3`
    assert [c.strip() for c in row.split("│")] == ["one.yaml", "1f1b", "default", "24", "12", "25.0%",
                                                   "one.png one.pdf one.html"]
    assert lines[-1] == f"2 of 2 examples drawn into {out}"


def test_a_failing_example_is_reported_and_exits_1(examples: Path, tmp_path: Path) -> None:
    (examples / "zzz.yaml").write_text("schedule: 1f1b\npp: 0\nmicrobatches: 2\n")
    result = runner.invoke(app, ["demo", "--out", str(tmp_path / "out"), "--fixtures", str(examples)])
    assert result.exit_code == 1, result.output
    row = next(line for line in result.stdout.splitlines() if line.startswith("zzz.yaml"))
    assert "error: " in row and "pp" in row
    assert result.stdout.splitlines()[-1].startswith("2 of 3 examples drawn")
    assert (tmp_path / "out" / "one.png").exists()  # the others were still drawn


def test_missing_fixtures_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nowhere: fixtures folder not found \(pass --fixtures DIR\)"):
        run_demo(tmp_path / "out", fixtures=tmp_path / "nowhere")
    result = runner.invoke(app, ["demo", "--out", str(tmp_path / "o"), "--fixtures", str(tmp_path / "nowhere")])
    assert result.exit_code == 2
    assert "fixtures folder not found" in result.stderr


def test_out_must_be_a_folder(examples: Path, tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(InputError, match=r"file: exists and is not a folder"):
        run_demo(f, fixtures=examples)


def test_fixtures_that_is_a_file_or_holds_no_example(tmp_path: Path) -> None:
    """A file given as the folder was called "not found"; a folder with no example drew "0 of 0" and
    exited 0. Each is one line, exit 2."""
    f = tmp_path / "p.json"
    f.write_text("{}")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    for given, line in ((f, "p.json: is a file; --fixtures takes the folder of example configs"),
                        (empty, "empty: holds no example (.json, .toml, .yaml, .yml) to draw")):
        result = runner.invoke(app, ["demo", "--out", str(tmp_path / "o"), "--fixtures", str(given)])
        assert result.exit_code == 2, result.output
        assert result.stderr.strip().splitlines() == [f"error: {tmp_path / line}"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_out_folder_that_cannot_be_made_is_one_line(examples: Path) -> None:
    result = runner.invoke(app, ["demo", "--out", "/proc/pptl-demo", "--fixtures", str(examples)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: /proc/pptl-demo: cannot make the folder: No such file or directory"]
