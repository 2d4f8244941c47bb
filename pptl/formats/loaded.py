"""What a reader returns (:class:`Loaded`), and the reader of pptl's own formats (:func:`load_data`):
the base every reader in :mod:`pptl.formats` builds on, below :mod:`pptl.formats.loader`'s table
of readers (a reader imports this module, never the loader)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from pptl.config import config_from_mapping
from pptl.errors import InputError
from pptl.formats.timeline import timeline_from_dict
from pptl.ir import Schedule
from pptl.timeline import Timeline

__all__ = ["Loaded", "load_data"]


@dataclass
class Loaded:
    path: str
    schedule: Schedule | None
    stored_timeline: Timeline | Callable[[], Timeline | None] | None
    """The file's timeline, or a function that reads it on first use (see :attr:`timeline`)."""
    kind: str
    """"plan", "config", "timeline", or a reader's name such as "torch-csv"."""
    notes: tuple[str, ...] = ()
    """What a reader inferred (placement, micro-batch count...), to tell the user."""
    problems: tuple[Any, ...] = ()
    """Violations a reader found in the file itself (unreadable cells...), with their lines;
    readers collect them only when called with ``report_problems=True`` (``pptl check``)."""
    locate: Callable[[str], int | None] | None = None
    """Op id -> line of the source file that holds it, for annotations (None: unknown)."""

    @property
    def timeline(self) -> Timeline | None:
        """The file's timeline. A plan's is read on first use: ``pptl check`` needs only
        :meth:`timeline_source`, and turning 400k stored times into events costs more than checking them."""
        if callable(self.stored_timeline):
            self.stored_timeline = self.stored_timeline()
        return self.stored_timeline

    def timeline_source(self) -> str | None:
        """Where the file's timeline came from ("planned", "measured"...), None without one. A
        plan's timeline is validated whole (InputError when malformed) but its events are not
        built: ``pptl check`` asks, to hold a measured timeline's times to PP090/PP091."""
        from pptl.formats.plan import StoredColumns

        if isinstance(self.stored_timeline, StoredColumns):
            return self.stored_timeline.meta().source
        tl = self.timeline
        return tl.meta.source if tl is not None else None


def load_data(data: Any, source: str, **options: Any) -> Loaded:
    if isinstance(data, Mapping) and data.get("format") == "pptl-plan":
        from pptl.formats.plan import read_plan_dict

        schedule, timeline = read_plan_dict(data, source=source)
        return Loaded(source, schedule, timeline, "plan")
    if isinstance(data, Mapping) and data.get("format") == "pptl-timeline":
        return Loaded(source, None, timeline_from_dict(data, source=source), "timeline")
    if isinstance(data, Mapping) and "schedule" in data:
        from pptl.schedules import build_schedule

        merged = dict(data)
        for k, v in options.items():
            if v is not None and k in ("microbatches", "memory_limit", "pp", "vpp"):
                merged[k] = v
        return Loaded(source, build_schedule(config_from_mapping(merged, source=source)), None, "config")
    if isinstance(data, Mapping) and "model" in data:  # what pptl tune reads: a model, no schedule to plan
        from pptl.formats._quote import shell_word

        raise InputError(f"{source}: is a pptl tune config (a model description), not a plan or schedule config; rank "
                         f"schedules for it with 'pptl tune {shell_word(source)}'")
    raise InputError(f"{source}: not a pptl plan, timeline or config (expected 'format': 'pptl-plan' or "
                     "'pptl-timeline', or a 'schedule' field)")
