"""``pptl plan``: a schedule from a config or flags, its metrics, the plan file."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from pptl.commands._shared import (
    MemoryLimit,
    Microbatches,
    Number,
    OutFile,
    OutputFmt,
    Whole,
    out,
    print_json,
    progress,
    say,
    without_cycle_scans,
)
from pptl.config import MAX_VALUE

__all__ = ["plan"]


def plan(
    config: Annotated[Optional[Path], typer.Argument(metavar="CONFIG", help="Config file (YAML, TOML or JSON).",
                                                     show_default=False)] = None,
    schedule: Annotated[Optional[str], typer.Option("--schedule", "-s", metavar="NAME",
                                                    help="Family name (see 'pptl schedules').")] = None,
    pp: Annotated[Optional[int], typer.Option("--pp", click_type=Whole(min=1), help="Number of pipeline ranks.")] = None,
    microbatches: Microbatches = None,
    vpp: Annotated[Optional[int], typer.Option("--vpp", click_type=Whole(min=1), help="Chunks per rank.")] = None,
    group_size: Annotated[Optional[int], typer.Option("--group-size", click_type=Whole(min=1),
                                                      help="Megatron micro-batch group size.")] = None,
    split_backward: Annotated[Optional[bool], typer.Option("--split-backward/--no-split-backward",
                                                           help="Split B into I and W.", show_default=False)] = None,
    cost: Annotated[Optional[list[str]], typer.Option("--cost", metavar="KIND=VALUE", help="Duration of an op kind "
                                                      "(F, B, I, W, FB), repeatable or comma-separated: F=1,B=2.")] = None,
    comm_latency: Annotated[Optional[float], typer.Option("--comm-latency", click_type=Number(min=0, max=MAX_VALUE),
                                                          help="Latency of one P2P message.")] = None,
    memory_limit: MemoryLimit = None,
    costs_from: Annotated[Optional[Path], typer.Option("--costs-from", help="Measured timeline to calibrate costs "
                                                       "from.")] = None,
    from_: Annotated[Optional[Path], typer.Option("--from", help="Plan an existing schedule (torch CSV, plan file) "
                                                  "instead of a family.")] = None,
    output: OutputFmt = "text",
    out_file: OutFile = None,
) -> None:
    """Plan a schedule from a config file or flags; print its metrics; write the plan with -o."""
    from pptl import planning
    from pptl.errors import InputError

    with without_cycle_scans(), progress("planning", json_output=output == "json"):
        if from_ is not None:
            if config is not None or schedule is not None or costs_from is not None:
                raise InputError("--from takes the schedule from its file; drop the config, --schedule and "
                                 "--costs-from")
            result = planning.plan_from_file(from_, microbatches=microbatches, cost_flags=cost,
                                             comm_latency=comm_latency, memory_limit=memory_limit)
        elif config is None and schedule is None:
            raise InputError("give a config file or --schedule (e.g. pptl plan --schedule 1f1b --pp 4 "
                             "--microbatches 8)")
        else:
            flags = {"schedule": schedule, "pp": pp, "microbatches": microbatches, "vpp": vpp,
                     "group_size": group_size, "split_backward": split_backward, "memory_limit": memory_limit}
            try:
                result = planning.plan_config(config, flags, cost, comm_latency, costs_from=costs_from)
            except InputError as e:
                raise _not_a_config(config, e) from None
        if out_file is not None:
            planning.write_plan(result, out_file)
        if from_ is not None:  # after the write: a name refused or a write that fails is the one line on stderr
            for note in result.metrics.get("notes", ()):
                say(f"note: {note}", stderr=True)
    if output == "json":
        print_json(result.metrics)
    else:
        print_plan(result)
        if out_file is not None:
            say(f"wrote {out_file}", stderr=True)
    if not result.valid:
        raise typer.Exit(1)


def _not_a_config(path: Optional[Path], error: Any) -> Any:
    """``error``, or for a file that is not a config or plan (a measured timeline, a torch CSV, a tune
    model file) one line that says what it is and which command or option takes it."""
    from pptl.commands._shared import not_a_config
    from pptl.formats._quote import shell_word

    if path is None:
        return error

    def hint(what: str) -> str:
        if what.startswith("a pptl tune config"):
            return f"rank schedules for it with 'pptl tune {shell_word(path)}'"
        if what.startswith("a Chrome trace"):
            return "give pptl the plan or timeline it was exported from"
        if what == "a torch CSV schedule":
            return f"plan it with 'pptl plan --from {shell_word(path)}'"
        return f"to take its durations, give it to --costs-from (pptl plan CONFIG --costs-from {shell_word(path)})"

    return not_a_config(path, error, hint)


#: Ranks a plan table lists in full; past that, the first and last _EDGE_RANKS and one summary row.
_SCREEN_RANKS = 32
_EDGE_RANKS = 8


def print_plan(result: Any) -> None:
    """The plan's title, a row per rank, the totals, the textbook comparison and the violations."""
    from rich.table import Table

    m = result.metrics
    memory = m.get("memory_label", "peak act.")  # None: a family that holds no activations (weight update)
    say(f"{result.title}")
    table = Table(show_edge=False, pad_edge=False)
    for name in ("rank", "busy", "idle", "bubble", memory):
        if name is not None:
            table.add_column(name, justify="right")
    ranks = m["ranks"]
    shown = ranks if len(ranks) <= _SCREEN_RANKS else ranks[:_EDGE_RANKS] + [None] + ranks[-_EDGE_RANKS:]
    for r in shown:
        if r is None:  # beyond a screenful: the first and last ranks, and the spread of the rest
            hidden = ranks[_EDGE_RANKS:-_EDGE_RANKS]
            table.add_row("…", *(f"{min(x[k] for x in hidden):g}..{max(x[k] for x in hidden):g}"
                                 for k in ("busy", "idle")),
                          f"{100 * min(x['bubble_fraction'] for x in hidden):.1f}.."
                          f"{100 * max(x['bubble_fraction'] for x in hidden):.1f}%",
                          *([f"{max(x['peak_activation'] for x in hidden):g} max"] if memory else []))
            continue
        table.add_row(str(r["rank"]), f"{r['busy']:g}", f"{r['idle']:g}", f"{100 * r['bubble_fraction']:.1f}%",
                      *([f"{r['peak_activation']:g}"] if memory else []))
    out.print(table)
    if len(shown) != len(ranks):
        say(f"{len(ranks) - 2 * _EDGE_RANKS} middle ranks summarised in the … row (ranges); "
            "--output json lists every rank")
    say(f"makespan {m['makespan']:g} · ops {m['ops']} · bubble {100 * m['bubble_fraction']:.1f}%")
    fam = result.family
    textbook = m.get("textbook_bubble")
    if fam is not None and result.schedule.config is not None and textbook is not None:
        say(f"bubble per rank: textbook {textbook:g}, simulated (max idle) "
            f"{max(r['idle'] for r in m['ranks']):g}; textbook formula: {fam.bubble_formula}")
    for v in result.violations:
        say(f"{v.code} {v.severity}: {v.message}")
    for line in m.get("report", ()):
        say(line)
