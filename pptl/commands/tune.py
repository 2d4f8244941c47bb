"""``pptl tune``: the best schedule for a model under a memory limit (the search lives in pptl/tune/)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from pptl.commands._shared import (
    Number,
    OutputFmt,
    Whole,
    figure_format,
    print_json,
    print_lines,
    progress,
    say,
    wide,
)

if TYPE_CHECKING:
    from pptl.errors import InputError
    from pptl.tune.model import TuneConfig

__all__ = ["tune"]


def tune(
    config: Annotated[Path, typer.Argument(metavar="CONFIG", help="Tune config: model, pp, microbatches (see docs/tune.md).",
                                           show_default=False)],
    memory_limit: Annotated[Optional[float], typer.Option(
        "--memory-limit", click_type=Number(above=0), help="Peak memory per rank allowed, > 0, in the config's memory "
        "unit (default: its memory_limit).")] = None,
    costs_from: Annotated[Optional[Path], typer.Option("--costs-from", help="Timeline of one pptl run: per-layer "
                                                       "costs (and activation memory) from it.")] = None,
    top: Annotated[int, typer.Option("--top", click_type=Whole(min=1), help="Rows of the ranked table.")] = 15,
    out_file: Annotated[Optional[Path], typer.Option("-o", "--out", help="Write the best plan (for pptl run, "
                                                     "render, check).")] = None,
    figure: Annotated[Optional[Path], typer.Option("--figure", help="Step time against peak memory: .png, .svg "
                                                   "or .pdf.")] = None,
    csv: Annotated[Optional[Path], typer.Option("--csv", help="The best plan as a torch CSV schedule.")] = None,
    calibration_plan: Annotated[Optional[Path], typer.Option(
        "--calibration-plan", help="Write the 1F1B plan to measure for --costs-from (pptl run it; the balanced "
        "split) and exit.")] = None,
    output: OutputFmt = "text",
) -> None:
    """Search schedule families, layer splits and settings for a model under a memory limit.

    Prints the ranking. Exit 1 when no candidate fits the limit (naming the closest).
    """
    import os
    from dataclasses import replace

    from rich.markup import escape
    from rich.table import Table

    from pptl.errors import InputError, InvalidScheduleError
    from pptl.fileio import atomic_write, check_writable, named_as
    from pptl.tune import load_tune_config
    from pptl.tune import tune as run_tune
    from pptl.tune.report import COLUMNS, summary_lines, table_rows, to_dict
    from pptl.tune.write import beside_sends_note, refuse_csv_without_families, write_best

    if calibration_plan is not None:
        ranked = [name for name, given in (("-o", out_file), ("--csv", csv), ("--figure", figure)) if given is not None]
        if ranked:
            from pptl.errors import InputError

            raise InputError(f"--calibration-plan writes the run to measure and ranks nothing; {', '.join(ranked)} "
                             f"{'writes' if len(ranked) == 1 else 'write'} the ranking's results: give "
                             f"{'it' if len(ranked) == 1 else 'them'} in a later call (with --costs-from)")
    fmt = figure_format(figure, name="--figure")
    for p in (out_file, csv):
        if p is not None:
            check_writable(p)
    if csv is not None and not named_as(csv, (".csv",)):
        # -o best.json --csv best.json wrote the CSV over the plan; --csv best.png a CSV under a figure's name
        raise InputError(f"--csv {csv}: writes the best plan as a torch CSV, expected a .csv name")
    try:
        tc = load_tune_config(config)
    except InputError as e:
        raise _not_a_tune_config(config, e) from None
    if csv is not None and calibration_plan is None:
        refuse_csv_without_families(tc)
    units, notes = "unit", list[str]()
    if costs_from is not None:
        from pptl.tune.calibrate import calibrate_tune

        tc, units, notes = calibrate_tune(tc, costs_from)
    if memory_limit is not None:
        tc = replace(tc, memory_limit=memory_limit)
    if calibration_plan is not None:
        _write_calibration_plan(tc, calibration_plan, config, output)
        return
    with progress("tuning", json_output=output == "json") as status:
        result = run_tune(tc, progress=lambda label: status.update(f"tuning: {escape(label)}"),
                          workers=os.cpu_count() or 1)
        result.notes[:0] = notes
        if costs_from is not None:
            from pptl.tune.calibrate import own_plan_note

            own = own_plan_note(tc, result.results, units)
            if own is not None:
                result.notes.append(own)
        unbuilt = result.unbuilt(str(config))
        if unbuilt is not None:
            from pptl.errors import InputError

            raise InputError(unbuilt)
        best = result.best
        if best is not None and (out_file is not None or csv is not None):
            status.update("writing the best plan")
            before = len(result.notes)
            written = write_best(tc, best, out=out_file, csv=csv, units=units, notes=result.notes)
            if len(result.notes) > before:  # the CSV was not written, and a note says why
                csv = None
            beside = beside_sends_note(written, tc.messages)
            if beside is not None:
                result.notes.append(beside)
    if figure is not None:
        from pptl.render.mpl import image_bytes
        from pptl.render.pareto import pareto_figure

        assert fmt is not None  # figure_format named it for this path

        atomic_write(figure, image_bytes(pareto_figure(result, units=units), fmt))
    if output == "json":
        print_json(to_dict(result, units))
    else:
        table = Table(show_edge=False, pad_edge=False)
        for col in COLUMNS:
            table.add_column(col, justify="right" if col in ("#", "step", "spread p05-p95", "per mb", "bubble") else "left")
        for row in table_rows(result, top):
            # the reasons quote config fields ("G in [pp, microbatches]"): text, not rich markup
            table.add_row(*(escape(cell) for cell in row))
        wide().print(table)
        print_lines(summary_lines(result, units))
        for p in (out_file, csv, figure):
            if p is not None and (best is not None or p == figure):
                say(f"wrote {p}", stderr=True)
    if best is None:
        closest = result.closest()
        assert closest is not None  # a ranking of no timed candidate was refused above (unbuilt)
        from pptl.tune.rank import peak_and_limit

        peak, limit = peak_and_limit(closest.max_peak, tc.memory_limit)  # type: ignore[arg-type]
        raise InvalidScheduleError(f"no candidate fits the memory limit {limit}; closest: {closest.label} with "
                                   f"peak {peak}")


def _not_a_tune_config(path: Path, error: InputError) -> InputError:
    """``error``, or for a plan, schedule config, timeline or trace one line that says what it is."""
    from pptl.commands._shared import other_kind
    from pptl.errors import InputError

    found = other_kind(path, error)
    if found is None or found[0].startswith("a pptl tune config"):
        return error
    return InputError(f"{path}: is {found[0]}, not a tune config; pptl tune takes a model description "
                      f"(pp, microbatches, model: layers and their costs; docs/tune.md)")


def _write_calibration_plan(tc: TuneConfig, path: Path, config: Path, output: str) -> None:
    from pptl.fileio import check_writable
    from pptl.planning import plan, write_plan
    from pptl.tune.write import calibration_config

    check_writable(path)
    cfg = calibration_config(tc)
    write_plan(plan(cfg), path)
    layers = list(cfg.workload.stage_layers or ())
    steps = [f"pptl run {path} -o run.json", f"pptl tune {config} --costs-from run.json"]
    if output == "json":
        print_json({"calibration_plan": str(path), "schedule": "1f1b", "microbatches": cfg.microbatches,
                    "stage_layers": layers, "run_blocks": list(tc.run_blocks), "next": steps})
        return
    emb, head = tc.run_blocks
    blocks = f"; the embedding and head as {emb} and {head} MLP blocks" if emb or head else ""
    say(f"wrote {path}: 1f1b m={cfg.microbatches}, stage layers {layers} (the balanced split{blocks}); measure it "
        f"with '{steps[0]}', then '{steps[1]}'")
