"""Timelines: when each op ran (planned by the simulator, or measured by ``pptl run``).

Planned and measured timelines are the same type, so every renderer and exporter serves both.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterable, Mapping, Sequence, TypeVar

from pptl.config import MAX_OPS
from pptl.errors import InputError

__all__ = ["Event", "TimelineMeta", "Timeline", "timeline_from_dict", "RankStats", "bubble_fraction", "MAX_INDEX", "MAX_TIME"]


@dataclass(frozen=True, slots=True)
class Event:
    """One op's interval on its lane."""

    op: str
    """The op id (``r0/compute/F s3 mb5``)."""
    rank: int
    lane: str
    start: float
    end: float
    kind: str
    stage: int = -1
    mb: int = -1
    direction: int = 0
    chunk: int = -1
    pair: tuple[int, int, int] | None = None
    label: str = ""
    sub: int = -1
    peer: int = -1
    waits_on: tuple[str, ...] = ()
    """Ids of the ops this one depends on (data facts), for hover text."""
    flow: str = ""
    """"F" or "B": the pass a P2P transfer or a family's sub-op belongs to (MoE figures colour by it)."""

    @property
    def duration(self) -> float:
        return self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": self.op, "rank": self.rank, "lane": self.lane,
                               "start": self.start, "end": self.end, "kind": self.kind}
        for f in ("stage", "mb", "direction", "chunk", "pair", "label", "sub", "peer", "waits_on", "flow"):
            v = getattr(self, f)
            default = _EVENT_DEFAULTS[f]
            if v != default:
                out[f] = list(v) if isinstance(v, tuple) else v
        return out


_EVENT_DEFAULTS = {f.name: f.default for f in fields(Event) if f.name not in ("op", "rank", "lane", "start", "end", "kind")}


@dataclass(frozen=True, kw_only=True)
class TimelineMeta:
    source: str = "planned"
    """"planned" (simulated) or "measured" (``pptl run``)."""
    units: str = "unit"
    """Time unit of start/end: "unit" (cost-model units), "ms" or "us"."""
    family: str = ""
    pp: int = 0
    vpp: int = 1
    microbatches: int = 0
    title: str = ""
    clock: str = ""
    """How measured clocks were aligned across ranks (measured only)."""
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RankStats:
    """One rank's time on a lane (compute, unless asked otherwise)."""

    rank: int
    busy: float
    """Time the lane is busy."""
    idle: float
    """Makespan minus busy: the rank's bubble."""
    bubble_fraction: float
    """Idle over the makespan (0 for an empty timeline)."""

    @classmethod
    def of(cls: type[_Stats], rank: int, busy: float, makespan: float, **more: Any) -> _Stats:
        """The stats of a rank busy for ``busy`` of ``makespan``; ``more`` fills a subclass's
        fields (the simulator's peak memory)."""
        idle = makespan - busy
        return cls(rank, busy, idle, idle / makespan if makespan > 0 else 0.0, **more)


_Stats = TypeVar("_Stats", bound=RankStats)


def bubble_fraction(ranks: Sequence[RankStats], makespan: float) -> float:
    """The bubble of a plan or run: idle share of the ranks' lanes over the whole makespan, every
    rank counted alike (what ``pptl plan``, ``draw``, ``compare`` and ``run`` report). The one
    definition; each family's textbook formula (``Family.bubble``) is another thing: a prediction.
    """
    if not ranks or makespan <= 0:
        return 0.0
    return sum(r.idle for r in ranks) / (makespan * len(ranks))


@dataclass
class Timeline:
    events: list[Event]
    meta: TimelineMeta = field(default_factory=TimelineMeta)

    @property
    def makespan(self) -> float:
        if not self.events:
            return 0.0
        return max(e.end for e in self.events) - min(e.start for e in self.events)

    @property
    def start(self) -> float:
        return min((e.start for e in self.events), default=0.0)

    def ranks(self) -> list[int]:
        return sorted({e.rank for e in self.events})

    def lanes(self) -> list[tuple[int, str]]:
        """(rank, lane) pairs in drawing order: rank, then compute first, then first use."""
        seen: dict[tuple[int, str], float] = {}
        for e in self.events:
            key = (e.rank, e.lane)
            if key not in seen or e.start < seen[key]:
                seen[key] = e.start
        return sorted(seen, key=lambda k: (k[0], k[1] != "compute", seen[k], k[1]))

    def rank_stats(self, lane: str = "compute") -> list[RankStats]:
        """Busy time on ``lane`` per rank; idle is the makespan minus busy."""
        span = self.makespan
        busy: dict[int, float] = {r: 0.0 for r in self.ranks()}
        for e in self.events:
            if e.lane == lane:
                busy[e.rank] += e.duration
        return [RankStats.of(r, b, span) for r, b in sorted(busy.items())]

    def bubble_fraction(self, lane: str = "compute") -> float:
        """:func:`bubble_fraction` of this timeline's ranks (those with an event) on ``lane``."""
        return bubble_fraction(self.rank_stats(lane), self.makespan)

    def select(self, ranks: Iterable[int] | None = None, lanes: Iterable[str] | None = None) -> "Timeline":
        rs = set(ranks) if ranks is not None else None
        ls = set(lanes) if lanes is not None else None
        ev = [e for e in self.events if (rs is None or e.rank in rs) and (ls is None or e.lane in ls)]
        return Timeline(ev, self.meta)

    def to_dict(self) -> dict[str, Any]:
        meta = asdict(self.meta)
        meta["extra"] = dict(self.meta.extra)
        return {"format": "pptl-timeline", "version": TIMELINE_VERSION, "meta": meta,
                "events": [e.to_dict() for e in self.events]}


TIMELINE_VERSION = 1
#: Largest index (rank, stage, micro-batch, chunk...) a timeline file may hold, as in plan files:
#: renderers size rows and labels by them.
MAX_INDEX = 10_000_000
#: Largest time a timeline may hold (about 30 years in microseconds): differences and unit
#: conversions of such times stay finite floats.
MAX_TIME = 1e18


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
    for name in ("stage", "mb", "direction", "chunk", "sub", "peer"):
        if name in e:
            v = e[name]
            if not isinstance(v, int) or isinstance(v, bool) or abs(v) > MAX_INDEX:
                raise InputError(f"{where}.{name}: got {v!r}, expected an integer in -{MAX_INDEX}..{MAX_INDEX}")
            kw[name] = v
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
        kw["waits_on"] = tuple(w)
    return Event(op=op, rank=rank, lane=lane, start=float(start), end=float(end), kind=kind, **kw)
