"""The training families' metadata, typed: what their plans (and imported torch CSVs) store in
``Schedule.meta`` about placement, the weight-gradient store, parameter copies and issue order.

:meth:`PipelineMeta.to_meta` is exactly the dict a plan file holds (the file format is unchanged);
:meth:`PipelineMeta.from_meta` reads it back, checking each value once, so the checks, the export and
the executor read fields instead of string keys. Keys a file lacks read as ``None``: each reader says
what it does without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from pptl.ir import Schedule
from pptl.schedules._meta_fields import ViewCache, fail, meta_of, read_int, read_list

__all__ = ["PipelineMeta"]

# The order ``pptl plan`` and the torch CSV reader have always written them in.
_KEYS = ("source_format", "csv_format", "parameter_copies", "weight_grad_store", "placement", "synthesised",
         "program_order")
_CHOICES: dict[str, tuple[str, ...]] = {
    "csv_format": ("compute_only", "compute_comms"),
    "weight_grad_store": ("rank", "stage"),
    # custom: a torch CSV whose stages sit neither looped nor in a V (what its reader detects and draws)
    "placement": ("loop", "v", "custom"),
    "synthesised": ("greedy", "given"),
}
_RANKS = 1 << 20
_LETTERS = "csr"


@dataclass(frozen=True)
class PipelineMeta:
    source_format: str | None = None
    """The file format a schedule was read from (``torch-csv``); ``None`` for pptl's own plans."""
    csv_format: str | None = None
    """Which torch CSV lowering the file was: ``compute_comms`` (with its SEND/RECV) or ``compute_only``."""
    parameter_copies: int | None = None
    """Copies of the model the pipeline holds (DualPipe: 2); ``None`` reads as 1."""
    weight_grad_store: str | None = None
    """Where pending weight gradients queue for their W: ``rank``, one FIFO per rank (DualPipe,
    DualPipeV: both chunks share it), or ``stage``, one per stage (``None`` reads as this)."""
    placement: str | None = None
    """Stage placement, ``loop``, ``v`` (the V families: ZB-V, DualPipeV) or ``custom`` (a torch CSV's
    own); ``None``: read from the stages."""
    synthesised: str | None = None
    """How ``pptl tune``'s synthesised order was made: ``greedy`` or ``given``."""
    program_order: tuple[str, ...] | None = None
    """Each rank's issue order as written: one letter an op, ``c`` compute, ``s`` send, ``r`` recv,
    each taking the next op of its lane (:func:`pptl.issue_order.given_program`)."""

    @property
    def copies(self) -> int:
        return 1 if self.parameter_copies is None else self.parameter_copies

    @property
    def per_rank_store(self) -> bool:
        """One weight-gradient FIFO per rank rather than per stage."""
        return self.weight_grad_store == "rank"

    @classmethod
    def of(cls, schedule: Schedule) -> PipelineMeta:
        """The typed view of ``schedule.meta`` (all ``None`` for a schedule without these keys)."""
        return cls.from_meta(meta_of(schedule.meta))

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any], source: str = "") -> PipelineMeta:
        """Read the pipeline keys of ``meta``; a malformed value is an :class:`InputError` naming it.

        Read once per set of values (:class:`~pptl.schedules._meta_fields.ViewCache`):
        ``program_order`` holds one letter per op (100k+ at scale) and is read by several checks; a
        plan file's schedule holds the values checked at load, so no later read checks them again."""
        values = tuple(meta.get(k) for k in _KEYS)
        if not any(v is not None for v in values):
            return _EMPTY
        return _CACHE.get(values, lambda: cls._read(meta, source))

    @classmethod
    def _read(cls, meta: Mapping[str, Any], source: str) -> PipelineMeta:
        got: dict[str, Any] = {}
        for key, choices in _CHOICES.items():
            x = meta.get(key)
            if x is not None and x not in choices:
                raise fail(source, key, repr(x), " or ".join(f"'{c}'" for c in choices))
            got[key] = x
        x = meta.get("source_format")
        if x is not None and not (isinstance(x, str) and 0 < len(x) <= 80):
            raise fail(source, "source_format", repr(x), "a format name")
        got["source_format"] = x
        if meta.get("parameter_copies") is not None:
            got["parameter_copies"] = read_int(meta["parameter_copies"], "parameter_copies", source, 1, 1 << 10)
        if meta.get("program_order") is not None:
            got["program_order"] = _program_order(meta["program_order"], source)
        return cls(**got)

    def to_meta(self) -> dict[str, Any]:
        """The plan file's form: the set keys in the order ``pptl plan`` has always written them."""
        out: dict[str, Any] = {}
        for key in _KEYS:
            v = getattr(self, key)
            if v is not None:
                out[key] = list(v) if key == "program_order" else v
        return out

    @staticmethod
    def without_program_order(meta: Mapping[str, Any]) -> dict[str, Any]:
        """``meta`` less its issue order: for a copy whose lanes no longer follow it."""
        return {k: v for k, v in meta.items() if k != "program_order"}


def _program_order(raw: object, source: str) -> tuple[str, ...]:
    """One string per rank of c/s/r only. Whether the letters fit the lanes is checked where they are
    used (a copy with reordered lanes reads as having no given order)."""
    texts = read_list(raw, "program_order", source, _RANKS)
    for r, text in enumerate(texts):
        # str.strip runs in C: a string of c/s/r only strips to nothing, anything else stays.
        if not isinstance(text, str) or text.strip(_LETTERS):
            got = repr(text[:80]) if isinstance(text, str) else text
            raise fail(source, f"program_order[{r}]", got, "a string of c (compute), s (send), r (recv)")
    return tuple(texts)


_EMPTY = PipelineMeta()
_CACHE: ViewCache[PipelineMeta] = ViewCache()
