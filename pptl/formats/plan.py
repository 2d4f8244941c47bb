"""The plan file: JSON with a format version, the config, the ops as columns, extra dependencies,
the planned times and the metrics. Documented in docs/format.md.

Version 2 (written since 2026-11-26) stores one list per op field, in file order (lanes in
order, ops in run order), with strings as indices into small tables and the planned timeline as
two lists (start, end): about 25 bytes an op where version 1 took 240. Version 3 (written since
2026-11-26) adds the columns ``bucket`` and ``half`` (a weight update's bucket and IPC buffer
half), which versions 1 and 2 stored in ``mb`` and ``sub``; files of every older version still
load, with those values moved into the new fields (:mod:`pptl.formats._legacy`).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from itertools import chain
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeGuard

import numpy as np

from pptl.config import MAX_OPS, config_from_mapping
from pptl.deps import facts_of_table, training_deps
from pptl.errors import InputError
from pptl.events import op_events
from pptl.fileio import MAX_FILE_BYTES, read_bounded
from pptl.formats._legacy import BUCKET_KINDS, bucket_fields
from pptl.formats._quote import counted, quoted
from pptl.formats._text import check_names
from pptl.formats.structured import read_structured
from pptl.formats.timeline import timeline_from_dict
from pptl.ir import Facts, Op, Schedule, ScheduleBuilder
from pptl.optable import OpTable
from pptl.schedules._moe_meta import MoEMeta
from pptl.schedules._pipeline_meta import PipelineMeta
from pptl.schedules._weight_update_meta import WeightUpdateMeta
from pptl.timeline import MAX_TIME, Timeline, TimelineMeta

__all__ = ["PLAN_FORMAT", "PLAN_VERSION", "PlanTimes", "StoredColumns", "plan_to_dict", "plan_from_dict",
           "read_plan_dict", "load_plan", "dumps"]

PLAN_FORMAT = "pptl-plan"
PLAN_VERSION = 3

#: Integer op fields stored as columns, with their defaults (a column equal to its default is left out).
_INT_COLUMNS = (("stage", -1), ("mb", -1), ("direction", 0), ("chunk", -1), ("peer", -1), ("sub", -1), ("bucket", -1),
                ("half", -1))
#: Columns a file of an older version cannot hold (it stored their values in mb and sub).
_NEW_IN_V3 = frozenset({"bucket", "half"})
#: String op fields stored as a table of values plus one index per op.
_STR_COLUMNS = (("kind", None), ("flow", ""), ("label", ""), ("cost", ""))
_MAX_INDEX = 10_000_000
#: Largest topological position a plan's ``order`` may claim (positions are compared, not counted).
_MAX_ORDER = 2**62
#: Op fields that most families leave at their defaults (the training families: all of them).
_RARE_NAMES = ("label", "cost", "direction", "sub", "pair", "payload", "bucket", "half")


@dataclass(frozen=True, slots=True)
class PlanTimes:
    """Planned start and end of every op (indexed like ``schedule.ops``) and the timeline's meta."""

    start: Sequence[float]
    end: Sequence[float]
    meta: TimelineMeta


def plan_to_dict(schedule: Schedule, *, timeline: Timeline | None = None, metrics: Mapping[str, Any] | None = None,
                 times: PlanTimes | None = None, topo: Sequence[int] | None = None) -> dict[str, Any]:
    """Serialise a schedule (format version 3).

    Training dependencies are not stored (they are derived from the ops on load); family-specific
    ones are, as a flat list of (producer, consumer) positions in file order. The planned times
    come from ``times`` (cheap: what the simulator computed) or from ``timeline``; a timeline whose
    events are not the schedule's ops is stored whole, as in version 1.
    """
    keys = sorted(schedule.lanes)
    if times is None and timeline is not None:
        times = _times_of(schedule, timeline)  # None: its events are not the schedule's ops (stored whole)
    return _finish(_columns_of(schedule, keys, times, topo), schedule, keys, timeline, metrics)


