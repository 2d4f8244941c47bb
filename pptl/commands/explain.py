"""``pptl explain``: where each rank's idle time went (the split lives in pptl/explain.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pptl.commands._shared import OutputFmt, Whole, figure_format, print_json, print_lines, say

__all__ = ["explain"]


def explain(
    measured: Annotated[list[Path], typer.Argument(metavar="MEASURED...", help="A measured timeline (pptl run -o), or torch profiler "
                                                   "traces: a folder, a glob, or one file per rank.",
                                                   show_default=False)],
    plan_file: Annotated[Optional[Path], typer.Option("--plan", help="The plan that ran: which op waits for which "
                                                      "(default: derived from the measured ops).")] = None,
    out_file: Annotated[Optional[Path], typer.Option("-o", "--out", help="Stacked-bar figure: .png, .svg or "
                                                     ".pdf.")] = None,
    top: Annotated[int, typer.Option("--top", click_type=Whole(min=0), help="Late inputs listed.")] = 8,
    output: OutputFmt = "text",
) -> None:
    """Where each rank's idle time went: schedule bubble, late input, transfer, host gap, imbalance."""
    from pptl import explain as ex
    from pptl.explain_inputs import load_run, plan_that_ran
    from pptl.fileio import atomic_write

    fmt = figure_format(out_file)
    run = load_run(measured)
    plan = plan_that_ran(plan_file, run) if plan_file is not None else None
    x = ex.explain(run.timeline, plan)
    if out_file is not None:
        from pptl.render.explain_figure import explain_bytes

        shown = ex.for_display(x)
        assert fmt is not None  # figure_format named it for this path
        atomic_write(out_file, explain_bytes(x, fmt, title=f"{run.name}: where each rank's step went "
                                             f"(makespan {shown.makespan:.4g} {shown.units})"))
    for note in run.notes:  # after --plan and the figure: a refusal or a failed write is the one line on stderr
        say(f"note: {note}", stderr=True)
    if output == "json":
        print_json(x.to_dict())
    else:
        print_lines(ex.explanation_lines(x, top=top))
    if out_file is not None:
        say(f"wrote {out_file}", stderr=True)
