"""pptl.fields: strict readers at their edges (values worked out by hand)."""
from __future__ import annotations

import math

import pytest

from pptl.errors import InputError
from pptl.fields import MAX_NUMBER, strict_flag, strict_int, strict_number


@pytest.mark.parametrize("v", [1, 7])
def test_an_integer_at_either_end_of_its_range_is_kept(v):
    assert strict_int(v, "options.ep", "x.yaml", lo=1, hi=7) == v


@pytest.mark.parametrize("v, got", [(0, "0"), (8, "8"), (True, "True"), ("4", "'4'"), (4.0, "4.0"), (None, "None")])
def test_anything_else_is_one_line_naming_the_field_and_the_range(v, got):
    with pytest.raises(InputError) as e:
        strict_int(v, "options.ep", "x.yaml", lo=1, hi=7, tail=" for schedule 's'")
    assert str(e.value) == f"x.yaml: field 'options.ep': got {got}, expected an integer in 1..7 for schedule 's'"


def test_an_open_range_and_a_required_field():
    assert strict_int(10 ** 12, "pp", "m.yaml", lo=0) == 10 ** 12
    with pytest.raises(InputError, match=r"^m.yaml: field 'pp': got -1, expected an integer >= 0$"):
        strict_int(-1, "pp", "m.yaml", lo=0)
    with pytest.raises(InputError, match=r"^m.yaml: field 'model.layers' is required. Example: layers: 4$"):
        strict_int(None, "model.layers", "m.yaml", lo=1, required=True)


def test_numbers_from_zero_to_the_largest_finite_value():
    assert strict_number(0, "c", "f") == 0.0
    assert strict_number(MAX_NUMBER, "c", "f") == 1e15
    assert strict_number(math.inf, "bw", "f", inf=True, positive=True) == math.inf
    for v, kw in [(math.inf, {}), (math.nan, {}), (-1e-300, {}), (0, {"positive": True}),
                  (True, {}), ("1", {}), (-10**400, {})]:
        with pytest.raises(InputError, match=r"expected a finite number (>|>=) 0$"):
            strict_number(v, "c", "f", **kw)
    # past the bound, yet a number any float holds (or an int past float's range): the bound is said
    for v, kw, what in [(1.0000001e15, {}, "a number in 0..1e15"), (10**15 + 1, {}, "a number in 0..1e15"),
                        (10**400, {}, "a number in 0..1e15"),
                        (1e29, {"positive": True, "inf": True}, "a number above 0, at most 1e15 or .inf")]:
        with pytest.raises(InputError, match=rf", expected {what.replace('.', '[.]')}$"):
            strict_number(v, "c", "f", **kw)


def test_a_flag_is_a_boolean_only():
    assert strict_flag(False, "options.overlap", "f") is False
    for v in (0, 1, "true", None):
        with pytest.raises(InputError, match=r"^f: field 'options.overlap': got .*, expected true or false$"):
            strict_flag(v, "options.overlap", "f")
