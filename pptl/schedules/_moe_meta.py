"""The MoE family's metadata (``moe-1f1b-overlap``), typed: what its plans store in ``Schedule.meta``.

:meth:`MoEMeta.to_meta` is exactly the dict a plan file holds (the file format is unchanged);
:meth:`MoEMeta.from_meta` reads it back, checking each value once, so the checks, the simulator,
the metrics and the executor read fields instead of string keys. Keys a file lacks read as
``None`` (a hand-written file): each reader says what it does without them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from pptl.ir import Schedule
from pptl.schedules._meta_fields import ViewCache, fail, meta_of, read_bool, read_int, read_list

__all__ = ["MoEMeta", "HeldSpan"]

HeldSpan = tuple[int, int, int, int, float]
"""``(op a, 0 start | 1 end, op b, 0 | 1, amount)``: memory held on op a's rank between two op edges."""

_KEYS = ("layers_per_chunk", "ep", "overlap", "offload", "extra_warmup", "ep_groups", "warmup", "host_lag",
         "held", "held_saved")
_RANKS = 1 << 20


@dataclass(frozen=True)
class MoEMeta:
    layers_per_chunk: int | None = None
    """MoE layers per model chunk (L)."""
    ep: int | None = None
    """Expert-parallel group size; ``ep_size`` defaults it to 1."""
    overlap: bool | None = None
    """Combined 1F1B's paired steps (F of one micro-batch with B of another)."""
    offload: bool | None = None
    extra_warmup: int | None = None
    ep_groups: tuple[tuple[int, ...], ...] | None = None
    """The ranks of each EP group (rank = pipeline rank * ep + member)."""
    warmup: tuple[int, ...] | None = None
    """Warmup forwards per pipeline rank."""
    host_lag: int | None = None
    """Compute sub-ops the host may issue ahead of the GPU (:class:`pptl.run.hostlag.HostLag`)."""
    held: tuple[HeldSpan, ...] | None = None
    """Memory a layer in flight holds beyond its saved activations (:func:`pptl.simulate.held_spans`)."""
    held_saved: bool | None = None
    """``held`` carries the saved activations too: the chunk-wide markers then hold nothing."""

    @property
    def ep_size(self) -> int:
        return 1 if self.ep is None else self.ep

    def group_of(self) -> dict[int, int]:
        """Rank -> index of its EP group (empty without groups)."""
        return {r: k for k, g in enumerate(self.ep_groups or ()) for r in g}

    @classmethod
    def of(cls, schedule: Schedule) -> MoEMeta:
        """The typed view of ``schedule.meta`` (all ``None`` for a schedule of another family),
        read once per set of values (:class:`~pptl.schedules._meta_fields.ViewCache`): the simulator
        asks for it several times a run and ``held`` has a span per layer sub-op."""
        meta = meta_of(schedule.meta)
        return _CACHE.get(tuple(meta.get(k) for k in _KEYS), lambda: cls.from_meta(meta))

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any], source: str = "") -> MoEMeta:
        """Read the MoE keys of ``meta``; a malformed value is an :class:`InputError` naming it."""
        if not any(k in meta for k in _KEYS):
            return _EMPTY

        def opt(key: str, read: Any, *args: Any) -> Any:
            x = meta.get(key)
            return None if x is None else read(x, key, source, *args)

        groups = None
        if meta.get("ep_groups") is not None:
            groups = tuple(tuple(read_int(r, f"ep_groups[{k}][{j}]", source, 0, _RANKS)
                                 for j, r in enumerate(read_list(g, f"ep_groups[{k}]", source, _RANKS)))
                           for k, g in enumerate(read_list(meta["ep_groups"], "ep_groups", source, _RANKS)))
        warmup = None
        if meta.get("warmup") is not None:
            warmup = tuple(read_int(w, f"warmup[{k}]", source)
                           for k, w in enumerate(read_list(meta["warmup"], "warmup", source, _RANKS)))
        return cls(layers_per_chunk=opt("layers_per_chunk", read_int, 1, 1 << 20),
                   ep=opt("ep", read_int, 1, _RANKS), overlap=opt("overlap", read_bool),
                   offload=opt("offload", read_bool), extra_warmup=opt("extra_warmup", read_int),
                   ep_groups=groups, warmup=warmup, host_lag=opt("host_lag", read_int, 0, 1 << 20),
                   held=_held(meta.get("held"), source), held_saved=opt("held_saved", read_bool))

    def to_meta(self) -> dict[str, Any]:
        """The plan file's form: the set keys in the order ``pptl plan`` has always written them."""
        out: dict[str, Any] = {}
        for key in _KEYS:
            v = getattr(self, key)
            if v is None:
                continue
            if key == "ep_groups":
                v = [list(g) for g in v]
            elif key in ("warmup",):
                v = list(v)
            elif key == "held":
                v = [list(s) for s in v]
            out[key] = v
        return out


def _held(raw: object, source: str) -> tuple[HeldSpan, ...] | None:
    """The shape of each span; the op indices are checked against the ops where they are used."""
    if raw is None:
        return None
    out: list[HeldSpan] = []
    for k, item in enumerate(raw if isinstance(raw, list) else [raw]):
        ok = isinstance(item, (list, tuple)) and len(item) == 5
        if ok:
            a, ea, b, eb, amount = item
            ok = (all(isinstance(x, int) and not isinstance(x, bool) for x in (a, ea, b, eb))
                  and a >= 0 and b >= 0 and ea in (0, 1) and eb in (0, 1)
                  and isinstance(amount, (int, float)) and not isinstance(amount, bool) and 0 <= amount < math.inf)
        if not ok:
            raise fail(source, f"held[{k}]", item, "[op index, 0|1, op index on the same rank, 0|1, amount >= 0]")
        out.append((a, ea, b, eb, amount))  # an int amount stays an int: the file writes back the same
    return tuple(out)


_EMPTY = MoEMeta()
_CACHE: ViewCache[MoEMeta] = ViewCache()
