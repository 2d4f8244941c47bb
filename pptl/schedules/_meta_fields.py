"""Readers of ``Schedule.meta`` values for the typed family metadata (:mod:`pptl.schedules._moe_meta`,
:mod:`pptl.schedules._weight_update_meta`).

A plan file's meta comes from elsewhere: each reader checks one value once and raises
:class:`pptl.errors.InputError` naming the field, so the readers of the typed view need no checks.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Generic, Mapping, TypeVar

from pptl.errors import InputError

__all__ = ["meta_of", "read_int", "read_bool", "read_number", "read_list", "fail", "ViewCache"]

_MISSING: Any = object()


def meta_of(meta: object) -> Mapping[str, Any]:
    """``meta`` itself, or an empty mapping for a schedule built with something else (tests)."""
    return meta if isinstance(meta, Mapping) else {}


def fail(source: str, field: str, got: object, want: str) -> InputError:
    head = f"{source}: " if source else ""
    return InputError(f"{head}field 'meta.{field}': got {str(got)[:80]}, expected {want}")


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def read_int(x: object, field: str, source: str, lo: int = 0, hi: int = 1 << 62) -> int:
    """An integer in lo..hi; an integral JSON float (``8.0e9``) is read as its integer."""
    if isinstance(x, float) and math.isfinite(x) and x == int(x):
        x = int(x)
    if not _is_int(x) or not lo <= x <= hi:  # type: ignore[operator]
        raise fail(source, field, x, f"an integer in {lo}..{hi}")
    return int(x)  # type: ignore[call-overload, no-any-return]


def read_number(x: object, field: str, source: str) -> float:
    """A finite number >= 0, kept as given (an int stays an int, so the file writes back the same)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool) or not 0 <= x < math.inf:
        raise fail(source, field, x, "a number >= 0")
    return x


def read_bool(x: object, field: str, source: str) -> bool:
    if not isinstance(x, bool):
        raise fail(source, field, x, "true or false")
    return x


def read_list(x: object, field: str, source: str, limit: int = 10_000_000) -> list[Any]:
    if not isinstance(x, list) or len(x) > limit:
        raise fail(source, field, x, f"a list (at most {limit:,} items)")
    return x


V = TypeVar("V")


class ViewCache(Generic[V]):
    """Typed views keyed on the identity of the meta values they were read from.

    A view is read once per set of values (``held`` and ``program_order`` have an entry per sub-op
    or op, and several checks ask): a key set or removed since (``meta={**meta, k: v}``,
    ``meta.pop(k)``) gives other values and is read anew. Each entry holds its values, so their ids
    cannot be reused while it is cached; the oldest entry goes past ``size``."""

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._views: dict[tuple[int, ...], tuple[tuple[Any, ...], V]] = {}

    def get(self, values: tuple[Any, ...], read: Callable[[], V]) -> V:
        stamp = tuple(map(id, values))
        hit = self._views.get(stamp)
        if hit is not None:
            return hit[1]
        out = read()
        if len(self._views) >= self._size:
            self._views.pop(next(iter(self._views)))
        self._views[stamp] = (values, out)
        return out
