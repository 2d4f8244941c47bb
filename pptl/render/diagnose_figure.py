"""The picture of ``pptl diagnose``: where each rank stopped, drawn on the plan's timeline.

One row per rank. Given the plan's simulated timeline, every op sits at its planned time
(so the picture reads like ``pptl render``'s); otherwise at its position in the rank's issue order.
Completed ops are grey, ops that never completed are outlined in red, the ops of the wait-for
cycle are filled red, and arrows follow the cycle from node to node.
"""
from __future__ import annotations

import re
from typing import Any

from pptl.diagnose import Diagnosis
from pptl.render.rc import pptl_figure
from pptl.timeline import Timeline

__all__ = ["diagnose_figure"]

# A status view, not a kind view: the kind colours of render/styles.py would compete with the one
# thing this picture says (what never completed), so it uses greys and one red.
_DONE, _STUCK, _PLAN = "#bdbdbd", "#d62728", "#f0f0f0"
#: The title of a hang with no wait-for cycle whose cause names ranks (the one at fault first): what held
#: the run, for a reader of the picture alone (the cause's sentence is in the text output).
_NO_CYCLE = {"held_send": "rank {0}'s compute held in a send rank {1} receives too late (sync-send)",
             "host_stopped": "rank {0}'s host waited for its GPU, where a message waited for rank {1}",
             "queues_shared": "rank {0}'s GPU stopped among queued work: more CUDA streams than hardware queues"}


def _places(d: Diagnosis, planned: Timeline | None
            ) -> tuple[dict[tuple[int, str], tuple[float, float]], list[tuple[int, float, float]], str]:
    """(rank, op label) -> (x, width) of the NCCL ops, the plan's other ops as (rank, x, width),
    and the x axis's name."""
    out: dict[tuple[int, str], tuple[float, float]] = {}
    if planned is not None and planned.events:
        # Sends and receives take no time in the plan; give them a width that shows.
        least = 0.012 * max(max(e.end for e in planned.events) - min(e.start for e in planned.events), 1e-9)
        other = []
        for e in planned.events:
            w = e.end - e.start
            if e.kind in ("SEND", "RECV"):
                out[(e.rank, e.op)] = (e.start - max(least - w, 0) / 2, max(w, least))
            elif w > 0:
                other.append((e.rank, e.start, w))
        return out, other, "planned time (grey background: the plan's compute)"
    for r, seq in d.ops.items():
        for o in seq:
            out[(r, o.label)] = (float(o.index), 0.9)
    return out, [], "issue order (collective and P2P calls of each rank)"


_UNNAMED = re.compile(r"^r\d+ (\S+) #(\d+) \(group (.+)\)$")


def _short(label: str) -> str:
    """The name drawn beside an op: ``r0/send/SEND_F s0 mb3 ->r1`` -> ``SEND_F mb3``,
    ``r1 all_to_all #2 (group ep_dispatch)`` -> ``all_to_all ep_dispatch #2``."""
    if len(label.split("/")) == 3:
        parts = label.split("/")[-1].split()
        mb = next((x for x in parts if x.startswith("mb")), "")
        return f"{parts[0]} {mb}".strip() if parts else label
    m = _UNNAMED.match(label)
    return f"{m.group(1)} {m.group(3)} #{m.group(2)}" if m else label


