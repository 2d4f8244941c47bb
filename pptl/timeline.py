"""Timelines: when each op ran (planned by the simulator, or measured by ``pptl run``).

Planned and measured timelines are the same type, so every renderer and exporter serves both.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from operator import attrgetter
from typing import Any, Iterable, Mapping, Sequence, TypeVar

__all__ = ["Event", "TimelineMeta", "Timeline", "RankStats", "bubble_fraction", "MAX_INDEX", "MAX_TIME", "TIME_UNITS",
           "unit_scale"]


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
    bucket: int = -1
    """Weight update: the bucket (see :attr:`pptl.ir.Op.bucket`)."""
    half: int = -1
    """Weight update: the IPC buffer half."""

    @property
    def duration(self) -> float:
        return self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": self.op, "rank": self.rank, "lane": self.lane,
                               "start": self.start, "end": self.end, "kind": self.kind}
        for f in ("stage", "mb", "direction", "chunk", "pair", "label", "sub", "peer", "waits_on", "flow", "bucket",
                  "half"):
            v = getattr(self, f)
            default = _EVENT_DEFAULTS[f]
            if v != default:
                out[f] = list(v) if isinstance(v, tuple) else v
        return out


def _event_init(self: Event, op: str, rank: int, lane: str, start: float, end: float, kind: str, stage: int = -1,
                mb: int = -1, direction: int = 0, chunk: int = -1, pair: tuple[int, int, int] | None = None,
                label: str = "", sub: int = -1, peer: int = -1, waits_on: tuple[str, ...] = (), flow: str = "",
                bucket: int = -1, half: int = -1) -> None:
    # As Op's: a frozen dataclass's generated __init__ calls object.__setattr__ per field, which
    # was most of the time of turning a 400k-op plan into events; the slots' own setters are
    # about twice as fast. Same signature and defaults; still frozen.
    _S_OP(self, op)
    _S_RANK(self, rank)
    _S_LANE(self, lane)
    _S_START(self, start)
    _S_END(self, end)
    _S_KIND(self, kind)
    _S_STAGE(self, stage)
    _S_MB(self, mb)
    _S_DIRECTION(self, direction)
    _S_CHUNK(self, chunk)
    _S_PAIR(self, pair)
    _S_LABEL(self, label)
    _S_SUB(self, sub)
    _S_PEER(self, peer)
    _S_WAITS_ON(self, waits_on)
    _S_FLOW(self, flow)
    _S_BUCKET(self, bucket)
    _S_HALF(self, half)


(_S_OP, _S_RANK, _S_LANE, _S_START, _S_END, _S_KIND, _S_STAGE, _S_MB, _S_DIRECTION, _S_CHUNK, _S_PAIR, _S_LABEL,
 _S_SUB, _S_PEER, _S_WAITS_ON, _S_FLOW, _S_BUCKET, _S_HALF) = (Event.__dict__[name].__set__ for name in Event.__slots__)
assert Event.__slots__ == ("op", "rank", "lane", "start", "end", "kind", "stage", "mb", "direction", "chunk", "pair",
                           "label", "sub", "peer", "waits_on", "flow", "bucket", "half"), \
    "keep _event_init in step with Event's fields"
_event_init.__qualname__ = "Event.__init__"
Event.__init__ = _event_init  # type: ignore[method-assign]


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
    _summary: tuple[int, int, float, float, dict[tuple[int, str], list[float]]] | None = field(
        default=None, init=False, repr=False, compare=False)

    def _summarised(self) -> tuple[float, float, dict[tuple[int, str], list[float]]]:
        """(first start, last end, {(rank, lane): [busy, first start]}) in one pass, remembered for
        this events list: titles, bubbles, rows and layouts all ask, and each scan of a 400k-event
        timeline took a large part of drawing it."""
        ev = self.events
        m = self._summary
        if m is None or m[0] != id(ev) or m[1] != len(ev):
            lanes: dict[tuple[int, str], list[float]] = {}
            get = lanes.get
            for e in ev:
                key = (e.rank, e.lane)
                s = e.start
                acc = get(key)
                if acc is None:
                    lanes[key] = [e.end - s, s]
                else:
                    acc[0] += e.end - s
                    if s < acc[1]:
                        acc[1] = s
            m = self._summary = (id(ev), len(ev), min(map(_START, ev), default=0.0), max(map(_END, ev), default=0.0),
                                 lanes)
        return m[2], m[3], m[4]

    @property
    def makespan(self) -> float:
        lo, hi, _ = self._summarised()
        return hi - lo if self.events else 0.0

    @property
    def start(self) -> float:
        return self._summarised()[0]

    def ranks(self) -> list[int]:
        return sorted({rank for rank, _ in self._summarised()[2]})

    def lanes(self) -> list[tuple[int, str]]:
        """(rank, lane) pairs in drawing order: rank, then compute first, then first use."""
        seen = self._summarised()[2]
        return sorted(seen, key=lambda k: (k[0], k[1] != "compute", seen[k][1], k[1]))

    def lane_busy(self) -> dict[tuple[int, str], float]:
        """Busy time of each (rank, lane) with an event (durations added in event order)."""
        return {key: acc[0] for key, acc in self._summarised()[2].items()}

    def rank_stats(self, lane: str = "compute") -> list[RankStats]:
        """Busy time on ``lane`` per rank; idle is the makespan minus busy."""
        span = self.makespan
        busy: dict[int, float] = {r: 0.0 for r in self.ranks()}
        for (rank, name), acc in self._summarised()[2].items():
            if name == lane:
                busy[rank] = acc[0]
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
        if meta["pp"] <= 0:
            del meta["pp"]  # not known: a reader takes a pp of 0 or less as an error, an absent one as unknown
        return {"format": "pptl-timeline", "version": TIMELINE_VERSION, "meta": meta,
                "events": [e.to_dict() for e in self.events]}


_START, _END = attrgetter("start"), attrgetter("end")
TIMELINE_VERSION = 1
#: Largest index (rank, stage, micro-batch, chunk...) a timeline file may hold, as in plan files:
#: renderers size rows and labels by them.
MAX_INDEX = 10_000_000
#: Largest time a timeline may hold (about 30 years in microseconds): differences and unit
#: conversions of such times stay finite floats.
MAX_TIME = 1e18


#: Time units a timeline may be in, as the power of ten of a second each is; "unit" (cost-model
#: units) is none of them. Powers, not factors: 1e-3 / 1e-6 is not exactly 1000 in floating point.
TIME_UNITS = {"s": 0, "ms": -3, "us": -6, "ns": -9}


def unit_scale(src: str, dst: str) -> float | None:
    """What a time in ``src`` is multiplied by to be in ``dst`` (``unit_scale("ms", "us") == 1000``),
    exactly; None when either is not a clock's unit (cost-model units convert to nothing)."""
    a, b = TIME_UNITS.get(src), TIME_UNITS.get(dst)
    return None if a is None or b is None else 10.0 ** (a - b)
