"""What ``pptl diagnose`` reads: flight-recorder dumps (files or folders of them), or the partial
timeline a stopped ``pptl run`` wrote, and the plan that ran; then the diagnosis of them.

The one place that sorts the given paths into dumps and a timeline and refuses a mix of the two.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

from pptl.errors import InputError

__all__ = ["diagnose_paths", "input_files"]


def input_files(paths: Sequence[Path]) -> list[Path]:
    """The files ``paths`` name: each file, and every file under each folder (hidden ones left out).

    Raises:
        InputError: a path that does not exist, or a folder with no file.
    """
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
            if not found:
                raise InputError(f"{p}: folder holds no files")
            files += found
        elif p.exists():
            files.append(p)
        else:
            raise InputError(f"{p}: no such file or folder")
    return files


def diagnose_paths(paths: Sequence[Path], plan_file: Optional[Path] = None) -> tuple[Any, Any]:
    """(the :mod:`pptl.diagnose` result, the schedule of ``plan_file`` or None) for the hung run in
    ``paths``: flight-recorder dumps, one per rank, or one pptl timeline (which needs the plan).

    Raises:
        InputError: unreadable input, dumps mixed with a timeline, two dumps of one rank, a JSON file
            that is no stopped run's timeline.
    """
    from pptl.diagnose import diagnose_dumps, diagnose_timeline
    from pptl.formats.flight_recorder import load_dump
    from pptl.formats.loader import load_any

    files = input_files(paths)
    timelines = [f for f in files if f.suffix.lower() == ".json"]
    pickles = [f for f in files if f.suffix.lower() != ".json"]
    if timelines and pickles:
        raise InputError(f"{timelines[0]} and {pickles[0]}: give flight-recorder dumps or one pptl timeline, not both")
    if len(timelines) > 1:
        raise InputError(f"{timelines[1]}: give one pptl timeline (it holds every rank)")
    schedule = None
    if plan_file is not None:
        schedule = load_any(plan_file).schedule
        if schedule is None:
            raise InputError(f"{plan_file}: has no plan (expected a plan, config or torch CSV)")
    if timelines:
        from pptl.formats.structured import read_structured

        data = read_structured(timelines[0])
        kind = data.get("format") if isinstance(data, dict) else None
        if kind != "pptl-timeline":
            what = "a plan" if kind == "pptl-plan" else "not a pptl timeline"
            raise InputError(f"{timelines[0]}: {'is ' if kind == 'pptl-plan' else ''}{what}, not the record of a "
                             "hung run; pptl diagnose takes flight-recorder dumps, or the timeline a stopped pptl "
                             "run wrote with --plan PLAN")
        if schedule is None:
            raise InputError(f"{timelines[0]}: a pptl timeline needs --plan (the plan that ran)")
        timeline = load_any(timelines[0]).timeline
        if timeline is None:  # pragma: no cover - a pptl-timeline file reads as a timeline or raises
            raise InputError(f"{timelines[0]}: holds no timeline")
        return diagnose_timeline(timeline, schedule), schedule
    loaded_dumps = [load_dump(f) for f in pickles]
    seen: dict[int, Path] = {}
    for f, d in zip(pickles, loaded_dumps):
        if d.rank in seen:
            raise InputError(f"{f}: a second dump for rank {d.rank} (the first is {seen[d.rank]})")
        seen[d.rank] = f
    return diagnose_dumps(loaded_dumps, schedule), schedule
