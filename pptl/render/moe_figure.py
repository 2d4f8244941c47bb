"""The MoE seed figure as data (seeds 000-002: Megatron-Core combined 1F1B with EP overlap).

What the seed draws, computed from the plan's op times (nothing is placed by hand):

- top, three sections side by side, each a close-up of ONE step of one device (``device``):
  warmup (forward only), steady state (one paired step) and cooldown (backward only), rows
  Computation / Communication / Offload. A section's window is the step's span: the first start
  and the last end of the step's own compute and communication ops; the step's own ops are
  drawn in it, clipped, with its own Offloads and the Onloads that start while it computes
  (prefetches for the backwards to come), so the close-up shows one step as the seed does;
- below, the order grid of every device: one cell per step at its plan time, micro-batch numbers
  (1-based, like the seed), forward blue, backward red, a paired step split in two, PP transfers
  as green marks. The grid's time axis is mapped piecewise so that each phase of ``device``
  (warmup | steady | cooldown) sits under its section.

Steps and phases: a step groups the sub-ops of one (stage, micro-batch, pass) on the compute lane;
a forward and a backward group that overlap in time are one paired step. A device's warmup is its
steps before the first one holding a backward, its cooldown the steps after the last one holding a
forward, the steady state what lies between (a plain interleaved plan has unpaired steps there).

Reloads: "Onload" is a reload issued while the device still runs forwards (steady state: the copy
engines offload and onload at once); "Load" is a reload in the cooldown, where only backwards run
and nothing is offloaded any more. The seed's steady close-up shows Onload, its cooldown Load.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pptl.render.base import Category, chunk_colour, chunk_label

if TYPE_CHECKING:
    from pptl.timeline import Event, Timeline

__all__ = ["SectionBlock", "Section", "GridStep", "DeviceRow", "MoEFigure", "moe_figure", "steps_by_rank",
           "SECTION_ROWS", "grid_caption", "block_kind"]

SECTION_ROWS = ("Computation", "Communication", "Offload")
_ROW_OF_LANE = {"compute": "Computation", "comm": "Communication", "send": "Communication",
                "recv": "Communication", "d2h": "Offload", "h2d": "Offload"}
_LABEL = {"ATTN": "Attn", "MLP": "MLP", "WGRAD": "WGrad", "A2A_DISPATCH": "EP-D", "A2A_COMBINE": "EP-C",
          "SEND": "PP", "RECV": "PP", "PP": "PP", "OFFLOAD": "Offload", "ONLOAD": "Onload"}
_PHASE_TITLES = {"warmup": "Warmup: forward only", "steady": "Steady state: one paired step",
                 "cooldown": "Cooldown: backward only"}


@dataclass(frozen=True)
class SectionBlock:
    row: str
    """One of :data:`SECTION_ROWS`."""
    start: float
    end: float
    """Clipped to the section's window."""
    label: str
    """What the seed writes in the block: Attn, MLP, WGrad, EP-D, EP-C, PP, Offload, Onload, Load."""
    cat: str
    """Category key (legend entry)."""
    colour: str
    """Semantic colour name."""
    track: int = 0
    """Track inside the row (offload and onload stack when they overlap)."""
    event: int = -1
    """Index into the timeline's events."""


@dataclass(frozen=True)
class Section:
    key: str
    """"warmup", "steady" or "cooldown"."""
    title: str
    t0: float
    t1: float
    """The step's window, from its ops' times."""
    what: str
    """The step in words: "F mb 3 (chunk 1)", "F mb 5 | B mb 2"."""
    blocks: tuple[SectionBlock, ...]
    tracks: tuple[int, ...]
    """Tracks per row of :data:`SECTION_ROWS`."""


@dataclass(frozen=True)
class GridStep:
    start: float
    end: float
    phase: str
    colours: tuple[str, ...]
    """One colour, or two for a paired step: forward, backward."""
    texts: tuple[str, ...]
    """1-based micro-batch numbers, one per colour."""
    flows: tuple[str, ...]
    """"F"/"B" per colour."""


