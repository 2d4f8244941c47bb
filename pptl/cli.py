"""The command line: parse, call the library, print.

Results go to stdout; progress and errors to stderr. Every :class:`pptl.errors.PptlError` becomes
one line on stderr and its exit code (2 bad input or usage, 1 invalid schedule or failed run).
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

from rich.console import Console
from rich.table import Table

from pptl import __version__
from pptl.cli_args import Argument, Commands, Option, Shown, UsageError
from pptl.errors import InputError, PptlError

__all__ = ["app", "main"]


_commands = Commands("pptl", help="Plan, check, draw and run pipeline-parallel training schedules.",
                     version=f"pptl {__version__}")
command = _commands.command

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def app(args: Optional[list[str]] = None) -> int:
    """Run one command line (``sys.argv[1:]`` by default) and return its exit code.

    The one place where an error becomes a line on stderr and an exit code: a usage error
    (``pptl: error: --pp: got 'x': ... (see 'pptl plan --help')``) exits 2, a
    :class:`pptl.errors.PptlError` (``error: ...``) its own code (2 bad input, 1 invalid schedule
    or failed run), Ctrl+C 130; a command's ``SystemExit`` keeps its code.
    """
    argv = list(sys.argv[1:] if args is None else args)
    try:
        what = _commands.parse(argv)
        if isinstance(what, Shown):
            stream = sys.stderr if what.stderr else sys.stdout
            stream.write(what.text)
            stream.flush()
            return what.exit_code
        # Plans reach 400k ops; the default collector thresholds rescan that heap thousands of times.
        gc.set_threshold(200_000, 20, 100)
        what.fn(**what.kwargs)
        return 0
    except UsageError as e:
        err.print(f"pptl: error: {_one_line(str(e))} (see '{e.command} --help')", markup=False)
        return 2
    except PptlError as e:
        err.print(f"error: {_one_line(str(e))}", markup=False)
        return e.exit_code
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    except SystemExit as e:
        if isinstance(e.code, str):
            err.print(e.code, markup=False)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)


#: What str.splitlines() (and a terminal) breaks a line at: an error must stay one line even when it
#: quotes a value from the input that holds one.
_BREAKS = {c: repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def _one_line(text: str) -> str:
    return text.translate(str.maketrans(_BREAKS)) if any(c in text for c in _BREAKS) else text


@contextlib.contextmanager
def _without_cycle_scans() -> Iterator[None]:
    """The cycle collector off while one plan or check runs (then back as it was).

    A schedule, its checks and its simulation are lists, tuples and frozen records that refcounting
    frees; the collector found nothing to collect in them, yet its scans of the young objects were
    10-20% of `pptl plan -o` and `pptl check` on a 400k-op plan (2026-11-26, docs/benchmarks.md).
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# ----------------------------------------------------------------------------------------------
# Shared options (declared once)

OutputFmt = Annotated[str, Option("--output", metavar="text|json", help="text or json.")]
OutFile = Annotated[Optional[Path], Option("-o", "--out", help="Write the result to this file "
                                                 "(replaced if it exists).")]
MemoryLimit = Annotated[Optional[float], Option("--memory-limit", min=0, help="Peak activation per rank "
                                                     "allowed (>= 0).")]
Microbatches = Annotated[Optional[int], Option("--microbatches", "-m", help="Micro-batches per step.")]
Placement = Annotated[Optional[str], Option("--placement", metavar="loop|v",
                                                  help="torch CSV: stage placement, loop or v "
                                                  "(default: inferred from the file).")]


PlotlyJs = Annotated[str, Option("--plotlyjs", metavar="inline|directory",
                                       help="HTML: inline (plotly.js in the page: one file that opens offline) "
                                       "or directory (plotly.min.js written once beside it, loaded by a "
                                       "relative path).")]


def _check_plotlyjs(value: str) -> None:
    if value not in ("inline", "directory"):
        raise InputError(f"--plotlyjs: got '{value}', expected inline or directory")


