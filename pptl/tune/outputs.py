"""The files ``pptl tune`` writes for its best candidate: the plan (through the one plan writer,
:func:`pptl.planning.write_plan`) and the torch CSV schedule."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from pptl.tune.model import TuneConfig
from pptl.tune.rank import Result

__all__ = ["write_best"]


def write_best(tc: TuneConfig, best: Result, units: str, *, plan: Optional[Path] = None,
               csv: Optional[Path] = None) -> None:
    """Write ``best`` as a pptl plan to ``plan`` (its metrics carry the candidate under ``tune``) and
    as a torch CSV schedule to ``csv``; times are in ``units`` (a calibrated tune's are the run's)."""
    from pptl import planning
    from pptl.fileio import atomic_write
    from pptl.tune.rank import best_schedule

    schedule = best_schedule(tc, best)
    if units != "unit":
        schedule.meta["units"] = units
    if plan is not None:
        planning.write_plan(planning.plan_schedule(schedule, metrics={"tune": best.to_dict()}), plan)
    if csv is not None:
        from pptl.formats.torch_csv import export_csv

        text, _ = export_csv(schedule)
        atomic_write(csv, text.encode("utf-8") if isinstance(text, str) else text)