@dataclass(frozen=True)
class DeviceRow:
    rank: int
    label: str
    steps: tuple[GridStep, ...]
    pp: tuple[tuple[float, float, str], ...]
    """PP transfers (start, end, pass) that take time."""


@dataclass(frozen=True)
class MoEFigure:
    device: int
    sections: tuple[Section, ...]
    phases: tuple[tuple[str, float, float], ...]
    """(phase, start, end) of ``device``: where each section's columns sit in the grid."""
    grid_title: str
    devices: tuple[DeviceRow, ...]
    categories: tuple[Category, ...]
    units: str
    t0: float
    t1: float


@dataclass(frozen=True)
class _Step:
    start: float
    end: float
    parts: tuple[tuple[int, int, int, str], ...]
    """(stage, chunk, mb, flow) of each group, forward first."""


def steps_by_rank(tl: "Timeline") -> dict[int, list[_Step]]:
    """Each rank's steps in time order, from its compute sub-ops (see the module docstring)."""
    groups: dict[tuple[int, int, int, int, str], list[float]] = {}
    for e in tl.events:
        if e.lane != "compute" or e.mb < 0 or e.flow not in ("F", "B") or e.kind == "WGRAD":
            continue  # delayed weight-gradient work does not start a step of its own
        key = (e.rank, e.stage, max(e.chunk, 0), e.mb, e.flow)
        g = groups.setdefault(key, [e.start, e.end])
        g[0], g[1] = min(g[0], e.start), max(g[1], e.end)
    for e in tl.events:  # a step lasts until its delayed WGrad ends
        if e.lane == "compute" and e.kind == "WGRAD":
            g = groups.get((e.rank, e.stage, max(e.chunk, 0), e.mb, "B"))
            if g is not None:
                g[1] = max(g[1], e.end)
    per: dict[int, list[tuple[float, float, tuple[int, int, int, str]]]] = {}
    for (r, s, c, mb, flow), (a, b) in groups.items():
        per.setdefault(r, []).append((a, b, (s, c, mb, flow)))
    out: dict[int, list[_Step]] = {}
    for r, items in per.items():
        items.sort(key=lambda t: (t[0], t[1]))
        steps: list[list] = []
        for a, b, part in items:
            last = steps[-1] if steps else None
            if last is not None and len(last[2]) == 1 and last[2][0][3] != part[3] and a < last[1]:
                last[2].append(part)
                last[2].sort(key=lambda p: p[3] != "F")
                last[1] = max(last[1], b)
            else:
                steps.append([a, b, [part]])
        out[r] = [_Step(a, b, tuple(p)) for a, b, p in steps]
    return out


def _phases(steps: list[_Step]) -> list[str]:
    has_b = [any(p[3] == "B" for p in s.parts) for s in steps]
    has_f = [any(p[3] == "F" for p in s.parts) for s in steps]
    first_b = next((i for i, x in enumerate(has_b) if x), len(steps))
    last_f = max((i for i, x in enumerate(has_f) if x), default=-1)
    return ["warmup" if i < first_b else "cooldown" if i > last_f else "steady" for i in range(len(steps))]


def grid_caption(tl: "Timeline", steps: dict[int, list[_Step]] | None = None) -> str:
    """"VPP + 1 warmup" where the plan pairs F and B under interleaving (Megatron adds one warmup
    forward there); otherwise what the grid is, without the "+1"."""
    steps = steps if steps is not None else steps_by_rank(tl)
    paired = any(len(s.parts) == 2 for ss in steps.values() for s in ss)
    if paired and tl.meta.vpp > 1:
        return "VPP + 1 warmup"
    if tl.meta.vpp > 1:
        return "Interleaved 1F1B (VPP)"
    return "Combined 1F1B" if paired else "1F1B"