def _print_json(data: Any) -> None:
    """Machine output: plain JSON on stdout (rich's highlighter takes seconds on large metrics)."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
    sys.stdout.flush()


def _check_output(fmt: str, allowed: tuple[str, ...] = ("text", "json")) -> None:
    if fmt not in allowed:
        raise InputError(f"--output: got '{fmt}', expected one of {', '.join(allowed)}")


_IMAGES = ("png", "svg", "pdf")


def _figure_format(path: Optional[Path], allowed: tuple[str, ...] = _IMAGES, *, name: str = "") -> str | None:
    """The drawing format PATH's suffix names (None without PATH), after checking PATH can be written;
    ``name`` prefixes the message with the option (``--figure``) where ``-o`` is not the one."""
    if path is None:
        return None
    from pptl.fileio import check_writable

    check_writable(path)  # a folder or a missing parent is named before the suffix
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in allowed:
        expected = ", ".join(f".{f}" for f in allowed[:-1]) + f" or .{allowed[-1]}"
        got = f"'.{fmt}'" if fmt else "a name with no suffix"
        raise InputError(f"{f'{name} ' if name else ''}{path}: cannot draw to {got}, expected {expected}")
    return fmt


# ----------------------------------------------------------------------------------------------
# pptl plan


@command("plan")
def plan(
    config: Annotated[Optional[Path], Argument(help="Config file (YAML, TOML or JSON).", show_default=False)] = None,
    schedule: Annotated[Optional[str], Option("--schedule", "-s", metavar="NAME",
                                                    help="Family name (see 'pptl schedules').")] = None,
    pp: Annotated[Optional[int], Option("--pp", help="Number of pipeline ranks.")] = None,
    microbatches: Microbatches = None,
    vpp: Annotated[Optional[int], Option("--vpp", help="Chunks per rank.")] = None,
    group_size: Annotated[Optional[int], Option("--group-size", help="Megatron micro-batch group size.")] = None,
    split_backward: Annotated[Optional[bool], Option("--split-backward/--no-split-backward",
                                                           help="Split B into I and W.")] = None,
    cost: Annotated[Optional[list[str]], Option("--cost", metavar="KIND=VALUE", help="Duration of an op kind "
                                                      "(F, B, I, W, FB), repeatable or comma-separated: F=1,B=2.")] = None,
    comm_latency: Annotated[Optional[float], Option("--comm-latency", help="Latency of one P2P message.")] = None,
    memory_limit: MemoryLimit = None,
    costs_from: Annotated[Optional[Path], Option("--costs-from", help="Measured timeline to calibrate costs from.")] = None,
    from_: Annotated[Optional[Path], Option("--from", help="Plan an existing schedule (torch CSV, plan file) "
                                                  "instead of a family.")] = None,
    output: OutputFmt = "text",
    out_file: OutFile = None,
) -> None:
    """Plan a schedule from a config file or flags; print its metrics; write the plan with -o."""
    with _without_cycle_scans():
        _plan(config, schedule, pp, microbatches, vpp, group_size, split_backward, cost, comm_latency, memory_limit,
              costs_from, from_, output, out_file)


def _plan(config: Optional[Path], schedule: Optional[str], pp: Optional[int], microbatches: Optional[int],
          vpp: Optional[int], group_size: Optional[int], split_backward: Optional[bool], cost: Optional[list[str]],
          comm_latency: Optional[float], memory_limit: Optional[float], costs_from: Optional[Path],
          from_: Optional[Path], output: str, out_file: Optional[Path]) -> None:
    from pptl import planning

    _check_output(output)
    if from_ is not None:
        if config is not None or schedule is not None or costs_from is not None:
            raise InputError("--from takes the schedule from its file; drop the config, --schedule and --costs-from")
        result = planning.plan_from_file(from_, microbatches=microbatches, cost_flags=cost,
                                         comm_latency=comm_latency, memory_limit=memory_limit)
        for note in result.metrics.get("notes", ()):
            err.print(f"note: {note}", markup=False)
    elif config is None and schedule is None:
        raise InputError("give a config file or --schedule (e.g. pptl plan --schedule 1f1b --pp 4 --microbatches 8)")
    else:
        flags = {"schedule": schedule, "pp": pp, "microbatches": microbatches, "vpp": vpp, "group_size": group_size,
                 "split_backward": split_backward, "memory_limit": memory_limit}
        cfg = planning.make_config(config, flags, cost, comm_latency)
        units = None
        if costs_from is not None:
            cfg, units = planning.calibrate(cfg, costs_from)
        result = planning.plan(cfg)
        if units is not None and units != "unit":  # calibrated durations are in the run's unit (ms)
            result.schedule.meta["units"] = units
    if out_file is not None:
        planning.write_plan(result, out_file)
    if output == "json":
        _print_json((result.metrics))
    else:
        _print_plan(result)
        if out_file is not None:
            err.print(f"wrote {out_file}")
    if not result.valid:
        raise SystemExit(1)


#: Ranks a plan table lists in full; past that, the first and last _EDGE_RANKS and one summary row.
_SCREEN_RANKS = 32
_EDGE_RANKS = 8


def _print_plan(result: Any) -> None:
    m = result.metrics
    cfg = result.schedule.config
    out.print(f"{result.title}")
    table = Table(show_edge=False, pad_edge=False)
    for name in ("rank", "busy", "idle", "bubble", "peak act."):
        table.add_column(name, justify="right")
    ranks = m["ranks"]
    shown = ranks if len(ranks) <= _SCREEN_RANKS else ranks[:_EDGE_RANKS] + [None] + ranks[-_EDGE_RANKS:]
    for r in shown:
        if r is None:  # beyond a screenful: the first and last ranks, and the spread of the rest
            hidden = ranks[_EDGE_RANKS:-_EDGE_RANKS]
            table.add_row("…", *(f"{min(x[k] for x in hidden):g}..{max(x[k] for x in hidden):g}"
                                 for k in ("busy", "idle")),
                          f"{100 * min(x['bubble_fraction'] for x in hidden):.1f}..{100 * max(x['bubble_fraction'] for x in hidden):.1f}%",
                          f"{max(x['peak_activation'] for x in hidden):g} max")
            continue
        table.add_row(str(r["rank"]), f"{r['busy']:g}", f"{r['idle']:g}", f"{100 * r['bubble_fraction']:.1f}%",
                      f"{r['peak_activation']:g}")
    out.print(table)
    if len(shown) != len(ranks):
        out.print(f"{len(ranks) - 2 * _EDGE_RANKS} middle ranks summarised in the … row (ranges); "
                  "--output json lists every rank")
    out.print(f"makespan {m['makespan']:g} · ops {m['ops']} · bubble {100 * m['bubble_fraction']:.1f}%")
    fam = result.family
    if fam is not None and cfg is not None:
        textbook = m.get("textbook_bubble")
        if textbook is not None:
            out.print(f"bubble per rank: textbook {textbook:g}, simulated (max idle) "
                      f"{max(r['idle'] for r in m['ranks']):g}; textbook formula: {fam.bubble_formula}")
    for v in result.violations:
        out.print(f"{v.code} {v.severity}: {v.message}", markup=False)
    for line in m.get("report", ()):
        out.print(line, markup=False)


# ----------------------------------------------------------------------------------------------
# pptl check


@command("check")
def check(
    files: Annotated[list[str], Argument(help="Plans, configs or schedule files; globs are expanded.")],
    microbatches: Microbatches = None,
    memory_limit: MemoryLimit = None,
    p2p: Annotated[str, Option("--p2p", metavar="nonblocking|nccl|blocking",
                                     help="P2P semantics: nonblocking, nccl or blocking.")] = "nccl",
    output: Annotated[str, Option("--output", metavar="text|json|github", help="text, json or github.")] = "text",
    placement: Placement = None,
) -> None:
    """Check schedules. Exit 0 when all are valid, 1 when any has a violation, 2 on bad input."""
    from pptl import planning

    _check_output(output, ("text", "json", "github"))
    paths, unreadable = planning.expand_paths_reporting(files)
    reports = []
    # Every file is checked; missing and unreadable ones are reported one by one and make the exit 2.
    with _without_cycle_scans():
        for k, p in enumerate(paths):
            if k:
                gc.collect()  # what one file left in cycles (an error's traceback), before the next
            try:
                reports.append(planning.check_file(p, microbatches=microbatches, memory_limit=memory_limit, p2p=p2p,
                                                   placement=placement))
            except InputError as e:
                unreadable.append((p, e))
    if len(paths) + len(unreadable) == 1 and unreadable and output != "github":
        raise unreadable[0][1]
    if output == "json":
        _print_json({"files": [r.to_dict() for r in reports] + [{"path": p, "error": str(e)} for p, e in unreadable],
                     "valid": all(r.valid for r in reports) and not unreadable})
    elif output == "github":
        for p, e in unreadable:
            out.print(planning.github_input_error(p, e), markup=False)
        for r in reports:
            for line in r.github_lines():
                out.print(line, markup=False)
    else:
        for r in reports:
            for line in r.text_lines():
                out.print(line, markup=False)
        for _, e in unreadable:
            err.print(f"error: {e}", markup=False)
    if unreadable:
        raise SystemExit(2)
    if not all(r.valid for r in reports):
        raise SystemExit(1)


# ----------------------------------------------------------------------------------------------
# pptl export


@command("export")
def export(
    source: Annotated[Path, Argument(help="Plan, config, torch CSV, timeline, or profiler traces (a folder).",
                                           show_default=False)],
    to: Annotated[str, Option("--to", metavar="torch-csv|chrome|torchtitan",
                                    help="torch-csv, chrome (Perfetto) or torchtitan (-o pp.toml: its [parallelism] "
                                    "lines, and the schedule CSV they name beside it).")],
    comms: Annotated[bool, Option("--comms", help="torch-csv: write compute_comms (with SEND/RECV).")] = False,
    out_file: OutFile = None,
    microbatches: Microbatches = None,
    placement: Placement = None,
    csv: Annotated[Optional[Path], Option("--csv", help="torchtitan: where the schedule CSV goes (default: "
                                                "beside -o, as NAME.csv).")] = None,
) -> None:
    """Write a schedule or timeline in another tool's format (to stdout without -o; .gz gzips)."""
    from pptl.export import export_file
    from pptl.fileio import atomic_write, check_writable

    if csv is not None and to != "torchtitan":
        raise InputError("--csv applies to --to torchtitan only")
    gz = out_file is not None and out_file.name.endswith(".gz")
    if gz and to != "chrome":
        raise InputError(f"-o {out_file}: .gz output is for --to chrome")
    if to == "torchtitan" and out_file is not None:
        if comms:
            raise InputError("--comms applies to --to torch-csv only")
        _export_torchtitan(source, out_file, csv, microbatches=microbatches, placement=placement)
        return
    if out_file is not None:
        check_writable(out_file)
    result = export_file(source, to=to, comms=comms, gzip_output=gz, microbatches=microbatches, placement=placement)
    for note in result.notes:
        err.print(f"note: {note}", markup=False)
    if out_file is None:
        sys.stdout.write(result.data.decode("utf-8"))
        sys.stdout.flush()
        return
    atomic_write(out_file, result.data)
    err.print(f"wrote {out_file}")


