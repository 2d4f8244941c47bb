"""The hand-written mutants (tests/hand_mutants.py) still point at code that exists.

Running them takes minutes and is not part of ``make test``; this checks, in a second, that each
edit's text is in its file exactly once and that each named test exists, so a mutant does not go stale
unseen when the code it mutates, or the test that kills it, moves."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("hand_mutants", ROOT / "tests" / "hand_mutants.py")
assert _spec is not None and _spec.loader is not None
hand_mutants = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("hand_mutants", hand_mutants)  # its dataclasses look their module up
_spec.loader.exec_module(hand_mutants)


@pytest.mark.parametrize("m", hand_mutants.MUTANTS, ids=lambda m: m.name)
def test_each_mutant_edits_one_place_that_exists(m):
    text = (ROOT / m.path).read_text()
    assert text.count(m.old) == 1, f"{m.name}: {m.old!r} found {text.count(m.old)} times in {m.path}"
    assert m.old != m.new
    for t in m.tests:
        path, _, name = t.partition("::")
        assert (ROOT / path).is_file(), t
        assert not name or f"def {name.split('[')[0]}(" in (ROOT / path).read_text(), t


def test_mutant_names_are_unique():
    names = [m.name for m in hand_mutants.MUTANTS]
    assert len(names) == len(set(names))
