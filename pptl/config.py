"""Configs: what a user asks for (schedule family, sizes, costs), read from YAML, TOML, JSON or flags.

Every validation error names the source, the field, the value and what was expected, on one line,
and is raised as :class:`pptl.errors.InputError` (exit code 2).
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Collection, Mapping

from pptl.errors import InputError
from pptl.fields import MAX_NUMBER, strict_int
from pptl.formats._quote import quoted
from pptl.formats.structured import read_structured

__all__ = [
    "DEFAULT_COSTS",
    "Costs",
    "Workload",
    "Config",
    "load_config",
    "config_from_file",
    "config_from_mapping",
    "parse_cost_flags",
    "apply_cost_flags",
    "backward_from_split",
    "MAX_OPS",
    "MAX_PLAN_OPS",
    "TRAINING_COST_KEYS",
    "MAX_HIDDEN",
    "MAX_TOKENS",
    "MAX_LAYERS",
]

#: Per-kind durations in one unit of time when a config names none: a backward costs two
#: forwards and splits evenly into input and weight gradients, as in the zero-bubble paper.
DEFAULT_COSTS: dict[str, float] = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}

#: Plans larger than this are refused before building (bounded work on hostile input).
MAX_OPS = 5_000_000
#: Schedules pptl generates from a family are refused past this many ops, estimated before building:
#: planning, checking and simulating take ~15 s and ~1.3 GB per million ops on 2 cores (docs/benchmarks.md);
#: 1f1b at pp=100000 and 8 micro-batches is 4.8M ops: minutes and gigabytes, for a table nobody reads.
MAX_PLAN_OPS = 2_000_000
#: Bounds of a workload's integers. ``pptl run`` allocates 8 h^2 weights per MLP block: at hidden
#: 65536 one block holds 32 Gi elements, past any single GPU, so a larger width is a typo (an extra
#: digit, 1e10) rather than a model. 1 Mi rows per micro-batch and 100000 blocks per stage (the bound
#: of ``stage_layers`` and of ``pptl tune``'s ``model.layers``) are as far past real runs.
MAX_HIDDEN = 65_536
MAX_TOKENS = 1 << 20
MAX_LAYERS = 100_000
#: Cost keys of the training families (op kinds); families with ``options`` name theirs there.
TRAINING_COST_KEYS = ("F", "B", "I", "W", "FB")


@dataclass(frozen=True, kw_only=True)
class Costs:
    """Durations of ops, in one unit of time (planned) or milliseconds (calibrated)."""

    base: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_COSTS))
    """Duration per cost key (usually the op kind: F, B, I, W, FB, or a family's key)."""
    stages: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    """Per-stage overrides: stage -> {key: duration}; the first and last stage are often heavier."""
    comm_latency: float = 0.0
    """Fixed time of one point-to-point message."""
    comm_bandwidth: float = math.inf
    """Bytes per unit of time of a point-to-point link (inf: payload is free)."""
    comm_bytes: float = 0.0
    """Bytes of one activation or gradient message between stages."""
    copy_bandwidth: float = math.inf
    """Bytes per unit of time of a host<->device copy (PCIe)."""
    context: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """Cost key -> context -> duration: side-lane ops alone or beside compute of a kind
    (:mod:`pptl.contexts`); a key with contexts takes the one its op has in the timed plan."""
    rank_scale: Mapping[int, float] = field(default_factory=dict)
    """Rank -> factor on the durations of that rank's compute-lane ops (1: as the stage's costs
    say). Ranks that share a stage (expert- or data-parallel members) get one cost per stage, yet
    their GPUs need not run at one speed (clocks under a power cap differ by a few percent); the
    faster member then waits at every collective of the group. Empty: every rank at its stage's
    costs. With :attr:`beside`, the factor is the rank's speed alone."""
    beside: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    """Stage -> compute cost key -> duration with a side-lane op (an all-to-all, a copy) beside it
    all along, for every rank of the stage (no rank factor); the op progresses at this rate while
    one runs beside it and at its stage cost (times its rank factor) otherwise
    (:mod:`pptl.contexts`). Empty: compute runs at one rate whatever runs beside it."""

    def lookup(self, key: str, stage: int = -1) -> float | None:
        """The duration of ``key`` at ``stage``, or ``None`` if no value is known."""
        if stage in self.stages and key in self.stages[stage]:
            return self.stages[stage][key]
        if key in self.base:
            return self.base[key]
        if key == "FB":
            f, b = self.lookup("F", stage), self.lookup("B", stage)
            return None if f is None or b is None else f + b
        if key == "B":
            i, w = self.lookup("I", stage), self.lookup("W", stage)
            return None if i is None or w is None else i + w
        return None

    def comm_time(self, payload: float) -> float:
        nbytes = payload or self.comm_bytes
        return self.comm_latency + (nbytes / self.comm_bandwidth if nbytes else 0.0)

    def with_defaults(self, defaults: Mapping[str, float]) -> "Costs":
        """A copy where keys missing from ``base`` take ``defaults`` (families add their keys)."""
        merged = dict(defaults)
        merged.update(self.base)
        return replace(self, base=merged)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.base)
        if self.stages:
            out["stages"] = {str(k): dict(v) for k, v in self.stages.items()}
        comm = {"latency": self.comm_latency, "bandwidth": self.comm_bandwidth,
                "bytes": self.comm_bytes, "copy_bandwidth": self.copy_bandwidth}
        comm = {k: v for k, v in comm.items() if v not in (0.0, math.inf)}
        if comm:
            out["comm"] = comm
        if self.context:
            out["context"] = {k: dict(v) for k, v in self.context.items()}
        if self.rank_scale:
            out["rank_scale"] = {str(r): f for r, f in sorted(self.rank_scale.items())}
        if self.beside:
            out["beside"] = {str(k): dict(v) for k, v in sorted(self.beside.items())}
        return out


