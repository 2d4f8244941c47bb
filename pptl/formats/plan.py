"""The plan file: JSON with a format version, the config, the ops as columns, extra dependencies,
the planned times and the metrics. Documented in docs/format.md.

Version 2 (written since 2026-11-26) stores one list per op field, in file order (lanes in
order, ops in run order), with strings as indices into small tables and the planned timeline as
two lists (start, end): about 25 bytes an op where version 1 took 240. Version 1 files (one object
per op, a full timeline) still load.
"""
from __future__ import annotations

import json
import math
from itertools import chain
from operator import attrgetter
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeGuard

from pptl.config import MAX_OPS, config_from_mapping
from pptl.deps import training_deps, training_deps_again, training_deps_columns
from pptl.errors import InputError
from pptl.fileio import MAX_FILE_BYTES, read_bounded
from pptl.formats.structured import read_structured
from pptl.formats.timeline import timeline_from_dict
from pptl.ir import Op, Schedule, ScheduleBuilder
from pptl.schedules._moe_meta import MoEMeta
from pptl.schedules._pipeline_meta import PipelineMeta
from pptl.schedules._weight_update_meta import WeightUpdateMeta
from pptl.simulate import op_events
from pptl.timeline import MAX_TIME, Timeline, TimelineMeta

__all__ = ["PLAN_FORMAT", "PLAN_VERSION", "PlanTimes", "plan_to_dict", "plan_from_dict", "read_plan_dict", "load_plan",
           "dumps"]

PLAN_FORMAT = "pptl-plan"
PLAN_VERSION = 2

#: Integer op fields stored as columns, with their defaults (a column equal to its default is left out).
_INT_COLUMNS = (("stage", -1), ("mb", -1), ("direction", 0), ("chunk", -1), ("peer", -1), ("sub", -1))
#: String op fields stored as a table of values plus one index per op.
_STR_COLUMNS = (("kind", None), ("flow", ""), ("label", ""), ("cost", ""))
_MAX_INDEX = 10_000_000
_PAIR = attrgetter("pair")
_PAYLOAD = attrgetter("payload")
#: Op fields that most families leave at their defaults (the training families: all of them).
_RARE_NAMES = ("label", "cost", "direction", "sub", "pair", "payload")
_RARE = attrgetter(*_RARE_NAMES)
_RARE_DEFAULTS = ("", "", 0, -1, None, 0.0)


class PlanTimes:
    """Planned start and end of every op (indexed like ``schedule.ops``) and the timeline's meta."""

    __slots__ = ("start", "end", "meta")

    def __init__(self, start: Sequence[float], end: Sequence[float], meta: TimelineMeta) -> None:
        self.start = start
        self.end = end
        self.meta = meta


