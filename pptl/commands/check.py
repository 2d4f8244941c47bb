"""``pptl check``: the rules on plans, configs and schedule files; exit 1 on a violation."""
from __future__ import annotations

from typing import Annotated

import typer

from pptl.commands._shared import (
    Choice,
    MemoryLimit,
    Microbatches,
    Placement,
    one_line,
    print_json,
    progress,
    say,
    without_cycle_scans,
)

__all__ = ["check"]


def check(
    files: Annotated[list[str], typer.Argument(metavar="FILES...", help="Plans, configs or schedule files; globs are expanded.",
                                               show_default=False)],
    microbatches: Microbatches = None,
    memory_limit: MemoryLimit = None,
    p2p: Annotated[str, typer.Option("--p2p", click_type=Choice("nonblocking", "nccl", "blocking"),
                                     help="P2P semantics: nonblocking, nccl or blocking.")] = "nccl",
    output: Annotated[str, typer.Option("--output", click_type=Choice("text", "json", "github"),
                                        help="text, json or github.")] = "text",
    placement: Placement = None,
) -> None:
    """Check schedules. Exit 0 when all are valid, 1 when any has a violation, 2 on bad input."""
    import gc

    from pptl import planning
    from pptl.errors import InputError

    paths, unreadable = planning.expand_paths_reporting(files)
    inputs = len(paths) + len(unreadable)
    reports = []
    # Every file is checked; missing and unreadable ones are reported one by one and make the exit 2.
    with without_cycle_scans(), progress("checking", json_output=output != "text") as status:
        for k, p in enumerate(paths):
            if k:
                gc.collect()  # what one file left in cycles (an error's traceback), before the next
            status.update(f"checking {p}")
            try:
                reports.append(planning.check_file(p, microbatches=microbatches, memory_limit=memory_limit, p2p=p2p,
                                                   placement=placement))
            except InputError as e:
                unreadable.append((p, e))
    if inputs == 1 and unreadable and output != "github":
        raise unreadable[0][1]
    if output == "json":
        print_json({"files": [r.to_dict() for r in reports] + [{"path": p, "error": str(x)} for p, x in unreadable],
                    "valid": all(r.valid for r in reports) and not unreadable})
    elif output == "github":
        for p, x in unreadable:
            say(planning.github_input_error(p, x))
        for r in reports:
            for line in r.github_lines():
                say(line)
    else:
        for r in reports:
            for line in r.text_lines():
                say(line)
        for _, x in unreadable:
            say(f"error: {one_line(str(x))}", stderr=True)
    if unreadable:
        raise typer.Exit(2)
    if not all(r.valid for r in reports):
        raise typer.Exit(1)
