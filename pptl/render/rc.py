"""The one place pptl styles matplotlib: every figure it makes is built and saved under
:func:`pptl_rc` (the figure functions wear :func:`pptl_figure`). Imports nothing heavy, so the
figure modules can take it at import time."""
from __future__ import annotations

import functools
from contextlib import AbstractContextManager
from typing import Any, Callable, ParamSpec, TypeVar

__all__ = ["PPTL_RC", "pptl_rc", "pptl_figure"]

#: Matplotlib settings of every figure pptl makes. Text is literal: titles, file names and labels
#: are the user's, and a ``$`` in them is a price or a shell variable, not mathtext (which would
#: italicise it, drop spaces, or raise on an unpaired one).
PPTL_RC: dict[str, Any] = {"text.parse_math": False}

_P = ParamSpec("_P")
_R = TypeVar("_R")


def pptl_rc() -> AbstractContextManager:
    """:data:`PPTL_RC` in force. Matplotlib reads it when a text is made (titles, legends) and when
    a figure is drawn (tick labels are made then), so building and saving both run inside it."""
    import matplotlib

    return matplotlib.rc_context(PPTL_RC)


def pptl_figure(build: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run a function that builds or saves a figure under :func:`pptl_rc`."""

    @functools.wraps(build)
    def inside(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with pptl_rc():
            return build(*args, **kwargs)

    return inside