def plan_to_dict(schedule: Schedule, *, timeline: Timeline | None = None, metrics: Mapping[str, Any] | None = None,
                 times: PlanTimes | None = None) -> dict[str, Any]:
    """Serialise a schedule (format version 2).

    Training dependencies are not stored (they are derived from the ops on load); family-specific
    ones are, as a flat list of (producer, consumer) positions in file order. The planned times
    come from ``times`` (cheap: what the simulator computed) or from ``timeline``; a timeline whose
    events are not the schedule's ops is stored whole, as in version 1.
    """
    ops = schedule.ops
    lanes = schedule.lanes
    keys = sorted(lanes)
    order = list(chain.from_iterable(map(lanes.__getitem__, keys)))
    seq = list(map(ops.__getitem__, order))
    n = len(seq)
    # Fields most plans leave at their defaults, checked in one pass (a column takes two).
    rare_default = set(map(_RARE, ops)) <= {_RARE_DEFAULTS}
    columns: dict[str, Any] = {}
    for name, text_default in _STR_COLUMNS:
        if rare_default and name in _RARE_NAMES:
            continue
        texts: list[str] = list(map(attrgetter(name), seq))
        if text_default is not None and texts.count(text_default) == n:
            continue  # all default (or no ops): left out
        table = list(dict.fromkeys(texts))
        code = {v: k for k, v in enumerate(table)}
        columns[name] = {"values": table, "index": list(map(code.__getitem__, texts))}
    for name, default in _INT_COLUMNS:
        if rare_default and name in _RARE_NAMES:
            continue
        values: list[int] = list(map(attrgetter(name), seq))
        if values.count(default) != n:
            columns[name] = values
    pairs = [] if rare_default else list(map(_PAIR, seq))
    if pairs.count(None) != len(pairs):
        columns["pair"] = [list(p) if p is not None else None for p in pairs]
    payload = [] if rare_default else list(map(_PAYLOAD, seq))
    if payload.count(0.0) != len(payload):
        columns["payload"] = _compact(payload)
    extra: list[tuple[int, int]] = []
    if schedule.deps:
        derived_list = training_deps_again(ops, schedule.num_stages)
        # A family's own facts, or an edited schedule (equal, and usually the same list: the common case).
        if derived_list is not schedule.deps and derived_list != schedule.deps:
            position = [0] * len(ops)
            for pos, i in enumerate(order):
                position[i] = pos
            derived = set(derived_list)
            extra = sorted((position[u], position[v]) for u, v in schedule.deps if (u, v) not in derived)
    out: dict[str, Any] = {
        "format": PLAN_FORMAT,
        "version": PLAN_VERSION,
        "config": schedule.config.to_dict() if schedule.config is not None else None,
        "schedule": {"family": schedule.family, "pp": schedule.pp, "num_stages": schedule.num_stages,
                     "microbatches": schedule.microbatches, "directions": schedule.directions,
                     "meta": schedule.meta},
        "lanes": [{"rank": r, "lane": lane, "count": len(schedule.lanes[(r, lane)])} for r, lane in keys],
        "ops": columns,
        "deps": [x for e in extra for x in e],
    }
    if times is None and timeline is not None:
        times = _times_of(schedule, timeline)
        if times is None:
            out["timeline"] = timeline.to_dict()
    if times is not None:
        meta = timeline_meta_dict(times.meta)
        out["timeline"] = {"meta": meta, "start": _compact(list(map(times.start.__getitem__, order))),
                           "end": _compact(list(map(times.end.__getitem__, order)))}
    if metrics is not None:
        out["metrics"] = dict(metrics)
    return out


def timeline_meta_dict(meta: TimelineMeta) -> dict[str, Any]:
    from dataclasses import asdict

    d = asdict(meta)
    d["extra"] = dict(meta.extra)
    return d


def _compact(values: list[float]) -> list[float] | list[int]:
    """Whole numbers as ints ("12" rather than "12.0"): a quarter of a plan's bytes are times."""
    try:
        ints = list(map(int, values))
    except (OverflowError, ValueError):  # inf or nan: the writer's allow_nan=False reports it
        return values
    if ints == values:
        return ints
    return [int(v) if v.is_integer() else v for v in values]


def _times_of(schedule: Schedule, timeline: Timeline) -> PlanTimes | None:
    """The timeline's times per op, when its events are exactly the schedule's ops."""
    if len(timeline.events) != len(schedule.ops):
        return None
    where: dict[str, int] = {}
    for i, op in enumerate(schedule.ops):
        where.setdefault(op.id, i)
    start = [0.0] * len(schedule.ops)
    end = [0.0] * len(schedule.ops)
    seen = 0
    for e in timeline.events:
        i = where.pop(e.op, -1)
        if i < 0:
            return None
        start[i], end[i] = e.start, e.end
        seen += 1
    return PlanTimes(start, end, timeline.meta) if seen == len(schedule.ops) else None


