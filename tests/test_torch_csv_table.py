"""A torch CSV read on arrays (a table-made schedule) is the schedule the cell-by-cell reader builds.

``pptl.columns.FORCE`` picks the path: every CSV fixture (valid, invalid, P2P hangs) and mutated
copies are read both ways; ops, lanes, facts, notes, problems, line numbers and every rule's
violations must agree.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from pptl import columns
from pptl.checks import run_checks
from pptl.errors import InputError
from pptl.formats.torch_csv import dumps_rows, load_csv_text, read_csv, to_rows
from pptl.formats.torch_csv_table import cells_of_text

ROOT = Path(__file__).resolve().parent.parent
CSVS = sorted([*ROOT.glob("fixtures/csv/*.csv"), *ROOT.glob("fixtures/csv/invalid/*.csv"),
               *ROOT.glob("fixtures/invalid/p2p_*.csv")])




def _mutants() -> list[tuple[str, str]]:
    """compute_comms texts with two cells of one rank swapped (new issue orders, some invalid)."""
    base = [load_csv_text(p.read_text(), report_problems=True)[0] for p in CSVS if p.name.endswith("_comms.csv")]
    out = []
    for k in range(12):
        rows, _ = to_rows(base[k % len(base)], comms=True)
        rng = random.Random(k)
        row = rng.choice([r for r in rows if len(r) > 1])
        a, b = rng.sample(range(len(row)), 2)
        row[a], row[b] = row[b], row[a]
        out.append((f"mutated{k}", dumps_rows(rows)))
    return out


TEXTS = [(p.name, p.read_text()) for p in CSVS] + _mutants()
OPTIONS = [{}, {"placement": "loop"}, {"placement": "v"}, {"microbatches": 3}]


def _read(text: str, arrays: bool, **kw):
    columns.FORCE = arrays
    try:
        return load_csv_text(text, report_problems=True, **kw)
    except InputError as e:
        return str(e)
    finally:
        columns.FORCE = None


def test_fixtures_cover_both_ways_in() -> None:
    fast = [name for name, text in TEXTS if cells_of_text(text) is not None]
    assert len(CSVS) >= 15 and 5 <= len(fast) < len(TEXTS)  # torch's own form, and FSDP/typos cell by cell


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "inferred")
@pytest.mark.parametrize("name,text", TEXTS, ids=[n for n, _ in TEXTS])
def test_table_path_reads_the_same_schedule(name: str, text: str, options: dict) -> None:
    plain, table = _read(text, False, **options), _read(text, True, **options)
    if isinstance(plain, str):
        assert table == plain  # the same one-line error
        return
    (a, notes_a, problems_a, lines_a), (b, notes_b, problems_b, lines_b) = plain, table
    assert a.built_table() is None and b.built_table() is not None and not b.has_ops()
    assert (notes_b, problems_b, lines_b) == (notes_a, problems_a, lines_a)
    assert (b.pp, b.num_stages, b.microbatches, b.directions, b.config, b.meta) == \
        (a.pp, a.num_stages, a.microbatches, a.directions, a.config, a.meta)
    assert list(b.lanes.items()) == list(a.lanes.items())  # same lanes, in the same order
    assert sorted(b.deps) == sorted(a.deps)
    assert b.ops == a.ops


@pytest.mark.parametrize("name,text", TEXTS, ids=[n for n, _ in TEXTS])
def test_table_path_reports_the_same_violations(name: str, text: str, tmp_path: Path, force) -> None:
    path = tmp_path / "s.csv"
    path.write_text(text)
    out = []
    for arrays in (False, True):
        force(arrays)
        try:
            loaded = read_csv(path, report_problems=True)
        except InputError as e:
            out.append(str(e))
            continue
        found = list(loaded.problems) + run_checks(loaded.schedule, p2p="nccl")
        out.append((found, [loaded.locate(op) for v in found for op in v.ops], loaded.notes))
    assert out[0] == out[1]


def test_a_large_file_in_torchs_form_builds_no_op_objects() -> None:
    rows = [[f"{s}{k}{m}" for m in range(600) for s in (r, r + 4) for k in ("F", "B")] for r in range(4)]
    rows[1][5] = "(1F3;5B2)OVERLAP_F_B"
    schedule, notes, problems, lines = load_csv_text(dumps_rows(rows))
    assert schedule.n_ops == 4 * 2400 >= columns.VECTOR_MIN_OPS // 4
    assert not schedule.has_ops() and lines == [1, 2, 3, 4] and problems == []
    op = schedule.built_table().op(2400 + 5)
    assert (op.kind, op.stage, op.mb, op.pair) == ("FB", 1, 3, (5, 2, 0))


@pytest.mark.parametrize("text", [
    "0F0,(0F1;1F0)OVERLAP_F_B\n",  # two forwards overlapped: the cell-by-cell reader names the cell
    "0F0, 0B0\n",  # a space: not torch's form
    "0F0,0UNSHARD\n",  # FSDP: no micro-batch
    "0F0,0F1234567890123456789\n",  # wider than int64
    "0F٣\n",  # a digit of another script
    "",
])
def test_other_forms_are_read_cell_by_cell(text: str) -> None:
    assert cells_of_text(text) is None
    plain, table = _read(text, False, microbatches=1), _read(text, True, microbatches=1)
    if isinstance(plain, str):
        assert table == plain
    else:
        assert table[1:] == plain[1:] and table[0].ops == plain[0].ops and table[0].lanes == plain[0].lanes


def test_array_threshold_is_lower_once_numpy_is_imported(monkeypatch) -> None:
    import numpy  # noqa: F401

    low = columns.ARRAYS_MIN_OPS_NUMPY_LOADED
    assert low < columns.VECTOR_MIN_OPS
    assert columns.use_arrays(low) and not columns.use_arrays(low - 1)
    monkeypatch.delitem(sys.modules, "numpy")  # a process that has not paid numpy's import
    assert not columns.use_arrays(low) and not columns.use_arrays(columns.VECTOR_MIN_OPS - 1)
    assert columns.use_arrays(columns.VECTOR_MIN_OPS)