def _export_torchtitan(source: Path, toml_path: Path, csv_path: Optional[Path], **options: Any) -> None:
    from pptl.export import export_torchtitan
    from pptl.fileio import atomic_write, check_writable

    csv_path = csv_path if csv_path is not None else toml_path.with_suffix(".csv")
    if csv_path.resolve() == toml_path.resolve():
        raise InputError(f"--csv {csv_path}: is the -o file; name another")
    check_writable(toml_path)
    check_writable(csv_path)
    files = export_torchtitan(source, csv_path=str(csv_path), **options)
    for note in files.notes:
        err.print(f"note: {note}", markup=False)
    atomic_write(csv_path, files.csv)
    atomic_write(toml_path, files.toml)
    err.print(f"wrote {toml_path} and {csv_path}", markup=False)


# ----------------------------------------------------------------------------------------------
# pptl schedules


@command("schedules")
def schedules(output: OutputFmt = "text") -> None:
    """List the schedule families with their constraints and textbook formulas."""
    from pptl.schedules import FAMILIES

    _check_output(output)
    if output == "json":
        _print_json(([
            {"name": f.name, "summary": f.summary, "constraints": f.constraints, "bubble": f.bubble_formula,
             "memory": f.memory_formula, "source": f.source, "aliases": list(f.aliases)} for f in FAMILIES.values()
        ]))
        return
    # Narrow terminals wrap every cell (overflow="fold") instead of cutting names or formulas with "…";
    # a pipe gets the full width so scripts see whole lines.
    console = out if out.is_terminal else Console(file=out.file, width=240, highlight=False)
    table = Table(show_lines=True)
    longest = max(len(f.name) for f in FAMILIES.values())
    for col in ("name", "what", "constraints", "bubble (idle per rank)", "peak activation"):
        table.add_column(col, overflow="fold", min_width=longest if col == "name" else None)
    for f in FAMILIES.values():
        table.add_row(f.name, f.summary, f.constraints, f.bubble_formula, f.memory_formula)
    console.print(table)