@dataclass(frozen=True, kw_only=True)
class Workload:
    """The synthetic model ``pptl run`` executes (same shape as bench/torch_pp_anchor.py)."""

    hidden: int = 256
    """Model width h; each layer is Linear(h, 4h), GELU, Linear(4h, h) with a residual."""
    tokens: int = 64
    """Rows of one micro-batch."""
    layers_per_stage: int = 1
    """MLP blocks per virtual stage."""
    stage_layers: tuple[int, ...] | None = None
    """MLP blocks of each (logical) stage, one entry per stage, for uneven splits (e.g. a heavier
    first and last stage); replaces ``layers_per_stage`` when given."""
    dtype: str = "float32"
    """float32, bfloat16 or float16."""

    def layers_of(self, stage: int) -> int:
        """MLP blocks of logical ``stage``."""
        if self.stage_layers is not None and 0 <= stage < len(self.stage_layers):
            return self.stage_layers[stage]
        return self.layers_per_stage


@dataclass(frozen=True, kw_only=True)
class Config:
    """A request for one schedule. Sizes are validated here; family rules by the family."""

    schedule: str
    """Family name, e.g. ``1f1b`` (``pptl schedules`` lists them)."""
    pp: int
    """Number of pipeline ranks."""
    microbatches: int
    """Micro-batches per step (for DualPipe: both directions together)."""
    vpp: int = 1
    """Model chunks (virtual stages) per rank."""
    group_size: int | None = None
    """Megatron's micro-batch group size for interleaved schedules (default: pp)."""
    split_backward: bool = False
    """Split B into I (input gradient) and W (weight gradient) where the family allows."""
    costs: Costs = field(default_factory=Costs)
    """Op durations."""
    activation: float = 1.0
    """Activation memory of one micro-batch on one stage, in the unit memory is reported in."""
    w_activation: float = 0.0
    """Fraction of ``activation`` that I leaves held until W (the rest is freed by I)."""
    memory_limit: float | None = None
    """Peak activation per rank that ``check`` accepts (None: no limit)."""
    workload: Workload = field(default_factory=Workload)
    """What ``pptl run`` executes."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Family-specific options (each family parses and validates its own section)."""
    source: str = "<flags>"
    """Where the config came from, for messages."""

    @property
    def group(self) -> int:
        return self.group_size if self.group_size is not None else self.pp

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schedule": self.schedule, "pp": self.pp, "microbatches": self.microbatches,
            "vpp": self.vpp, "split_backward": self.split_backward, "costs": self.costs.to_dict(),
            "activation": self.activation, "w_activation": self.w_activation,
            "workload": asdict(self.workload),
        }
        if self.group_size is not None:
            out["group_size"] = self.group_size
        if self.memory_limit is not None:
            out["memory_limit"] = self.memory_limit
        if self.options:
            out["options"] = dict(self.options)
        return out


