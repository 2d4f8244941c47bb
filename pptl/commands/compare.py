"""``pptl compare``: a plan against the run of it."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pptl.commands._shared import IMAGES, OutputFmt, Whole, figure_format, print_json, print_lines, say

__all__ = ["compare"]


def compare(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN_FILE", help="The plan (or config) that was run.", show_default=False)],
    measured: Annotated[Path, typer.Argument(metavar="MEASURED", help="The timeline pptl run wrote.", show_default=False)],
    out_file: Annotated[Optional[Path], typer.Option("-o", "--out", help="Draw measured over planned: .png, .svg, "
                                                     ".pdf or .html.")] = None,
    top: Annotated[int, typer.Option("--top", click_type=Whole(min=0),
                                     help="Ops listed with the largest errors.")] = 10,
    output: OutputFmt = "text",
) -> None:
    """Compare a plan with a measured run: makespan, bubble, per-kind and per-op errors."""
    from pptl.compare import compare_files, comparison_lines
    from pptl.fileio import atomic_write
    from pptl.whatif.band import plan_step_band

    fmt = figure_format(out_file, (*IMAGES, "html"))
    cmp = compare_files(plan_file, measured)
    band = plan_step_band(plan_file, cmp.measured, str(measured))
    if out_file is not None:
        from pptl.render.compare import overlay_bytes, overlay_html

        assert fmt is not None  # figure_format named it for this path

        atomic_write(out_file, overlay_html(cmp, top) if fmt == "html" else overlay_bytes(cmp, fmt))
    if output == "json":
        print_json({**cmp.to_dict(), **({"step_band": band.to_dict()} if band is not None else {})})
    else:
        lines = comparison_lines(cmp, top)
        lines[2:2] = [band.line()] if band is not None else []  # after makespan and bubble
        print_lines(lines)
        if out_file is not None:
            say(f"wrote {out_file}", stderr=True)
