"""``pptl render`` and ``pptl demo``: drawings of timelines (the drawing lives in pptl/render/)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pptl.commands._shared import Choice, Number, PlotlyJs, Whole, out, progress, say, typed_options, wide
from pptl.render.options import DPI_RANGE, FONT_SIZE_RANGE

__all__ = ["render", "demo", "MAX_WIDTH"]

#: Widest terminal drawing: past a few screens a row is unreadable, and the text grows as width x rows.
MAX_WIDTH = 1000

# The option types refuse every bad value, NaN included, in one wording ("expected an integer from 30 to 1200"),
# with RenderOptions' own ranges.
DpiOpt = Annotated[int, typer.Option("--dpi", click_type=Whole(min=DPI_RANGE[0], max=DPI_RANGE[1]),
                                     help=f"PNG resolution (dots per inch, {DPI_RANGE[0]} to {DPI_RANGE[1]}).")]
SizeOpt = Annotated[Optional[str], typer.Option("--size", help="Figure size W,H in inches (e.g. 7,4.5; default: "
                                                "7 wide, a paper column, as tall as the content). A size smaller "
                                                "than the title, legend and rows need is refused, naming the least "
                                                "that fits.")]
FontOpt = Annotated[Optional[float], typer.Option("--font-size", click_type=Number(min=FONT_SIZE_RANGE[0],
                                                                                         max=FONT_SIZE_RANGE[1]),
                                                  help=f"Font size in points, {FONT_SIZE_RANGE[0]} to {FONT_SIZE_RANGE[1]} "
                                                  "(default: 7; no text under 6 "
                                                  "pt, labels without room are left out).")]
TitleOpt = Annotated[str, typer.Option("--title", help="TEXT, auto (config summary) or none; default: none for "
                                       "seed figures, auto otherwise.")]
NotesOpt = Annotated[Optional[bool], typer.Option("--notes/--no-notes", help="Per-row notes (bubble %); "
                                                  "default: off for seed figures.", show_default=False)]
LegendOpt = Annotated[str, typer.Option("--legend", help="Legend place: auto, bottom, top, right or none.")]
DeviceOpt = Annotated[Optional[int], typer.Option("--device", click_type=Whole(min=0),
                                                  help="MoE figure: the device the three close-up sections show "
                                                  "(default: the last).")]

#: Ops past which drawing takes long enough to show a spinner.
_LARGE = 20_000


#: render's options that shape a figure file only; the terminal drawing takes --style, --time and --width.
_FIGURE_ONLY = ("dpi", "size", "font_size", "title", "notes", "legend", "device", "split", "reverse_ids")


def render(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(metavar="FILE", help="Plan, timeline, or config (planned on the fly).", show_default=False)],
    style: Annotated[str, typer.Option("--style", help="auto, default, dualpipe, moe or weight-update.")] = "auto",
    html: Annotated[bool, typer.Option("--html", help="Write interactive HTML (to FILE's name + .html unless "
                                       "-o).")] = False,
    out_file: Annotated[Optional[Path], typer.Option("-o", "--out", help="Draw to .png, .svg, .pdf or .html.")] = None,
    width: Annotated[Optional[int], typer.Option("--width", click_type=Whole(min=40, max=MAX_WIDTH),
                                                 help=f"Terminal width in columns (40 to {MAX_WIDTH}).")] = None,
    time_window: Annotated[Optional[str], typer.Option("--time", help="Draw only START:END (e.g. 80:110).")] = None,
    dpi: DpiOpt = 200,
    size: SizeOpt = None,
    font_size: FontOpt = None,
    title: TitleOpt = "",
    notes: NotesOpt = None,
    legend: LegendOpt = "auto",
    device: DeviceOpt = None,
    compare_warmup: Annotated[bool, typer.Option("--compare-warmup", help="MoE: draw plain interleaved 1F1B over "
                                                 "the +1 warmup plan of the same config.")] = False,
    split: Annotated[str, typer.Option("--split", click_type=Choice("side", "stack"),
                                       help="DualPipe F&B cell: side (halves side by side, the seed) or "
                                       "stack.")] = "side",
    reverse_ids: Annotated[bool, typer.Option("--reverse-ids", help="DualPipe: number reverse-direction blocks too "
                                              "(the seed omits them).")] = False,
    plotlyjs: PlotlyJs = "inline",
) -> None:
    """Draw a timeline: in the terminal by default, or to PNG/SVG/PDF/HTML with -o (or --html)."""
    from rich.console import Console

    from pptl.errors import InputError
    from pptl.planning import load_timeline, plain_counterpart
    from pptl.render import output_format, parse_window, write_file
    from pptl.render.options import RenderOptions, parse_size
    from pptl.render.styles import STYLE_NAMES

    opts = RenderOptions(style=style, dpi=dpi, size=parse_size(size), font_size=font_size, title=title,
                         notes=notes, legend=legend, device=device, split=split, reverse_ids=reverse_ids)
    if compare_warmup and out_file is None and not html:
        raise InputError("--compare-warmup draws a figure: add -o FILE.png (or .pdf, .svg, .html)")
    if style not in STYLE_NAMES:
        raise InputError(f"--style: got '{style}', expected one of {', '.join(STYLE_NAMES)}")
    if html and out_file is not None and output_format(out_file) != "html":
        raise InputError(f"--html writes HTML but -o {out_file} is not .html; drop --html or name a .html file")
    writes_html = html or (out_file is not None and output_format(out_file) == "html")
    if plotlyjs != "inline" and not writes_html:
        # an option that changes nothing is a mistake the user should hear of, as --html -o x.png is
        where = f"-o {out_file} is not .html" if out_file is not None else "the drawing goes to the terminal"
        raise InputError(f"--plotlyjs {plotlyjs} shapes HTML pages but {where}; drop --plotlyjs or name a .html "
                         "file")
    if width is not None and (out_file is not None or html):
        raise InputError("--width sizes the terminal drawing; a figure file takes --size")
    unused = typed_options(ctx, *_FIGURE_ONLY) if out_file is None and not html else []
    if unused:  # ignored in silence, a --dpi or --title reads as a figure that was drawn and looks wrong
        raise InputError(f"{', '.join(unused)} shape{'s' if len(unused) == 1 else ''} a figure file but the drawing "
                         f"goes to the terminal; add -o FILE.png (or .svg, .pdf, .html) or drop "
                         f"{'it' if len(unused) == 1 else 'them'}")
    named = out_file is not None  # a file the user names is overwritten; one pptl names is not
    if html and out_file is None:
        out_file = Path(file.stem + ".html")
    window = parse_window(time_window)
    if out_file is not None:
        output_format(out_file)  # a bad suffix fails before any planning
        if not named:
            from pptl.fileio import check_new

            check_new(out_file)
    with progress(f"reading {file}") as status:
        tl = load_timeline(file)
        compare = plain_counterpart(file) if compare_warmup else None
        if len(tl.events) >= _LARGE:
            status.update(f"drawing {len(tl.events):,} ops")
        if out_file is not None:
            for warning in write_file(tl, out_file, window=window, overwrite=named, options=opts, compare=compare,
                                      plotlyjs=plotlyjs):
                say(f"warning: {warning}", stderr=True)
            say(f"wrote {out_file}", stderr=True)
            return
        from pptl.render.layout import build_layout
        from pptl.render.terminal import TerminalOptions, TimelineView

        view = TimelineView(tl, TerminalOptions(style=style), layout=build_layout(tl, style, window=window))
    console = Console(width=width, highlight=False) if width else out
    console.print(view)


def demo(
    out_dir: Annotated[Path, typer.Option("-o", "--out", help="Folder for the figures (created if missing; its "
                                          "parent must exist).")] = Path("out"),
    fixtures: Annotated[Optional[Path], typer.Option("--fixtures", help="Folder of example configs.")] = None,
    dpi: DpiOpt = 200,
    font_size: FontOpt = None,
    title: TitleOpt = "",
    notes: NotesOpt = None,
    legend: LegendOpt = "auto",
    device: DeviceOpt = None,
    plotlyjs: Annotated[str, typer.Option("--plotlyjs", click_type=Choice("inline", "directory"),
                                          help="HTML: directory (one plotly.min.js shared by the pages in the folder) "
                                          "or inline (in every page).")] = "directory",
) -> None:
    """Plan and draw every example config in fixtures/; print what was written.

    Each is drawn as PNG, PDF and HTML, plus the MoE +1 warmup comparison.
    """
    from rich.table import Table

    from pptl.demo import run_demo
    from pptl.render.options import RenderOptions

    opts = RenderOptions(dpi=dpi, font_size=font_size, title=title, notes=notes, legend=legend, device=device)
    with progress("drawing examples") as status:
        items = run_demo(out_dir, fixtures=fixtures, progress=lambda name: status.update(f"drawing {name}"),
                         options=opts, plotlyjs=plotlyjs)
    table = Table(show_edge=False, pad_edge=False)
    for col in ("example", "family", "style", "ops", "makespan", "bubble", "wrote"):
        table.add_column(col, justify="right" if col in ("ops", "makespan", "bubble") else "left")
    for it in items:
        if it.ok:
            table.add_row(it.fixture, it.family, it.style, str(it.ops), f"{it.makespan:g}",
                          f"{100 * it.bubble:.1f}%", " ".join(Path(f).name for f in it.files))
        else:
            table.add_row(it.fixture, "", "", "", "", "", f"error: {it.error}")
    wide().print(table)
    for it in items:
        for w in it.warnings:
            say(f"warning: {it.fixture}: {w}", stderr=True)
    failed = sum(not it.ok for it in items)
    say(f"{len(items) - failed} of {len(items)} examples drawn into {out_dir}")
    if failed:
        raise typer.Exit(1)
