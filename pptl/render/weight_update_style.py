"""The weight-update figure style (seed 003, MoonshotAI/checkpoint-engine).

Rows "H2D Buffer" (every rank's H2D copies), "IPC Buffer" (the bucket owner's copies into the
ping-pong IPC buffer), a dashed rule, then "Device 0..N-1" (broadcasts and the reload). Legend at
the top right: H2D white with a dark edge, Broadcast (src) yellow, Reload weights orange, Broadcast
(dst) light yellow; the IPC copy is grey with its own entry, so every block in the figure is named,
and copies too short to see are drawn at a minimum width (its legend entry says so). Each stream
keeps one sub-row: H2D per device, IPC per buffer half, broadcast above reload on a device.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Hashable

from pptl.formats._quote import counted
from pptl.render.base import Category, Part, RowSpec, Style, title_head, title_number, title_units

if TYPE_CHECKING:
    from pptl.timeline import Event, Timeline

__all__ = ["WeightUpdateStyle"]

_LABELS = {"H2D": "H2D", "COPY": "IPC", "RELOAD": "Reload weights"}


class WeightUpdateStyle(Style):
    name = "weight-update"
    legend_at = "top right"
    seed = True
    show_bubble = False
    idle_band = False

    def title(self, tl: "Timeline") -> str:
        # Buckets, not micro-batches, and no pipeline: no bubble to report.
        buckets = len({e.bucket for e in tl.events if e.bucket >= 0})
        return (f"{title_head(tl)}: {counted(tl.meta.pp or len(tl.ranks()), 'device')}, {counted(buckets, 'bucket')}, "
                f"makespan={title_number(tl.makespan)}{title_units(tl)}")

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
        # One sub-row per stream: the H2D Buffer row a sub-row per device's copy stream, the IPC
        # row one per buffer half, each device row broadcasts above and reloads below.
        bucket = f"b{e.bucket}" if e.bucket >= 0 else ""
        if e.kind == "H2D":
            return (Part("h2d", _texts(e.label or "H2D", bucket), track=max(e.rank, 0)),)
        if e.kind == "COPY":
            return (Part("ipc", _texts(bucket), track=max(e.half, 0) % 2),)
        if e.kind == "BCAST":
            src = e.peer == e.rank or (e.peer < 0 and "src" in e.label)
            return (Part("bcast_src" if src else "bcast_dst", _texts(bucket), track=0),)
        if e.kind == "RELOAD":
            return (Part("reload", _texts(e.label or "Reload", bucket), track=1),)
        return (Part(f"kind:{e.kind}", _texts(e.label or e.kind, bucket)),)

    def categories(self, tl: "Timeline", keys: set[str]) -> list[Category]:
        out = [Category("h2d", "H2D", ("wu.h2d",), "H", edge="edge"),
               Category("bcast_src", "Broadcast (src)", ("wu.bcast_src",), "S"),
               Category("reload", "Reload weights", ("wu.reload",), "R"),
               Category("bcast_dst", "Broadcast (dst)", ("wu.bcast_dst",), "D")]
        if "ipc" in keys:
            out.insert(1, Category("ipc", "IPC copy (short ones drawn wider)", ("wu.ipc",), "C", edge="edge",
                                   min_width=True))
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
