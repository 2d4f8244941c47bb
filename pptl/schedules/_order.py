"""One rank's compute order as columns: what a family hands to :func:`pptl.schedules._common.assemble`
instead of a list of :class:`pptl.ir.Op`.

A large plan is built as an op table (:class:`pptl.optable.OpTable`) without any ``Op`` object;
a family that writes its order as columns (plain lists, cut and interleaved with slices) lets
``assemble`` skip creating 130k compute ops at pp 64 too. Small plans still become ``Op`` lists
(:meth:`Order.ops`), without numpy.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from typing import Any, Sequence

from pptl.ir import Op

__all__ = ["Order", "interleave", "phases"]


@dataclass(frozen=True, slots=True)
class Order:
    """The compute ops of one rank, in order, one list per :class:`pptl.ir.Op` field they set
    (lane ``compute``; every other field at its default)."""

    kind: Sequence[str]
    stage: Sequence[int]
    mb: Sequence[int]
    direction: Sequence[int]
    chunk: Sequence[int]
    pair: Sequence[tuple[int, int, int] | None] | None = None
    """FB ops' B half, op by op; None: no op has one."""

    @staticmethod
    def of_rows(rows: Sequence[tuple[Any, ...]]) -> Order:
        """The order of ``rows``, each (kind, stage, mb, direction, chunk) or (..., pair): what a
        phase table written as a loop appends per op (a tuple costs a fraction of an ``Op``)."""
        if not rows:
            return Order((), (), (), (), ())
        cols = tuple(zip(*rows))
        return Order(kind=cols[0], stage=cols[1], mb=cols[2], direction=cols[3], chunk=cols[4],
                     pair=cols[5] if len(cols) > 5 else None)

    def __len__(self) -> int:
        return len(self.kind)

    def ops(self, rank: int) -> list[Op]:
        """The ``Op`` of every entry (``map`` calls ``Op`` without a Python loop)."""
        n = len(self.kind)
        pair = self.pair if self.pair is not None else repeat(None, n)
        return list(map(Op, self.kind, repeat(rank, n), repeat("compute", n), self.stage, self.mb, self.direction,
                        self.chunk, pair))


def interleave(head: list[Any], rows: Sequence[list[Any]], tail_rows: Sequence[list[Any]], filler: object) -> list[Any]:
    """``head``, then the entries of ``rows`` taken one of each in turn, then those of ``tail_rows``
    likewise: the warmup / steady / cooldown layout of a 1F1B-style phase table, on one column.

    Example: ``interleave([f0], [[f1, f2], [b0, b1]], [[b2]], None)`` is ``[f0, f1, b0, f2, b1, b2]``.
    """
    out = list(head)
    for part in (rows, tail_rows):
        if not part:
            continue
        step = len(part)
        block = [filler] * (step * len(part[0]))
        for j, row in enumerate(part):
            block[j::step] = row
        out += block
    return out


def phases(fwd: list[Any], bwd: Sequence[list[Any]], warmup: int) -> list[Any]:
    """One column of a 1F1B phase table: ``fwd`` and ``bwd`` (one list per backward kind: B, or
    I and W) are F_k and B_k in micro-batch order; the result is

        warmup    F_k                 k < warmup
        steady    F_{warmup+k}, B_k   k < len(fwd) - warmup
        cooldown  B_k                 the rest

    Every column (kind, stage, mb, ...) goes through the same layout, so a rank's order is built
    with list slices, not one op at a time."""
    steady = len(fwd) - warmup
    return interleave(fwd[:warmup], [fwd[warmup:], *(b[:steady] for b in bwd)], [b[steady:] for b in bwd], None)
