"""The picture of ``pptl whatif`` (matplotlib): the step-time distribution of each plan, and each
plan's planned timeline with every op coloured by its criticality (the share of samples whose
critical path holds it)."""
from __future__ import annotations

import io
from typing import Any, Sequence

from pptl.formats._quote import counted
from pptl.render.rc import pptl_figure
from pptl.whatif.study import PlanOutcome

__all__ = ["whatif_figure", "whatif_bytes", "MAX_TIMELINES"]

#: Plans whose timelines are drawn (the distributions are drawn for all).
MAX_TIMELINES = 4


@pptl_figure
def whatif_figure(outcomes: Sequence[PlanOutcome]) -> Any:
    """A matplotlib Figure: violins of the step time per plan (p50 and p95 marked) above the
    planned timelines of the first :data:`MAX_TIMELINES` plans, ops coloured by criticality."""
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    shown = list(outcomes[:MAX_TIMELINES])
    rows_of = [_rows(o) for o in shown]
    heights = [2.6] + [0.32 * len(r) + 0.9 for r in rows_of]
    fig = Figure(figsize=(12, sum(heights) + 0.6), layout="constrained")
    axes = fig.subplots(len(heights), 1, gridspec_kw={"height_ratios": heights}, squeeze=False)[:, 0]
    ax = axes[0]
    units = outcomes[0].units if outcomes else ""
    data = [o.samples.makespan for o in outcomes]
    pos = list(range(len(outcomes)))
    parts = ax.violinplot(data, positions=pos, orientation="horizontal", showextrema=False, widths=0.8)
    for body in parts["bodies"]:
        body.set_facecolor("#7a9cc6")
        body.set_alpha(0.7)
    for i, o in enumerate(outcomes):
        p50, p95 = np.quantile(o.samples.makespan, (0.5, 0.95)).tolist()
        ax.vlines([p50], i - 0.38, i + 0.38, colors="#1f2d3d", linewidth=1.6)
        ax.vlines([p95], i - 0.38, i + 0.38, colors="#c0392b", linewidth=1.2, linestyles="dashed")
        ax.plot([o.samples.planned], [i], marker="|", color="#555555", markersize=14)
    ax.set_yticks(pos)
    ax.set_yticklabels([_short(o) for o in outcomes], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"step time ({units}): p50 solid, p95 dashed, planned grey tick", fontsize=8)
    ax.set_title(f"pptl whatif: {counted(outcomes[0].samples.makespan.size if outcomes else 0, 'sample')} per plan",
                 fontsize=10)
    cmap = colormaps["YlOrRd"]
    norm = Normalize(0.0, 1.0)
    for axt, o, rows in zip(axes[1:], shown, rows_of):
        _timeline(axt, o, rows, cmap, norm)
    if shown:
        sm = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
        fig.colorbar(sm, ax=list(axes[1:]), fraction=0.02, pad=0.01, label="criticality (share of samples)")
    return fig


@pptl_figure
def whatif_bytes(outcomes: Sequence[PlanOutcome], fmt: str) -> bytes:
    buf = io.BytesIO()
    whatif_figure(outcomes).savefig(buf, format=fmt, dpi=110)
    return buf.getvalue()


def _short(o: PlanOutcome) -> str:
    name = o.name.rsplit("/", 1)[-1]
    return f"{name}\n({o.schedule.family}, m={o.schedule.microbatches})"


def _rows(o: PlanOutcome) -> list[tuple[int, str]]:
    """(rank, lane) rows that hold an op with time (messages of no time are left out)."""
    from pptl.optable import table_of

    t = table_of(o.schedule)
    dur = o.samples.planned_end - o.samples.planned_start
    keys = {(int(r), t.lane_names[c]) for r, c, d in zip(t.rank.tolist(), t.lane.tolist(), (dur > 0).tolist()) if d}
    return sorted(keys, key=lambda k: (k[0], k[1] != "compute", k[1]))


def _timeline(ax: Any, o: PlanOutcome, rows: list[tuple[int, str]], cmap: Any, norm: Any) -> None:
    import numpy as np

    from pptl.optable import table_of

    t = table_of(o.schedule)
    start, end = o.samples.planned_start, o.samples.planned_end
    crit = o.samples.critical
    y = {k: i for i, k in enumerate(rows)}
    lane = np.asarray(t.lane)
    for (r, name), i in y.items():
        code = t.lane_names.index(name)
        sel = np.flatnonzero((t.rank == r) & (lane == code) & (end > start))
        if sel.size:
            ax.broken_barh(np.column_stack([start[sel], end[sel] - start[sel]]), (i - 0.4, 0.8),
                           facecolors=cmap(norm(crit[sel])), edgecolors="#444444",
                           linewidth=0.2 if sel.size < 2000 else 0.0)  # outlines would hide the colour of short ops
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"rank {r} {lane_name}" for r, lane_name in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, max(float(end.max()) if end.size else 1.0, 1e-12))
    ax.set_title(f"{_short(o).replace(chr(10), ' ')}: timeline at mean durations, colour = criticality", fontsize=9)
    ax.set_xlabel(f"time ({o.units})", fontsize=8)
