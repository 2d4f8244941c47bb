"""Names read from a file (op ids, kinds, lanes, labels, titles): text without control characters.

These names reach terminals as they are: ``pptl check`` prints op ids in its messages, ``pptl
render`` draws kinds in its legend and lanes in its row labels. A name holding ESC (``\\x1b[2J``
clears the screen; ``\\x1b]0;...\\x07`` retitles the window) or a newline would act on the user's
terminal or break a one-line message, so the readers refuse it, naming the file and the field, as
they refuse any other malformed field. No writer of pptl's makes such a name.
"""
from __future__ import annotations

import re
from typing import Iterable

from pptl.errors import InputError
from pptl.formats._quote import quoted

__all__ = ["check_names", "has_control"]

#: C0 controls (tab and newline too: a name is one line), DEL and the C1 controls.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def has_control(text: str) -> bool:
    """Whether ``text`` holds a control character."""
    return _CONTROL.search(text) is not None


def check_names(values: Iterable[str], where: str) -> None:
    """Refuse the first of ``values`` that holds a control character.

    Raises:
        InputError: ``WHERE: got 'a\\x1b[2J', expected text without control characters ...``.
    """
    for v in values:
        if _CONTROL.search(v) is not None:
            raise InputError(f"{where}: got {quoted(v)}, expected text without control characters (escape codes, "
                             "tabs, newlines)")
