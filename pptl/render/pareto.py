"""The ``pptl tune --figure`` plot: predicted step time against peak memory per candidate, one
marker and colour per family, the memory limit as a vertical line, the Pareto front (no candidate
both faster and smaller) joined, and the pick circled. Returns a matplotlib figure; never saves."""
from __future__ import annotations

from typing import Any

from pptl.render.rc import pptl_figure

__all__ = ["pareto_figure", "pareto_front"]

#: Each family's (colour, marker), fixed so a family looks the same in every figure; no two share a
#: colour or a marker (tab10's ten colours, then three more: tab10 alone repeats after ten families).
_STYLES = {"gpipe": ("#1f77b4", "s"), "1f1b": ("#ff7f0e", "o"), "interleaved-1f1b": ("#2ca02c", "D"),
           "zb-h1": ("#d62728", "^"), "zb-h2": ("#9467bd", "v"), "zbv": ("#8c564b", "<"),
           "dualpipe": ("#e377c2", "P"), "dualpipev": ("#7f7f7f", "X"), "looped-bfs": ("#bcbd22", ">"),
           "interleaved-zb": ("#17becf", "d"), "v-half": ("#000000", "h"), "v-min": ("#393b79", "p"),
           "synth": ("#b8860b", "*")}
#: For a family not in :data:`_STYLES`: the first pair not already drawn in the figure.
_SPARE_MARKERS = ("o", "s", "D", "^", "v", "<", ">", "P", "X", "h", "p", "d", "*", "H", "8")


def _family_styles(fams: list[str]) -> dict[str, tuple[Any, str]]:
    """A (colour, marker) per family, distinct within one figure however many families it draws."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    out = {f: _STYLES[f] for f in fams if f in _STYLES}
    used = set(out.values())
    colours = [to_hex(colormaps["tab20"](i)) for i in range(20)]
    spare = ((c, m) for m in _SPARE_MARKERS for c in colours)
    for f in fams:
        if f not in out:
            out[f] = next(pair for pair in spare if pair not in used)
            used.add(out[f])
    return out


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points (memory, step) that no other point beats in both, by memory."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    out, best = [], float("inf")
    for i in order:
        if points[i][1] < best - 1e-12:
            out.append(i)
            best = points[i][1]
    return out


@pptl_figure
def pareto_figure(result: Any, *, units: str = "unit", title: str = "") -> Any:
    """``result`` is a :class:`pptl.tune.rank.TuneResult`."""
    from matplotlib.figure import Figure

    timed = [r for r in result.results if r.step is not None]
    # A sweep over micro-batch counts compares time per micro-batch (the ranking's key).
    sweep = len({r.structure.microbatches for r in timed}) > 1

    def y(r: Any) -> float:
        return r.step / r.structure.microbatches if sweep else r.step

    fig = Figure(figsize=(8.5, 4.8), dpi=150)
    ax = fig.add_subplot(111)
    fams = list(dict.fromkeys(r.structure.family for r in timed))
    styles = _family_styles(fams)
    for fam in fams:
        rs = [r for r in timed if r.structure.family == fam]
        colour, marker = styles[fam]
        ax.scatter([r.max_peak for r in rs], [y(r) for r in rs], marker=marker,
                   s=28, color=colour, alpha=0.8, label=fam, edgecolors="none")
    pts = [(r.max_peak, y(r)) for r in timed]
    front = pareto_front(pts)
    if front:
        ax.plot([pts[i][0] for i in front], [pts[i][1] for i in front], color="0.35", lw=0.8, ls="--",
                zorder=0, label="Pareto front")
    if result.limit is not None:
        ax.axvline(result.limit, color="#c62828", lw=1.2)
        ax.text(result.limit, 1.0, f" limit {result.limit:g}", color="#c62828", fontsize=7,
                transform=ax.get_xaxis_transform(), va="top", ha="left")
    best = result.best
    if best is not None:
        ax.scatter([best.max_peak], [y(best)], s=180, facecolors="none", edgecolors="black", lw=1.2)
        ax.annotate(f"pick: {best.label}", (best.max_peak, y(best)), xytext=(12, -14),
                    textcoords="offset points", fontsize=7,
                    bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "0.6", "lw": 0.5})
    # Calibrated from a run (times in its unit), memory is what the run measured: MiB.
    ax.set_xlabel(f"peak memory on the busiest rank ({'MiB' if units != 'unit' else 'unit of the config'})")
    ax.set_ylabel(f"predicted {'step time per micro-batch' if sweep else 'step time'} ({units})")
    ax.set_title(title or "pptl tune: step time against peak memory", fontsize=9)
    ax.grid(True, lw=0.3, alpha=0.5)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.subplots_adjust(left=0.09, right=0.82, top=0.92, bottom=0.11)
    return fig
