"""The array passes of the checker and simulator give what their plain-Python twins give.

``pptl.columns.FORCE`` picks the path; every CSV fixture (valid, invalid, P2P hangs) and mutated
copies go through both, under the three P2P models.
"""
from __future__ import annotations

import random
from collections import Counter
from itertools import chain
from pathlib import Path

import numpy as np
import pytest

from pptl.checks import Context, run_checks
from pptl.checks.p2p import _edges, _rendezvous, _wait_arrays
from pptl.config import Config
from pptl.formats.torch_csv import load_csv_text, to_rows
from pptl.ir import Schedule
from pptl.issue_order import given_program
from pptl.optable import table_of
from pptl.schedules import build_schedule
from pptl.simulate import simulate

ROOT = Path(__file__).resolve().parent.parent
CSVS = sorted([*ROOT.glob("fixtures/csv/*.csv"), *ROOT.glob("fixtures/csv/invalid/*.csv"),
               *ROOT.glob("fixtures/invalid/p2p_*.csv")])
MODES = ("nonblocking", "nccl", "blocking")




def _load(path: Path) -> Schedule:
    return load_csv_text(path.read_text(), report_problems=True)[0]


def _mutated(s: Schedule, seed: int) -> Schedule:
    """The CSV of ``s`` with two cells of one rank swapped, read again (a new issue order)."""
    from pptl.formats.torch_csv import dumps_rows

    rows, _ = to_rows(s, comms=True)
    rng = random.Random(seed)
    row = rng.choice([r for r in rows if len(r) > 1])
    a, b = rng.sample(range(len(row)), 2)
    row[a], row[b] = row[b], row[a]
    return load_csv_text(dumps_rows(rows), report_problems=True)[0]


def _schedules() -> list[tuple[str, Schedule]]:
    out = [(p.name, _load(p)) for p in CSVS]
    base = [s for name, s in out if name.endswith("_comms.csv")]
    out += [(f"mutated{k}", _mutated(base[k % len(base)], k)) for k in range(12)]
    return out


SCHEDULES = _schedules()
# the wait-for graph needs an issue order: the files that give one (compute_comms CSVs and their mutants)
ORDERED = [(n, s) for n, s in SCHEDULES if given_program(s) is not None]


def test_fixtures_are_there() -> None:
    assert len(CSVS) >= 15
    assert len(ORDERED) >= 5


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,schedule", ORDERED, ids=[n for n, _ in ORDERED])
def test_wait_for_edges_on_arrays_are_the_labelled_edges(name: str, schedule: Schedule, mode: str) -> None:
    prog = given_program(schedule)
    assert prog is not None
    rep = _rendezvous(schedule) if mode != "nonblocking" else {}
    cols = table_of(schedule).columns
    seqs = np.fromiter(chain.from_iterable(prog.values()), dtype=np.int64)
    matched = None
    if mode != "nonblocking":
        js = list(rep)
        matched = (np.array([rep[j] for j in js], dtype=np.int64), np.array(js, dtype=np.int64))
    u, v = _wait_arrays(schedule, cols, mode, seqs, [len(q) for q in prog.values()], matched)
    assert Counter(zip(u.tolist(), v.tolist())) == Counter((a, b) for a, b, _ in _edges(schedule, mode, prog, rep))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,schedule", SCHEDULES, ids=[n for n, _ in SCHEDULES])
def test_both_paths_report_the_same_violations(name: str, schedule: Schedule, mode: str, force) -> None:
    force(False)
    plain = run_checks(schedule, p2p=mode)
    force(True)
    arrays = run_checks(schedule, p2p=mode)
    assert arrays == plain


def test_a_hang_is_found_on_both_paths(force) -> None:
    s = _load(ROOT / "fixtures/invalid/p2p_nccl_hang.csv")
    for value in (False, True):
        force(value)
        assert [v.code for v in run_checks(s) if v.code == "PP031"] == ["PP031"]


@pytest.mark.parametrize("family,pp,mb", [("1f1b", 4, 8), ("zb-h1", 4, 8), ("dualpipe", 8, 20),
                                          ("interleaved-1f1b", 4, 8), ("zbv", 4, 8)])
def test_simulation_is_the_same_on_both_paths(family: str, pp: int, mb: int, force) -> None:
    cfg = Config(schedule=family, pp=pp, microbatches=mb, **({"vpp": 2} if family == "interleaved-1f1b" else {}))
    s = build_schedule(cfg)
    force(False)
    plain = simulate(s)
    force(True)
    table_of(s)  # what a check on arrays builds first; the simulator's array passes use it
    arrays = simulate(s)
    assert (arrays.start, arrays.end, arrays.makespan, arrays.critical_path) == \
        (plain.start, plain.end, plain.makespan, plain.critical_path)
    assert arrays.ranks == plain.ranks and arrays.peak_time == plain.peak_time


def test_columns_of_huge_indices_fall_back_to_plain_python(force) -> None:
    s = load_csv_text("0F99999999999999999999999,0B99999999999999999999999\n", microbatches=1,
                      report_problems=True)[0]
    force(True)
    assert Context(s).table is None  # no int64 column holds them: the plain paths run
    assert {v.code for v in run_checks(s)} >= {"PP004"}


def test_a_schedule_keeps_one_table_while_its_ops_are_the_same_list(force) -> None:
    s = build_schedule(Config(schedule="1f1b", pp=2, microbatches=2))
    t = table_of(s)
    assert table_of(s) is t and s.built_table() is t
    force(True)
    assert Context(s).table is t and Context(s).columns is t.columns
    s.ops = list(s.ops)  # another list: the table is built again from it
    assert s.built_table() is None and table_of(s) is not t


def test_a_table_made_schedule_reads_as_its_ops():
    from tests.table_copy import table_made

    s = build_schedule(Config(schedule="dualpipe", pp=4, microbatches=8))
    t = table_made(s)
    assert not t.has_ops() and t.n_ops == len(s.ops)
    assert t.built_table().kinds() == {op.kind for op in s.ops}
    assert [t.built_table().op(i) for i in range(len(s.ops))] == s.ops  # one row at a time
    assert not t.has_ops()
    assert t.deps == s.deps and t.ops == s.ops and t.has_ops()
    assert t == s