def moe_figure(tl: "Timeline", device: int | None = None) -> MoEFigure | None:
    """The seed figure's data for ``tl``; ``device`` defaults to the last one (where Megatron's
    extra warmup forward is needed). None when the timeline has no forward/backward sub-ops.

    Raises:
        ValueError: ``device`` is not a rank of the timeline (the CLI turns it into an InputError).
    """
    by_rank = steps_by_rank(tl)
    if not by_rank:
        return None
    ranks = sorted(by_rank)
    k = ranks[-1] if device is None else device
    if k not in by_rank:
        raise ValueError(f"--device: got {device}, expected one of {ranks[0]}..{ranks[-1]}")
    steps = by_rank[k]
    phases = _phases(steps)
    cool = next((s.start for s, p in zip(steps, phases) if p == "cooldown"), float("inf"))
    spans = []
    for name in ("warmup", "steady", "cooldown"):
        idx = [i for i, p in enumerate(phases) if p == name]
        if idx:
            spans.append((name, steps[idx[0]].start, steps[idx[-1]].end))
    # Phases touch: each ends where the next begins, so the grid has no unmapped time.
    spans = [(n, a if i == 0 else spans[i - 1][2], b) for i, (n, a, b) in enumerate(spans)]
    sections = []
    for name in ("warmup", "steady", "cooldown"):
        idx = [i for i, p in enumerate(phases) if p == name]
        if not idx:
            continue
        # The seed's close-ups: the last warmup step (it sends to the next stage and offloads), a
        # paired step from the middle of the steady state, the first cooldown step.
        pick = idx[-1] if name == "warmup" else idx[len(idx) // 2] if name == "steady" else idx[0]
        sec = _section(tl, k, name, steps[pick], cool)
        if name == "warmup":  # the seed's warmup close-up sends to the next stage: prefer one with PP
            with_pp = [sec2 for sec2 in (_section(tl, k, name, steps[i], cool) for i in reversed(idx[-4:]))
                       if any(b.cat == "pp" for b in sec2.blocks)]
            sec = with_pp[0] if with_pp else sec
        sections.append(sec)
    devices = tuple(_device_row(tl, r, by_rank[r]) for r in ranks)
    cats = _categories(sections, devices)
    return MoEFigure(k, tuple(sections), tuple(spans), grid_caption(tl, by_rank), devices, cats, tl.meta.units,
                     tl.start, tl.start + tl.makespan)


def _pass_colour(flow: str, chunk: int) -> str:
    return chunk_colour("moe.forward" if flow == "F" else "moe.backward", max(chunk, 0))


def _section(tl: "Timeline", rank: int, name: str, step: _Step, cooldown_from: float) -> Section:
    own = {(s, mb, flow) for s, _c, mb, flow in step.parts}
    lo, hi = step.start, step.end
    for e in tl.events:
        if e.rank != rank:
            continue
        if e.lane in ("comm", "send", "recv") and e.duration > 0 and (e.stage, e.mb, e.flow) in own:
            lo, hi = min(lo, e.start), max(hi, e.end)
    blocks = []
    for i, e in enumerate(tl.events):
        row = _ROW_OF_LANE.get(e.lane)
        # Ops that started before the window are the previous step's tail: the close-up leaves them out.
        if e.rank != rank or row is None or e.duration <= 0 or e.start < lo or e.start >= hi:
            continue
        # One step, as the seed draws it: compute and communication of other steps that start in
        # the window (the next step's attention beside this one's last combine and PP send, the
        # previous backward's last WGrad) are left out, and so are the copies of earlier steps (an
        # Offload follows its own forward's MLP). An Onload belongs to a backward still to come:
        # the ones this step's compute issues are drawn.
        if row != "Offload" and (e.stage, e.mb, e.flow) not in own:
            continue
        if row == "Offload" and (e.start < step.start or (e.kind == "OFFLOAD" and (e.stage, e.mb, e.flow) not in own)):
            continue
        label = e.label or _LABEL.get(e.kind, e.kind)
        cat, col = block_kind(e, label, cooldown_from)
        if cat == "load":
            label = "Load"
        blocks.append(SectionBlock(row, max(e.start, lo), min(e.end, hi), label, cat, col, 0, i))
    blocks, tracks = _pack(blocks)
    what = " | ".join(f"{flow} mb {mb + 1}" + (f" (chunk {c})" if tl.meta.vpp > 1 else "")
                      for _s, c, mb, flow in step.parts)
    title = _PHASE_TITLES[name] if name != "steady" or len(step.parts) == 2 else "Steady state: one step"
    return Section(name, title, lo, hi, what, tuple(blocks), tracks)


def block_kind(e: "Event", label: str, cooldown_from: float = float("inf")) -> tuple[str, str]:
    """(category key, semantic colour) of one MoE op; reloads from ``cooldown_from`` on are "Load"."""
    if e.kind in ("SEND", "RECV", "PP") or label == "PP":
        return "pp", "moe.pp"
    if e.kind in ("A2A_DISPATCH", "A2A_COMBINE"):
        return (f"ep.{e.flow or 'F'}", "moe.ep.backward" if e.flow == "B" else "moe.ep.forward")
    if e.kind == "OFFLOAD":
        return "offload", "moe.offload"
    if e.kind == "ONLOAD":
        return ("load", "moe.load") if e.start >= cooldown_from else ("onload", "moe.onload")
    flow = "B" if e.flow == "B" or e.kind in ("B", "I", "W", "WGRAD") else "F"
    return f"{flow}.c{max(e.chunk, 0)}", _pass_colour(flow, e.chunk)


def _pack(blocks: list[SectionBlock]) -> tuple[list[SectionBlock], tuple[int, ...]]:
    """Overlapping blocks of one row go on separate tracks (offload beside onload)."""
    out, tracks = [], []
    for row in SECTION_ROWS:
        ends: list[float] = []
        for b in sorted((b for b in blocks if b.row == row), key=lambda b: (b.start, b.end)):
            t = next((j for j, last in enumerate(ends) if last <= b.start + 1e-9), len(ends))
            if t == len(ends):
                ends.append(b.end)
            else:
                ends[t] = b.end
            out.append(SectionBlock(b.row, b.start, b.end, b.label, b.cat, b.colour, t, b.event))
        tracks.append(max(1, len(ends)))
    return out, tuple(tracks)


def _device_row(tl: "Timeline", rank: int, steps: list[_Step]) -> DeviceRow:
    phases = _phases(steps)
    cells = tuple(GridStep(s.start, s.end, ph, tuple(_pass_colour(f, c) for _s, c, _m, f in s.parts),
                           tuple(str(m + 1) for _s, _c, m, _f in s.parts), tuple(f for *_x, f in s.parts))
                  for s, ph in zip(steps, phases))
    pp = tuple(sorted((e.start, e.end, e.flow or "F") for e in tl.events
                      if e.rank == rank and e.kind in ("SEND", "PP") and e.duration > 0))
    return DeviceRow(rank, f"Device {rank}", cells, pp)


def _categories(sections: list[Section], devices: tuple[DeviceRow, ...]) -> tuple[Category, ...]:
    used = {b.cat for s in sections for b in s.blocks}
    chunks = sorted({int(c[3:]) for c in used if c[:3] in ("F.c", "B.c")} |
                    {_chunk_of(col) for d in devices for st in d.steps for col in st.colours})
    out = []
    for flow, name, label in (("F", "moe.forward", "Forward pass"), ("B", "moe.backward", "Backward pass")):
        for c in chunks:
            out.append(Category(f"{flow}.c{c}", chunk_label(label, c, len(chunks)), (chunk_colour(name, c),),
                                flow if c == 0 else flow.lower()))
    out.append(Category("pp", "PP communication", ("moe.pp",), "P"))
    out.append(Category("ep.F", "EP dispatch/combine (forward)", ("moe.ep.forward",), "E"))
    out.append(Category("ep.B", "EP dispatch/combine (backward)", ("moe.ep.backward",), "e"))
    for key, label, col, hatch in (("offload", "Offload (to host)", "moe.offload", ""),
                                   ("onload", "Onload (beside forwards)", "moe.onload", "//"),
                                   ("load", "Load (cooldown)", "moe.load", "xx")):
        if key in used:
            out.append(Category(key, label, (col,), key[:2].upper(), edge="edge", hatch=hatch))
    return tuple(out)


def _chunk_of(colour_name: str) -> int:
    return int(colour_name.rsplit(".c", 1)[1]) if ".c" in colour_name else 0