def load_config(path: str | Path, **overrides: Any) -> Config:
    """Read a config file; ``overrides`` (from flags) replace fields that are not None."""
    return config_from_file(read_structured(path), str(path), overrides)


def config_from_file(data: Any, source: str, overrides: Mapping[str, Any]) -> Config:
    """:func:`load_config` of a file already read (``data``, from ``source``)."""
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: expected a mapping of fields at the top level, got {_typename(data)}")
    data = dict(data)
    for k, v in overrides.items():
        if v is not None:
            data[k] = v
    return config_from_mapping(data, source=source)


_TOP_FIELDS = {f.name for f in fields(Config)} - {"source"}
_KNOWN_TOP = sorted(_TOP_FIELDS | {"name", "description", "comm"})


def config_from_mapping(data: Mapping[str, Any], *, source: str = "<flags>") -> Config:
    """Validate a mapping (from a file or flags) into a :class:`Config`."""
    unknown = sorted(str(k) for k in data if k not in _KNOWN_TOP)
    if unknown:
        raise InputError(f"{source}: unknown field '{unknown[0]}'; known fields: {', '.join(_KNOWN_TOP)}")
    if "schedule" not in data:
        raise InputError(f"{source}: field 'schedule' is required. Example: schedule: 1f1b (see 'pptl schedules')")
    schedule = data["schedule"]
    if not isinstance(schedule, str) or not schedule:
        raise InputError(f"{source}: field 'schedule': got {schedule!r}, expected a family name such as '1f1b'")
    pp = _int(data, "pp", source, required=True, lo=1)
    mbs = _int(data, "microbatches", source, required=True, lo=1)
    vpp = _int(data, "vpp", source, default=1, lo=1)
    group = _int(data, "group_size", source, default=None, lo=1)
    limit = 1_000_000
    for name, value in (("pp", pp), ("microbatches", mbs), ("vpp", vpp)):
        if value > limit:  # a float as written (1e+30), not its 31-digit int of binary noise
            given = data[name]
            shown = f"{given:g}" if isinstance(given, float) else value
            raise InputError(f"{source}: field '{name}': got {shown}, expected at most {limit}")
    costs_data = data.get("costs", {})
    if "comm" in data:  # accepted at the top level too, as users write it
        if not isinstance(costs_data, Mapping):
            costs_data = {}
        costs_data = {**costs_data, "comm": data["comm"]}
    return Config(
        schedule=schedule.strip().lower(),
        pp=pp,
        microbatches=mbs,
        vpp=vpp,
        group_size=group,
        split_backward=_bool(data, "split_backward", source, False),
        costs=costs_from_mapping(costs_data, source=source),
        activation=_num(data, "activation", source, default=1.0, lo=0.0),
        w_activation=_num(data, "w_activation", source, default=0.0, lo=0.0, hi=1.0),
        memory_limit=_num(data, "memory_limit", source, default=None, lo=0.0),
        workload=_workload(data.get("workload", {}), source),
        options=_mapping(data, "options", source),
        source=source,
    )


