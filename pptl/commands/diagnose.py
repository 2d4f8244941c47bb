"""``pptl diagnose``: why a run hung (the analysis lives in pptl/diagnose/)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pptl.commands._shared import OutputFmt, figure_format, print_json, print_lines, say

__all__ = ["diagnose"]


def diagnose(
    dumps: Annotated[list[Path], typer.Argument(metavar="DUMPS...", help="Flight-recorder dumps (one per rank; files or folders), or "
                                                "the partial timeline a stopped pptl run wrote.",
                                                show_default=False)],
    plan_file: Annotated[Optional[Path], typer.Option("--plan", help="The plan (or torch CSV) that ran: name each "
                                                      "NCCL op by its op id.")] = None,
    out_file: Annotated[Optional[Path], typer.Option("-o", "--out", help="Draw the pending ops and the cycle: "
                                                     ".png, .svg or .pdf.")] = None,
    output: OutputFmt = "text",
    prefix: Annotated[str, typer.Option("--prefix", metavar="PREFIX", help="In folders, dumps are the files named "
                                        "PREFIX<rank> (TORCH_FR_DUMP_TEMP_FILE's name); other files are "
                                        "skipped.")] = "nccl_trace_rank_",
) -> None:
    """Explain a hung run: the root cause and the ranks in one sentence, then the evidence.

    The evidence: counts per pair of ranks and per group, sizes, kinds, stopped or missing ranks, the NCCL
    ops that never completed and the wait-for cycle. Exit 0 when every op completed and the counts match,
    1 otherwise.
    """
    from pptl.diagnose import to_dict, to_text
    from pptl.diagnose_inputs import diagnose_paths
    from pptl.fileio import atomic_write

    fmt = figure_format(out_file)
    found = diagnose_paths(dumps, plan_file, prefix=prefix)
    result, schedule = found.result, found.schedule
    if found.note:
        say(f"note: {found.note}", stderr=True)
    if out_file is not None:
        from pptl.render.diagnose_figure import diagnose_figure
        from pptl.render.mpl import image_bytes

        assert fmt is not None  # figure_format named it for this path

        from pptl.errors import InputError, InvalidScheduleError
        from pptl.simulate import simulate

        try:  # the plan's times place the ops; a plan the simulator refuses is drawn in issue order
            planned = simulate(schedule).timeline(with_waits=False) if schedule is not None else None
        except (InvalidScheduleError, InputError):
            planned = None
        atomic_write(out_file, image_bytes(diagnose_figure(result, planned), fmt))
    if output == "json":
        print_json(to_dict(result))
    else:
        print_lines(to_text(result).splitlines())
        if out_file is not None:
            say(f"wrote {out_file}", stderr=True)
    if not result.ok:
        raise typer.Exit(1)
