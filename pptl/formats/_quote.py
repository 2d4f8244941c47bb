"""A value read from a file, as an error message quotes it: bounded, whatever the file held.

Input is hostile, and an error is one line: ``{v!r}`` of a 20 MB string is a 20 MB line, and of a
deeply nested list a walk of all of it. Every reader in :mod:`pptl.formats` quotes a bad value
through :func:`quoted`.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

__all__ = ["QUOTE_LIMIT", "quoted", "int_ranges", "counted", "shell_word"]

#: Characters of a value's repr an error line shows before cutting it with "...".
QUOTE_LIMIT = 60
#: Items of a list (or keys of an object) still spelled out, each a plain value.
_ITEMS = 8


def quoted(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """``value`` as ``repr`` writes it when that is short; otherwise its first ``limit`` characters
    and ``...``. A list or object is spelled out only when it is small and flat; else it is named
    by its type and length, so that a deep structure is never walked.

    Example:
        >>> quoted("x" * 100)[-30:]
        'xxxxxxxxxx... (100 characters)'
        >>> quoted([[1], [2]])
        'a list of 2 items'
    """
    if isinstance(value, str):
        if len(value) <= limit:
            text = repr(value)
            if len(text) <= limit + 2:  # escapes (\x00) can make it up to four times longer
                return text
        return f"{repr(value[:limit])[:limit + 1]}... ({len(value):,} characters)"
    if value is None or isinstance(value, (bool, float)):
        return repr(value)
    if isinstance(value, int):
        if abs(value) >= 10 ** limit:  # str() of one over 4,300 digits raises, and is no use shorter
            return f"an integer of more than {limit} digits"
        return repr(value)
    if isinstance(value, (list, tuple)):
        values: Iterable[Any] = value
        name, unit = ("a list" if isinstance(value, list) else "a tuple"), "item"
    elif isinstance(value, Mapping):
        values = value.values()
        name, unit = "an object", "key"
    else:
        return f"a value of type {type(value).__name__}"
    n = len(value)
    if n <= _ITEMS and all(_flat(x) for x in values) and all(_short(x, limit) for x in _parts(value)):
        text = repr(value)
        if len(text) <= limit:
            return text
    return f"{name} of {n:,} {unit}{'s' if n != 1 else ''}"


def _flat(x: Any) -> bool:
    return x is None or isinstance(x, (str, int, float, bool))


def _parts(items: Any) -> Iterable[Any]:
    if isinstance(items, Mapping):
        for k, v in items.items():
            yield k
            yield v
    else:
        yield from items


def _short(x: Any, limit: int) -> bool:
    """Whether ``repr(x)`` is cheap and short (a long string or a huge integer is not)."""
    if isinstance(x, str):
        return len(x) <= limit
    if isinstance(x, int) and not isinstance(x, bool):
        return bool(abs(x) < 10 ** limit)
    return _flat(x)


def int_ranges(values: Iterable[int], *, most: int = 8) -> str:
    """Sorted integers as runs (``1-3, 7, 9-65534``), at most ``most`` runs and then how many are left:
    a list of missing ranks can be 65,535 long."""
    runs: list[tuple[int, int]] = []
    for v in sorted(set(values)):
        if runs and v == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))
    shown = [f"{a}" if a == b else f"{a}-{b}" if b > a + 1 else f"{a}, {b}" for a, b in runs[:most]]
    more = len(runs) - most
    return ", ".join(shown) + (f" and {more:,} more run{'s' if more != 1 else ''}" if more > 0 else "")


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, in the plural unless ``n`` is 1 (``plural`` where adding "s" is wrong):
    a count in a message can be 1 (one rank, one event), and "1 ranks" reads as a slip.

    Example:
        >>> counted(1, "rank"), counted(0, "rank"), counted(2, "entry", "entries")
        ('1 rank', '0 ranks', '2 entries')
    """
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def shell_word(path: Any) -> str:
    """``path`` as a command a message suggests writes it, to be pasted into a shell: as it is when it
    needs no quoting, in double quotes when it holds a space or the like (the suggestions sit inside
    single quotes: ``'pptl plan --from "my sched.csv"'``), else as :func:`shlex.quote` quotes it.

    Example:
        >>> shell_word("a.json"), shell_word("my run.json")
        ('a.json', '"my run.json"')
    """
    import shlex

    text = str(path)
    bare = shlex.quote(text)
    if bare == text or any(c in text for c in '"$`\\!'):
        return bare
    return f'"{text}"'
