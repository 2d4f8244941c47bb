"""What ``pptl diagnose`` reads: flight-recorder dumps (files, or folders of PREFIX<rank> files), or the
partial timeline a stopped ``pptl run`` wrote, and the plan that ran; then the diagnosis of them.

The one place that decides what the given paths are (:func:`pptl.formats.flight_recorder.find_dumps`
sorts them) and refuses a mix of dumps and a timeline, or a JSON file that records no hung run.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from pptl.errors import InputError

__all__ = ["Diagnosed", "diagnose_paths"]


@dataclass(frozen=True)
class Diagnosed:
    """A diagnosis, the schedule it named ops by (None without --plan) and a note on skipped files."""

    result: Any
    schedule: Any
    note: str = ""


def diagnose_paths(paths: Sequence[Path], plan_file: Optional[Path] = None, *, prefix: Optional[str] = None) -> Diagnosed:
    """The diagnosis of the hung run in ``paths``: flight-recorder dumps, one per rank (in folders, the
    files named ``prefix<rank>``), or one pptl timeline (which needs the plan).

    Raises:
        InputError: unreadable input, dumps mixed with a timeline, two dumps of one rank, a JSON file
            that is no stopped run's timeline.
    """
    from pptl.diagnose import diagnose_dumps, diagnose_timeline
    from pptl.formats.flight_recorder import DEFAULT_PREFIX, find_dumps, load_dump
    from pptl.formats.loader import load_any

    found = find_dumps(list(paths), prefix if prefix is not None else DEFAULT_PREFIX)
    timelines, dumps = found.timelines, found.dumps
    if timelines and dumps:
        raise InputError(f"{timelines[0]} and {dumps[0][1]}: give flight-recorder dumps or one pptl timeline, not both")
    if len(timelines) > 1:
        raise InputError(f"{timelines[1]}: give one pptl timeline (it holds every rank)")
    schedule = None
    if plan_file is not None:
        schedule = load_any(plan_file).schedule
        if schedule is None:
            raise InputError(f"{plan_file}: has no plan (expected a plan, config or torch CSV)")
    if timelines:
        return Diagnosed(_timeline_diagnosis(timelines[0], schedule, diagnose_timeline, plan_file), schedule)
    return Diagnosed(diagnose_dumps([load_dump(f, rank=r) for r, f in dumps], schedule), schedule, found.note)


def _timeline_diagnosis(path: Path, schedule: Any, diagnose_timeline: Any, plan_file: Optional[Path]) -> Any:
    from pptl.compare import header_difference
    from pptl.formats.loader import load_any
    from pptl.formats.structured import read_structured

    data = read_structured(path)
    kind = data.get("format") if isinstance(data, dict) else None
    if kind != "pptl-timeline":
        what = "is a plan" if kind == "pptl-plan" else "not a pptl timeline"
        raise InputError(f"{path}: {what}, not the record of a hung run; pptl diagnose takes flight-recorder "
                         "dumps, or the timeline a stopped pptl run wrote with --plan PLAN")
    if schedule is None:
        raise InputError(f"{path}: a pptl timeline needs --plan (the plan that ran)")
    timeline = load_any(path).timeline
    if timeline is None:  # pragma: no cover - a pptl-timeline file reads as a timeline or raises
        raise InputError(f"{path}: holds no timeline")
    # Another plan's ops would read as the hung run's pending ones (what explain and compare refuse too);
    # ops the run never reached are no difference.
    differs = header_difference(schedule.family, schedule.pp, schedule.microbatches, timeline,
                                {op.id for op in schedule.ops})
    if differs:
        raise InputError(f"{plan_file}: not the plan that ran {path.name}: {differs}")
    return diagnose_timeline(timeline, schedule)
