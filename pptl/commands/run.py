"""``pptl run``: execute a plan with PyTorch, one process per rank (the runtime lives in pptl/run/)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pptl.commands._shared import Choice, Number, OutputFmt, Whole, print_json, progress, say
from pptl.config import MAX_HIDDEN, MAX_TOKENS
from pptl.formats._quote import counted
from pptl.run.options import SLOW_FACTOR_RANGE

__all__ = ["default_out", "run"]

#: How much slower ``--slow-rank`` runs when ``--slow-factor`` is not given.
_SLOW_FACTOR = 1.3


#: What a plan or config file's name ends in, dropped to name its measured timeline.
_PLAN_SUFFIXES = (".json.gz", ".json", ".yaml", ".yml", ".toml", ".csv")


def default_out(plan_file: Path) -> Path:
    """``PLAN.measured.json`` in this folder: the plan's name less its format's suffix only, so
    ``a.1f1b.json`` and ``a.zbv.json`` measure into files of their own (cut at the first dot,
    both were ``a.measured.json``, and a dot-file's name was empty)."""
    name = plan_file.name
    stem = next((name[:-len(x)] for x in _PLAN_SUFFIXES if name.lower().endswith(x) and len(name) > len(x)), name)
    return Path(f"{stem}.measured.json")


def run(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN_FILE", help="Plan (pptl plan -o) or config to execute.", show_default=False)],
    gpus: Annotated[Optional[int], typer.Option("--gpus", "-g", click_type=Whole(min=1),
                                                help="Processes, one per rank (default: the plan's pp).")] = None,
    device: Annotated[Optional[str], typer.Option("--device", click_type=Choice("cuda", "cpu"),
                                                  help="cuda (NCCL) or cpu (gloo); default: cuda when "
                                                  "available.")] = None,
    steps: Annotated[int, typer.Option("--steps", click_type=Whole(min=1), help="Timed steps (as many untimed ones "
                                       "measure the instrumentation overhead).")] = 3,
    warmup: Annotated[int, typer.Option("--warmup", click_type=Whole(min=0),
                                        help="Steps run first and discarded.")] = 1,
    verify: Annotated[bool, typer.Option("--verify", help="Check loss and gradients against one process without a "
                                         "pipeline.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", click_type=Number(above=0),
                                           help="Seconds without progress before every rank is stopped.")] = 300.0,
    hidden: Annotated[Optional[int], typer.Option("--hidden", click_type=Whole(min=1, max=MAX_HIDDEN),
                                                  help="Width of the synthetic model (default: the plan's workload, "
                                                  "256).")] = None,
    tokens: Annotated[Optional[int], typer.Option("--tokens", click_type=Whole(min=1, max=MAX_TOKENS),
                                                  help="Rows of one micro-batch (default: the plan's workload, "
                                                  "64).")] = None,
    out_file: Annotated[Optional[Path], typer.Option("-o", "--out", help="Measured timeline (default: "
                                                     "PLAN.measured.json here).")] = None,
    messages: Annotated[Optional[str], typer.Option("--messages", click_type=Choice("sync-send", "overlap", "inline"),
                                                    help="How CUDA ranks run SEND/RECV: sync-send (default: compute "
                                                    "waits for each send, receives start when their sender is "
                                                    "ready), overlap (sends beside compute too) or inline (as "
                                                    "torch.distributed.pipelining).")] = None,
    slow_rank: Annotated[Optional[int], typer.Option("--slow-rank", click_type=Whole(min=0),
                                                     help="Make this rank a straggler: its compute lane held "
                                                     "--slow-factor times each op's time.")] = None,
    # 1 to 100 is RunOptions' range (pptl/run/options.py): a rank can only be slowed
    slow_factor: Annotated[Optional[float], typer.Option("--slow-factor", click_type=Number(min=SLOW_FACTOR_RANGE[0], max=SLOW_FACTOR_RANGE[1]),
                                                         help="How much slower --slow-rank runs (1 to 100; "
                                                         "default 1.3).")] = None,
    output: OutputFmt = "text",
) -> None:
    """Execute a plan with PyTorch, one process per rank; write the measured timeline."""
    from pptl.errors import InputError, RunError
    from pptl.fileio import check_new
    from pptl.formats.loader import load_any
    from pptl.run import run_plans, runnable, with_workload
    from pptl.run.output import check_output
    from pptl.run.report import summary, summary_lines

    if slow_factor is not None and slow_rank is None:  # a factor alone would slow nothing, silently
        raise InputError(f"--slow-factor {slow_factor:g}: give --slow-rank too (the rank to slow down)")
    factor = 1.0 if slow_rank is None else _SLOW_FACTOR if slow_factor is None else slow_factor
    schedule = with_workload(runnable(load_any(plan_file), plan_file), hidden=hidden, tokens=tokens)
    target = out_file if out_file is not None else default_out(plan_file)
    check_output(target)
    if target.exists() and plan_file.exists() and target.resolve() == plan_file.resolve():
        raise InputError(f"-o {target}: is the plan being run; name another file for the measured timeline "
                         "(it would replace the plan)")
    if out_file is None:  # a name pptl made up never replaces a file (-o names one to overwrite)
        check_new(target)
    with progress(f"running {schedule.family} on {counted(gpus or schedule.pp, 'process', 'processes')}", json_output=output == "json"):
        tl = run_plans([(schedule, target)], gpus=gpus or schedule.pp, device=device, steps=steps,
                       warmup=warmup, verify=verify, timeout=timeout, messages=messages, slow_rank=slow_rank,
                       slow_factor=factor, sources=[str(plan_file)])[0]
    if output == "json":
        print_json(summary(tl, str(target)))
    else:
        for line in summary_lines(tl):
            say(line)
        say(f"wrote {target}", stderr=True)
    v = tl.meta.extra.get("verify")
    if v and not v["ok"]:
        raise RunError(f"--verify failed: max gradient rel err {v['max_grad_rel_err']:.2e} at {v['worst']}, loss rel "
                       f"err {v['loss_rel_err']:.2e} (tolerance {v['tolerance']:g})")
