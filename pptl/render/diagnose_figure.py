"""The picture of ``pptl diagnose``: where each rank stopped, drawn on the plan's timeline.

One row per rank. With a plan whose timeline can be simulated, every op sits at its planned time
(so the picture reads like ``pptl render``'s); otherwise at its position in the rank's issue order.
Completed ops are grey, ops that never completed are outlined in red, the ops of the wait-for
cycle are filled red, and arrows follow the cycle from node to node.
"""
from __future__ import annotations

from typing import Any

from pptl.diagnose import Diagnosis
from pptl.ir import Schedule

__all__ = ["diagnose_figure"]

# A status view, not a kind view: the kind colours of render/styles.py would compete with the one
# thing this picture says (what never completed), so it uses grey and one red.
_DONE, _STUCK = "#d0d0d0", "#d62728"


def _places(d: Diagnosis, schedule: Schedule | None) -> tuple[dict[tuple[int, str], tuple[float, float]], str]:
    """(rank, op label) -> (x, width), and the x axis's name."""
    out: dict[tuple[int, str], tuple[float, float]] = {}
    if schedule is not None:
        try:
            from pptl.simulate import simulate

            sim = simulate(schedule)
            for i, op in enumerate(schedule.ops):
                out[(op.rank, op.id)] = (sim.start[i], max(sim.end[i] - sim.start[i], 1e-9))
            return out, "planned time"
        except Exception:  # a plan that hangs has no simulated timeline: fall back to issue order
            out.clear()
    for r, seq in d.ops.items():
        for o in seq:
            out[(r, o.label)] = (float(o.index), 0.9)
    return out, "issue order (NCCL calls of each rank)"


def diagnose_figure(d: Diagnosis, schedule: Schedule | None = None) -> Any:
    """A matplotlib Figure of ``d`` (``schedule``: place ops at their planned times)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    places, axis = _places(d, schedule)
    in_cycle = {name for node in d.cycle_ops for name in node}
    ranks = sorted(d.ops)
    fig = Figure(figsize=(12, 0.6 * len(ranks) + 2.0))
    ax = fig.add_subplot(1, 1, 1)
    centre: dict[str, tuple[float, float]] = {}
    for y, r in enumerate(ranks):
        for o in d.ops[r]:
            at = places.get((r, o.label))
            if at is None:
                continue
            x, w = at
            if o.done:
                style = {"facecolors": _DONE, "edgecolors": "none"}
            elif o.label in in_cycle:
                style = {"facecolors": _STUCK, "edgecolors": "black"}
            else:
                style = {"facecolors": "none", "edgecolors": _STUCK}
            ax.broken_barh([(x, w)], (y - 0.38, 0.76), linewidth=0.8, **style)
            centre[o.label] = (x + w / 2, y)
    pts = [next((centre[n] for n in node if n in centre), None) for node in d.cycle_ops]
    pts = [p for p in pts if p is not None]
    for a, b in zip(pts, pts[1:] + pts[:1]):
        if a != b:
            ax.annotate("", xy=b, xytext=a, arrowprops={"arrowstyle": "->", "color": "black", "lw": 1.2,
                                                        "connectionstyle": "arc3,rad=0.2"})
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel(axis)
    title = (f"hang: wait-for cycle across ranks {', '.join(map(str, d.cycle_ranks))}" if d.cycle
             else "no wait-for cycle found" if d.hung else "no hang")
    ax.set_title(title, loc="left", fontsize=11, fontweight="bold")
    ax.legend(handles=[Patch(facecolor=_DONE, label="completed"),
                       Patch(facecolor="none", edgecolor=_STUCK, label="never completed"),
                       Patch(facecolor=_STUCK, edgecolor="black", label="in the wait-for cycle")],
              loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3, frameon=False)
    fig.tight_layout()
    return fig

