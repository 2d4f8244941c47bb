"""What ``pptl explain`` reads: the measured run (a timeline, or profiler traces) and the plan that ran.

The one place that decides whether a plan file is the plan of a run: it must share ops with it and
be the same schedule (:func:`pptl.compare.schedule_difference`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pptl.errors import InputError
from pptl.formats._quote import counted

__all__ = ["MeasuredRun", "load_run", "plan_that_ran"]


@dataclass(frozen=True)
class MeasuredRun:
    """A measured timeline with the name messages call it by and the reader's notes."""

    timeline: Any
    name: str
    notes: tuple[str, ...]


def load_run(paths: Sequence[Path]) -> MeasuredRun:
    """The run in ``paths``: one pptl timeline or trace folder, or one torch profiler trace per rank.

    Raises:
        InputError: nothing measured in them.
    """
    from pptl.formats.loader import load_any

    if len(paths) > 1:  # one trace file per rank
        from pptl.formats.profiler import read_traces

        loaded = read_traces(list(paths), source=" ".join(map(str, paths)))
    else:
        loaded = load_any(paths[0])
    name = paths[0].name if len(paths) == 1 else f"{len(paths)} traces"
    if loaded.timeline is None or not loaded.timeline.events:
        raise InputError(f"{name}: has no measured timeline (expected pptl run output or profiler traces)")
    notes = tuple(loaded.notes)
    if loaded.timeline.meta.source == "planned":  # allowed (compare takes two plans too), but said where it is read
        notes += (f"{name} is a plan, not a measured run: its idle is the simulated schedule's (pptl run it to "
                  "measure one)",)
    return MeasuredRun(loaded.timeline, name, notes)


def plan_that_ran(plan_file: Path, run: MeasuredRun) -> Any:
    """The schedule in ``plan_file``, checked to be the one ``run`` ran.

    Raises:
        InputError: the file holds no schedule, shares no op with the run, or is another schedule.
    """
    from pptl.compare import planned_timeline, schedule_difference
    from pptl.formats.loader import load_any

    plan = load_any(plan_file).schedule
    if plan is None:
        raise InputError(f"{plan_file}: has no schedule (expected a plan or a config)")
    ids = {e.op for e in run.timeline.events}
    if not any(op.id in ids for op in plan.ops):
        raise InputError(f"{plan_file}: shares no op with {run.name} (a plan of {plan.family}, pp={plan.pp}, "
                         f"{counted(plan.microbatches, 'micro-batch', 'micro-batches')}; was it the plan that ran?)")
    differs = schedule_difference(planned_timeline(str(plan_file)), run.timeline)
    if differs:
        raise InputError(f"{plan_file}: not the plan that ran {run.name}: {differs}")
    return plan
