"""The weight-update family's metadata, typed: ``Schedule.meta['weight_update']`` of its plans.

:meth:`WeightUpdateMeta.to_meta` is exactly the dict a plan file holds (the file format is
unchanged); :meth:`WeightUpdateMeta.from_meta` reads it back, checking each value once, so the
checks, the metrics and the executor read fields instead of string keys. Keys a hand-written file
lacks read as ``None``: each reader says what it does without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from pptl.ir import Schedule
from pptl.schedules._meta_fields import fail, meta_of, read_bool, read_int, read_list

__all__ = ["BucketMeta", "WeightUpdateMeta"]

_BYTES = 1 << 62
_BUCKET_KEYS = ("owner", "round", "bytes", "tensors", "largest", "half")
_KEYS = ("bucket_size", "bucket_auto", "free_memory", "max_bucket_size", "h2d_buffer", "h2d_overlap", "ipc_halves",
         "buffers", "model_bytes", "largest_tensor", "buckets")
_FLAGS = ("bucket_auto", "h2d_buffer", "h2d_overlap")


@dataclass(frozen=True)
class BucketMeta:
    """One bucket as the plan stores it (``op.bucket`` is its position in ``buckets``)."""

    owner: int
    """The rank whose host memory holds it and that broadcasts it."""
    round: int
    """Which of its owner's buckets this is."""
    bytes: int
    tensors: int
    largest: int
    """Bytes of its largest tensor."""
    half: int
    """IPC half it goes through (``op.half``)."""

    def to_meta(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in _BUCKET_KEYS}


@dataclass(frozen=True)
class WeightUpdateMeta:
    bucket_size: int | None = None
    """Bytes of one bucket = one IPC half = the H2D buffer."""
    bucket_auto: bool | None = None
    free_memory: int | None = None
    max_bucket_size: int | None = None
    h2d_buffer: bool | None = None
    h2d_overlap: bool | None = None
    ipc_halves: int | None = None
    buffers: int | None = None
    """Buckets of GPU memory held: the IPC halves plus the H2D buffer if used."""
    model_bytes: int | None = None
    largest_tensor: int | None = None
    buckets: tuple[BucketMeta, ...] | None = None

    @classmethod
    def of(cls, schedule: Schedule) -> WeightUpdateMeta:
        """The typed view of ``schedule.meta['weight_update']`` (all ``None`` without it)."""
        return cls.from_meta(meta_of(schedule.meta))

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any], source: str = "") -> WeightUpdateMeta:
        """Read ``meta['weight_update']``; a malformed value is an :class:`InputError` naming it."""
        wu = meta.get("weight_update")
        if wu is None:
            return _EMPTY
        if not isinstance(wu, Mapping):
            raise fail(source, "weight_update", wu, "an object")
        got: dict[str, Any] = {}
        for key in _KEYS[:-1]:
            x = wu.get(key)
            if x is not None:
                field = f"weight_update.{key}"
                got[key] = read_bool(x, field, source) if key in _FLAGS else read_int(x, field, source, 0, _BYTES)
        if wu.get("buckets") is not None:
            got["buckets"] = tuple(_bucket(b, f"weight_update.buckets[{k}]", source)
                                   for k, b in enumerate(read_list(wu["buckets"], "weight_update.buckets", source)))
        return cls(**got)

    def to_meta(self) -> dict[str, Any]:
        """The plan file's ``{"weight_update": {...}}``, keys in the order ``pptl plan`` has always written them."""
        out: dict[str, Any] = {}
        for key in _KEYS:
            v = getattr(self, key)
            if v is not None:
                out[key] = [b.to_meta() for b in v] if key == "buckets" else v
        return {"weight_update": out}


def _bucket(raw: object, field: str, source: str) -> BucketMeta:
    if not isinstance(raw, Mapping) or any(k not in raw for k in _BUCKET_KEYS):
        raise fail(source, field, raw, "an object with " + ", ".join(_BUCKET_KEYS))
    return BucketMeta(**{k: read_int(raw[k], f"{field}.{k}", source, 0, _BYTES) for k in _BUCKET_KEYS})


_EMPTY = WeightUpdateMeta()
