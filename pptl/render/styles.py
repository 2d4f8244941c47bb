"""Figure styles by name: the registry that picks a :class:`~pptl.render.base.Style` for a timeline.

The shared colour table and the records styles return live in :mod:`pptl.render.base` (re-exported
here); each family's style is its own module, importing only the base.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pptl.render.base import (
    PALETTE,
    Category,
    Grid,
    GridCell,
    Part,
    RowSpec,
    Style,
    _chunk_tag,
    _chunked,
    chunk_colour,
    colour,
    text_colour,
)
from pptl.render.dualpipe_style import DualPipeStyle
from pptl.render.moe_style import MoEStyle
from pptl.render.weight_update_style import WeightUpdateStyle

if TYPE_CHECKING:
    from pptl.timeline import Timeline

__all__ = ["PALETTE", "STYLE_NAMES", "Category", "Grid", "GridCell", "Part", "RowSpec", "Style", "colour",
           "text_colour", "chunk_colour", "resolve_style", "style_for_family"]

_ = (_chunk_tag, _chunked)  # re-exported for callers that used them from here

STYLE_NAMES: tuple[str, ...] = ("auto", "default", "dualpipe", "moe", "weight-update")


_STYLES: dict[str, type[Style]] = {"default": Style, "dualpipe": DualPipeStyle, "moe": MoEStyle,
                                   "weight-update": WeightUpdateStyle}


def _make(name: str) -> Style:
    return _STYLES[name]()


def style_for_family(family: str) -> str:
    """The style a family asks for (``Family.style``); "default" for unknown or imported families."""
    from pptl.errors import InputError
    from pptl.schedules import get_family

    if not family:
        return "default"
    try:
        name = getattr(get_family(family), "style", "default") or "default"
    except InputError:
        return "default"
    return name if name in STYLE_NAMES[1:] else "default"


def resolve_style(name: str, tl: "Timeline") -> Style:
    """The :class:`Style` called ``name``; ``auto`` asks the timeline's family.

    Raises:
        InputError: an unknown style name (the message lists the known ones).
    """
    from pptl.errors import InputError

    key = (name or "auto").strip().lower()
    if key not in STYLE_NAMES:
        raise InputError(f"--style: got '{name}', expected one of {', '.join(STYLE_NAMES)}")
    if key == "auto":
        key = style_for_family(tl.meta.family)
    return _make(key)