@dataclass(slots=True)
class _Written:
    """The op columns, the extra facts, the planned times and the topological positions, all in
    file order."""

    columns: dict[str, Any]
    deps: list[int]
    timeline: dict[str, Any] | None = None
    order: list[int] | None = None
    position: Any = None
    """Op index in the schedule -> its position in the file (what op indices in ``meta`` become)."""


def _finish(written: _Written, schedule: Schedule, keys: list[tuple[int, str]], timeline: Timeline | None,
            metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "format": PLAN_FORMAT,
        "version": PLAN_VERSION,
        "config": schedule.config.to_dict() if schedule.config is not None else None,
        "schedule": {"family": schedule.family, "pp": schedule.pp, "num_stages": schedule.num_stages,
                     "microbatches": schedule.microbatches, "directions": schedule.directions,
                     "meta": _meta_in_file_order(schedule.meta, written.position)},
        "lanes": [{"rank": r, "lane": lane, "count": len(schedule.lanes[(r, lane)])} for r, lane in keys],
        "ops": written.columns,
        "deps": written.deps,
    }
    if written.order is not None:
        out["order"] = written.order
    if written.timeline is not None:
        out["timeline"] = written.timeline
    elif timeline is not None:
        out["timeline"] = timeline.to_dict()  # its events are not the schedule's ops: stored whole
    if metrics is not None:
        out["metrics"] = dict(metrics)
    return out


def _meta_in_file_order(meta: Mapping[str, Any], position: Any) -> Mapping[str, Any]:
    """``meta`` with the op indices of its ``held`` spans moved to file order: the reader takes
    them as positions in the file, and a family need not build its ops in lane order (inference's
    are per rank in phase order, not per lane)."""
    held = meta.get("held")
    if not held or position is None:
        return meta
    at = position.tolist()
    return {**meta, "held": [[at[a], ea, at[b], eb, amount] for a, ea, b, eb, amount in held]}


def _columns_of(schedule: Schedule, keys: list[tuple[int, str]], times: PlanTimes | None,
                topo: Sequence[int] | None) -> _Written:
    """:func:`plan_to_dict`'s columns, facts and times, from the schedule's table (no ``Op`` per row)."""
    t = schedule.table
    n = t.n
    lanes = schedule.lanes
    order = np.fromiter(chain.from_iterable(map(lanes.__getitem__, keys)), dtype=np.int64, count=n)

    def names_at(name: str) -> list[str]:
        table = getattr(t, f"{name}_names")
        return [table[c] for c in np.flatnonzero(np.bincount(getattr(t, name), minlength=len(table))).tolist()]

    rare_default = (set(names_at("label")) <= {""} and set(names_at("cost")) <= {""}
                    and not (t.direction != 0).any() and not (t.sub != -1).any() and not t.has_pair.any()
                    and not (t.payload != 0.0).any() and not (t.bucket != -1).any() and not (t.half != -1).any())
    columns: dict[str, Any] = {}
    for name, text_default in _STR_COLUMNS:
        if rare_default and name in _RARE_NAMES:
            continue
        codes = getattr(t, name)[order]
        table = getattr(t, f"{name}_names")
        used = np.flatnonzero(np.bincount(codes, minlength=len(table))) if n else np.zeros(0, dtype=np.int64)
        if text_default is not None and all(table[c] == text_default for c in used.tolist()):
            continue  # all default (or no ops): left out
        # Codes in first-seen order, as the table lists them (a few names: one pass per name).
        first = [int(np.argmax(codes == c)) for c in used.tolist()] if used.size <= 64 else \
            np.unique(codes, return_index=True)[1].tolist()
        seen = used[np.argsort(np.asarray(first, dtype=np.int64), kind="stable")]
        remap = np.zeros(max(len(table), 1), dtype=np.int64)
        remap[seen] = np.arange(seen.size)
        columns[name] = {"values": [table[c] for c in seen.tolist()], "index": remap[codes].tolist()}
    for name, default in _INT_COLUMNS:
        if rare_default and name in _RARE_NAMES:
            continue
        values = getattr(t, name)[order]
        if (values != default).any():
            columns[name] = values.tolist()
    if not rare_default:
        has = t.has_pair[order]
        if has.any():
            rows = t.pair[order].tolist()
            columns["pair"] = [p if h else None for p, h in zip(rows, has.tolist())]
        payload = t.payload[order]
        if (payload != 0.0).any():
            columns["payload"] = _compact_array(payload)
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n, dtype=np.int64)
    extra: list[int] = []
    u, v = schedule.dep_arrays()
    if u.size:
        du, dv = facts_of_table(t, schedule.num_stages)
        same = (du is u and dv is v) or (du.size == u.size and (du == u).all() and (dv == v).all())
        if not same:
            keep = ~np.isin(u * n + v, du * n + dv)
            pu, pv = position[u[keep]], position[v[keep]]
            by = np.lexsort((pv, pu))
            extra = np.stack([pu[by], pv[by]], axis=1).ravel().tolist()
    written = _Written(columns, extra, position=position)
    if times is not None:
        written.timeline = {"meta": timeline_meta_dict(times.meta),
                            "start": _compact_array(np.asarray(times.start, dtype=np.float64)[order]),
                            "end": _compact_array(np.asarray(times.end, dtype=np.float64)[order])}
    if topo is not None and len(topo) == n:
        rank_in = np.empty(n, dtype=np.int64)
        rank_in[np.asarray(topo, dtype=np.int64)] = np.arange(n, dtype=np.int64)
        written.order = rank_in[order].tolist()
    return written


