"""The op kinds pptl knows: training's, plus those each family record and file format declares.

A family declares the kinds its plans hold beyond training's in its record
(``Family.runtime.kinds``, :class:`pptl.schedules.Runtime`: the kinds its executor runs); a
format whose reader makes other ops declares them as ``OP_KINDS`` in its module (the torch CSV's
FSDP actions). Nothing is registered at import, so what is known does not depend on which modules
happen to be loaded.
"""
from __future__ import annotations

from functools import cache
from importlib import import_module

from pptl.ir import COMM_KINDS, COMPUTE_KINDS

__all__ = ["TRAINING_KINDS", "known_kinds", "is_known"]

TRAINING_KINDS = COMPUTE_KINDS | COMM_KINDS

#: Format modules that declare ``OP_KINDS`` (their readers make ops of other kinds).
_FORMATS = ("pptl.formats.torch_csv",)


@cache
def known_kinds() -> frozenset[str]:
    """Every op kind a plan may hold: training's, every family's, every format's.

    Loads every family module and the formats of ``_FORMATS`` once (cached), so callers on the hot
    path ask :func:`is_known`, which loads them only for a kind that is not training's.
    """
    from pptl.schedules import FAMILIES

    out = set(TRAINING_KINDS)
    for fam in FAMILIES.values():
        if fam.runtime is not None:
            out |= fam.runtime.kinds
    for name in _FORMATS:
        out |= getattr(import_module(name), "OP_KINDS")
    return frozenset(out)


def is_known(kind: str) -> bool:
    """Whether some family or format declares ``kind`` (training kinds without loading any)."""
    return kind in TRAINING_KINDS or kind in known_kinds()
