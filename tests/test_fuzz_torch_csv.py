"""Fuzz the torch schedule CSV reader (compute_only and compute_comms) through every command that
reads it: check, render, export and plan --from. Never a traceback, a hang or a memory blow-up."""
from __future__ import annotations

import random
from pathlib import Path

from fuzzing import EXAMPLES, NASTY_CELLS, clean_run, mutate_bytes, mutate_cells
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CSVS = sorted((FIXTURES / "csv").glob("*.csv")) + sorted((FIXTURES / "csv" / "invalid").glob("*.csv")) + \
    sorted((FIXTURES / "invalid").glob("*.csv"))

_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

#: Every command that reads a CSV, with the options that change how it is read.
_COMMANDS = [
    ["check"], ["check", "--output", "github"], ["check", "--p2p", "blocking"], ["render", "--width", "80"],
    ["export", "--to", "chrome"], ["export", "--to", "torch-csv", "--comms"], ["plan", "--from"],
]
_OPTIONS = [[], ["--microbatches", "1"], ["--microbatches", "3"], ["--microbatches", "1000000000"],
            ["--microbatches", "0"], ["--placement", "loop"], ["--placement", "v"]]


def _run(path: Path, rnd: random.Random) -> int:
    cmd = list(rnd.choice(_COMMANDS))
    args = cmd + [str(path)]
    opts = rnd.choice(_OPTIONS)
    if cmd[0] == "render":
        opts = []  # render takes the file as it is
    elif cmd[0] == "plan" and opts[:1] == ["--placement"]:
        opts = []
    code, _ = clean_run(args + opts)
    return code


def test_the_csv_fixtures_exist() -> None:
    forms = {"comms" in p.name for p in CSVS}
    assert len(CSVS) >= 10 and forms == {True, False}


@_SETTINGS
@given(st.sampled_from(CSVS), st.randoms(use_true_random=False))
def test_fuzz_csv_bytes(tmp_path: Path, src: Path, rnd: random.Random) -> None:
    p = tmp_path / "s.csv"
    p.write_bytes(mutate_bytes(src.read_bytes(), rnd))
    _run(p, rnd)


@_SETTINGS
@given(st.sampled_from(CSVS), st.randoms(use_true_random=False))
def test_fuzz_csv_cells(tmp_path: Path, src: Path, rnd: random.Random) -> None:
    p = tmp_path / "s.csv"
    p.write_text(mutate_cells(src.read_text(), rnd), encoding="utf-8", errors="surrogatepass")
    _run(p, rnd)


@_SETTINGS
@given(st.lists(st.lists(st.sampled_from(NASTY_CELLS), max_size=12), min_size=0, max_size=6),
       st.randoms(use_true_random=False))
def test_fuzz_csv_from_nasty_cells(tmp_path: Path, rows: list[list[str]], rnd: random.Random) -> None:
    p = tmp_path / "s.csv"
    p.write_text("\n".join(",".join(r) for r in rows), encoding="utf-8")
    _run(p, rnd)