def _compact_array(values: Any) -> list[float] | list[int]:
    """Whole numbers as ints ("12" rather than "12.0"): a quarter of a plan's bytes are times."""
    if values.size and np.isfinite(values).all() and np.abs(values).max() < 2.0 ** 53 and \
            (values == np.trunc(values)).all():
        return values.astype(np.int64).tolist()  # type: ignore[no-any-return]
    return [int(v) if v.is_integer() else v for v in values.tolist()]  # inf or nan: allow_nan=False reports it


def timeline_meta_dict(meta: TimelineMeta) -> dict[str, Any]:
    d = asdict(meta)
    d["extra"] = dict(meta.extra)
    return d


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
    (``pptl check`` only validates it, see :class:`StoredColumns`: building 400k events costs more
    than the check).

    Every error names the field; the timeline's are raised when it is read.
    """
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: expected a JSON object with 'format': '{PLAN_FORMAT}'")
    if data.get("format") != PLAN_FORMAT:
        raise InputError(f"{source}: field 'format': got {quoted(data.get('format'))}, expected '{PLAN_FORMAT}'")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InputError(f"{source}: field 'version': got {quoted(version)}, expected an integer >= 1")
    if version > PLAN_VERSION:
        raise InputError(f"{source}: plan format version {version} is newer than this pptl reads ({PLAN_VERSION}); "
                         "upgrade pptl or re-plan with this version")
    head = data.get("schedule")
    if not isinstance(head, Mapping):
        raise InputError(f"{source}: field 'schedule': expected an object with family, pp, num_stages, microbatches")
    family = head.get("family")
    if not isinstance(family, str):
        raise InputError(f"{source}: field 'schedule.family': expected a string")
    check_names((family,), f"{source}: field 'schedule.family'")  # titles and messages print it
    sizes = {}
    for name, lo in (("pp", 1), ("num_stages", 1), ("microbatches", 1), ("directions", 1)):
        v = head.get(name, 1 if name == "directions" else None)
        if not isinstance(v, int) or isinstance(v, bool) or v < lo or v > 10_000_000:
            raise InputError(f"{source}: field 'schedule.{name}': got {quoted(v)}, expected an integer >= {lo}")
        sizes[name] = v
    work = sizes["num_stages"] * sizes["microbatches"] * sizes["directions"]
    if work > MAX_OPS:
        raise InputError(f"{source}: schedule of {counted(sizes['num_stages'], 'stage')} x "
                         f"{counted(sizes['microbatches'], 'micro-batch', 'micro-batches')} "
                         f"x {counted(sizes['directions'], 'direction')} is more than the {MAX_OPS:,} units of work pptl checks")
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
    raw_deps = data.get("deps", [])
    if not isinstance(raw_deps, list):
        raise InputError(f"{source}: field 'deps': expected a list of producer, consumer op positions")
    if version >= 2:
        made = _from_table(_raw_v2(data, source, version), raw_deps, data.get("order"), family=family, sizes=sizes,
                           cfg=cfg, meta=meta, source=source)
        return made, _timeline_reader(data, made, version, source)
    ops, lanes = _ops_v1(data, source)
    n = len(ops)
    deps: dict[tuple[int, int], None] = dict.fromkeys(training_deps(ops, sizes["num_stages"]))
    for k, e in enumerate(raw_deps):
        if not (isinstance(e, list) and len(e) == 2 and all(_is_int(x) and 0 <= x < n for x in e)):
            raise InputError(f"{source}: deps[{k}]: got {quoted(e)}, expected [producer, consumer] positions in 0..{n - 1}")
        deps[(e[0], e[1])] = None
    schedule = Schedule(family=family, pp=sizes["pp"], num_stages=sizes["num_stages"],
                        microbatches=sizes["microbatches"], ops=ops, lanes=lanes, deps=list(deps),
                        directions=sizes["directions"], config=cfg, meta=dict(meta))
    return schedule, _timeline_reader(data, schedule, version, source)


def _timeline_reader(data: Mapping[str, Any], schedule: Schedule, version: int,
                     source: str) -> Callable[[], Timeline | None]:
    raw_timeline = data.get("timeline")
    if raw_timeline is None:
        return lambda: None
    if isinstance(raw_timeline, Mapping) and "format" not in raw_timeline and version >= 2:
        return StoredColumns(raw_timeline, schedule, source)
    return lambda: timeline_from_dict(raw_timeline, source=f"{source}: timeline")


@dataclass(frozen=True)
class StoredColumns:
    """A plan's timeline as version 2 stores it (``start`` and ``end`` columns, one per op), built
    into events when called. :meth:`meta` reads and validates it without building them, for
    ``pptl check``: it must refuse a malformed timeline (a file it passes should draw) and see a
    measured one, yet 400k events cost several times the check (docs/format.md)."""

    raw: Mapping[str, Any]
    schedule: Schedule
    source: str

    def __call__(self) -> Timeline:
        meta, start, end = _timeline_v2(self.raw, self.schedule, self.source)
        return Timeline(op_events(self.schedule, start.tolist(), end.tolist()), meta)

    def meta(self) -> TimelineMeta:
        """The timeline's meta, once every field of it has been validated (InputError otherwise)."""
        return _timeline_v2(self.raw, self.schedule, self.source)[0]


