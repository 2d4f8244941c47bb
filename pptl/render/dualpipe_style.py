"""The DualPipe figure style (seed 004, deepseek-ai/DualPipe README).

Rows "Device 0..N-1" (compute lanes only; P2P is not drawn), legend Forward / Backward / Backward
for input / Backward for weights / Overlapped forward & Backward, the overlapped block split in two
halves side by side (F left, B right) under one black border as the seed's legend draws it
(``split="stack"``: F on top, B below), micro-batch numbers in the blocks and a "Time →" arrow in
place of a numbered axis. As in the README, blocks of the reverse direction (direction 1) carry no
number unless ``reverse_ids`` is set:
"the micro-batches in the reverse direction are symmetric to those in the forward direction, so
we omit their batch ID"; hover text in the HTML still names them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Hashable

from pptl.render.base import Category, Part, RowSpec, Style

if TYPE_CHECKING:
    from pptl.timeline import Event, Timeline

__all__ = ["DualPipeStyle"]

_KINDS = {
    "F": ("forward", "Forward", "dualpipe.forward", "F"),
    "B": ("backward", "Backward", "dualpipe.backward", "B"),
    "I": ("input", "Backward for input", "dualpipe.input", "I"),
    "W": ("weight", "Backward for weights", "dualpipe.weight", "W"),
}


class DualPipeStyle(Style):
    name = "dualpipe"
    time_arrow = True

    def __init__(self, split: str = "side", reverse_ids: bool = False) -> None:
        self.split = split
        self.reverse_ids = reverse_ids

    def with_options(self, *, split: str = "side", reverse_ids: bool = False) -> "DualPipeStyle":
        return DualPipeStyle(split, reverse_ids)

    def _ids(self, direction: int, mb: int) -> tuple[str, ...]:
        return (str(mb),) if mb >= 0 and (direction == 0 or self.reverse_ids) else ()
    seed = True

    def rows(self, tl: "Timeline") -> list[RowSpec]:
        return [RowSpec((r, "compute"), f"Device {r}", f"Dev {r}", r, bubble=True) for r in tl.ranks()]

    def row_of(self, e: "Event") -> Hashable | None:
        return (e.rank, "compute") if e.lane == "compute" else None

    def parts(self, e: "Event") -> tuple[Part, ...]:
        if e.kind == "FB":
            f_txt = self._ids(e.direction, e.mb)
            b_txt = self._ids(e.pair[2], e.pair[1]) if e.pair is not None else ()
            if self.split == "stack":
                return (Part("overlap", f_txt, 0.0, 0.5, "dualpipe.forward", frame=True),
                        Part("overlap", b_txt, 0.5, 1.0, "dualpipe.backward", frame=True))
            return (Part("overlap", f_txt, 0.0, 1.0, "dualpipe.forward", 0.0, 0.5, frame=True),
                    Part("overlap", b_txt, 0.0, 1.0, "dualpipe.backward", 0.5, 1.0, frame=True))
        spec = _KINDS.get(e.kind)
        if spec is None:
            return (Part(f"kind:{e.kind}", (e.label or e.kind,)),)
        return (Part(spec[0], self._ids(e.direction, e.mb)),)

    def categories(self, tl: "Timeline", keys: set[str]) -> list[Category]:
        # The seed's legend lists all five entries even where a figure lacks one; do the same.
        out = [Category(key, label, (col,), tag) for key, label, col, tag in _KINDS.values()]
        out.append(Category("overlap", "Overlapped forward & Backward",
                            ("dualpipe.forward", "dualpipe.backward"), "FB", split=self.split))
        extra = sorted(k for k in keys if k.startswith("kind:"))
        out.extend(Category(k, k[5:], (f"extra.{i % 6}",), k[5:6]) for i, k in enumerate(extra))
        return out