# ----------------------------------------------------------------------------------------------
# pptl render, pptl demo (drawing lives in pptl/render/, the demo's loop in pptl/demo.py)


DpiOpt = Annotated[int, Option("--dpi", help="PNG resolution (dots per inch).")]
SizeOpt = Annotated[Optional[str], Option("--size", help="Figure size W,H in inches (e.g. 7,4.5; default: "
                                                "7 wide, a paper column, as tall as the content).")]
FontOpt = Annotated[Optional[float], Option("--font-size", help="Font size in points (default: 7; no text "
                                                  "under 6 pt, labels without room are left out).")]
TitleOpt = Annotated[str, Option("--title", help="TEXT, auto (config summary) or none; default: none for "
                                       "seed figures, auto otherwise.")]
NotesOpt = Annotated[Optional[bool], Option("--notes/--no-notes", help="Per-row notes (bubble %); "
                                                  "default: off for seed figures.", show_default=False)]
LegendOpt = Annotated[str, Option("--legend", help="Legend place: auto, bottom, top, right or none.")]
DeviceOpt = Annotated[Optional[int], Option("--device", help="MoE figure: the device the three close-up "
                                                  "sections show (default: the last).")]


@command("render")
def render(
    file: Annotated[Path, Argument(help="Plan, timeline, or config (planned on the fly).", show_default=False)],
    style: Annotated[str, Option("--style", help="auto, default, dualpipe, moe or weight-update.")] = "auto",
    html: Annotated[bool, Option("--html", help="Write interactive HTML (to FILE's name + .html unless -o).")] = False,
    out_file: Annotated[Optional[Path], Option("-o", "--out", help="Draw to .png, .svg, .pdf or .html.")] = None,
    width: Annotated[Optional[int], Option("--width", help="Terminal width in columns.")] = None,
    time_window: Annotated[Optional[str], Option("--time", help="Draw only START:END (e.g. 80:110).")] = None,
    dpi: DpiOpt = 200,
    size: SizeOpt = None,
    font_size: FontOpt = None,
    title: TitleOpt = "",
    notes: NotesOpt = None,
    legend: LegendOpt = "auto",
    device: DeviceOpt = None,
    compare_warmup: Annotated[bool, Option("--compare-warmup", help="MoE: draw plain interleaved 1F1B over "
                                                 "the +1 warmup plan of the same config.")] = False,
    split: Annotated[str, Option("--split", help="DualPipe F&B cell: side (halves side by side, the "
                                       "seed) or stack.")] = "side",
    reverse_ids: Annotated[bool, Option("--reverse-ids", help="DualPipe: number reverse-direction "
                                              "blocks too (the seed omits them).")] = False,
    plotlyjs: PlotlyJs = "inline",
) -> None:
    """Draw a timeline: in the terminal by default, or to PNG/SVG/PDF/HTML with -o (or --html)."""
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
    if width is not None and width < 40:
        raise InputError(f"--width: got {width}, expected at least 40 columns")
    if html and out_file is not None and output_format(out_file) != "html":
        raise InputError(f"--html writes HTML but -o {out_file} is not .html; drop --html or name a .html file")
    named = out_file is not None  # a file the user names is overwritten; one pptl names is not
    if html and out_file is None:
        out_file = Path(file.stem + ".html")
    _check_plotlyjs(plotlyjs)
    window = parse_window(time_window)
    if out_file is not None:
        output_format(out_file)  # a bad suffix fails before any planning
        if not named:
            from pptl.fileio import check_new

            check_new(out_file)
    tl = load_timeline(file)
    compare = plain_counterpart(file) if compare_warmup else None
    if out_file is not None:
        for warning in write_file(tl, out_file, window=window, overwrite=named, options=opts, compare=compare,
                                  plotlyjs=plotlyjs):
            err.print(f"warning: {warning}", markup=False)
        err.print(f"wrote {out_file}", markup=False)
        return
    from pptl.render.layout import build_layout
    from pptl.render.terminal import TerminalOptions, TimelineView

    console = Console(width=width, highlight=False) if width else out
    console.print(TimelineView(tl, TerminalOptions(style=style), layout=build_layout(tl, style, window=window)))


