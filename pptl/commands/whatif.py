"""``pptl whatif``: step-time distributions of plans under variance and stragglers (pptl/whatif/)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pptl.commands._shared import OutputFmt, Whole, figure_format, print_json, print_lines, progress, say
from pptl.formats._quote import counted

__all__ = ["whatif"]


def whatif(
    plans: Annotated[list[Path], typer.Argument(metavar="PLANS...", help="Plans or configs, compared side by side.",
                                                show_default=False)],
    measured: Annotated[Optional[Path], typer.Option("--from", help="A measured timeline (pptl run -o): its costs "
                                                     "and the spread of its op durations.")] = None,
    samples: Annotated[int, typer.Option("--samples", "-n", click_type=Whole(min=1),
                                         help="Steps drawn per plan.")] = 1000,
    seed: Annotated[int, typer.Option("--seed", click_type=Whole(min=0), help="Seed of the draws (same seed, same "
                                      "numbers).")] = 0,
    jitter: Annotated[Optional[str], typer.Option("--jitter", metavar="SHARE", help="Every op's duration times a "
                                                  "normal factor of this spread (5% or 0.05).")] = None,
    straggler: Annotated[Optional[list[str]], typer.Option("--straggler", metavar="SPEC", help="A slow rank: "
                                                           "rank=2,x1.3 or rank=1,+2ms@mb7 (each of its ops of mb "
                                                           "7); parts combine, repeatable.")] = None,
    duty_exponent: Annotated[str, typer.Option("--duty-exponent", metavar="ALPHA", help="With --from: a busier rank "
                                               "runs slower, op time x (duty / the run's duty)^ALPHA; 'learn' (the "
                                               "default with --from) learns ALPHA from the run's ranks, 0 is off "
                                               "(docs/whatif.md).", show_default=False)] = "",
    top: Annotated[int, typer.Option("--top", click_type=Whole(min=0), help="Ops listed per plan by "
                                     "criticality.")] = 5,
    out_file: Annotated[Optional[Path], typer.Option("-o", "--out", help="Draw the distributions and criticality: "
                                                     ".png, .svg or .pdf.")] = None,
    output: OutputFmt = "text",
) -> None:
    """Step-time distribution of plans under variance and stragglers (Monte Carlo over the graph)."""
    from pptl.fileio import atomic_write
    from pptl.whatif.report import report_dict, report_lines
    from pptl.whatif.spread import parse_duty_exponent, parse_jitter, parse_straggler
    from pptl.whatif.study import study_plans

    fmt = figure_format(out_file)
    spec = parse_jitter(jitter) if jitter is not None else None
    slow = [one for t in straggler or [] for one in parse_straggler(t)]
    alpha = parse_duty_exponent(duty_exponent or ("learn" if measured is not None else "0"))
    with progress(f"sampling {len(plans)} plan(s) x {counted(samples, 'step')}", json_output=output == "json"):
        outcomes = study_plans(plans, measured=measured, samples=samples, seed=seed, jitter=spec, stragglers=slow,
                               duty_exponent=alpha)
    spread = outcomes[0].spread  # one outcome per plan named, and typer requires at least one
    if out_file is not None and fmt is not None:
        from pptl.whatif.figure import whatif_bytes

        atomic_write(out_file, whatif_bytes(outcomes, fmt))
    if output == "json":
        print_json(report_dict(outcomes, spread, top=top))
    else:
        print_lines(report_lines(outcomes, spread, top=top))
        if out_file is not None:
            say(f"wrote {out_file}", stderr=True)
