"""Timeline files: the JSON that :meth:`pptl.timeline.Timeline.to_dict` writes (planned by the
simulator, measured by ``pptl run``), read back with every field checked and bounded.

Errors name the source and the field, on one line (:class:`pptl.errors.InputError`).
"""
from __future__ import annotations

import re
from dataclasses import fields
from typing import Any, Mapping

from pptl.config import MAX_OPS
from pptl.errors import InputError
from pptl.formats._legacy import BUCKET_KINDS, bucket_fields, bucket_id
from pptl.formats._quote import quoted
from pptl.formats._text import check_names, has_control
from pptl.timeline import MAX_INDEX, MAX_TIME, TIMELINE_VERSION, Event, Timeline, TimelineMeta, unit_scale

__all__ = ["timeline_from_dict"]


def timeline_from_dict(data: Any, *, source: str = "<timeline>") -> Timeline:
    """Read a timeline written by :meth:`Timeline.to_dict`; errors name the source and field.

    Beyond each field's type and bounds, the events must agree with each other and with ``meta``:
    op ids are unique, the rank an id names is the event's rank, a rank is below ``meta.pp``, and a
    clock tolerance (``meta.extra.clock.tolerance_ms``) is shorter than the timeline itself.
    """
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: expected a JSON object with 'format': 'pptl-timeline'")
    if data.get("format") != "pptl-timeline":
        raise InputError(f"{source}: field 'format': got {quoted(data.get('format'))}, expected 'pptl-timeline'")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise InputError(f"{source}: field 'version': got {quoted(version)}, expected an integer")
    if version > TIMELINE_VERSION:
        raise InputError(f"{source}: timeline format version {version} is newer than this pptl reads "
                         f"({TIMELINE_VERSION}); upgrade pptl")
    if version < 1:
        raise InputError(f"{source}: field 'version': got {version}, expected {TIMELINE_VERSION} (no timeline "
                         "format had a version below 1)")
    meta = _meta(data.get("meta", {}), source)
    events_raw = data.get("events")
    if not isinstance(events_raw, list):
        raise InputError(f"{source}: field 'events': expected a list")
    if len(events_raw) > MAX_OPS:
        raise InputError(f"{source}: {len(events_raw):,} events, more than the {MAX_OPS:,} pptl accepts")
    events = [_event(e, i, source) for i, e in enumerate(events_raw)]
    _check_events(events, meta, source)
    tl = Timeline(events, meta)
    _check_tolerance(tl, source)
    return tl


def _meta(meta_raw: Any, source: str) -> TimelineMeta:
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
            raise InputError(f"{source}: field 'meta.{k}': got {quoted(v)}, expected {_TYPE_NAMES[expected]}")
        # Renderers size rows by pp and vpp, and every rank of an event must be below pp: a count
        # of zero or less is no count (a timeline that does not know its pp leaves the field out).
        low = _LEAST.get(k)
        if low is not None and isinstance(v, int) and not low <= v <= MAX_INDEX:
            raise InputError(f"{source}: field 'meta.{k}': got {v}, expected an integer in {low}..{MAX_INDEX}")
        if isinstance(v, str):
            check_names((v,), f"{source}: field 'meta.{k}'")  # the title and family are drawn and printed
        meta_kw[k] = v
    return TimelineMeta(**meta_kw)


_TYPE_NAMES = {str: "a string", int: "an integer", Mapping: "an object"}
#: The least value of each count in ``meta``.
_LEAST = {"pp": 1, "vpp": 1, "microbatches": 0}
#: The rank and lane an op id starts with (``r3/compute/...``; see docs/format.md).
_ID_HEAD = re.compile(r"r(\d{1,8})/([^/]*)/")


