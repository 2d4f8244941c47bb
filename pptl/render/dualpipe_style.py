"""The DualPipe figure style (seed 004, deepseek-ai/DualPipe README).

Rows "Device 0..N-1" (compute lanes only; P2P is not drawn), legend Forward / Backward / Backward
for input / Backward for weights / Overlapped forward & Backward, the overlapped block split in two
(F half on top, B half below), micro-batch numbers in the blocks and a "Time →" arrow in place of a
numbered axis. As in the README, blocks of the reverse direction (direction 1) carry no number:
"the micro-batches in the reverse direction are symmetric to those in the forward direction, so
we omit their batch ID"; hover text in the HTML still names them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Hashable

from pptl.render.styles import Category, Part, RowSpec, Style

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

    def rows(self, tl: "Timeline") -> list[RowSpec]:
        return [RowSpec((r, "compute"), f"Device {r}", f"Dev {r}", r, bubble=True) for r in tl.ranks()]

    def row_of(self, e: "Event") -> Hashable | None:
        return (e.rank, "compute") if e.lane == "compute" else None

    def parts(self, e: "Event") -> tuple[Part, ...]:
        if e.kind == "FB":
            f_txt = (str(e.mb),) if e.direction == 0 and e.mb >= 0 else ()
            b_dir = e.pair[2] if e.pair is not None else 1
            b_txt = (str(e.pair[1]),) if e.pair is not None and b_dir == 0 else ()
            return (Part("overlap", f_txt, 0.0, 0.5, "dualpipe.forward"),
                    Part("overlap", b_txt, 0.5, 1.0, "dualpipe.backward"))
        spec = _KINDS.get(e.kind)
        if spec is None:
            return (Part(f"kind:{e.kind}", (e.label or e.kind,)),)
        txt = (str(e.mb),) if e.direction == 0 and e.mb >= 0 else ()
        return (Part(spec[0], txt),)

    def categories(self, tl: "Timeline", keys: set[str]) -> list[Category]:
        # The seed's legend lists all five entries even where a figure lacks one; do the same.
        out = [Category(key, label, (col,), tag) for key, label, col, tag in _KINDS.values()]
        out.append(Category("overlap", "Overlapped forward & Backward",
                            ("dualpipe.forward", "dualpipe.backward"), "FB"))
        extra = sorted(k for k in keys if k.startswith("kind:"))
        out.extend(Category(k, k[5:], (f"extra.{i % 6}",), k[5:6]) for i, k in enumerate(extra))
        return out
