"""The base of figure styles: the colour table every renderer shares, the :class:`Style` every style
extends, and the small records a style returns. Style modules import this module only, and the registry
(:mod:`pptl.render.styles`) imports them, so nothing imports back.

Vocabulary: a *category* is one legend entry (and one HTML trace); a *part* is one drawn block (an
overlapped FB op is two parts, its F half on top and its B half below); a *row* is one line of the
figure (a rank's lane, or a seed figure's "Computation"/"H2D Buffer" row). A packed row stacks ops
that overlap in time on tracks.

Colours are semantic names looked up in :data:`PALETTE` (hex strings), so matplotlib, plotly and
rich draw the same figure; nothing in the IR carries a colour.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Hashable

if TYPE_CHECKING:
    from pptl.timeline import Event, Timeline

__all__ = [
    "PALETTE",
    "Category",
    "Part",
    "RowSpec",
    "Style",
    "colour",
    "text_colour",
    "chunk_colour",
    "chunk_label",
    "Grid",
    "GridCell",
    "title_head",
    "title_number",
    "title_units",
]

_BASE: dict[str, str] = {
    # default style (any family)
    "forward": "#4E79A7",
    "backward": "#F28E2B",
    "backward.input": "#FFBE7D",
    "backward.weight": "#59A14F",
    "comm": "#BAB0AC",
    "other": "#B07AA1",
    # seed 004 (DualPipe)
    "dualpipe.forward": "#F6B26B",
    "dualpipe.backward": "#38761D",
    "dualpipe.input": "#B6D7A8",
    "dualpipe.weight": "#6FA8DC",
    # seeds 000-002 (MoE overlap)
    "moe.forward": "#5B9BD5",
    "moe.backward": "#E06666",
    "moe.pp": "#70AD47",
    "moe.ep": "#FFD966",
    "moe.ep.forward": "#A9C9EA",
    "moe.ep.backward": "#F0ABAB",
    "moe.offload": "#FFD966",
    "moe.onload": "#FFF2C2",
    "moe.load": "#F4B183",
    # seed 003 (weight update)
    "wu.h2d": "#FFFFFF",
    "wu.ipc": "#D9D9D9",
    "wu.bcast_src": "#FFD200",
    "wu.reload": "#F39C3C",
    "wu.bcast_dst": "#FFF2B3",
    # chrome
    "idle": "#F1F1F1",
    "edge": "#3A3A3A",
    "grid": "#CCCCCC",
    "text.dark": "#1A1A1A",
    "text.light": "#FFFFFF",
    "muted": "#6B6B6B",
}

_EXTRA_CYCLE = ("#76B7B2", "#EDC948", "#FF9DA7", "#9C755F", "#B07AA1", "#86BCB6")


def _mix(hex_colour: str, other: str, t: float) -> str:
    a = [int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]
    b = [int(other[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * t):02X}" for x, y in zip(a, b))


def _with_chunk_shades(base: dict[str, str]) -> dict[str, str]:
    # Interleaved schedules tell model chunks apart by shade (Megatron's figures do the same):
    # "<name>.c1" is darker, "<name>.c2" lighter, and so on, alternating.
    out = dict(base)
    for name in ("forward", "backward", "backward.input", "backward.weight", "moe.forward", "moe.backward",
                 "dualpipe.forward", "dualpipe.backward", "dualpipe.input", "dualpipe.weight"):
        for c in range(1, 6):
            t = 0.18 * ((c + 1) // 2)
            out[f"{name}.c{c}"] = _mix(base[name], "#000000" if c % 2 else "#FFFFFF", min(t, 0.55))
    for i, hx in enumerate(_EXTRA_CYCLE):
        out[f"extra.{i}"] = hx
    return out


#: Semantic colour name -> hex. The one colour table of every renderer.
PALETTE: dict[str, str] = _with_chunk_shades(_BASE)


def colour(name: str) -> str:
    """Hex colour of a semantic name (a hex string passes through)."""
    if name.startswith("#"):
        return name
    return PALETTE[name]


def chunk_colour(name: str, chunk: int) -> str:
    """The semantic name of ``name``'s shade for model chunk ``chunk`` (chunk 0 is the base)."""
    if chunk <= 0:
        return name
    key = f"{name}.c{(chunk - 1) % 5 + 1}"
    return key if key in PALETTE else name


def chunk_label(label: str, chunk: int, chunks: int) -> str:
    """``label`` of a pass drawn in chunk ``chunk``'s shade ("Forward pass, chunk 1 (darker)"), bare
    where the figure draws ``chunks`` = 1 chunk: shades only need naming when they tell chunks apart."""
    if chunks <= 1:
        return label
    return f"{label}, chunk {chunk}" + (" (darker)" if chunk % 2 else "")


def text_colour(name: str) -> str:
    """Semantic name of the text colour readable on ``name`` (by relative luminance)."""
    hx = colour(name)
    r, g, b = (int(hx[i:i + 2], 16) / 255 for i in (1, 3, 5))
    lum = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "text.dark" if lum > 0.5 else "text.light"