def _from_table(raw: _RawColumns, raw_deps: list[Any], raw_order: Any, *, family: str, sizes: dict[str, int],
                cfg: Any, meta: Mapping[str, Any], source: str) -> Schedule:
    """A plan (format 2+) as a table-made schedule: no ``Op`` objects until something reads them."""
    n = raw.n
    table = _table_v2(raw)
    try:
        derived = facts_of_table(table, sizes["num_stages"])
    except InputError as e:
        raise InputError(f"{source}: {e}") from None
    if len(raw_deps) % 2 or not all(_is_int(x) and 0 <= x < n for x in raw_deps):
        raise InputError(f"{source}: field 'deps': expected an even-length list of op positions in 0..{n - 1}")
    u, v = derived
    if raw_deps:
        # The extra facts after the derived ones, each once, in file order.
        flat = np.asarray(raw_deps, dtype=np.int64)
        keys = flat[0::2] * n + flat[1::2]
        _, first = np.unique(keys, return_index=True)
        keys = keys[np.sort(first)]
        keys = keys[~np.isin(keys, u * n + v)]
        u, v = np.concatenate([u, keys // n]), np.concatenate([v, keys % n])
    hint = None
    if raw_order is not None:
        typed = isinstance(raw_order, list) and len(raw_order) == n and (not n or set(map(type, raw_order)) == {int})
        checked = (_checked_ints(raw_order, 0, _MAX_ORDER) if n else raw_order) if typed else None
        if checked is None:
            raise InputError(f"{source}: field 'order': expected a list of {counted(n, 'integer')} in 0..{_MAX_ORDER} (a "
                             "topological position per op, in file order)")
        hint = np.asarray(checked, dtype=np.int64)
    return Schedule(family, sizes["pp"], sizes["num_stages"], sizes["microbatches"], lanes=raw.lanes,
                    directions=sizes["directions"], config=cfg, meta=dict(meta), table=table, facts=Facts(u, v),
                    order_hint=hint)


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
        if not isinstance(rank, int) or isinstance(rank, bool) or abs(rank) > _MAX_INDEX:  # as version 2's
            raise InputError(f"{where}.rank: got {quoted(rank)}, expected an integer")
        if not isinstance(lane, str) or not lane:
            raise InputError(f"{where}.lane: got {quoted(lane)}, expected a lane name")
        check_names((lane,), f"{where}.lane")
        if not isinstance(ops, list):
            raise InputError(f"{where}.ops: expected a list")
        for oi, raw in enumerate(ops):
            b.add(_op_v1(raw, rank, lane, f"{where}.ops[{oi}]"))
    return b.ops, b.lanes


class _RawColumns:
    """A version 2 file's op columns, validated but not yet turned into ops: each string field as
    (index list, value table), each integer field as a list, pairs and payloads (None: absent)."""

    __slots__ = ("n", "lanes", "lane_rank", "lane_name", "lane_count", "strs", "ints", "pairs", "payloads")

    def __init__(self, n: int, lanes: dict[tuple[int, str], list[int]], lane_rank: list[int], lane_name: list[str],
                 lane_count: list[int], strs: dict[str, tuple[Any, list[str]] | None],
                 ints: dict[str, Any], pairs: list[tuple[int, int, int] | None] | None,
                 payloads: list[float] | None) -> None:
        self.n, self.lanes, self.lane_rank, self.lane_name, self.lane_count = n, lanes, lane_rank, lane_name, lane_count
        self.strs, self.ints, self.pairs, self.payloads = strs, ints, pairs, payloads


def _raw_v2(data: Mapping[str, Any], source: str, version: int) -> _RawColumns:
    """The op columns of a version 2 or 3 file (version 2: a weight update's bucket and half read
    from its mb and sub)."""
    raw_lanes = data.get("lanes")
    if not isinstance(raw_lanes, list):
        raise InputError(f"{source}: field 'lanes': expected a list of {{rank, lane, count}}")
    total = sum(e["count"] for e in raw_lanes if isinstance(e, Mapping) and _is_int(e.get("count")) and e["count"] > 0)
    if total > MAX_OPS:
        raise InputError(f"{source}: {total:,} ops, more than the {MAX_OPS:,} pptl accepts")
    lanes: dict[tuple[int, str], list[int]] = {}
    lane_rank: list[int] = []
    lane_name: list[str] = []
    lane_count: list[int] = []
    n = 0
    for li, entry in enumerate(raw_lanes):
        where = f"{source}: lanes[{li}]"
        if not isinstance(entry, Mapping):
            raise InputError(f"{where}: expected an object with rank, lane, count")
        rank, lane, count = entry.get("rank"), entry.get("lane"), entry.get("count")
        if not _is_int(rank) or abs(rank) > _MAX_INDEX:
            raise InputError(f"{where}.rank: got {quoted(rank)}, expected an integer")
        if not isinstance(lane, str) or not lane:
            raise InputError(f"{where}.lane: got {quoted(lane)}, expected a lane name")
        check_names((lane,), f"{where}.lane")
        if not _is_int(count) or count < 0:
            raise InputError(f"{where}.count: got {quoted(count)}, expected an integer >= 0")
        lanes.setdefault((rank, lane), []).extend(range(n, n + count))
        lane_rank.append(rank)
        lane_name.append(lane)
        lane_count.append(count)
        n += count
    cols = data.get("ops")
    if not isinstance(cols, Mapping):
        raise InputError(f"{source}: field 'ops': expected an object of columns (kind, stage, mb, ...)")
    known = {name for name, _ in _STR_COLUMNS} | {name for name, _ in _INT_COLUMNS} | {"pair", "payload"}
    if version < 3:
        known -= _NEW_IN_V3
    unknown = sorted(set(cols) - known)
    if unknown:
        raise InputError(f"{source}: ops.{unknown[0]}: unknown column; known: {', '.join(sorted(known))}")
    if "kind" not in cols:
        raise InputError(f"{source}: ops.kind: required (the kind of every op)")
    strs = {name: _str_column(cols.get(name), n, f"{source}: ops.{name}") for name, _ in _STR_COLUMNS}
    kinds = strs["kind"]
    empty = {k for k, v in enumerate(kinds[1]) if not v} if kinds is not None else set()
    if kinds is not None and empty and not empty.isdisjoint(_as_list(kinds[0])):
        raise InputError(f"{source}: ops.kind: got an empty kind, expected an op kind such as F")
    ints: dict[str, Any] = {}  # a list, or the int64 array it was checked on (long columns)
    for name, _ in _INT_COLUMNS:
        col = cols.get(name)
        if col is None:
            ints[name] = None
            continue
        if not isinstance(col, list) or len(col) != n:
            raise InputError(f"{source}: ops.{name}: expected a list of {counted(n, 'integer')}")
        typed = not n or set(map(type, col)) == {int}
        checked = (_checked_ints(col, -_MAX_INDEX, _MAX_INDEX) if n else col) if typed else None
        if checked is None:  # a value of another type, or out of range
            bad = next(v for v in col if type(v) is not int or abs(v) > _MAX_INDEX)
            raise InputError(f"{source}: ops.{name}: got {quoted(bad)}, expected integers in -{_MAX_INDEX}..{_MAX_INDEX}")
        ints[name] = checked
    if version < 3 and kinds is not None and not BUCKET_KINDS.isdisjoint(kinds[1]):
        _move_buckets(ints, kinds, n)
    pair = cols.get("pair")
    pairs: list[tuple[int, int, int] | None] | None = None
    if pair is not None:
        if not isinstance(pair, list) or len(pair) != n:
            raise InputError(f"{source}: ops.pair: expected a list of {counted(n, 'entry', 'entries')}, each null or [stage, mb, direction]")
        pairs = []
        for p in pair:
            if p is None:
                pairs.append(None)
            elif isinstance(p, list) and len(p) == 3 and all(_is_int(x) and abs(x) <= _MAX_INDEX for x in p):
                pairs.append((p[0], p[1], p[2]))
            else:
                raise InputError(f"{source}: ops.pair: got {quoted(p)}, expected null or [stage, mb, direction]")
    payload = cols.get("payload")
    payloads: list[float] | None = None
    if payload is not None:
        if not isinstance(payload, list) or len(payload) != n:
            raise InputError(f"{source}: ops.payload: expected a list of {counted(n, 'number')}")
        for v in payload:
            if type(v) not in (int, float) or not 0 <= v < math.inf:
                raise InputError(f"{source}: ops.payload: got {quoted(v)}, expected a finite number >= 0")
        payloads = [float(v) for v in payload]
    return _RawColumns(n, lanes, lane_rank, lane_name, lane_count, strs, ints, pairs, payloads)


def _move_buckets(ints: dict[str, Any], kinds: tuple[Any, list[str]], n: int) -> None:
    """A version 2 file's weight-update ops, with their mb and sub moved into bucket and half."""
    # New lists (the file's are left as read; a long column may be an array).
    mb, sub = ([-1] * n if ints[k] is None else _as_list(ints[k]) for k in ("mb", "sub"))
    bucket, half = [-1] * n, [-1] * n
    index, table = kinds
    moved = {k for k, name in enumerate(table) if name in BUCKET_KINDS}
    for i, k in enumerate(_as_list(index)):
        if k in moved:
            mb[i], sub[i], bucket[i], half[i] = bucket_fields(table[k], mb[i], sub[i])
    for name, col in (("mb", mb), ("sub", sub), ("bucket", bucket), ("half", half)):
        ints[name] = col if col.count(-1) != n else None


def _table_v2(raw: _RawColumns) -> OpTable:
    """The columns as an :class:`pptl.optable.OpTable`, without an ``Op`` per row."""
    n = raw.n
    i64 = np.int64
    counts = np.asarray(raw.lane_count, dtype=i64)
    lane_names = tuple(dict.fromkeys(raw.lane_name))
    where = {v: k for k, v in enumerate(lane_names)}
    strs: dict[str, tuple[Any, tuple[str, ...]]] = {
        "lane": (np.repeat(np.asarray([where[v] for v in raw.lane_name], dtype=np.int32), counts), lane_names)}
    for name, default in _STR_COLUMNS:
        col = raw.strs[name]
        if col is None:
            strs[name] = (np.zeros(n, dtype=np.int32), (default or "",))
            continue
        index, table = col
        names = tuple(dict.fromkeys(table))  # a table may list a value twice: one code per value
        codes = np.asarray(index, dtype=np.int32)
        if len(names) != len(table):
            first = {v: k for k, v in enumerate(names)}
            codes = np.asarray([first[v] for v in table], dtype=np.int32)[codes]
        strs[name] = (codes, names or (default or "",))
    ints = {"rank": np.repeat(np.asarray(raw.lane_rank, dtype=i64), counts)}
    for name, int_default in _INT_COLUMNS:
        int_col = raw.ints[name]
        ints[name] = np.full(n, int_default, dtype=i64) if int_col is None else np.asarray(int_col, dtype=i64)
    payload = np.asarray(raw.payloads, dtype=np.float64) if raw.payloads is not None else None
    return OpTable.of_columns(n, strs, ints, raw.pairs, payload)


def _checked_ints(values: list[int], lo: int, hi: int) -> Any:
    """``values`` (ints) as the int64 array they were checked on (the op table takes it as it is:
    converted once) if every one lies in ``lo..hi``, else None."""
    try:
        a = np.asarray(values, dtype=np.int64)
    except OverflowError:
        return None
    return a if lo <= int(a.min()) and int(a.max()) <= hi else None


def _as_list(values: Any) -> list[int]:
    """A checked column as a list (what ``Op`` fields hold: Python ints, not numpy's)."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


def _str_column(col: Any, n: int, where: str) -> tuple[Any, list[str]] | None:
    """A string column as (one index per op: a list, or for a long column the array it was checked
    on; the table of values); None when the file leaves it out."""
    if col is None:
        return None
    if not isinstance(col, Mapping):
        raise InputError(f"{where}: expected an object with 'values' (strings) and 'index' (one per op)")
    table, index = col.get("values"), col.get("index")
    if not isinstance(table, list) or not all(isinstance(v, str) for v in table):
        raise InputError(f"{where}.values: expected a list of strings")
    check_names(table, f"{where}.values")  # kinds, labels... are printed in ids and drawn in legends
    if not isinstance(index, list) or len(index) != n:
        raise InputError(f"{where}.index: expected a list of {counted(n, 'position')} into 'values'")
    typed = not n or set(map(type, index)) == {int}
    checked = (_checked_ints(index, 0, len(table) - 1) if n else index) if typed else None
    if checked is None:  # a value of another type, or out of range
        raise InputError(f"{where}.index: expected integers in 0..{len(table) - 1}")
    return checked, table


def _timeline_v2(raw: Mapping[str, Any], schedule: Schedule, source: str) -> tuple[TimelineMeta, np.ndarray,
                                                                                    np.ndarray]:
    """The meta, starts and ends of a version 2 timeline, each validated (one InputError line)."""
    where = f"{source}: timeline"
    n = schedule.n_ops
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
            raise InputError(f"{where}.{name}: got {quoted(col)}, expected a list of {counted(n, 'time')} (one per op, "
                             "in file order)")
        if not set(map(type, col)) <= {int, float}:  # not bool, str, None, a list...
            v = next(v for v in col if type(v) not in (int, float))
            raise InputError(f"{where}.{name}: got {quoted(v)}, expected a finite number within +-{MAX_TIME:g}")
        values = np.asarray(col, dtype=np.float64) if n else np.zeros(0)
        bad = ~((values >= -MAX_TIME) & (values <= MAX_TIME))  # also NaN
        if bad.any():
            raise InputError(f"{where}.{name}: got {quoted(col[int(np.argmax(bad))])}, expected a finite number within "
                             f"+-{MAX_TIME:g}")
        cols.append(values)
    backwards = cols[1] < cols[0]
    if backwards.any():
        i = int(np.argmax(backwards))
        raise InputError(f"{where}: op {i} ends at {cols[1][i]:g}, before it starts at {cols[0][i]:g}")
    return meta, cols[0], cols[1]


def _op_v1(raw: Any, rank: int, lane: str, where: str) -> Op:
    if not isinstance(raw, Mapping):
        raise InputError(f"{where}: expected an object with at least 'kind'")
    kind = raw.get("kind")
    if not isinstance(kind, str) or not kind:
        raise InputError(f"{where}.kind: got {quoted(kind)}, expected an op kind such as F")
    check_names((kind,), f"{where}.kind")
    kw: dict[str, Any] = {}
    for name, _ in _V1_INTS:
        if name in raw:
            v = raw[name]
            if not isinstance(v, int) or isinstance(v, bool) or abs(v) > _MAX_INDEX:
                raise InputError(f"{where}.{name}: got {quoted(v)}, expected an integer")
            kw[name] = v
    for name in ("flow", "label", "cost"):
        if name in raw:
            if not isinstance(raw[name], str):
                raise InputError(f"{where}.{name}: got {quoted(raw[name])}, expected a string")
            check_names((raw[name],), f"{where}.{name}")
            kw[name] = raw[name]
    if "payload" in raw:
        v = raw["payload"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or v == float("inf"):
            raise InputError(f"{where}.payload: got {quoted(v)}, expected a finite number >= 0")
        kw["payload"] = float(v)
    if raw.get("pair") is not None:
        p = raw["pair"]
        if not (isinstance(p, list) and len(p) == 3
                and all(isinstance(x, int) and not isinstance(x, bool) and abs(x) <= _MAX_INDEX for x in p)):
            raise InputError(f"{where}.pair: got {quoted(p)}, expected [stage, mb, direction]")
        kw["pair"] = tuple(p)
    known = {name for name, _ in _V1_INTS} | {"flow", "label", "cost", "kind", "payload", "pair", "rank", "lane"}
    extra = sorted(set(raw) - known)
    if extra:
        raise InputError(f"{where}: unknown field '{extra[0]}'; known: {', '.join(sorted(known))}")
    if kind in BUCKET_KINDS:
        kw["mb"], kw["sub"], kw["bucket"], kw["half"] = bucket_fields(kind, kw.get("mb", -1), kw.get("sub", -1))
    return Op(kind=kind, rank=rank, lane=lane, **kw)


_V1_INTS = tuple((name, default) for name, default in _INT_COLUMNS if name not in _NEW_IN_V3)