def costs_from_mapping(data: Any, *, source: str = "<flags>") -> Costs:
    """Parse a ``costs`` section: ``{F: 1, B: 2, stages: {0: {F: 1.5}}, comm: {latency: ..}}``."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: field 'costs': got {_typename(data)}, expected a mapping such as {{F: 1, B: 2}}")
    base = dict(DEFAULT_COSTS)
    stages: dict[int, dict[str, float]] = {}
    comm: Mapping[str, Any] = {}
    context: dict[str, dict[str, float]] = {}
    rank_scale: dict[int, float] = {}
    beside: dict[int, dict[str, float]] = {}
    for key, value in data.items():
        if key in ("stages", "beside"):
            if not isinstance(value, Mapping):
                raise InputError(f"{source}: field 'costs.{key}': expected a mapping stage -> {{kind: duration}}")
            into = stages if key == "stages" else beside
            for s, overrides in value.items():
                try:
                    stage = int(s)
                except (TypeError, ValueError):
                    raise InputError(f"{source}: field 'costs.{key}': stage {s!r} is not an integer") from None
                if stage < 0:
                    raise InputError(f"{source}: field 'costs.{key}': stage {stage} is negative")
                if stage in into:  # 0 and "0" (YAML keys of two types): one would silently win
                    raise InputError(f"{source}: field 'costs.{key}': stage {stage} is given twice")
                if not isinstance(overrides, Mapping):
                    raise InputError(f"{source}: field 'costs.{key}.{stage}': expected a mapping kind -> duration")
                into[stage] = {str(k): _duration(v, f"costs.{key}.{stage}.{k}", source) for k, v in overrides.items()}
        elif key == "comm":
            if not isinstance(value, Mapping):
                raise InputError(f"{source}: field 'comm': expected a mapping with latency, bandwidth, bytes")
            comm = value
        elif key == "context":
            if not isinstance(value, Mapping):
                raise InputError(f"{source}: field 'costs.context': expected a mapping key -> {{context: duration}}"
                                 " such as {dispatch: {alone: 0.1, MLP: 0.4}}")
            for k, row in value.items():
                if not isinstance(row, Mapping):
                    raise InputError(f"{source}: field 'costs.context.{k}': expected a mapping context -> duration")
                context[str(k)] = {str(c): _duration(v, f"costs.context.{k}.{c}", source) for c, v in row.items()}
        elif key == "rank_scale":
            rank_scale = _rank_scale(value, source)
        else:
            base[str(key)] = _duration(value, f"costs.{key}", source)
    base = backward_from_split(base, data)
    known_comm = {"latency", "bandwidth", "bytes", "copy_bandwidth"}
    for k in comm:
        if k not in known_comm:
            raise InputError(f"{source}: field 'comm.{k}' is unknown; known: {', '.join(sorted(known_comm))}")
    return Costs(
        base=base,
        stages=stages,
        comm_latency=_duration(comm.get("latency", 0.0), "comm.latency", source),
        comm_bandwidth=_positive(comm.get("bandwidth", math.inf), "comm.bandwidth", source),
        comm_bytes=_duration(comm.get("bytes", 0.0), "comm.bytes", source),
        copy_bandwidth=_positive(comm.get("copy_bandwidth", math.inf), "comm.copy_bandwidth", source),
        context=context,
        rank_scale=rank_scale,
        beside=beside,
    )


def _rank_scale(value: Any, source: str) -> dict[int, float]:
    """``costs.rank_scale``: rank (an integer >= 0) -> a factor > 0 on its compute ops' durations."""
    if not isinstance(value, Mapping):
        raise InputError(f"{source}: field 'costs.rank_scale': got {_typename(value)}, expected a mapping rank -> "
                         "factor such as {0: 0.97, 1: 1.03}")
    out: dict[int, float] = {}
    for r, f in value.items():
        ok = (isinstance(r, int) and not isinstance(r, bool) and r >= 0) or (
            isinstance(r, str) and _RANK_KEY.fullmatch(r.strip()) is not None)
        if not ok:
            raise InputError(f"{source}: field 'costs.rank_scale': rank {r!r} is not an integer >= 0")
        rank = int(r)
        factor = _float(f, f"costs.rank_scale.{rank}", source)
        if not 0 < factor <= MAX_VALUE:  # also inf and NaN
            raise InputError(f"{source}: field 'costs.rank_scale.{rank}': got {f!r}, expected a finite number > 0")
        out[rank] = factor
    return out