def dumps(data: Mapping[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"), allow_nan=False)


def load_plan(path: str | Path) -> tuple[Schedule, Timeline | None]:
    name = str(path).lower()
    if name.endswith(".json.gz"):
        try:
            data = json.loads(read_bounded(path, MAX_FILE_BYTES))
        except (UnicodeDecodeError, ValueError) as e:
            raise InputError(f"{path}: not valid JSON: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    elif name.endswith(".json"):
        data = read_structured(path)
    else:
        raise InputError(f"{path}: a plan file is JSON (.json or .json.gz)")
    return plan_from_dict(data, source=str(path))


def plan_from_dict(data: Any, *, source: str = "<plan>") -> tuple[Schedule, Timeline | None]:
    """Rebuild a schedule and its stored timeline (if any); every error names the field."""
    schedule, timeline = read_plan_dict(data, source=source)
    return schedule, timeline()


def read_plan_dict(data: Any, *, source: str = "<plan>") -> tuple[Schedule, Callable[[], Timeline | None]]:
    """:func:`plan_from_dict`, with the timeline as a function that builds it on demand
    (``pptl check`` never asks, and building 400k events costs more than the check).

    Every error names the field; the timeline's are raised when it is built.
    """
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: expected a JSON object with 'format': '{PLAN_FORMAT}'")
    if data.get("format") != PLAN_FORMAT:
        raise InputError(f"{source}: field 'format': got {data.get('format')!r}, expected '{PLAN_FORMAT}'")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InputError(f"{source}: field 'version': got {version!r}, expected an integer >= 1")
    if version > PLAN_VERSION:
        raise InputError(f"{source}: plan format version {version} is newer than this pptl reads ({PLAN_VERSION}); "
                         "upgrade pptl or re-plan with this version")
    head = data.get("schedule")
    if not isinstance(head, Mapping):
        raise InputError(f"{source}: field 'schedule': expected an object with family, pp, num_stages, microbatches")
    family = head.get("family")
    if not isinstance(family, str):
        raise InputError(f"{source}: field 'schedule.family': expected a string")
    sizes = {}
    for name, lo in (("pp", 1), ("num_stages", 1), ("microbatches", 1), ("directions", 1)):
        v = head.get(name, 1 if name == "directions" else None)
        if not isinstance(v, int) or isinstance(v, bool) or v < lo or v > 10_000_000:
            raise InputError(f"{source}: field 'schedule.{name}': got {v!r}, expected an integer >= {lo}")
        sizes[name] = v
    work = sizes["num_stages"] * sizes["microbatches"] * sizes["directions"]
    if work > MAX_OPS:
        raise InputError(f"{source}: schedule of {sizes['num_stages']} stages x {sizes['microbatches']} micro-batches "
                         f"x {sizes['directions']} directions is more than the {MAX_OPS:,} units of work pptl checks")
    meta = head.get("meta", {})
    if not isinstance(meta, Mapping):
        raise InputError(f"{source}: field 'schedule.meta': expected an object")
    # The families' typed metadata, read once here: a malformed value is one line now rather than
    # a crash in a check, the simulator or the executor later.
    MoEMeta.from_meta(meta, source)
    WeightUpdateMeta.from_meta(meta, source)
    PipelineMeta.from_meta(meta, source)  # cached on its values, which the schedule's meta shares
    cfg = None
    if data.get("config") is not None:
        if not isinstance(data["config"], Mapping):
            raise InputError(f"{source}: field 'config': expected an object")
        cfg = config_from_mapping(data["config"], source=f"{source}: config")
    derived: list[tuple[int, int]] | None = None
    if version == 1:
        ops, lanes = _ops_v1(data, source)
    else:
        ops, lanes, derived = _ops_v2(data, source, sizes["num_stages"])
    n = len(ops)
    if derived is None:
        derived = training_deps(ops, sizes["num_stages"])
    deps: dict[tuple[int, int], None] = dict.fromkeys(derived)
    raw_deps = data.get("deps", [])
    if not isinstance(raw_deps, list):
        raise InputError(f"{source}: field 'deps': expected a list of producer, consumer op positions")
    if version == 1:
        for k, e in enumerate(raw_deps):
            if not (isinstance(e, list) and len(e) == 2 and all(_is_int(x) and 0 <= x < n for x in e)):
                raise InputError(f"{source}: deps[{k}]: got {e!r}, expected [producer, consumer] positions in 0..{n - 1}")
            deps[(e[0], e[1])] = None
    else:
        if len(raw_deps) % 2 or not all(_is_int(x) and 0 <= x < n for x in raw_deps):
            raise InputError(f"{source}: field 'deps': expected an even-length list of op positions in 0..{n - 1}")
        for k in range(0, len(raw_deps), 2):
            deps[(raw_deps[k], raw_deps[k + 1])] = None
    schedule = Schedule(family=family, pp=sizes["pp"], num_stages=sizes["num_stages"],
                        microbatches=sizes["microbatches"], ops=ops, lanes=lanes, deps=list(deps),
                        directions=sizes["directions"], config=cfg, meta=dict(meta))
    raw_timeline = data.get("timeline")
    if raw_timeline is None:
        return schedule, lambda: None
    if isinstance(raw_timeline, Mapping) and "format" not in raw_timeline and version >= 2:
        return schedule, lambda: _timeline_v2(raw_timeline, schedule, source)
    return schedule, lambda: timeline_from_dict(raw_timeline, source=f"{source}: timeline")


def _is_int(x: Any) -> TypeGuard[int]:
    return type(x) is int


def _ops_v1(data: Mapping[str, Any], source: str) -> tuple[list[Op], dict[tuple[int, str], list[int]]]:
    lanes = data.get("lanes")
    if not isinstance(lanes, list):
        raise InputError(f"{source}: field 'lanes': expected a list of {{rank, lane, ops}}")
    total = sum(len(e["ops"]) for e in lanes if isinstance(e, Mapping) and isinstance(e.get("ops"), list))
    if total > MAX_OPS:
        raise InputError(f"{source}: {total:,} ops, more than the {MAX_OPS:,} pptl accepts")
    b = ScheduleBuilder()
    for li, entry in enumerate(lanes):
        where = f"{source}: lanes[{li}]"
        if not isinstance(entry, Mapping):
            raise InputError(f"{where}: expected an object with rank, lane, ops")
        rank, lane, ops = entry.get("rank"), entry.get("lane"), entry.get("ops")
        if not isinstance(rank, int) or isinstance(rank, bool):
            raise InputError(f"{where}.rank: got {rank!r}, expected an integer")
        if not isinstance(lane, str) or not lane:
            raise InputError(f"{where}.lane: got {lane!r}, expected a lane name")
        if not isinstance(ops, list):
            raise InputError(f"{where}.ops: expected a list")
        for oi, raw in enumerate(ops):
            b.add(_op_v1(raw, rank, lane, f"{where}.ops[{oi}]"))
    return b.ops, b.lanes


def _ops_v2(data: Mapping[str, Any], source: str, num_stages: int
            ) -> tuple[list[Op], dict[tuple[int, str], list[int]], list[tuple[int, int]] | None]:
    """The ops, the lanes, and the training facts derived from the columns (None: derive from the ops)."""
    raw_lanes = data.get("lanes")
    if not isinstance(raw_lanes, list):
        raise InputError(f"{source}: field 'lanes': expected a list of {{rank, lane, count}}")
    total = sum(e["count"] for e in raw_lanes if isinstance(e, Mapping) and _is_int(e.get("count")) and e["count"] > 0)
    if total > MAX_OPS:
        raise InputError(f"{source}: {total:,} ops, more than the {MAX_OPS:,} pptl accepts")
    ranks: list[int] = []
    lane_col: list[str] = []
    lanes: dict[tuple[int, str], list[int]] = {}
    for li, entry in enumerate(raw_lanes):
        where = f"{source}: lanes[{li}]"
        if not isinstance(entry, Mapping):
            raise InputError(f"{where}: expected an object with rank, lane, count")
        rank, lane, count = entry.get("rank"), entry.get("lane"), entry.get("count")
        if not _is_int(rank) or abs(rank) > _MAX_INDEX:
            raise InputError(f"{where}.rank: got {rank!r}, expected an integer")
        if not isinstance(lane, str) or not lane:
            raise InputError(f"{where}.lane: got {lane!r}, expected a lane name")
        if not _is_int(count) or count < 0:
            raise InputError(f"{where}.count: got {count!r}, expected an integer >= 0")
        lanes.setdefault((rank, lane), []).extend(range(len(ranks), len(ranks) + count))
        ranks += [rank] * count
        lane_col += [lane] * count
    n = len(ranks)
    cols = data.get("ops")
    if not isinstance(cols, Mapping):
        raise InputError(f"{source}: field 'ops': expected an object of columns (kind, stage, mb, ...)")
    known = {name for name, _ in _STR_COLUMNS} | {name for name, _ in _INT_COLUMNS} | {"pair", "payload"}
    unknown = sorted(set(cols) - known)
    if unknown:
        raise InputError(f"{source}: ops.{unknown[0]}: unknown column; known: {', '.join(sorted(known))}")
    if "kind" not in cols:
        raise InputError(f"{source}: ops.kind: required (the kind of every op)")
    values: dict[str, list[Any]] = {}
    for name, default in _STR_COLUMNS:
        values[name] = _str_column(cols.get(name), n, default or "", f"{source}: ops.{name}")
    if not all(values["kind"]):
        raise InputError(f"{source}: ops.kind: got an empty kind, expected an op kind such as F")
    for name, int_default in _INT_COLUMNS:
        col = cols.get(name)
        if col is None:
            values[name] = [int_default] * n
            continue
        if not isinstance(col, list) or len(col) != n:
            raise InputError(f"{source}: ops.{name}: expected a list of {n} integers")
        if (n and set(map(type, col)) != {int}) or (n and (min(col) < -_MAX_INDEX or max(col) > _MAX_INDEX)):
            bad = next(v for v in col if type(v) is not int or abs(v) > _MAX_INDEX)
            raise InputError(f"{source}: ops.{name}: got {bad!r}, expected integers in -{_MAX_INDEX}..{_MAX_INDEX}")
        values[name] = col
    pair = cols.get("pair")
    if pair is None:
        pairs: list[tuple[int, int, int] | None] = [None] * n
    else:
        if not isinstance(pair, list) or len(pair) != n:
            raise InputError(f"{source}: ops.pair: expected a list of {n} entries, each null or [stage, mb, direction]")
        pairs = []
        for p in pair:
            if p is None:
                pairs.append(None)
            elif isinstance(p, list) and len(p) == 3 and all(_is_int(x) and abs(x) <= _MAX_INDEX for x in p):
                pairs.append((p[0], p[1], p[2]))
            else:
                raise InputError(f"{source}: ops.pair: got {p!r}, expected null or [stage, mb, direction]")
    payload = cols.get("payload")
    if payload is None:
        payloads: list[float] = [0.0] * n
    else:
        if not isinstance(payload, list) or len(payload) != n:
            raise InputError(f"{source}: ops.payload: expected a list of {n} numbers")
        for v in payload:
            if type(v) not in (int, float) or not 0 <= v < math.inf:
                raise InputError(f"{source}: ops.payload: got {v!r}, expected a finite number >= 0")
        payloads = [float(v) for v in payload]
    ops = list(map(Op, values["kind"], ranks, lane_col, values["stage"], values["mb"], values["direction"],
                   values["chunk"], pairs, values["peer"], values["flow"], values["sub"], values["label"],
                   payloads, values["cost"]))
    derived = training_deps_columns(values["kind"], ranks, values["stage"], values["mb"], values["direction"],
                                    values["flow"], pairs, num_stages)
    return ops, lanes, derived


def _str_column(col: Any, n: int, default: str, where: str) -> list[str]:
    if col is None:
        return [default] * n
    if not isinstance(col, Mapping):
        raise InputError(f"{where}: expected an object with 'values' (strings) and 'index' (one per op)")
    table, index = col.get("values"), col.get("index")
    if not isinstance(table, list) or not all(isinstance(v, str) for v in table):
        raise InputError(f"{where}.values: expected a list of strings")
    if not isinstance(index, list) or len(index) != n:
        raise InputError(f"{where}.index: expected a list of {n} positions into 'values'")
    if n and not (set(map(type, index)) == {int} and min(index) >= 0 and max(index) < len(table)):
        raise InputError(f"{where}.index: expected integers in 0..{len(table) - 1}")
    return list(map(table.__getitem__, index))


def _timeline_v2(raw: Mapping[str, Any], schedule: Schedule, source: str) -> Timeline:
    where = f"{source}: timeline"
    n = len(schedule.ops)
    meta_raw = raw.get("meta", {})
    if not isinstance(meta_raw, Mapping):
        raise InputError(f"{where}.meta: expected an object")
    # The meta reads as a timeline file's does (same checks, same tolerance of newer fields).
    meta = timeline_from_dict({"format": "pptl-timeline", "version": 1, "meta": meta_raw, "events": []},
                              source=where).meta
    cols = []
    for name in ("start", "end"):
        col = raw.get(name)
        if not isinstance(col, list) or len(col) != n:
            raise InputError(f"{where}.{name}: expected a list of {n} times (one per op, in file order)")
        for v in col:
            if type(v) not in (int, float) or not -MAX_TIME <= v <= MAX_TIME:
                raise InputError(f"{where}.{name}: got {v!r}, expected a finite number within +-{MAX_TIME:g}")
        cols.append([float(v) for v in col])
    start, end = cols
    for i in range(n):
        if end[i] < start[i]:
            raise InputError(f"{where}: op {i} ends at {end[i]:g}, before it starts at {start[i]:g}")
    return Timeline(op_events(schedule, start, end), meta)


def _op_v1(raw: Any, rank: int, lane: str, where: str) -> Op:
    if not isinstance(raw, Mapping):
        raise InputError(f"{where}: expected an object with at least 'kind'")
    kind = raw.get("kind")
    if not isinstance(kind, str) or not kind:
        raise InputError(f"{where}.kind: got {kind!r}, expected an op kind such as F")
    kw: dict[str, Any] = {}
    for name, _ in _INT_COLUMNS:
        if name in raw:
            v = raw[name]
            if not isinstance(v, int) or isinstance(v, bool) or abs(v) > _MAX_INDEX:
                raise InputError(f"{where}.{name}: got {v!r}, expected an integer")
            kw[name] = v
    for name in ("flow", "label", "cost"):
        if name in raw:
            if not isinstance(raw[name], str):
                raise InputError(f"{where}.{name}: got {raw[name]!r}, expected a string")
            kw[name] = raw[name]
    if "payload" in raw:
        v = raw["payload"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or v == float("inf"):
            raise InputError(f"{where}.payload: got {v!r}, expected a finite number >= 0")
        kw["payload"] = float(v)
    if raw.get("pair") is not None:
        p = raw["pair"]
        if not (isinstance(p, list) and len(p) == 3 and all(isinstance(x, int) and not isinstance(x, bool) for x in p)):
            raise InputError(f"{where}.pair: got {p!r}, expected [stage, mb, direction]")
        kw["pair"] = tuple(p)
    known = {name for name, _ in _INT_COLUMNS} | {"flow", "label", "cost", "kind", "payload", "pair", "rank", "lane"}
    extra = sorted(set(raw) - known)
    if extra:
        raise InputError(f"{where}: unknown field '{extra[0]}'; known: {', '.join(sorted(known))}")
    return Op(kind=kind, rank=rank, lane=lane, **kw)
