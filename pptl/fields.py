"""Strict readers for one field of a parsed file (pure): an integer in a range, a finite number, a flag.

Strict means the value's own type: ``4`` is an integer, ``"4"`` and ``4.0`` are not, and ``True``
is neither. A run's model file (``pptl tune``) and a family's options are read this way; a
schedule config's top-level fields are lenient on purpose (YAML users write ``pp: "4"``, see
:mod:`pptl.config`). Every refusal is one :class:`~pptl.errors.InputError` line: the source, the
field, what it got and what it expects, and ``tail`` (e.g. " for schedule 'moe-1f1b-overlap'").
"""
from __future__ import annotations

import math
from typing import Any

from pptl.errors import InputError
from pptl.formats._quote import quoted

__all__ = ["strict_int", "strict_number", "strict_flag", "MAX_NUMBER"]

MAX_NUMBER = 1e15
"""Largest finite number a field may hold (:data:`pptl.config.MAX_VALUE`): sums of millions of
them stay finite."""


def strict_int(v: Any, field: str, source: str, *, lo: int, hi: int | None = None, required: bool = False,
               tail: str = "") -> int:
    """``v`` when it is an integer in ``lo..hi`` (``hi`` None: no upper bound)."""
    if v is None and required:
        raise InputError(f"{source}: field '{field}' is required. Example: {field.split('.')[-1]}: 4{tail}")
    span = f">= {lo}" if hi is None else f"in {lo}..{hi}"
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        raise InputError(f"{source}: field '{field}': got {v!r}, expected an integer {span}{tail}")
    return v


def strict_number(v: Any, field: str, source: str, *, positive: bool = False, inf: bool = False,
                  tail: str = "") -> float:
    """``v`` as a float when it is a number ``>= 0`` (``> 0`` with ``positive``) and at most
    :data:`MAX_NUMBER` (or infinite, with ``inf``)."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool)
    # past the bound but a number any float (or int) holds: say the bound, not "finite"; an int past
    # float's range (YAML reads 10**400 as one) must not reach float()
    if ok and (v > MAX_NUMBER if isinstance(v, int) else math.isfinite(v) and v > MAX_NUMBER):
        bound = f"{MAX_NUMBER:.0e}".replace("e+", "e")
        what = f"a number above 0, at most {bound}" if positive else f"a number in 0..{bound}"
        raise InputError(f"{source}: field '{field}': got {quoted(v)}, expected {what}{' or .inf' if inf else ''}{tail}")
    f = float(v) if ok and not (isinstance(v, int) and v < -MAX_NUMBER) else math.nan
    ok = ok and f == f and (f > 0 if positive else f >= 0) and (f <= MAX_NUMBER or (inf and f == math.inf))
    if not ok:
        raise InputError(f"{source}: field '{field}': got {quoted(v)}, expected a finite number "
                         f"{'> 0' if positive else '>= 0'}{tail}")
    return f


def strict_flag(v: Any, field: str, source: str, *, tail: str = "") -> bool:
    """``v`` when it is ``true`` or ``false``."""
    if not isinstance(v, bool):
        raise InputError(f"{source}: field '{field}': got {v!r}, expected true or false{tail}")
    return v