@command("demo")
def demo(
    out_dir: Annotated[Path, Option("-o", "--out", help="Folder for the figures (created if missing; "
                                          "its parent must exist).")] = Path("out"),
    fixtures: Annotated[Optional[Path], Option("--fixtures", help="Folder of example configs.")] = None,
    dpi: DpiOpt = 200,
    font_size: FontOpt = None,
    title: TitleOpt = "",
    notes: NotesOpt = None,
    legend: LegendOpt = "auto",
    device: DeviceOpt = None,
    plotlyjs: Annotated[str, Option("--plotlyjs", metavar="inline|directory",
                                          help="HTML: directory (one plotly.min.js shared by the pages in the "
                                          "folder) or inline (in every page).")] = "directory",
) -> None:
    """Plan and draw every example config in fixtures/ (PNG, PDF and HTML each, plus the MoE +1 warmup
    comparison); print what was written."""
    from pptl.demo import run_demo
    from pptl.render.options import RenderOptions

    _check_plotlyjs(plotlyjs)
    opts = RenderOptions(dpi=dpi, font_size=font_size, title=title, notes=notes, legend=legend, device=device)
    with err.status("drawing examples") as status:
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
    # Piped output has no width to respect: print the table whole rather than truncated at 80.
    (out if out.is_terminal else Console(file=out.file, width=200, highlight=False)).print(table)
    for it in items:
        for w in it.warnings:
            err.print(f"warning: {it.fixture}: {w}", markup=False)
    failed = sum(not it.ok for it in items)
    out.print(f"{len(items) - failed} of {len(items)} examples drawn into {out_dir}")
    if failed:
        raise SystemExit(1)


# ----------------------------------------------------------------------------------------------
# pptl run, pptl compare


@command("run")
def run(
    plan_file: Annotated[Path, Argument(help="Plan (pptl plan -o) or config to execute.", show_default=False)],
    gpus: Annotated[Optional[int], Option("--gpus", "-g", min=1, help="Processes, one per rank (default: the "
                                                "plan's pp).")] = None,
    device: Annotated[Optional[str], Option("--device", metavar="cuda|cpu", help="cuda (NCCL) or cpu (gloo); default: cuda "
                                                  "when available.")] = None,
    steps: Annotated[int, Option("--steps", help="Timed steps (as many untimed ones measure the "
                                       "instrumentation overhead).")] = 3,
    warmup: Annotated[int, Option("--warmup", help="Steps run first and discarded.")] = 1,
    verify: Annotated[bool, Option("--verify", help="Check loss and gradients against one process "
                                         "without a pipeline.")] = False,
    timeout: Annotated[float, Option("--timeout", help="Seconds without progress before every rank "
                                           "is stopped.")] = 300.0,
    out_file: Annotated[Optional[Path], Option("-o", "--out", help="Measured timeline (default: "
                                                     "PLAN.measured.json here).")] = None,
    messages: Annotated[Optional[str], Option("--messages", metavar="sync-send|overlap|inline",
                                                    help="How CUDA ranks run SEND/RECV: sync-send "
                                                    "(default: compute waits for each send, receives start when "
                                                    "their sender is ready), overlap (sends beside compute too) or "
                                                    "inline (as torch.distributed.pipelining).")] = None,
    slow_rank: Annotated[Optional[int], Option("--slow-rank", min=0, help="Make this rank a straggler: its "
                                                     "compute lane held --slow-factor times each op's time.")] = None,
    slow_factor: Annotated[float, Option("--slow-factor", help="How much slower --slow-rank runs (1 to 100).")] = 1.3,
    output: OutputFmt = "text",
) -> None:
    """Execute a plan with PyTorch, one process per rank; write the measured timeline."""
    from pptl.errors import RunError
    from pptl.fileio import check_writable
    from pptl.formats.loader import load_any
    from pptl.run import run_plans
    from pptl.run.report import summary, summary_lines

    _check_output(output)
    loaded = load_any(plan_file)
    if loaded.schedule is None:
        raise InputError(f"{plan_file}: is a {loaded.kind}, not a plan; pptl run takes plans and configs")
    target = out_file if out_file is not None else Path(f"{plan_file.name.split('.')[0]}.measured.json")
    check_writable(target)
    if out_file is None:  # a name pptl made up never replaces a file (-o names one to overwrite)
        from pptl.fileio import check_new

        check_new(target)
    with err.status(f"running {loaded.schedule.family} on {gpus or loaded.schedule.pp} processes"):
        tl = run_plans([(loaded.schedule, target)], gpus=gpus or loaded.schedule.pp, device=device, steps=steps,
                       warmup=warmup, verify=verify, timeout=timeout, messages=messages, slow_rank=slow_rank,
                       slow_factor=slow_factor if slow_rank is not None else 1.0)[0]
    if output == "json":
        _print_json((summary(tl, str(target))))
    else:
        for line in summary_lines(tl):
            out.print(line, markup=False)
        err.print(f"wrote {target}", markup=False)
    v = tl.meta.extra.get("verify")
    if v and not v["ok"]:
        raise RunError(f"--verify failed: max gradient rel err {v['max_grad_rel_err']:.2e} at {v['worst']}, loss rel "
                       f"err {v['loss_rel_err']:.2e} (tolerance {v['tolerance']:g})")