@pptl_figure
def diagnose_figure(d: Diagnosis, planned: Timeline | None = None) -> Any:
    """A matplotlib Figure of ``d`` (``planned``: the plan's simulated timeline, to place ops at
    their planned times; without it, at their place in each rank's issue order)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    places, plan_ops, axis = _places(d, planned)
    in_cycle = {name for node in d.cycle_ops for name in node}
    ranks = sorted(d.ops)
    row = {r: y for y, r in enumerate(ranks)}
    fig = Figure(figsize=(12, 0.7 * len(ranks) + 2.0))
    ax = fig.add_subplot(1, 1, 1)
    for r, x, w in plan_ops:
        if r in row:
            ax.broken_barh([(x, w)], (row[r] - 0.3, 0.6), facecolors=_PLAN, edgecolors="#d9d9d9", linewidth=0.5)
    centre: dict[str, tuple[float, float]] = {}
    labelled: dict[int, list[tuple[float, str]]] = {}
    for r in ranks:
        y = row[r]
        for o in d.ops[r]:
            at = places.get((r, o.label))
            if at is None:
                continue
            x, w = at
            if o.done:
                style = {"facecolors": _DONE, "edgecolors": "none"}
            elif d.no_completion and o.label not in in_cycle:  # gloo's dumps: not known to be waiting
                style = {"facecolors": "none", "edgecolors": _DONE}
            elif o.label in in_cycle:
                style = {"facecolors": _STUCK, "edgecolors": "black"}
            else:
                style = {"facecolors": "none", "edgecolors": _STUCK}
            ax.broken_barh([(x, w)], (y - 0.38, 0.76), linewidth=0.9, **style)
            centre[o.label] = (x + w / 2, y)
            if o.label in in_cycle:
                labelled.setdefault(r, []).append((x + w / 2, _short(o.label)))
    for r, names in labelled.items():  # alternate above and below so neighbours' names do not overlap
        for k, (x, text) in enumerate(sorted(names)):
            below = k % 2 == 1
            ax.text(x, row[r] + (0.42 if below else -0.42), text, ha="center", va="top" if below else "bottom",
                    fontsize=7)
    # The cycle: within a node, a dashed line joins the ends of one transfer (or one collective);
    # between nodes, an arrow on the rank whose issue order makes the next node wait.
    for node in d.cycle_ops:
        pts = sorted((centre[n] for n in node if n in centre), key=lambda c: c[1])
        for a, b in zip(pts, pts[1:]):
            ax.plot([a[0], b[0]], [a[1], b[1]], linestyle="--", color="black", linewidth=0.8)
    by_rank = [{int(centre[n][1]): centre[n] for n in node if n in centre} for node in d.cycle_ops]
    for k, (_, why) in enumerate(d.cycle):
        here, there = by_rank[k], by_rank[(k + 1) % len(by_rank)]
        rank = next((r for r in ranks if why.endswith(f"rank {r}")), None)
        y = row.get(rank) if rank is not None else None
        a = here.get(y) if y is not None else None
        b = there.get(y) if y is not None else None
        if a is None or b is None:  # the wait is across ranks: join any two ends
            a, b = next(iter(here.values()), None), next(iter(there.values()), None)
        if a is not None and b is not None and a != b:
            ax.annotate("", xy=b, xytext=a, arrowprops={"arrowstyle": "->", "color": "black", "lw": 1.2,
                                                        "connectionstyle": "arc3,rad=-0.3"})
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([f"rank {r}" for r in ranks])
    ax.set_ylim(len(ranks) - 0.4, -0.7)
    ax.set_xlabel(axis)
    why = None if d.cycle else _NO_CYCLE.get(d.cause.kind)
    if why is not None and len(d.cause.ranks) < why.count("{"):  # fewer ranks than the title names
        why = None
    title = (f"hang: wait-for cycle across ranks {', '.join(map(str, d.cycle_ranks))}" if d.cycle
             else "no wait-for cycle: " + why.format(*d.cause.ranks) if why is not None
             else "no wait-for cycle found" if d.hung
             else "no hang shown: the dumps record no completion" if d.no_completion else "no hang")
    ax.set_title(title, loc="left", fontsize=11, fontweight="bold")
    second = (Patch(facecolor="none", edgecolor=_DONE, label="completion not recorded (gloo)") if d.no_completion
              else Patch(facecolor="none", edgecolor=_STUCK, label="never completed"))
    ax.legend(handles=[Patch(facecolor=_DONE, label="call completed"), second,
                       Patch(facecolor=_STUCK, edgecolor="black", label="in the wait-for cycle (arrow: holds up)")],
              loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3, frameon=False)
    fig.tight_layout()
    return fig
