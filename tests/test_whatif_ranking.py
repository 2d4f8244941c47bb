"""Ranking up to the measurement's ties (pptl.whatif.ranking), numbers worked out by hand."""
from __future__ import annotations

import pytest

from pptl.whatif.ranking import launch_spread, rank_agreement


def test_launch_spread_is_the_relative_move_either_way():
    # 94.29 then 94.76 ms (call 6's 1F1B, calibrating launch then the later one): 0.47 / 94.29 = 0.4985%
    assert launch_spread(94.29, 94.76) == pytest.approx(0.47 / 94.29)
    assert launch_spread(50.0, 49.5) == pytest.approx(0.01)
    assert launch_spread(40.0, 40.0) == 0.0


@pytest.mark.parametrize("a,b", [(0.0, 1.0), (1.0, 0.0), (-1.0, 1.0)])
def test_launch_spread_refuses_a_mean_that_is_not_positive(a, b):
    with pytest.raises(ValueError, match="positive"):
        launch_spread(a, b)


def test_a_pair_exactly_at_the_tolerance_ties_whichever_comes_first():
    # 1.25 / 1.0 - 1 = 0.25 exactly in binary floating point
    for measured in ({"a": 1.25, "b": 1.0}, {"b": 1.0, "a": 1.25}, {"a": 1.0, "b": 1.25}):
        got = rank_agreement(measured, {"a": 2.0, "b": 1.0}, 0.25)
        assert got.ties == (("a", "b"),) and got.resolved == () and got.alike


def test_a_pair_just_over_the_tolerance_is_resolved_and_must_be_ordered_alike():
    got = rank_agreement({"a": 1.25, "b": 1.0}, {"a": 2.0, "b": 1.0}, 0.2499)
    assert got.resolved == (("b", "a"),) and got.ties == () and got.disagree == () and got.alike
    wrong = rank_agreement({"a": 1.25, "b": 1.0}, {"a": 1.0, "b": 2.0}, 0.2499)
    assert wrong.disagree == (("b", "a"),) and not wrong.alike


def test_a_prediction_that_ties_a_resolved_pair_disagrees():
    got = rank_agreement({"a": 1.1, "b": 1.2}, {"a": 1.15, "b": 1.15}, 0.01)
    assert got.resolved == (("a", "b"),) and got.disagree == (("a", "b"),)


def test_tolerance_zero_is_the_strict_order_and_equal_values_still_tie():
    got = rank_agreement({"x": 1.0, "y": 1.0, "z": 1.0001}, {"x": 3.0, "y": 1.0, "z": 2.0}, 0.0)
    # x and y measured equal: a tie even at 0; x < z and y < z resolved; predicted z (2.0) is not over x (3.0)
    assert got.ties == (("x", "y"),)
    assert got.resolved == (("x", "z"), ("y", "z"))
    assert got.disagree == (("x", "z"),)


def test_call_6s_sensitivities_one_tie_and_two_resolved_pairs():
    # measured 1.114, 1.102, 1.114 within 0.5% (the launch spread): gpipe and interleaved tie (0.0%),
    # 1f1b is 1.09% under both; the model's 1.156, 1.131, 1.110 puts 1f1b over interleaved
    measured = {"gpipe": 1.114, "1f1b": 1.102, "interleaved": 1.114}
    got = rank_agreement(measured, {"gpipe": 1.156, "1f1b": 1.131, "interleaved": 1.110}, 0.005)
    assert got.ties == (("gpipe", "interleaved"),)
    assert got.resolved == (("1f1b", "gpipe"), ("1f1b", "interleaved"))
    assert got.disagree == (("1f1b", "interleaved"),) and not got.alike


def test_all_tied_resolves_nothing_and_asks_nothing():
    # call 5 (hidden 2560): 1.144, 1.146, 1.147, at most 0.26% apart, under its 0.59% launch spread
    got = rank_agreement({"g": 1.144, "f": 1.146, "i": 1.147}, {"g": 1.149, "f": 1.123, "i": 1.110}, 0.0059)
    assert got.resolved == () and len(got.ties) == 3 and got.alike


def test_misuse_is_refused():
    with pytest.raises(ValueError, match="different plans"):
        rank_agreement({"a": 1.0}, {"b": 1.0}, 0.0)
    with pytest.raises(ValueError, match="tolerance"):
        rank_agreement({"a": 1.0}, {"a": 1.0}, -0.001)
    with pytest.raises(ValueError, match="positive"):
        rank_agreement({"a": 0.0, "b": 1.0}, {"a": 1.0, "b": 1.0}, 0.0)
