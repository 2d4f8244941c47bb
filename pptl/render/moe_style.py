"""The MoE overlap figure style (seeds 000-002: Megatron-Core combined 1F1B with EP overlap).

Per device three rows: Computation (lane ``compute``), Communication (``comm``, plus ``send`` /
``recv`` where the family puts PP transfers there) and Offload (``d2h`` and ``h2d``; offload and
onload stack when they overlap). Blocks carry the family's labels (Attn, MLP, EP-D, EP-C, PP,
WGrad, Offload, Onload). Colours follow the seeds: forward blue, backward red, PP communication
green, EP dispatch/combine yellow (offload/onload a paler yellow with its own legend entry, so the
legend does not call a copy an all-to-all).

Below the timeline, the "VPP + 1 warmup" grid: per rank, the order of forward (blue) and backward
(red) blocks per (chunk, micro-batch), numbered from 1 like the figure, chunks told apart by shade.
It comes from F/B/FB ops where the family has them, else from grouping sub-ops by (rank, stage,
mb, flow); a forward and a backward group that overlap in time form one split (overlapped) cell.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Hashable

from pptl.render.base import Category, Grid, GridCell, Part, RowSpec, Style, chunk_colour, chunk_label

if TYPE_CHECKING:
    from pptl.timeline import Event, Timeline

__all__ = ["MoEStyle", "order_grid"]

_ROW_OF_LANE = {"compute": "Computation", "comm": "Communication", "send": "Communication",
                "recv": "Communication", "d2h": "Offload", "h2d": "Offload"}
_ROW_ORDER = ("Computation", "Communication", "Offload")
_SHORT = {"Computation": "comp", "Communication": "comm", "Offload": "offl"}
_PP_KINDS = frozenset({"SEND", "RECV", "PP"})
_EP_KINDS = frozenset({"A2A_DISPATCH", "A2A_COMBINE"})
_COPY_KINDS = frozenset({"OFFLOAD", "ONLOAD"})
_FALLBACK_LABEL = {"ATTN": "Attn", "MLP": "MLP", "WGRAD": "WGrad", "A2A_DISPATCH": "EP-D", "A2A_COMBINE": "EP-C",
                   "SEND": "PP", "RECV": "PP", "PP": "PP", "OFFLOAD": "Offload", "ONLOAD": "Onload",
                   "F": "F", "B": "B", "I": "I", "W": "W", "FB": "FB"}


class MoEStyle(Style):
    name = "moe"
    seed = True

    def rows(self, tl: "Timeline") -> list[RowSpec]:
        present: dict[int, set[str]] = {}
        kinds_used: set[str] = set()
        for e in tl.events:
            name = _ROW_OF_LANE.get(e.lane, e.lane)
            if e.duration > 0 or name == "Computation":
                present.setdefault(e.rank, set()).add(name)
                kinds_used.add(name)
        order = [n for n in _ROW_ORDER if n in kinds_used] + sorted(kinds_used - set(_ROW_ORDER))
        out = []
        for r in sorted(present):
            for k, name in enumerate(order):
                out.append(RowSpec((r, name), name, f"{r} {_SHORT.get(name, name[:4])}", r, group=f"Device {r}",
                                   bubble=name == "Computation", pack=name != "Computation",
                                   separator=k == 0 and r != min(present)))
        return out

    def row_of(self, e: "Event") -> Hashable | None:
        return (e.rank, _ROW_OF_LANE.get(e.lane, e.lane))

    def parts(self, e: "Event") -> tuple[Part, ...]:
        label = e.label or _FALLBACK_LABEL.get(e.kind, e.kind)
        if e.kind == "FB":
            b_mb = e.pair[1] if e.pair is not None else -1
            return (Part(_pass_key("forward", e.chunk), (f"F{e.mb + 1}",), 0.0, 0.5,
                         chunk_colour("moe.forward", e.chunk)),
                    Part(_pass_key("backward", e.chunk), (f"B{b_mb + 1}",), 0.5, 1.0,
                         chunk_colour("moe.backward", e.chunk)))
        if e.kind in _PP_KINDS or label == "PP":
            return (Part("pp", (label,)),)
        if e.kind in _EP_KINDS:
            return (Part("ep", (label,)),)
        if e.kind in _COPY_KINDS:
            return (Part("offload", (label,)),)
        if e.flow == "B" or e.kind in ("B", "I", "W", "WGRAD"):
            return (Part(_pass_key("backward", e.chunk), (label,), colour=chunk_colour("moe.backward", e.chunk)),)
        return (Part(_pass_key("forward", e.chunk), (label,), colour=chunk_colour("moe.forward", e.chunk)),)

    def categories(self, tl: "Timeline", keys: set[str]) -> list[Category]:
        # One entry per chunk shade: the blocks and the order grid draw chunks in their own shades,
        # and the grid covers the whole timeline even where the blocks are a --time window.
        chunks = sorted({_chunk_of_key(k) for k in keys if k.split(".c")[0] in ("forward", "backward")} |
                        {max(e.chunk, 0) for e in tl.events if e.lane == "compute" and e.flow in ("F", "B")} | {0})
        out = [Category(_pass_key(name, c), chunk_label(label, c, len(chunks)), (chunk_colour(f"moe.{name}", c),),
                        tag if c == 0 else tag.lower())
               for name, label, tag in (("forward", "Forward pass", "F"), ("backward", "Backward pass", "B"))
               for c in chunks]
        out += [Category("pp", "PP communication", ("moe.pp",), "P"),
                Category("ep", "EP dispatch/combine", ("moe.ep",), "E")]
        if "offload" in keys:
            out.append(Category("offload", "Offload / Onload", ("moe.offload",), "O"))
        return out

    def grid(self, tl: "Timeline") -> Grid | None:
        return order_grid(tl)

    def compares_warmup(self, tl: "Timeline") -> bool:
        # Megatron's extra warm-up forward exists only where F and B pair under interleaving.
        from pptl.render.moe_figure import grid_caption

        return grid_caption(tl) == "VPP + 1 warmup"


def order_grid(tl: "Timeline") -> Grid | None:
    """The per-rank order of forward and backward blocks, numbered 1-based (seeds 000-002)."""
    title = "VPP + 1 warmup" if tl.meta.vpp > 1 else "Order of work"
    cells_of: dict[int, list[GridCell]] = {}
    compute = sorted((e for e in tl.events if e.lane == "compute"), key=lambda e: (e.rank, e.start, e.end))
    if any(e.kind in ("F", "B", "I", "FB") for e in compute):
        for e in compute:
            cell = _training_cell(e, tl.meta.pp)
            if cell is not None:
                cells_of.setdefault(e.rank, []).append(cell)
    else:
        groups: dict[tuple[int, int, int, int, str], list[float]] = {}
        for e in compute:
            if e.kind == "WGRAD" or e.mb < 0 or e.flow not in ("F", "B"):
                continue  # delayed weight-gradient work does not belong to one pass in the order
            key = (e.rank, e.stage, e.mb, max(e.chunk, 0), e.flow)
            g = groups.setdefault(key, [e.start, e.end])
            g[0], g[1] = min(g[0], e.start), max(g[1], e.end)
        per_rank: dict[int, list[tuple[float, float, int, int, str]]] = {}
        for (r, _s, mb, chunk, flow), (a, b) in groups.items():
            per_rank.setdefault(r, []).append((a, b, chunk, mb, flow))
        for r, items in per_rank.items():
            items.sort()
            cells: list[tuple[float, float, list[tuple[int, int, str]]]] = []
            for a, b, chunk, mb, flow in items:
                last = cells[-1] if cells else None
                # A forward and a backward group running at once are one overlapped step.
                if last is not None and len(last[2]) == 1 and last[2][0][2] != flow and a < last[1]:
                    last[2].append((chunk, mb, flow))
                    last[2].sort(key=lambda t: t[2] != "F")
                    cells[-1] = (last[0], max(last[1], b), last[2])
                else:
                    cells.append((a, b, [(chunk, mb, flow)]))
            cells_of[r] = [GridCell(tuple(_cell_colour(f, c) for c, _m, f in parts),
                                    tuple(str(m + 1) for _c, m, _f in parts)) for _a, _b, parts in cells]
    if not cells_of:
        return None
    legend = [Category("forward", "Forward pass", ("moe.forward",), "F"),
              Category("backward", "Backward pass", ("moe.backward",), "B")]
    return Grid(title, [(f"r{r}", cells_of[r]) for r in sorted(cells_of)], legend)


def _pass_key(name: str, chunk: int) -> str:
    """The category of a pass's blocks: "forward" for chunk 0, "forward.c1" for chunk 1 (its shade)."""
    return name if chunk <= 0 else f"{name}.c{chunk}"


def _chunk_of_key(key: str) -> int:
    return int(key.rsplit(".c", 1)[1]) if ".c" in key else 0


def _cell_colour(flow: str, chunk: int) -> str:
    return chunk_colour("moe.forward" if flow == "F" else "moe.backward", chunk)


def _training_cell(e: "Event", pp: int) -> GridCell | None:
    if e.kind == "F":
        return GridCell((_cell_colour("F", e.chunk),), (str(e.mb + 1),))
    if e.kind in ("B", "I"):
        return GridCell((_cell_colour("B", e.chunk),), (str(e.mb + 1),))
    if e.kind == "FB":
        b_stage, b_mb = (e.pair[0], e.pair[1]) if e.pair is not None else (-1, -1)
        # The B half may belong to another chunk; with looped placement its chunk is stage // pp.
        b_chunk = b_stage // pp if pp > 0 and b_stage >= 0 else e.chunk
        return GridCell((_cell_colour("F", e.chunk), _cell_colour("B", b_chunk)), (str(e.mb + 1), str(b_mb + 1)))
    return None
