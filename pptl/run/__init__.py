"""``pptl run``: execute a plan with PyTorch, one process per rank, and measure it.

The only package of pptl that imports torch, and only when a run starts: importing
``pptl.run`` itself stays light, so ``pptl --help`` and the core never load torch.

Modules: :mod:`~pptl.run.program` (pure: what each rank runs, in what order),
:mod:`~pptl.run.model` (the synthetic MLP chunks, split backward), :mod:`~pptl.run.executor`
(one step on streams / on the host), :mod:`~pptl.run.worker` (one process), :mod:`~pptl.run.launcher`
(local processes, failures), :mod:`~pptl.run.results` (records -> measured Timeline),
:mod:`~pptl.run.verify` (single-process reference), :mod:`~pptl.run.clocksync` (each rank's clock
against rank 0's) and :mod:`~pptl.run.timebase` (pure: those offsets -> one time base). ``python -m pptl.run PLAN`` is the per-rank
entry under ``torchrun``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["run_plans"]


def run_plans(plans: list[tuple[Any, str | Path | None]], *, gpus: int, device: str | None = None, steps: int = 3,
              warmup: int = 1, verify: bool = False, timeout: float | None = None,
              threads: int | None = None, messages: str | None = None, slow_rank: int | None = None,
              slow_factor: float = 1.0) -> list[Any]:
    """Run each (schedule, output path or None) with ``gpus`` local processes, one launch for all.

    A plan is a :class:`pptl.ir.Schedule` or a path any pptl reader takes (plan, config). Returns the
    measured :class:`pptl.timeline.Timeline` of each plan. ``slow_rank`` (with ``slow_factor``)
    makes one rank a straggler (:mod:`pptl.run.slow`). Raises InputError (exit 2) for bad input
    or a device this machine lacks, RunError (exit 1) when the run fails.
    """
    from pptl.errors import InputError
    from pptl.formats.loader import load_any
    from pptl.ir import Schedule
    from pptl.run.launcher import check_device, launch
    from pptl.run.options import DEFAULT_MESSAGES, DEFAULT_TIMEOUT, Job, PlanJob
    from pptl.run.program import build_program

    schedules, jobs = [], []
    for plan, out in plans:
        if isinstance(plan, Schedule):
            schedule, label = plan, plan.family
        else:
            loaded = load_any(plan)
            if loaded.schedule is None:
                raise InputError(f"{plan}: is a {loaded.kind}, not a plan; pptl run takes plans and configs")
            schedule, label = loaded.schedule, str(plan)
        build_program(schedule, source=label)  # refuse what cannot run before starting processes
        schedules.append(schedule)
        jobs.append(PlanJob(label, str(out) if out is not None else None, label))
    dev = check_device(device, gpus)
    job = Job(plans=tuple(jobs), device=dev, steps=steps, warmup=warmup, verify=verify,
              timeout=timeout if timeout is not None else DEFAULT_TIMEOUT, threads=threads,
              messages=messages or DEFAULT_MESSAGES, slow_rank=slow_rank, slow_factor=slow_factor).validate()
    if slow_rank is not None and slow_rank >= gpus:
        raise InputError(f"--slow-rank: got {slow_rank}, expected a rank below {gpus} (the run's processes)")
    return launch(job, schedules, gpus)
