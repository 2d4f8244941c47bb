"""Schedule families. Adding one is one module plus one line in ``_FAMILIES`` below."""
from __future__ import annotations

from pptl.config import Config
from pptl.errors import InputError
from pptl.ir import Schedule
from pptl.schedules import gpipe, interleaved, one_f_one_b
from pptl.schedules._common import Family

__all__ = ["Family", "FAMILIES", "get_family", "build_schedule", "names"]

_FAMILIES: tuple[Family, ...] = (
    gpipe.FAMILY,
    one_f_one_b.FAMILY,
    interleaved.FAMILY,
)

FAMILIES: dict[str, Family] = {f.name: f for f in _FAMILIES}
_ALIASES: dict[str, str] = {a: f.name for f in _FAMILIES for a in f.aliases}


def names() -> list[str]:
    return list(FAMILIES)


def get_family(name: str) -> Family:
    """The family called ``name`` (or one of its aliases); InputError lists the known ones."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in FAMILIES:
        raise InputError(f"unknown schedule '{name}'; known schedules: {', '.join(FAMILIES)}")
    return FAMILIES[key]


def build_schedule(cfg: Config) -> Schedule:
    """Validate ``cfg`` against its family and build the schedule."""
    try:
        fam = get_family(cfg.schedule)
    except InputError as e:
        if cfg.source == "<flags>":
            raise
        raise InputError(f"{cfg.source}: field 'schedule': {e}") from None
    fam.validate(cfg)
    return fam.build(cfg)