@command("compare")
def compare(
    plan_file: Annotated[Path, Argument(help="The plan (or config) that was run.", show_default=False)],
    measured: Annotated[Path, Argument(help="The timeline pptl run wrote.", show_default=False)],
    out_file: Annotated[Optional[Path], Option("-o", "--out", help="Draw measured over planned: .png, .svg, "
                                                     ".pdf or .html.")] = None,
    top: Annotated[int, Option("--top", help="Ops listed with the largest errors.")] = 10,
    output: OutputFmt = "text",
) -> None:
    """Compare a plan with a measured run: makespan, bubble, per-kind and per-op errors."""
    from pptl.compare import compare_timelines, comparison_lines, planned_timeline
    from pptl.fileio import atomic_write
    from pptl.formats.loader import load_any

    _check_output(output)
    fmt = _figure_format(out_file, (*_IMAGES, "html"))
    m = load_any(measured).timeline
    if m is None:
        raise InputError(f"{measured}: has no timeline (expected the output of pptl run)")
    cmp = compare_timelines(planned_timeline(str(plan_file)), m)
    from pptl.whatif.band import step_band

    plan_schedule = load_any(plan_file).schedule
    band = step_band(plan_schedule, m, str(measured)) if plan_schedule is not None else None
    if out_file is not None:
        from pptl.render.compare import overlay_bytes, overlay_html

        atomic_write(out_file, overlay_html(cmp, top) if fmt == "html" else overlay_bytes(cmp, fmt))
    if output == "json":
        _print_json({**cmp.to_dict(), **({"step_band": band.to_dict()} if band is not None else {})})
    else:
        lines = comparison_lines(cmp, top)
        lines[2:2] = [band.line()] if band is not None else []  # after makespan and bubble
        for line in lines:
            out.print(line, markup=False)
        if out_file is not None:
            err.print(f"wrote {out_file}", markup=False)


# ----------------------------------------------------------------------------------------------
# pptl whatif


@command("whatif")
def whatif(
    plans: Annotated[list[Path], Argument(help="Plans or configs, compared side by side.", show_default=False)],
    measured: Annotated[Optional[Path], Option("--from", help="A measured timeline (pptl run -o): its costs "
                                                     "and the spread of its op durations.")] = None,
    samples: Annotated[int, Option("--samples", "-n", min=1, help="Steps drawn per plan.")] = 1000,
    seed: Annotated[int, Option("--seed", help="Seed of the draws (same seed, same numbers).")] = 0,
    jitter: Annotated[Optional[str], Option("--jitter", metavar="SHARE", help="Every op's duration times a "
                                                  "normal factor of this spread (5% or 0.05).")] = None,
    straggler: Annotated[Optional[list[str]], Option("--straggler", metavar="SPEC", help="A slow rank: rank=2,x1.3 "
                                                           "or rank=1,+2ms@mb7 (repeatable).")] = None,
    duty_exponent: Annotated[str, Option("--duty-exponent", metavar="ALPHA", help="With --from: a busier rank "
                                               "runs slower, op time x (duty / the run's duty)^ALPHA; 'learn' "
                                               "(the default with --from) learns ALPHA from the run's ranks, 0 "
                                               "is off (docs/whatif.md).")] = "",
    top: Annotated[int, Option("--top", min=0, help="Ops listed per plan by criticality.")] = 5,
    out_file: Annotated[Optional[Path], Option("-o", "--out", help="Draw the distributions and criticality: "
                                                     ".png, .svg or .pdf.")] = None,
    output: OutputFmt = "text",
) -> None:
    """Step-time distribution of plans under variance and stragglers (Monte Carlo over the graph)."""
    from pptl.fileio import atomic_write
    from pptl.whatif.report import report_dict, report_lines
    from pptl.whatif.spread import parse_duty_exponent, parse_jitter, parse_straggler
    from pptl.whatif.study import study_plans

    _check_output(output)
    fmt = _figure_format(out_file)
    spec = parse_jitter(jitter) if jitter is not None else None
    slow = [parse_straggler(t) for t in straggler or []]
    alpha = parse_duty_exponent(duty_exponent or ("learn" if measured is not None else "0"))
    with err.status(f"sampling {len(plans)} plan(s) x {samples} steps"):
        outcomes = study_plans(plans, measured=measured, samples=samples, seed=seed, jitter=spec, stragglers=slow,
                               duty_exponent=alpha)
    spread = outcomes[0].spread if outcomes else None
    if out_file is not None and fmt is not None:
        from pptl.whatif.figure import whatif_bytes

        atomic_write(out_file, whatif_bytes(outcomes, fmt))
    if output == "json":
        _print_json(report_dict(outcomes, spread, top=top))
    else:
        for line in report_lines(outcomes, spread, top=top):
            out.print(line, markup=False)
        if out_file is not None:
            err.print(f"wrote {out_file}", markup=False)


# ----------------------------------------------------------------------------------------------
# pptl diagnose


