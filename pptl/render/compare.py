"""The picture of ``pptl compare``: the measured run drawn over the plan (matplotlib), and a small
self-contained HTML page with that picture and the error tables.

Deliberately minimal: one row per (rank, lane); the plan is an outlined box over the whole row
height, the measurement a filled bar in the lower part of the row, both in the shared kind colours
of :mod:`pptl.render.styles`. Richer views of a single timeline are ``pptl render``'s job.
"""
from __future__ import annotations

import html
import io
from typing import Any

from pptl.compare import Comparison
from pptl.render.rc import pptl_figure

__all__ = ["overlay_figure", "overlay_bytes", "overlay_html"]

_KIND_COLOUR = {"F": "forward", "B": "backward", "I": "backward.input", "W": "backward.weight", "FB": "backward",
                "SEND": "comm", "RECV": "comm"}

_KIND_LABEL = {"F": "Forward", "B": "Backward", "I": "Backward for input", "W": "Backward for weights",
               "FB": "Overlapped F & B", "SEND": "Send / Recv", "RECV": "Send / Recv"}
_ORDER = ("F", "B", "I", "W", "FB", "SEND", "RECV")


def _colour(kind: str) -> str:
    from pptl.render.styles import colour

    return colour(_KIND_COLOUR.get(kind, "other"))


@pptl_figure
def overlay_figure(cmp: Comparison) -> Any:
    """A matplotlib Figure: per (rank, lane) row, planned outlines with measured bars inside."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    rows = sorted({(e.rank, e.lane) for e in cmp.measured.events} | {(e.rank, e.lane) for e in cmp.planned.events},
                  key=lambda k: (k[0], k[1] != "compute", k[1]))
    y = {k: i for i, k in enumerate(rows)}
    fig = Figure(figsize=(12, 0.45 * len(rows) + 1.6))
    ax = fig.add_subplot(1, 1, 1)
    p0, m0 = cmp.planned.start, cmp.measured.start
    for e in cmp.planned.events:
        ax.broken_barh([((e.start - p0) * cmp.scale, e.duration * cmp.scale)], (y[(e.rank, e.lane)] - 0.42, 0.84),
                       facecolors="none", edgecolors=_colour(e.kind), linewidth=0.9)
    for e in cmp.measured.events:
        ax.broken_barh([(e.start - m0, e.duration)], (y[(e.rank, e.lane)] - 0.05, 0.42),
                       facecolors=_colour(e.kind), edgecolors="none")
    ax.set_xlim(left=0)  # both timelines are shifted to start at 0; no padding before it
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"rank {r} {lane}" for r, lane in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)  # top row first, without the default headroom of empty rows
    ax.set_xlabel(f"time ({cmp.units})")
    err = cmp.makespan_error
    ax.set_title(f"{cmp.measured.meta.family}: measured (filled) over planned (outlined): makespan "
                 f"{cmp.makespan_measured:.4g} vs planned {cmp.makespan_planned:.4g} {cmp.units}"
                 + (f" ({100 * err:+.1f}%)" if err is not None else ""), fontsize=10, pad=20)
    # One entry per colour drawn, named in words (SEND and RECV share a colour: one "Send / Recv"),
    # for the kinds of either timeline (a plan's kind the run never reached is still outlined).
    kinds = {e.kind for e in cmp.measured.events} | {e.kind for e in cmp.planned.events}
    entries: dict[str, str] = {}
    for k in sorted(kinds, key=lambda k: (_ORDER.index(k) if k in _ORDER else len(_ORDER), k)):
        entries.setdefault(_colour(k), _KIND_LABEL.get(k, k))
    # Above the plot, under the title: inside it, the legend covered rank 0's bars and outlines.
    ax.legend(handles=[Patch(color=c, label=label) for c, label in entries.items()], loc="lower right",
              bbox_to_anchor=(1.0, 1.0), borderaxespad=0.2, frameon=False, fontsize=8, ncol=len(entries))
    fig.tight_layout()
    return fig


@pptl_figure
def overlay_bytes(cmp: Comparison, fmt: str) -> bytes:
    buf = io.BytesIO()
    overlay_figure(cmp).savefig(buf, format=fmt, dpi=120)
    return buf.getvalue()


def overlay_html(cmp: Comparison, top: int = 20) -> str:
    """One page: the overlay as inline SVG, the summary, the per-kind and the worst per-op errors."""
    svg = overlay_bytes(cmp, "svg").decode("utf-8")
    svg = svg[svg.find("<svg"):]
    esc = html.escape
    err = cmp.makespan_error
    kinds = "".join(
        f"<tr><td>{esc(k.kind)}</td><td>{k.count}</td><td>{k.planned_mean:.4g}</td><td>{k.measured_mean:.4g}</td>"
        f"<td>{'' if k.error is None else f'{100 * k.error:+.1f}%'}</td></tr>" for k in cmp.kinds)
    ops = "".join(
        f"<tr><td>{esc(o.op)}</td><td>{o.planned_start:.4g}&ndash;{o.planned_end:.4g}</td>"
        f"<td>{o.measured_start:.4g}&ndash;{o.measured_end:.4g}</td><td>{o.end_error:+.4g}</td></tr>"
        for o in cmp.worst_ops(top))
    notes = "".join(f"<li>{esc(n)}</li>" for n in cmp.notes)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>pptl compare: {esc(cmp.measured.meta.family)}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}} td:first-child{{text-align:left}}</style></head>
<body><h1>{esc(cmp.measured.meta.family)}: plan vs run</h1>
<p>makespan planned {cmp.makespan_planned:.4g} {esc(cmp.units)}, measured {cmp.makespan_measured:.4g}
{esc(cmp.units)}{'' if err is None else f' (error {100 * err:+.1f}%)'};
bubble planned {100 * cmp.bubble_planned:.1f}%, measured {100 * cmp.bubble_measured:.1f}%</p>
<ul>{notes}</ul>
{svg}
<h2>per kind (mean duration, {esc(cmp.units)})</h2>
<table><tr><th>kind</th><th>ops</th><th>planned</th><th>measured</th><th>error</th></tr>{kinds}</table>
<h2>largest end-time errors ({min(top, len(cmp.ops))} of {len(cmp.ops)} ops)</h2>
<table><tr><th>op</th><th>planned</th><th>measured</th><th>planned - measured end</th></tr>{ops}</table>
</body></html>
"""
