"""Schedule families. Adding one is one module plus one line in ``_WHERE`` below.

A family's module is imported when the family is asked for (``pptl plan`` of one family loads
that one); ``FAMILIES`` and an alias load them all.
"""
from __future__ import annotations

from importlib import import_module

from pptl.config import MAX_PLAN_OPS, TRAINING_COST_KEYS, Config
from pptl.errors import InputError
from pptl.ir import Schedule
from pptl.schedules._common import Family, Runtime, assemble

__all__ = ["Family", "Runtime", "assemble", "FAMILIES", "get_family", "find_family", "build_schedule", "check_keys", "names"]

#: Every family, in the order ``pptl schedules`` lists them: its name -> (module, record).
_WHERE: dict[str, tuple[str, str]] = {
    "gpipe": ("gpipe", "FAMILY"),
    "1f1b": ("one_f_one_b", "FAMILY"),
    "interleaved-1f1b": ("interleaved", "FAMILY"),
    "zb-h1": ("zero_bubble", "FAMILY_H1"),
    "zb-h2": ("zero_bubble", "FAMILY_H2"),
    "zbv": ("zbv", "FAMILY"),
    "looped-bfs": ("looped_bfs", "FAMILY"),
    "interleaved-zb": ("interleaved_zb", "FAMILY"),
    "v-half": ("v_shape", "FAMILY_HALF"),
    "v-min": ("v_shape", "FAMILY_MIN"),
    "inference": ("inference", "FAMILY"),
    "dualpipe": ("dualpipe", "FAMILY"),
    "dualpipev": ("dualpipev", "FAMILY"),
    "weight-update": ("weight_update", "FAMILY"),
    "moe-1f1b-overlap": ("moe_overlap", "FAMILY"),
}


def _load(name: str) -> Family:
    module, record = _WHERE[name]
    fam: Family = getattr(import_module(f"pptl.schedules.{module}"), record)
    return fam


def _families() -> dict[str, Family]:
    return {name: _load(name) for name in _WHERE}


def __getattr__(name: str) -> dict[str, Family]:
    # ``FAMILIES`` (every family by name) imports every family module, so it is built when read.
    if name == "FAMILIES":
        return _families()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def names() -> list[str]:
    return list(_WHERE)


def get_family(name: str) -> Family:
    """The family called ``name`` (or one of its aliases); InputError lists the known ones."""
    key = name.strip().lower()
    if key not in _WHERE:  # an alias: the records hold them, so every family loads
        key = {a: f.name for f in _families().values() for a in f.aliases}.get(key, key)
        if key not in _WHERE:
            raise InputError(f"unknown schedule '{name}'; known schedules: {', '.join(_WHERE)}")
    return _load(key)


def find_family(name: str) -> Family | None:
    """The family a schedule names (``Schedule.family``, the canonical name), or None for a
    schedule no family built (an imported torch CSV, a hand-written plan)."""
    return _load(name) if name in _WHERE else None


def build_schedule(cfg: Config) -> Schedule:
    """Validate ``cfg`` against its family and build the schedule."""
    try:
        fam = get_family(cfg.schedule)
    except InputError as e:
        if cfg.source == "<flags>":
            raise
        raise InputError(f"{cfg.source}: field 'schedule': {e}") from None
    check_keys(cfg, fam)
    fam.validate(cfg)
    # Bound the work before building, by the family's own count (MoE's sub-ops make four times 1F1B's
    # a slot); after the family's own checks, which name what it can reduce.
    from pptl.schedules._size import estimate_ops

    estimate = estimate_ops(cfg, fam, limit=MAX_PLAN_OPS)
    if estimate > MAX_PLAN_OPS:
        # past the bound by its slots alone the count is not worked out: one op a slot is the least
        slots = cfg.pp * cfg.vpp * cfg.microbatches
        raise InputError(f"{cfg.source}: pp={cfg.pp} x vpp={cfg.vpp} x microbatches={cfg.microbatches} would plan "
                         f"{'at least' if estimate == slots else 'about'} {estimate:,} ops, more than the "
                         f"{MAX_PLAN_OPS:,} pptl plans; reduce pp or microbatches")
    return fam.build(cfg)


def check_keys(cfg: Config, fam: Family | None = None) -> None:
    """Refuse what a family would silently ignore: ``options`` on a family that reads none, a cost
    key that is not an op kind (``costs: {Bwd: 2}``, ``--cost X=2``). One line names the key and
    the known ones."""
    fam = fam or get_family(cfg.schedule)
    if cfg.options and not fam.takes_options:
        key = sorted(map(str, cfg.options))[0]
        raise InputError(f"{cfg.source}: field 'options.{key}' is unknown; schedule '{fam.name}' takes no options "
                         f"(families with options: {', '.join(f.name for f in _families().values() if f.takes_options)})")
    if fam.own_costs:  # MoE and weight update: cost keys of their own, checked in their options
        return
    keys = set(cfg.costs.base) | {k for per in cfg.costs.stages.values() for k in per}
    unknown = sorted(map(str, keys - set(TRAINING_COST_KEYS)))
    if unknown:
        where = "--cost" if cfg.source == "<flags>" else "field 'costs'"
        raise InputError(f"{cfg.source}: {where}: unknown cost key '{unknown[0]}'; known keys: "
                         f"{', '.join(TRAINING_COST_KEYS)} (op kinds)")
