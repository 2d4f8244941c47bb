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

__all__ = ["run_plans", "runnable", "with_workload"]


def with_workload(schedule: Any, *, hidden: int | None = None, tokens: int | None = None, source: str = "") -> Any:
    """``schedule`` whose synthetic model has width ``hidden`` and ``tokens`` rows per micro-batch
    (each kept from its config where None): ``pptl run --hidden/--tokens`` size a run without
    editing the plan.

    Raises:
        InputError: a value under 1.
    """
    from dataclasses import replace

    from pptl.config import Config
    from pptl.errors import InputError

    for name, value in (("hidden", hidden), ("tokens", tokens)):
        if value is not None and value < 1:
            raise InputError(f"--{name}: got {value}, expected an integer >= 1")
    if hidden is None and tokens is None:
        return schedule
    cfg = schedule.config or Config(schedule=schedule.family, pp=schedule.pp, microbatches=schedule.microbatches)
    sizes = {k: v for k, v in (("hidden", hidden), ("tokens", tokens)) if v is not None}
    return schedule.copy_with(config=replace(cfg, workload=replace(cfg.workload, **sizes)))


def runnable(loaded: Any, name: str | Path) -> Any:
    """The schedule of a file ``pptl run`` takes (a plan, a config, another tool's schedule).

    A measured timeline is refused whatever its reader: profiler traces come with a schedule
    inferred from what ran, which would otherwise run as if it were a plan.

    Raises:
        InputError: the file holds no schedule, or holds a measured timeline.
    """
    from pptl.errors import InputError

    measured = loaded.kind not in ("plan", "config") and loaded.timeline_source() == "measured"
    if loaded.schedule is None or measured:
        kind = "measured timeline" if measured and loaded.kind != "timeline" else loaded.kind
        raise InputError(f"{name}: is a {kind}, not a plan; pptl run takes plans and configs")
    return loaded.schedule


def run_plans(plans: list[tuple[Any, str | Path | None]], *, gpus: int, device: str | None = None, steps: int = 3,
              warmup: int = 1, verify: bool = False, timeout: float | None = None,
              threads: int | None = None, messages: str | None = None, slow_rank: int | None = None,
              slow_factor: float = 1.0, sources: list[str] | None = None) -> list[Any]:
    """Run each (schedule, output path or None) with ``gpus`` local processes, one launch for all.

    A plan is a :class:`pptl.ir.Schedule` or a path any pptl reader takes (plan, config). Returns the
    measured :class:`pptl.timeline.Timeline` of each plan. ``slow_rank`` (with ``slow_factor``)
    makes one rank a straggler (:mod:`pptl.run.slow`). Raises InputError (exit 2) for bad input
    (an output no reader takes or this process cannot write included) or a device this machine
    lacks, InvalidScheduleError (exit 1) for a plan ``pptl check`` rejects, before any process
    starts, and RunError (exit 1) when the run fails.
    ``sources`` names each plan's file in messages (default: the path given, or the family).
    """
    from pptl.errors import InputError, InvalidScheduleError
    from pptl.formats.loader import load_any
    from pptl.ir import Schedule
    from pptl.run.hostmem import check_host_memory
    from pptl.run.launcher import check_device, launch
    from pptl.run.options import DEFAULT_MESSAGES, DEFAULT_TIMEOUT, Job, PlanJob
    from pptl.run.output import check_output
    from pptl.run.program import build_program, refuse_invalid

    schedules, jobs = [], []
    for k, (plan, out) in enumerate(plans):
        named = not isinstance(plan, Schedule) or bool(sources)
        if isinstance(plan, Schedule):
            schedule, label = plan, sources[k] if sources else plan.family
        else:
            schedule, label = runnable(load_any(plan), plan), str(plan)
        # Refuse what cannot run before starting processes: a plan pptl check rejects is an invalid
        # schedule (exit 1) that would otherwise run with wrong gradients or die inside a rank.
        refuse_invalid(schedule, label, named=named)
        try:
            build_program(schedule, source=label)
        except InvalidScheduleError as e:  # some messages (a deadlock's) come from code that knows no file
            raise InvalidScheduleError(str(e) if str(e).startswith(f"{label}:") else f"{label}: {e}") from None
        if out is not None:
            check_output(out)
        schedules.append(schedule)
        jobs.append(PlanJob(label, str(out) if out is not None else None, label))
    dev = check_device(device, gpus)
    for schedule, pj in zip(schedules, jobs):  # before the OOM killer finds out, a minute in
        check_host_memory(schedule, pj.label or pj.plan, dev)
    job = Job(plans=tuple(jobs), device=dev, steps=steps, warmup=warmup, verify=verify,
              timeout=timeout if timeout is not None else DEFAULT_TIMEOUT, threads=threads,
              messages=messages or DEFAULT_MESSAGES, slow_rank=slow_rank, slow_factor=slow_factor).validate()
    if slow_rank is not None and slow_rank >= gpus:
        raise InputError(f"--slow-rank: got {slow_rank}, expected a rank below {gpus} (the run's processes)")
    return launch(job, schedules, gpus)
