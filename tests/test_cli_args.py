"""The command-line grammar (pptl/cli_args.py): values by type, lists, on/off flags, positionals
around options, and every mistake as one UsageError in the words pptl has always used."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Annotated, Optional

import pytest

from pptl.cli_args import Argument, Call, Commands, Option, Shown, UsageError

ROOT = Path(__file__).resolve().parent.parent

cli = Commands("prog", help="A test program.", version="prog 1.2")


@cli.command("go")
def go(
    first: Annotated[Path, Argument(help="First file.")],
    second: Annotated[Optional[str], Argument(help="Second word.")] = None,
    n: Annotated[Optional[int], Option("--n", "-n", help="A count.")] = None,
    limit: Annotated[Optional[float], Option("--limit", min=0, help="At least 0.")] = None,
    cost: Annotated[Optional[list[str]], Option("--cost", metavar="K=V", help="Repeatable.")] = None,
    split: Annotated[Optional[bool], Option("--split/--no-split", help="On or off.")] = None,
    verbose: Annotated[bool, Option("--verbose", help="Say more.")] = False,
    title: Annotated[str, Option("--title", help="A title.")] = "auto",
) -> None:
    """Go somewhere.

    A second paragraph."""


@cli.command("many")
def many(
    files: Annotated[list[str], Argument(help="Files.")],
    to: Annotated[str, Option("--to", metavar="a|b", help="Where.")],
) -> None:
    """Take many files."""


def _kwargs(argv: list[str]) -> dict[str, object]:
    call = cli.parse(argv)
    assert isinstance(call, Call)
    return call.kwargs


def _error(argv: list[str]) -> str:
    with pytest.raises(UsageError) as e:
        cli.parse(argv)
    return str(e.value)


def test_values_by_type_and_defaults() -> None:
    kw = _kwargs(["go", "a.json", "--n", "4", "--limit", "1.5"])
    assert kw == {"first": Path("a.json"), "second": None, "n": 4, "limit": 1.5, "cost": None, "split": None,
                  "verbose": False, "title": "auto"}


@pytest.mark.parametrize("text,value", [("4", 4), (" 4", 4), ("+4", 4), ("4.0", 4), ("4_0", 40), ("-3", -3)])
def test_whole_numbers_are_ints(text: str, value: int) -> None:
    assert _kwargs(["go", "a", "--n", text])["n"] == value


def test_repeated_option_collects_in_order_and_on_off_pair() -> None:
    kw = _kwargs(["go", "a", "--cost", "F=1,B=2", "--cost", "W=1", "--split", "--verbose"])
    assert kw["cost"] == ["F=1,B=2", "W=1"] and kw["split"] is True and kw["verbose"] is True
    assert _kwargs(["go", "a", "--no-split"])["split"] is False


def test_positionals_around_options_and_after_double_dash() -> None:
    kw = _kwargs(["go", "a", "--n", "2", "b"])
    assert kw["first"] == Path("a") and kw["second"] == "b" and kw["n"] == 2
    kw = _kwargs(["go", "--n", "2", "--", "-a", "-b"])
    assert kw["first"] == Path("-a") and kw["second"] == "-b"
    assert _kwargs(["many", "x", "--to", "a", "y", "z"])["files"] == ["x", "y", "z"]


def test_an_option_takes_the_next_word_even_when_it_starts_with_a_dash() -> None:
    assert _kwargs(["go", "a", "--title", "-x"])["title"] == "-x"
    assert _kwargs(["go", "a", "-n", "-5"])["n"] == -5
    assert _kwargs(["go", "a", "--title=--n"])["title"] == "--n"


@pytest.mark.parametrize("argv,line", [
    (["go", "a", "--n", "4.5"], "--n: got '4.5': input should be a valid integer, unable to parse string as an integer"),
    (["go", "a", "-n", "x"], "--n: got 'x': input should be a valid integer, unable to parse string as an integer"),
    (["go", "a", "--limit", "abc"], "--limit: got 'abc': input should be a valid number, unable to parse string as a "
                                    "number"),
    (["go", "a", "--limit=-1"], "--limit: got '-1': input should be greater than or equal to 0"),
    (["go", "a", "--limit", "nan"], "--limit: got 'nan': input should be greater than or equal to 0"),
    (["go"], "Missing argument 'FIRST'"),
    (["many", "x"], "Missing option '--to'"),
    (["many", "--to", "a"], "Missing argument 'FILES'"),
    (["go", "a", "b", "c", "d"], "Got unexpected extra argument(s) (c d)"),
    (["go", "a", "--spilt"], "No such option: --spilt (Possible options: --cost, --no-split, --split)"),
    (["go", "a", "--bogus=1", "--help"], "No such option: --bogus (Possible options: --cost, --verbose)"),
    (["go", "a", "--n"], "Option '--n' requires an argument"),
    (["go", "a", "-n"], "Option '-n' requires an argument"),
    (["go", "a", "--verbose=yes"], "Option '--verbose' does not take a value"),
    (["goo"], "No such command 'goo'. Did you mean 'go'?"),
    (["--bogus"], "No such option: --bogus"),
], ids=["float-for-int", "short-name", "not-a-number", "below-min", "nan", "missing-argument", "missing-option",
        "missing-list", "extra", "typo", "unknown-before-help", "no-value", "no-value-short", "flag-value",
        "unknown-command", "unknown-top-option"])
def test_mistakes_are_one_usage_error(argv: list[str], line: str) -> None:
    assert _error(argv) == line


def test_usage_error_names_the_command_whose_help_to_read() -> None:
    with pytest.raises(UsageError) as e:
        cli.parse(["go", "a", "--n", "x"])
    assert e.value.command == "prog go"


def test_help_version_and_no_arguments() -> None:
    assert cli.parse(["--version", "go"]) == Shown("prog 1.2\n")
    bare = cli.parse([])
    assert isinstance(bare, Shown) and bare.stderr and bare.exit_code == 2 and "Commands:" in bare.text
    shown = cli.parse(["go", "--n", "x", "-h"])  # help before any value is converted
    assert isinstance(shown, Shown) and shown.exit_code == 0
    lines = shown.text.splitlines()
    assert lines[0] == "Usage: prog go [OPTIONS] FIRST [SECOND]"
    assert "  Go somewhere." in lines and "  A second paragraph." in lines
    assert any(line.startswith("  FIRST ") and line.endswith("First file.  [required]") for line in lines)
    assert any(line.startswith("  -n, --n INT ") for line in lines)
    assert any(line.startswith("  --cost K=V ") for line in lines)
    assert any(line.startswith("  --split / --no-split ") for line in lines)
    assert any(line.endswith("A title.  [default: auto]") for line in lines)
    assert lines[-1].startswith("  -h, --help ")


def test_pptl_starts_without_typer_or_pydantic(tmp_path: Path) -> None:
    code = ("import sys; from pptl.cli import app; app(['plan', '-s', '1f1b', '--pp', '2', '-m', '2', '-o', sys.argv[1]]);"
            " app(['check', sys.argv[1]]); print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'typer', 'click', 'pydantic'}))")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "p.json")], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]"
