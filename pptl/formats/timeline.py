"""Timeline files: the JSON that :meth:`pptl.timeline.Timeline.to_dict` writes (planned by the
simulator, measured by ``pptl run``), read back with every field checked and bounded.

Errors name the source and the field, on one line (:class:`pptl.errors.InputError`).
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Mapping

from pptl.config import MAX_OPS
from pptl.errors import InputError
from pptl.formats._legacy import BUCKET_KINDS, bucket_fields, bucket_id
from pptl.timeline import MAX_INDEX, MAX_TIME, TIMELINE_VERSION, Event, Timeline, TimelineMeta

__all__ = ["timeline_from_dict"]


def timeline_from_dict(data: Any, *, source: str = "<timeline>") -> Timeline:
    """Read a timeline written by :meth:`Timeline.to_dict`; errors name the source and field."""
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: expected a JSON object with 'format': 'pptl-timeline'")
    if data.get("format") != "pptl-timeline":
        raise InputError(f"{source}: field 'format': got {data.get('format')!r}, expected 'pptl-timeline'")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise InputError(f"{source}: field 'version': got {version!r}, expected an integer")
    if version > TIMELINE_VERSION:
        raise InputError(f"{source}: timeline format version {version} is newer than this pptl reads "
                         f"({TIMELINE_VERSION}); upgrade pptl")
    meta_raw = data.get("meta", {})
    if not isinstance(meta_raw, Mapping):
        raise InputError(f"{source}: field 'meta': expected an object")
    known = {f.name for f in fields(TimelineMeta)}
    meta_kw: dict[str, Any] = {}
    for k, v in meta_raw.items():
        if k not in known:
            continue  # newer writers may add fields; they do not change the events
        expected = {"source": str, "units": str, "family": str, "title": str, "clock": str,
                    "pp": int, "vpp": int, "microbatches": int, "extra": Mapping}[k]
        if not isinstance(v, expected) or isinstance(v, bool):
            raise InputError(f"{source}: field 'meta.{k}': got {v!r}, expected {expected.__name__}")
        meta_kw[k] = v
    events_raw = data.get("events")
    if not isinstance(events_raw, list):
        raise InputError(f"{source}: field 'events': expected a list")
    if len(events_raw) > MAX_OPS:
        raise InputError(f"{source}: {len(events_raw):,} events, more than the {MAX_OPS:,} pptl accepts")
    return Timeline([_event(e, i, source) for i, e in enumerate(events_raw)], TimelineMeta(**meta_kw))


def _event(e: Any, i: int, source: str) -> Event:
    where = f"{source}: events[{i}]"
    if not isinstance(e, Mapping):
        raise InputError(f"{where}: expected an object")
    try:
        op, rank, lane, kind = e["op"], e["rank"], e["lane"], e["kind"]
        start, end = e["start"], e["end"]
    except KeyError as k:
        raise InputError(f"{where}: field {k} is required") from None
    for name, v, typ in (("op", op, str), ("lane", lane, str), ("kind", kind, str), ("rank", rank, int)):
        if not isinstance(v, typ) or isinstance(v, bool):
            raise InputError(f"{where}.{name}: got {v!r}, expected {typ.__name__}")
    if not 0 <= rank <= MAX_INDEX:
        raise InputError(f"{where}.rank: got {rank}, expected an integer in 0..{MAX_INDEX}")
    for name, v in (("start", start), ("end", end)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not -MAX_TIME <= v <= MAX_TIME:
            raise InputError(f"{where}.{name}: got {v!r}, expected a finite number within +-{MAX_TIME:g}")
    if end < start:
        raise InputError(f"{where}: end {end} is before start {start}")
    kw: dict[str, Any] = {}
    for name in ("stage", "mb", "direction", "chunk", "sub", "peer", "bucket", "half"):
        if name in e:
            v = e[name]
            if not isinstance(v, int) or isinstance(v, bool) or abs(v) > MAX_INDEX:
                raise InputError(f"{where}.{name}: got {v!r}, expected an integer in -{MAX_INDEX}..{MAX_INDEX}")
            kw[name] = v
    legacy = kind in BUCKET_KINDS and "bucket" not in kw and "half" not in kw
    if legacy:
        # Written before weight-update ops had a bucket and a half: they were its mb and sub (and
        # its id said so), so that its events still match the ops of a plan written now.
        kw["mb"], kw["sub"], kw["bucket"], kw["half"] = bucket_fields(kind, kw.get("mb", -1), kw.get("sub", -1))
        op = bucket_id(op)
    for name in ("label", "flow"):
        if name in e:
            if not isinstance(e[name], str):
                raise InputError(f"{where}.{name}: expected a string")
            kw[name] = e[name]
    if "pair" in e and e["pair"] is not None:
        p = e["pair"]
        if not (isinstance(p, list) and len(p) == 3 and all(isinstance(x, int) and not isinstance(x, bool) for x in p)):
            raise InputError(f"{where}.pair: got {p!r}, expected [stage, mb, direction]")
        kw["pair"] = tuple(p)
    if "waits_on" in e:
        w = e["waits_on"]
        if not (isinstance(w, list) and all(isinstance(x, str) for x in w)):
            raise InputError(f"{where}.waits_on: expected a list of op ids")
        kw["waits_on"] = tuple(map(bucket_id, w)) if legacy else tuple(w)
    return Event(op=op, rank=rank, lane=lane, start=float(start), end=float(end), kind=kind, **kw)
