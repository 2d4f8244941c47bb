"""The plan file: JSON with a format version, the config, ops per rank and lane, extra
dependencies, the planned timeline and the metrics. Documented in docs/format.md.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from pptl.config import MAX_OPS, config_from_mapping, read_structured
from pptl.deps import training_deps
from pptl.errors import InputError
from pptl.ir import Op, Schedule, ScheduleBuilder
from pptl.timeline import Timeline, timeline_from_dict

__all__ = ["PLAN_FORMAT", "PLAN_VERSION", "plan_to_dict", "plan_from_dict", "load_plan", "dumps"]

PLAN_FORMAT = "pptl-plan"
PLAN_VERSION = 1


def plan_to_dict(schedule: Schedule, *, timeline: Timeline | None = None, metrics: Mapping | None = None) -> dict:
    """Serialise a schedule. Training dependencies are not stored (they are derived from the
    ops on load); family-specific ones are, as index pairs into the ops in file order."""
    lanes = []
    position: dict[int, int] = {}
    for (rank, lane), order in sorted(schedule.lanes.items()):
        entry_ops = []
        for i in order:
            position[i] = len(position)
            d = schedule.ops[i].to_dict()
            del d["rank"], d["lane"]
            entry_ops.append(d)
        lanes.append({"rank": rank, "lane": lane, "ops": entry_ops})
    derived = set(training_deps(schedule.ops, schedule.num_stages))
    extra = sorted((position[u], position[v]) for u, v in schedule.deps if (u, v) not in derived)
    out: dict[str, Any] = {
        "format": PLAN_FORMAT,
        "version": PLAN_VERSION,
        "config": schedule.config.to_dict() if schedule.config is not None else None,
        "schedule": {"family": schedule.family, "pp": schedule.pp, "num_stages": schedule.num_stages,
                     "microbatches": schedule.microbatches, "directions": schedule.directions,
                     "meta": schedule.meta},
        "lanes": lanes,
        "deps": [list(e) for e in extra],
    }
    if timeline is not None:
        out["timeline"] = timeline.to_dict()
    if metrics is not None:
        out["metrics"] = dict(metrics)
    return out


def dumps(data: Mapping) -> str:
    return json.dumps(data, separators=(",", ":"), allow_nan=False)


def load_plan(path: str | Path) -> tuple[Schedule, Timeline | None]:
    data = read_structured(path) if str(path).lower().endswith(".json") else None
    if data is None:
        raise InputError(f"{path}: a plan file is JSON (.json)")
    return plan_from_dict(data, source=str(path))


_INT_FIELDS = ("stage", "mb", "direction", "chunk", "peer", "sub")
_STR_FIELDS = ("flow", "label", "cost")


def plan_from_dict(data: Any, *, source: str = "<plan>") -> tuple[Schedule, Timeline | None]:
    """Rebuild a schedule (and its stored timeline, if any); every error names the field."""
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
    cfg = None
    if data.get("config") is not None:
        if not isinstance(data["config"], Mapping):
            raise InputError(f"{source}: field 'config': expected an object")
        cfg = config_from_mapping(data["config"], source=f"{source}: config")
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
            b.add(_op(raw, rank, lane, f"{where}.ops[{oi}]"))
    n = len(b.ops)
    deps = set(training_deps(b.ops, sizes["num_stages"]))
    raw_deps = data.get("deps", [])
    if not isinstance(raw_deps, list):
        raise InputError(f"{source}: field 'deps': expected a list of [producer, consumer] op positions")
    for k, e in enumerate(raw_deps):
        if not (isinstance(e, list) and len(e) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                                              and 0 <= x < n for x in e)):
            raise InputError(f"{source}: deps[{k}]: got {e!r}, expected [producer, consumer] positions in 0..{n - 1}")
        deps.add((e[0], e[1]))
    schedule = Schedule(family=family, pp=sizes["pp"], num_stages=sizes["num_stages"],
                        microbatches=sizes["microbatches"], ops=b.ops, lanes=b.lanes, deps=sorted(deps),
                        directions=sizes["directions"], config=cfg, meta=dict(meta))
    timeline = None
    if data.get("timeline") is not None:
        timeline = timeline_from_dict(data["timeline"], source=f"{source}: timeline")
    return schedule, timeline


def _op(raw: Any, rank: int, lane: str, where: str) -> Op:
    if not isinstance(raw, Mapping):
        raise InputError(f"{where}: expected an object with at least 'kind'")
    kind = raw.get("kind")
    if not isinstance(kind, str) or not kind:
        raise InputError(f"{where}.kind: got {kind!r}, expected an op kind such as F")
    kw: dict[str, Any] = {}
    for name in _INT_FIELDS:
        if name in raw:
            v = raw[name]
            if not isinstance(v, int) or isinstance(v, bool) or abs(v) > 10_000_000:
                raise InputError(f"{where}.{name}: got {v!r}, expected an integer")
            kw[name] = v
    for name in _STR_FIELDS:
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
    known = set(_INT_FIELDS) | set(_STR_FIELDS) | {"kind", "payload", "pair", "rank", "lane"}
    extra = sorted(set(raw) - known)
    if extra:
        raise InputError(f"{where}: unknown field '{extra[0]}'; known: {', '.join(sorted(known))}")
    return Op(kind=kind, rank=rank, lane=lane, **kw)
