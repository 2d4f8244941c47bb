"""The figure of ``pptl explain``: per rank, a stacked bar of busy time and the parts of its idle
time (matplotlib). Takes an :class:`~pptl.explain.Explanation`; returns a Figure or bytes."""
from __future__ import annotations

import io
from typing import Any

from pptl.explain import PART_LABELS, PARTS, Explanation, for_display
from pptl.render.rc import pptl_figure

__all__ = ["explain_figure", "explain_bytes"]

# Semantic colours for the parts (one table, here: no other figure draws them).
_PART_COLOURS = {"busy": "#4E79A7", "bubble": "#BAB0AC", "late_input": "#E15759", "transfer": "#F28E2B",
                 "host": "#B07AA1", "imbalance": "#EDC948"}


@pptl_figure
def explain_figure(x: Explanation, title: str = "") -> Any:
    """Horizontal stacked bars, one per rank: busy, then each part of idle, summing to the makespan."""
    import matplotlib

    x = for_display(x)

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    n = len(x.ranks)
    fig = Figure(figsize=(10, 0.55 * n + 1.9))
    ax = fig.add_subplot(1, 1, 1)
    ys = list(range(n))
    left = [0.0] * n
    for part in ("busy",) + PARTS:
        widths = [getattr(r, part) for r in x.ranks]
        label = "busy (compute)" if part == "busy" else PART_LABELS[part]
        ax.barh(ys, widths, left=left, color=_PART_COLOURS[part], label=label, height=0.62, edgecolor="white",
                linewidth=0.5)
        for y, l0, w in zip(ys, left, widths):
            if x.makespan > 0 and w / x.makespan > 0.06:
                ax.text(l0 + w / 2, y, f"{100 * w / x.makespan:.0f}%", ha="center", va="center", fontsize=8,
                        color="white" if part in ("busy", "late_input", "host") else "black")
        left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(ys)
    ax.set_yticklabels([f"rank {r.rank}" for r in x.ranks])
    ax.invert_yaxis()
    ax.set_xlim(0, max(left + [x.makespan]) * 1.001 or 1)
    ax.set_xlabel(f"time in the step ({x.units})")
    ax.set_title(title or f"where each rank's step went: makespan {x.makespan:.4g} {x.units}", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18 - 0.02 * max(0, 6 - n)), ncol=6, fontsize=8,
              frameon=False)
    fig.tight_layout()
    return fig


@pptl_figure
def explain_bytes(x: Explanation, fmt: str, title: str = "") -> bytes:
    buf = io.BytesIO()
    explain_figure(x, title).savefig(buf, format=fmt, dpi=120)
    return buf.getvalue()