def _check_events(events: list[Event], meta: TimelineMeta, source: str) -> None:
    """Refuse events that contradict each other or ``meta``: every reader keys events by op id
    (compare, explain, the measured rules), and draws a row per (rank, lane) it sees, so a repeated
    id or a rank the id does not name would count an op twice or invent a rank.

    Notes: the importers of profiler traces and event lists build their timelines from a schedule
    and never come here; a plan's own timeline (columns) neither. What does come here, a
    ``pptl run`` timeline or one stored whole in a plan, has one event per op by construction. O(n).
    """
    seen: dict[str, int] = {}
    pp = meta.pp
    for i, e in enumerate(events):
        first = seen.setdefault(e.op, i)
        if first != i:
            raise InputError(f"{source}: events[{i}]: op {quoted(e.op)} appears twice (events[{first}])")
        head = _ID_HEAD.match(e.op)
        if head is not None:
            if int(head.group(1)) != e.rank:
                raise InputError(f"{source}: events[{i}]: rank {e.rank}, but its op id {quoted(e.op)} names rank "
                                 f"{int(head.group(1))}")
            if head.group(2) != e.lane:
                raise InputError(f"{source}: events[{i}]: lane {quoted(e.lane)}, but its op id {quoted(e.op)} "
                                 f"names lane {quoted(head.group(2))}")
        if pp and e.rank >= pp:
            raise InputError(f"{source}: events[{i}].rank: got {e.rank}, expected a rank in 0..{pp - 1} "
                             f"(meta.pp is {pp})")




def _check_tolerance(tl: Timeline, source: str) -> None:
    """The clock tolerance a measured timeline states (``meta.extra.clock.tolerance_ms``) widens
    what PP090/PP091 let pass; one as long as the step itself lets every violation pass, so it is
    refused rather than trusted."""
    clock = tl.meta.extra.get("clock")
    if not isinstance(clock, Mapping) or "tolerance_ms" not in clock:
        return
    where = f"{source}: field 'meta.extra.clock.tolerance_ms'"
    tol = clock["tolerance_ms"]
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol:
        raise InputError(f"{where}: got {quoted(tol)}, expected a number of ms >= 0")
    span_ms = tl.makespan * (unit_scale(tl.meta.units, "ms") or 1.0)
    if tol > (span_ms if tl.events else MAX_TIME):
        raise InputError(f"{where}: got {tol:g} ms, longer than the timeline's makespan ({span_ms:.6g} ms): a "
                         "tolerance that long would pass any measurement error; expected the clocks' uncertainty")


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
            raise InputError(f"{where}.{name}: got {quoted(v)}, expected {typ.__name__}")
    if not 0 <= rank <= MAX_INDEX:
        raise InputError(f"{where}.rank: got {rank}, expected an integer in 0..{MAX_INDEX}")
    for name, v in (("start", start), ("end", end)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not -MAX_TIME <= v <= MAX_TIME:
            raise InputError(f"{where}.{name}: got {quoted(v)}, expected a finite number within +-{MAX_TIME:g}")
    if end < start:
        raise InputError(f"{where}: end {end} is before start {start}")
    kw: dict[str, Any] = {}
    for name in ("stage", "mb", "direction", "chunk", "sub", "peer", "bucket", "half"):
        if name in e:
            v = e[name]
            if not isinstance(v, int) or isinstance(v, bool) or abs(v) > MAX_INDEX:
                raise InputError(f"{where}.{name}: got {quoted(v)}, expected an integer in -{MAX_INDEX}..{MAX_INDEX}")
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
            raise InputError(f"{where}.pair: got {quoted(p)}, expected [stage, mb, direction]")
        kw["pair"] = tuple(p)
    if "waits_on" in e:
        w = e["waits_on"]
        if not (isinstance(w, list) and all(isinstance(x, str) for x in w)):
            raise InputError(f"{where}.waits_on: expected a list of op ids")
        kw["waits_on"] = tuple(map(bucket_id, w)) if legacy else tuple(w)
    _check_event_names(op, lane, kind, kw, where)
    return Event(op=op, rank=rank, lane=lane, start=float(start), end=float(end), kind=kind, **kw)


def _check_event_names(op: str, lane: str, kind: str, kw: dict[str, Any], where: str) -> None:
    """The event's names are printed and drawn as they are (:mod:`pptl.formats._text`). One search
    over them all, and a field by field one only to name the field of a bad event (O(length))."""
    texts = (op, lane, kind, kw.get("label", ""), kw.get("flow", ""), *kw.get("waits_on", ()))
    if not has_control("".join(texts)):
        return
    for name, value in (("op", op), ("lane", lane), ("kind", kind), ("label", kw.get("label", "")),
                        ("flow", kw.get("flow", ""))):
        check_names((value,), f"{where}.{name}")
    check_names(kw.get("waits_on", ()), f"{where}.waits_on")