@dataclass(frozen=True)
class GridCell:
    colours: tuple[str, ...]
    """One colour, or two for an overlapped (split) cell: top, bottom."""
    texts: tuple[str, ...]


@dataclass(frozen=True)
class Grid:
    """A panel of equal-width cells per row: the order of work, not its timing (seeds 000-002)."""

    title: str
    rows: list[tuple[str, list[GridCell]]]
    legend: list["Category"] = field(default_factory=list)


@dataclass(frozen=True)
class Category:
    """One legend entry and one HTML trace."""

    key: str
    label: str
    """Legend text."""
    colours: tuple[str, ...]
    """Semantic colour names: one, or two for a split block (top half, bottom half)."""
    tag: str = ""
    """A short text for the terminal without colour (``F``, ``B``...)."""
    edge: str = ""
    """Semantic colour of an outline drawn at any size (white blocks need one)."""
    hatch: str = ""
    """A matplotlib hatch ("//", "xx") that tells blocks of one hue apart without colour."""
    min_width: bool = False
    """Blocks too short to see are drawn at a minimum width (the legend label says so)."""
    split: str = "stack"
    """How a two-colour block divides: "stack" (top, bottom) or "side" (left, right; seed 004)."""


@dataclass(frozen=True)
class Part:
    """One drawn block of an op."""

    cat: str
    """Category key."""
    texts: tuple[str, ...] = ()
    """Label candidates, longest first; renderers draw the first that fits (or none)."""
    lo: float = 0.0
    hi: float = 1.0
    """Vertical extent inside the row's track, 0 = top, 1 = bottom."""
    colour: str = ""
    """Semantic colour; empty means the category's first colour."""
    x0: float = 0.0
    x1: float = 1.0
    """Horizontal extent inside the op's time span (0 = its start, 1 = its end): halves side by side."""
    frame: bool = False
    """Draw one dark border around the whole op (seed 004's overlapped F&B cell)."""
    track: int = -1
    """A fixed sub-row inside a packed row (one per stream), instead of packing by time."""


@dataclass(frozen=True)
class RowSpec:
    """One row of a figure."""

    key: Hashable
    label: str
    short: str = ""
    """Label for narrow places (the terminal); empty means ``label``."""
    rank: int = -1
    group: str = ""
    """A heading shared by consecutive rows (MoE: "Device 0" over Computation/Communication/Offload)."""
    bubble: bool = False
    """Show the rank's bubble (idle fraction of its compute lane) on this row."""
    pack: bool = False
    """Ops that overlap in time go on stacked tracks (rows that merge several lanes)."""
    separator: bool = False
    """Draw a dashed rule above this row (seed 003 between buffers and devices)."""