def parse_cost_flags(values: list[str] | None) -> dict[str, float]:
    """``["F=1", "B=2,I=1"]`` -> ``{"F": 1.0, "B": 2.0, "I": 1.0}``."""
    out: dict[str, float] = {}
    for value in values or []:
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            key, sep, num = item.partition("=")
            if not sep or not key.strip():
                raise InputError(f"--cost: got '{item}', expected KIND=VALUE such as F=1")
            if key.strip() in out:  # F=1,F=2: the last would win silently
                raise InputError(f"--cost: {key.strip()} is given twice")
            out[key.strip()] = _duration(num.strip(), f"--cost {key.strip()}", "<flags>")
    return out


def backward_from_split(base: Mapping[str, float], given: Collection[str]) -> dict[str, float]:
    """``base`` with B = I + W when ``given`` (the keys a user or a measurement set) names I or W
    but not B: whoever sets the split means the full backward is its sum. The one place pptl
    decides that; unchanged while I or W has no value.
    """
    out = dict(base)
    if "B" not in given and ("I" in given or "W" in given) and "I" in out and "W" in out:
        out["B"] = out["I"] + out["W"]
    return out


def apply_cost_flags(costs: Costs, flags: Mapping[str, float], comm_latency: float | None = None) -> Costs:
    """``costs`` with ``--cost KEY=VALUE`` flags (parsed by :func:`parse_cost_flags`) and
    ``--comm-latency`` on top; I or W without B sets B = I + W (:func:`backward_from_split`).

    Raises:
        InputError: ``comm_latency`` is negative or NaN.
    """
    if flags:
        costs = replace(costs, base=backward_from_split({**costs.base, **flags}, flags))
    if comm_latency is not None:
        if not 0 <= comm_latency <= MAX_VALUE:  # also NaN and inf: the config's comm.latency has the same bound
            raise InputError(f"--comm-latency: got {comm_latency:g}, expected a number from 0 to {MAX_VALUE:g}")
        costs = replace(costs, comm_latency=comm_latency)
    return costs


def _workload(data: Any, source: str) -> Workload:
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: field 'workload': expected a mapping (hidden, tokens, layers_per_stage, dtype)")
    known = {f.name for f in fields(Workload)}
    for k in data:
        if k not in known:
            raise InputError(f"{source}: field 'workload.{k}' is unknown; known: {', '.join(sorted(known))}")
    dtype = data.get("dtype", "float32")
    if dtype not in ("float32", "bfloat16", "float16"):
        raise InputError(f"{source}: field 'workload.dtype': got {dtype!r}, expected float32, bfloat16 or float16")
    # Strict, unlike the top-level fields (pp: "4" is accepted there): the workload sizes tensors a
    # run allocates, and stage_layers already refused "4"; one rule for all of the section's integers.
    # (null, as an empty YAML value reads, keeps the default, as it does for every other config field)
    sizes = {name: strict_int(default if data.get(name) is None else data[name], f"workload.{name}", source,
                              lo=1, hi=hi)
             for name, default, hi in (("hidden", 256, MAX_HIDDEN), ("tokens", 64, MAX_TOKENS),
                                       ("layers_per_stage", 1, MAX_LAYERS))}
    return Workload(
        **sizes,
        dtype=dtype,
        stage_layers=_stage_layers(data.get("stage_layers"), source),
    )