@command("diagnose")
def diagnose(
    dumps: Annotated[list[Path], Argument(help="Flight-recorder dumps (one per rank; files or folders), or "
                                                "the partial timeline a stopped pptl run wrote.",
                                                show_default=False)],
    plan_file: Annotated[Optional[Path], Option("--plan", help="The plan (or torch CSV) that ran: name each "
                                                      "NCCL op by its op id.")] = None,
    out_file: Annotated[Optional[Path], Option("-o", "--out", help="Draw the pending ops and the cycle: "
                                                     ".png, .svg or .pdf.")] = None,
    output: OutputFmt = "text",
    prefix: Annotated[str, Option("--prefix", metavar="PREFIX", help="In folders, dumps are the files named PREFIX<rank> "
                                  "(TORCH_FR_DUMP_TEMP_FILE's name); other files are skipped.")] = "nccl_trace_rank_",
) -> None:
    """Explain a hung run: first the root cause and the ranks in one sentence, then the evidence (counts per
    pair of ranks and per group, sizes, kinds, stopped or missing ranks), the NCCL ops that never completed
    and the wait-for cycle. Exit 0 when every op completed and the counts match, 1 otherwise."""
    from pptl.diagnose import diagnose_dumps, diagnose_timeline, to_dict, to_text
    from pptl.fileio import atomic_write
    from pptl.formats.flight_recorder import find_dumps, load_dump
    from pptl.formats.loader import load_any

    _check_output(output)
    fmt = _figure_format(out_file)
    found = find_dumps(dumps, prefix)
    timelines, pickles = found.timelines, found.dumps
    if timelines and pickles:
        raise InputError(f"{timelines[0]} and {pickles[0][1]}: give flight-recorder dumps or one pptl timeline, not both")
    if len(timelines) > 1:
        raise InputError(f"{timelines[1]}: give one pptl timeline (it holds every rank)")
    schedule = None
    if plan_file is not None:
        schedule = load_any(plan_file).schedule
        if schedule is None:
            raise InputError(f"{plan_file}: has no plan (expected a plan, config or torch CSV)")
    if timelines:
        if schedule is None:
            raise InputError(f"{timelines[0]}: a pptl timeline needs --plan (the plan that ran)")
        tl = load_any(timelines[0]).timeline
        if tl is None:
            raise InputError(f"{timelines[0]}: not a pptl timeline (expected the -o of a stopped pptl run)")
        result = diagnose_timeline(tl, schedule)
    else:
        result = diagnose_dumps([load_dump(f, rank=r) for r, f in pickles], schedule)
        if found.note:
            err.print(f"note: {found.note}", markup=False)
    if out_file is not None:
        from pptl.errors import InvalidScheduleError
        from pptl.render.diagnose_figure import diagnose_figure
        from pptl.render.mpl import image_bytes
        from pptl.simulate import simulate

        try:  # the plan's times place the ops; a plan the simulator refuses is drawn in issue order
            planned = simulate(schedule).timeline(with_waits=False) if schedule is not None else None
        except (InvalidScheduleError, InputError):
            planned = None
        atomic_write(out_file, image_bytes(diagnose_figure(result, planned), fmt))
    if output == "json":
        _print_json(to_dict(result))
    else:
        for line in to_text(result).splitlines():
            out.print(line, markup=False)
        if out_file is not None:
            err.print(f"wrote {out_file}", markup=False)
    if not result.ok:
        raise SystemExit(1)


# ----------------------------------------------------------------------------------------------
# pptl serve (the page and its API live in pptl/serve/)


@command("serve")
def serve(
    config: Annotated[Optional[Path], Argument(help="Config file to start from (YAML, TOML or JSON).",
                                                     show_default=False)] = None,
    port: Annotated[int, Option("--port", help="TCP port (0 picks a free one).")] = 8000,
    host: Annotated[str, Option("--host", metavar="ADDRESS", help="Address to listen on; other machines reach it only if "
                                      "you name a non-loopback one (e.g. 0.0.0.0).")] = "127.0.0.1",
) -> None:
    """Explore schedules in the browser, offline: change pp, micro-batches, costs, memory limit and see
    the timeline, metrics and violations redrawn; compare two families; download plan, figure, CSV."""
    from pptl.serve.server import make_server

    if not 0 <= port <= 65535:
        raise InputError(f"--port: got {port}, expected 0..65535")
    cfg = None
    if config is not None:
        from pptl.config import load_config

        cfg = load_config(config)
    server = make_server(host, port, config=cfg, log=lambda line: err.print(line, markup=False))
    if host not in ("127.0.0.1", "localhost", "::1"):
        err.print(f"warning: listening on {host}: other machines on the network can open this page", markup=False)
    out.print(f"pptl serve: open {server.url} (Ctrl+C stops)", markup=False)
    sys.stdout.flush()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()


# ----------------------------------------------------------------------------------------------
# pptl tune


