"""Schedule families. Adding one is one module plus one line in ``_FAMILIES`` below."""
from __future__ import annotations

from pptl.config import MAX_PLAN_OPS, TRAINING_COST_KEYS, Config
from pptl.errors import InputError
from pptl.ir import Schedule
from pptl.schedules import (
    dualpipe,
    dualpipev,
    gpipe,
    interleaved,
    moe_overlap,
    one_f_one_b,
    weight_update,
    zbv,
    zero_bubble,
)
from pptl.schedules._common import Family

__all__ = ["Family", "FAMILIES", "get_family", "build_schedule", "check_keys", "names"]

_FAMILIES: tuple[Family, ...] = (
    gpipe.FAMILY,
    one_f_one_b.FAMILY,
    interleaved.FAMILY,
    zero_bubble.FAMILY_H1,
    zero_bubble.FAMILY_H2,
    zbv.FAMILY,
    dualpipe.FAMILY,
    dualpipev.FAMILY,
    weight_update.FAMILY,
    moe_overlap.FAMILY,
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
    # Bound the work first: compute ops plus their SEND/RECV, about 6 per stage and micro-batch.
    estimate = 6 * cfg.pp * cfg.vpp * cfg.microbatches
    if estimate > MAX_PLAN_OPS:
        raise InputError(f"{cfg.source}: pp={cfg.pp} x vpp={cfg.vpp} x microbatches={cfg.microbatches} would plan "
                         f"about {estimate:,} ops, more than the {MAX_PLAN_OPS:,} pptl plans; reduce pp or "
                         "microbatches")
    check_keys(cfg, fam)
    fam.validate(cfg)
    return fam.build(cfg)


def check_keys(cfg: Config, fam: Family | None = None) -> None:
    """Refuse what a family would silently ignore: ``options`` on a family that reads none, a cost
    key that is not an op kind (``costs: {Bwd: 2}``, ``--cost X=2``). One line names the key and
    the known ones."""
    fam = fam or get_family(cfg.schedule)
    if cfg.options and not fam.takes_options:
        key = sorted(map(str, cfg.options))[0]
        raise InputError(f"{cfg.source}: field 'options.{key}' is unknown; schedule '{fam.name}' takes no options "
                         f"(families with options: {', '.join(f.name for f in _FAMILIES if f.takes_options)})")
    if fam.own_costs:  # MoE and weight update: cost keys of their own, checked in their options
        return
    keys = set(cfg.costs.base) | {k for per in cfg.costs.stages.values() for k in per}
    unknown = sorted(map(str, keys - set(TRAINING_COST_KEYS)))
    if unknown:
        where = "--cost" if cfg.source == "<flags>" else "field 'costs'"
        raise InputError(f"{cfg.source}: {where}: unknown cost key '{unknown[0]}'; known keys: "
                         f"{', '.join(TRAINING_COST_KEYS)} (op kinds)")