def _stage_layers(v: Any, source: str) -> tuple[int, ...] | None:
    if v is None:
        return None
    if not isinstance(v, (list, tuple)) or not v or len(v) > 1_000_000 or any(
            isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= MAX_LAYERS for x in v):
        raise InputError(f"{source}: field 'workload.stage_layers': got {str(v)[:80]}, expected a list of integers "
                         f"1..{MAX_LAYERS}, one per stage, e.g. [9, 7, 7, 9]")
    return tuple(v)


def _typename(v: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", type(None): "nothing"}.get(type(v), type(v).__name__)


def _int(data: Mapping[str, Any], name: str, source: str, *, required: bool = False, default: Any = None,
         lo: int | None = None, prefix: str = "") -> Any:
    if name not in data or data[name] is None:
        if required:
            raise InputError(f"{source}: field '{prefix}{name}' is required. Example: {name}: 4")
        return default
    v = data[name]
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, str) and _PLAIN_INT.fullmatch(v.strip()):  # ASCII: "²" and "--4" pass isdigit(), not int()
            v = int(v)
        elif isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise InputError(f"{source}: field '{prefix}{name}': got {v!r}, expected an integer")
    if lo is not None and v < lo:
        raise InputError(f"{source}: field '{prefix}{name}': got {v}, expected an integer >= {lo}")
    return v


def _num(data: Mapping[str, Any], name: str, source: str, *, default: Any, lo: float | None = None,
         hi: float | None = None) -> Any:
    if name not in data or data[name] is None:
        return default
    v = _duration(data[name], name, source) if lo == 0.0 else _float(data[name], name, source)
    if hi is not None and v > hi:
        raise InputError(f"{source}: field '{name}': got {v}, expected at most {hi}")
    return v


def _float(v: Any, name: str, source: str) -> float:
    if isinstance(v, bool) or (isinstance(v, str) and not _PLAIN_NUMBER.fullmatch(v.strip())):
        # float() also reads "1_000" and other scripts' digits; a number in a flag or file is plain
        raise InputError(f"{source}: field '{name}': got {quoted(v)}, expected a number")
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{source}: field '{name}': got {v!r}, expected a number") from None
    if math.isnan(f):
        raise InputError(f"{source}: field '{name}': got NaN, expected a number")
    return f


#: Largest duration, size or memory a config may give: 5M ops of it still sum to a finite float
#: (also in microseconds), so every renderer and writer gets finite times.
MAX_VALUE = MAX_NUMBER


_PLAIN_INT = re.compile(r"-?[0-9]+")
#: A rank written as a mapping key (YAML and JSON keys are strings): ASCII digits, fewer than ten.
_RANK_KEY = re.compile(r"[0-9]{1,9}")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)",
                           re.IGNORECASE)


def _duration(v: Any, name: str, source: str) -> float:
    f = _float(v, name, source)
    if f < 0 or math.isinf(f):
        raise InputError(f"{source}: field '{name}': got {v!r}, expected a finite number >= 0")
    if f > MAX_VALUE:
        raise InputError(f"{source}: field '{name}': got {v!r}, expected at most {MAX_VALUE:g}")
    return f


def _positive(v: Any, name: str, source: str) -> float:
    f = _float(v, name, source)
    if f <= 0:
        raise InputError(f"{source}: field '{name}': got {v!r}, expected a number > 0")
    return f


def _bool(data: Mapping[str, Any], name: str, source: str, default: bool) -> bool:
    v = data.get(name, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise InputError(f"{source}: field '{name}': got {v!r}, expected true or false")
    return v


def _mapping(data: Mapping[str, Any], name: str, source: str) -> dict[str, Any]:
    v = data.get(name) or {}
    if not isinstance(v, Mapping):
        raise InputError(f"{source}: field '{name}': got {_typename(v)}, expected a mapping")
    return dict(v)