@command("tune")
def tune(
    config: Annotated[Path, Argument(help="Tune config: model, pp, microbatches (see docs/tune.md).",
                                           show_default=False)],
    memory_limit: Annotated[Optional[float], Option(
        "--memory-limit", help="Peak memory per rank allowed, > 0, in the config's memory unit (default: its "
        "memory_limit).")] = None,
    costs_from: Annotated[Optional[Path], Option("--costs-from", help="Timeline of one pptl run: per-layer "
                                                       "costs (and activation memory) from it.")] = None,
    top: Annotated[int, Option("--top", help="Rows of the ranked table.")] = 15,
    out_file: Annotated[Optional[Path], Option("-o", "--out", help="Write the best plan (for pptl run, "
                                                     "render, check).")] = None,
    figure: Annotated[Optional[Path], Option("--figure", help="Step time against peak memory: .png, .svg "
                                                   "or .pdf.")] = None,
    csv: Annotated[Optional[Path], Option("--csv", help="The best plan as a torch CSV schedule.")] = None,
    output: OutputFmt = "text",
) -> None:
    """Search schedule families, layer splits and settings for a model under a memory limit; print the
    ranking. Exit 1 when no candidate fits the limit (naming the closest)."""
    from dataclasses import replace as _replace

    from pptl.errors import InvalidScheduleError
    from pptl.fileio import atomic_write, check_writable
    from pptl.tune import load_tune_config
    from pptl.tune import tune as run_tune
    from pptl.tune.report import COLUMNS, summary_lines, table_rows, to_dict

    _check_output(output)
    if top < 1:
        raise InputError(f"--top: got {top}, expected at least 1")
    fmt = _figure_format(figure, name="--figure")
    for p in (out_file, csv):
        if p is not None:
            check_writable(p)
    tc = load_tune_config(config)
    units = "unit"
    notes: list[str] = []
    if costs_from is not None:
        from pptl.tune.calibrate import calibrate_tune

        tc, units, notes = calibrate_tune(tc, costs_from)
    if memory_limit is not None:
        if not memory_limit > 0 or memory_limit == float("inf"):
            raise InputError(f"--memory-limit: got {memory_limit}, expected a finite number > 0")
        tc = _replace(tc, memory_limit=memory_limit)
    with err.status("tuning") as status:
        result = run_tune(tc, progress=lambda label: status.update(f"tuning: {label}"), workers=os.cpu_count() or 1)
    result.notes[:0] = notes
    best = result.best
    if best is not None and (out_file is not None or csv is not None):
        from pptl.tune.write import write_best

        write_best(tc, best, out=out_file, csv=csv, units=units)
    if figure is not None:
        from pptl.render.mpl import image_bytes
        from pptl.render.pareto import pareto_figure

        atomic_write(figure, image_bytes(pareto_figure(result, units=units), fmt))
    if output == "json":
        _print_json(to_dict(result, units))
    else:
        table = Table(show_edge=False, pad_edge=False)
        for col in COLUMNS:
            table.add_column(col, justify="right" if col in ("#", "step", "spread p05-p95", "per mb", "bubble") else "left")
        for row in table_rows(result, top):
            table.add_row(*row)
        (out if out.is_terminal else Console(file=out.file, width=200, highlight=False)).print(table)
        for line in summary_lines(result, units):
            out.print(line, markup=False)
        for p in (out_file, csv, figure):
            if p is not None and (best is not None or p == figure):
                err.print(f"wrote {p}", markup=False)
    if best is None:
        closest = result.closest()
        if closest is None:
            raise InvalidScheduleError("no candidate could be built for this config (see the table for why)")
        raise InvalidScheduleError(f"no candidate fits the memory limit {tc.memory_limit:g}; closest: "
                                   f"{closest.label} with peak {closest.max_peak:.4g}")



# ----------------------------------------------------------------------------------------------
# pptl explain (the split lives in pptl/explain.py, the figure in pptl/render/explain_figure.py)


@command("explain")
def explain_cmd(
    measured: Annotated[list[Path], Argument(help="A measured timeline (pptl run -o), or torch profiler "
                                                   "traces: a folder, a glob, or one file per rank.",
                                                   show_default=False)],
    plan_file: Annotated[Optional[Path], Option("--plan", help="The plan that ran: which op waits for "
                                                      "which (default: derived from the measured ops).")] = None,
    out_file: Annotated[Optional[Path], Option("-o", "--out", help="Stacked-bar figure: .png, .svg or "
                                                     ".pdf.")] = None,
    top: Annotated[int, Option("--top", help="Late inputs listed.")] = 8,
    output: OutputFmt = "text",
) -> None:
    """Where each rank's idle time went: schedule bubble, late input, transfer, host gap, imbalance."""
    from pptl.explain import explain, explanation_lines
    from pptl.fileio import atomic_write
    from pptl.formats.loader import load_any

    _check_output(output)
    if top < 0:
        raise InputError(f"--top: got {top}, expected 0 or more")
    fmt = _figure_format(out_file)
    if len(measured) > 1:  # one trace file per rank
        from pptl.formats.profiler import read_traces

        loaded = read_traces(measured, source=" ".join(map(str, measured)))
    else:
        loaded = load_any(measured[0])
    name = measured[0].name if len(measured) == 1 else f"{len(measured)} traces"
    if loaded.timeline is None or not loaded.timeline.events:
        raise InputError(f"{name}: has no measured timeline (expected pptl run output or profiler traces)")
    for note in loaded.notes:
        err.print(f"note: {note}", markup=False)
    plan = None
    if plan_file is not None:
        from pptl.compare import planned_timeline, schedule_difference

        plan = load_any(plan_file).schedule
        if plan is None:
            raise InputError(f"{plan_file}: has no schedule (expected a plan or a config)")
        ids = {e.op for e in loaded.timeline.events}
        if not any(op.id in ids for op in plan.ops):
            raise InputError(f"{plan_file}: shares no op with {name} (a plan of {plan.family}, pp={plan.pp}, "
                             f"{plan.microbatches} micro-batches; was it the plan that ran?)")
        differs = schedule_difference(planned_timeline(str(plan_file)), loaded.timeline)
        if differs:
            raise InputError(f"{plan_file}: not the plan that ran {name}: {differs}")
    x = explain(loaded.timeline, plan)
    if out_file is not None:
        from pptl.explain import for_display
        from pptl.render.explain_figure import explain_bytes

        shown = for_display(x)
        atomic_write(out_file, explain_bytes(x, fmt, title=f"{name}: where each rank's step went "
                                              f"(makespan {shown.makespan:.4g} {shown.units})"))
    if output == "json":
        _print_json(x.to_dict())
    else:
        for line in explanation_lines(x, top=top):
            out.print(line, markup=False)
    if out_file is not None:
        err.print(f"wrote {out_file}", markup=False)


def main() -> None:
    """Console entry point (``pptl``, ``python -m pptl``)."""
    code = app()
    # Skip the interpreter's teardown: freeing a 400k-op plan object by object takes ~3 s.
    # Exit handlers (temporary folders, multiprocessing) still run first.
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
