"""The weight-update figure style (seed 003, MoonshotAI/checkpoint-engine).

Rows "H2D Buffer" (every rank's H2D copies), "IPC Buffer" (the bucket owner's copies into the
ping-pong IPC buffer), a dashed rule, then "Device 0..N-1" (broadcasts and the reload). Legend at
the top right: H2D white with a dark edge, Broadcast (src) yellow, Reload weights orange, Broadcast
(dst) light yellow; the IPC copy is white too and gets its own entry, so every block in the figure
is named. Rows that merge lanes or ranks stack overlapping blocks on tracks.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Hashable

from pptl.render.styles import Category, Part, RowSpec, Style

if TYPE_CHECKING:
    from pptl.timeline import Event, Timeline

__all__ = ["WeightUpdateStyle"]

_LABELS = {"H2D": "H2D", "COPY": "IPC", "RELOAD": "Reload weights"}


class WeightUpdateStyle(Style):
    name = "weight-update"
    legend_at = "top right"
    show_bubble = False
    idle_band = False

    def rows(self, tl: "Timeline") -> list[RowSpec]:
        kinds = {e.kind for e in tl.events}
        out = []
        if "H2D" in kinds:
            out.append(RowSpec("h2d", "H2D Buffer", "H2D buf", pack=True))
        if "COPY" in kinds:
            out.append(RowSpec("ipc", "IPC Buffer", "IPC buf", pack=True))
        for i, r in enumerate(tl.ranks()):
            out.append(RowSpec(("dev", r), f"Device {r}", f"Dev {r}", r, pack=True, separator=i == 0 and bool(out)))
        return out

    def row_of(self, e: "Event") -> Hashable | None:
        if e.kind == "H2D":
            return "h2d"
        if e.kind == "COPY":
            return "ipc"
        return ("dev", e.rank)

    def parts(self, e: "Event") -> tuple[Part, ...]:
        bucket = f"b{e.mb}" if e.mb >= 0 else ""
        if e.kind == "H2D":
            return (Part("h2d", _texts(e.label or "H2D", bucket)),)
        if e.kind == "COPY":
            return (Part("ipc", _texts(e.label or "IPC", bucket)),)
        if e.kind == "BCAST":
            src = e.peer == e.rank or (e.peer < 0 and "src" in e.label)
            return (Part("bcast_src" if src else "bcast_dst", _texts(bucket)),)
        if e.kind == "RELOAD":
            return (Part("reload", _texts(e.label or "Reload", bucket)),)
        return (Part(f"kind:{e.kind}", _texts(e.label or e.kind, bucket)),)

    def categories(self, tl: "Timeline", keys: set[str]) -> list[Category]:
        out = [Category("h2d", "H2D", ("wu.h2d",), "H", edge="edge"),
               Category("bcast_src", "Broadcast (src)", ("wu.bcast_src",), "S"),
               Category("reload", "Reload weights", ("wu.reload",), "R"),
               Category("bcast_dst", "Broadcast (dst)", ("wu.bcast_dst",), "D")]
        if "ipc" in keys:
            out.insert(1, Category("ipc", "IPC copy", ("wu.ipc",), "C", edge="edge"))
        extra = sorted(k for k in keys if k.startswith("kind:"))
        out.extend(Category(k, k[5:], (f"extra.{i % 6}",), k[5:6]) for i, k in enumerate(extra))
        return out


def _texts(*candidates: str) -> tuple[str, ...]:
    """Label candidates longest first: "H2D b3", "H2D", "b3"."""
    words = [c for c in candidates if c]
    out = []
    if len(words) > 1:
        out.append(" ".join(words))
    out.extend(words)
    return tuple(out)