class Style:
    """The default style: one row per (rank, lane) that is ever busy, colours by op kind.

    Subclasses override :meth:`rows`, :meth:`row_of`, :meth:`parts` and :meth:`categories`.
    """

    name = "default"
    time_arrow = False
    """Draw a "Time →" arrow instead of a numbered time axis (seed 004)."""
    legend_at = "bottom"
    """"bottom" or "top right" (seed 003)."""
    show_bubble = True
    seed = False
    """A seed figure's style: no title and no per-row notes unless asked (the seed has neither)."""
    idle_band = True
    """Shade the span of rows that carry a bubble, so idle time reads as idle."""

    def with_options(self, *, split: str = "side", reverse_ids: bool = False) -> "Style":
        """The style with figure options applied (DualPipe uses them; others ignore them)."""
        return self

    def rows(self, tl: "Timeline") -> list[RowSpec]:
        busy = tl.lane_busy()
        lanes = tl.lanes()
        # Sub-lanes in one order on every rank (a lane's first use anywhere): by each rank's own first
        # use, rank 0 (which sends before it receives) would list send above recv, the others below.
        first: dict[str, int] = {}
        for _, lane in lanes:
            first.setdefault(lane, len(first))
        out = []
        for rank, lane in sorted(lanes, key=lambda k: (k[0], k[1] != "compute", first[k[1]])):
            if lane != "compute" and busy.get((rank, lane), 0.0) <= 0.0:
                continue  # zero-time lanes (RECV completes with its SEND) would only add empty rows
            if lane == "compute":
                out.append(RowSpec((rank, lane), f"rank {rank}", f"r{rank}", rank, bubble=True))
            else:
                out.append(RowSpec((rank, lane), f"rank {rank} {lane}", f"r{rank} {lane[:4]}", rank))
        return out

    def row_of(self, e: "Event") -> Hashable | None:
        return (e.rank, e.lane)

    def parts(self, e: "Event") -> tuple[Part, ...]:
        mb = str(e.mb) if e.mb >= 0 else ""
        if e.kind == "FB":
            b_mb = str(e.pair[1]) if e.pair is not None else ""
            return (Part(_chunked("FB", e.chunk), (mb,), 0.0, 0.5, chunk_colour("forward", e.chunk)),
                    Part(_chunked("FB", e.chunk), (b_mb,), 0.5, 1.0, chunk_colour("backward", e.chunk)))
        if e.kind in _DEFAULT_KINDS:
            return (Part(_chunked(e.kind, e.chunk), (mb,)),)
        if e.kind in ("SEND", "RECV"):
            return (Part("comm", (mb,)),)
        index = mb or (f"b{e.bucket}" if e.bucket >= 0 else "")  # a weight update's bucket, as its own style names it
        return (Part(f"kind:{e.kind}", (e.label or e.kind, index) if index else (e.label or e.kind,)),)

    def categories(self, tl: "Timeline", keys: set[str]) -> list[Category]:
        """Legend entries for the category keys in use, in legend order."""
        out = []
        chunks = sorted({int(k.rsplit(".c", 1)[1]) for k in keys if ".c" in k} | {0})
        for kind, (name, label) in _DEFAULT_KINDS.items():
            for c in chunks:
                key = _chunked(kind, c)
                if key in keys:
                    suffix = f" (chunk {c})" if len(chunks) > 1 else ""
                    out.append(Category(key, label + suffix, (chunk_colour(name, c),), _chunk_tag(kind, c)))
        for c in chunks:
            key = _chunked("FB", c)
            if key in keys:
                suffix = f" (chunk {c})" if len(chunks) > 1 else ""
                out.append(Category(key, "Overlapped F & B" + suffix,
                                    (chunk_colour("forward", c), chunk_colour("backward", c)), _chunk_tag("FB", c)))
        if "comm" in keys:
            out.append(Category("comm", "Send / Recv", ("comm",), "S"))
        extra = sorted(k for k in keys if k.startswith("kind:"))
        for i, key in enumerate(extra):
            kind = key[5:]
            out.append(Category(key, kind, (f"extra.{i % len(_EXTRA_CYCLE)}",)))  # no tag: labels name them
        return out

    def grid(self, tl: "Timeline") -> Grid | None:
        """An extra panel below the timeline (the MoE figures' order grid); none by default."""
        return None

    def compares_warmup(self, tl: "Timeline") -> bool:
        """Whether ``pptl demo`` also draws ``tl`` beside the same config planned without its extra
        warm-up (``--compare-warmup``); only the MoE overlap's style asks for it."""
        return False

    def title(self, tl: "Timeline") -> str:
        """"<family>: pp=.. vpp=.. micro-batches=.. makespan=.. bubble=..%", with the source if measured.

        A figure's title is the one the timeline's *family* style gives (:func:`pptl.render.layout.title_line`),
        whatever style draws it: a family that is no training pipeline words its own."""
        m = tl.meta
        directions = max((e.direction for e in tl.events), default=0) + 1
        mbs = m.microbatches * directions if m.microbatches else len({(e.direction, e.mb) for e in tl.events
                                                                      if e.mb >= 0})
        pp = m.pp or len(tl.ranks())
        # chunks per rank as run: a timeline written before its meta said so (zbv: 2) says vpp 1
        stages = len({e.stage for e in tl.events if e.stage is not None and e.stage >= 0})
        vpp = max(m.vpp or 1, stages // max(1, pp))
        return (f"{title_head(tl)}: pp={pp} vpp={vpp} micro-batches={mbs} "
                f"makespan={title_number(tl.makespan)}{title_units(tl)} bubble={100 * tl.bubble_fraction():.1f}%")


def title_head(tl: "Timeline") -> str:
    """The family (or "timeline"), marked when measured: what every style's title starts with."""
    head = tl.meta.family or "timeline"
    return head + " (measured)" if tl.meta.source == "measured" else head


def title_number(v: float) -> str:
    """A time in a title: 4 significant digits (a measured makespan has more than anyone reads),
    without an exponent below 1e9 (a trace in microseconds runs to millions). From 9999.5 on, four
    significant digits round to 10000, which ``.4g`` writes "1e+04": those take ``.0f`` too."""
    return f"{v:.4g}" if abs(v) < 9999.5 or abs(v) >= 1e9 else f"{v:.0f}"


def title_units(tl: "Timeline") -> str:
    """" ms" after a time, or nothing for the plan's unit."""
    return "" if tl.meta.units in ("", "unit") else f" {tl.meta.units}"


_DEFAULT_KINDS: dict[str, tuple[str, str]] = {
    "F": ("forward", "Forward"),
    "B": ("backward", "Backward"),
    "I": ("backward.input", "Backward for input"),
    "W": ("backward.weight", "Backward for weights"),
}


def _chunk_tag(kind: str, chunk: int) -> str:
    # Without colour, chunks need their own letters: F for chunk 0, f for chunk 1, f' for chunk 2...
    # and past a few primes the number (a measured timeline may name any chunk).
    if chunk <= 0:
        return kind
    return kind.lower() + "'" * (chunk - 1) if chunk <= 4 else f"{kind.lower()}{chunk}"


def _chunked(key: str, chunk: int) -> str:
    return key if chunk <= 0 else f"{key}.c{chunk}"
