from __future__ import annotations

import pytest

from pptl.intervals import overlap_length, union


def test_union_merges_touching_and_drops_empty() -> None:
    assert union([(3, 4), (0, 1), (1, 2), (5, 5), (3.5, 6)]) == [(0, 2), (3, 6)]


@pytest.mark.parametrize("xs, ys, expected", [
    ([(0, 10)], [(2, 3), (5, 7)], 3.0),
    ([(0, 1), (2, 3)], [(1, 2)], 0.0),
    ([(0, 4), (6, 8)], [(3, 7)], 2.0),
    ([], [(0, 1)], 0.0),
], ids=["inside", "touching", "straddling", "empty"])
def test_overlap_length(xs: list, ys: list, expected: float) -> None:
    assert overlap_length(xs, ys) == expected
