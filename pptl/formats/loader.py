"""One entry point for "give me a schedule (and maybe a timeline) from this file".

Accepts plan files (``pptl plan -o``), configs (YAML, TOML, JSON with a ``schedule`` field) and
timelines; other tools' formats register a reader in ``_READERS`` by suffix.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from pptl.config import config_from_mapping
from pptl.errors import InputError
from pptl.formats.structured import read_structured
from pptl.formats.timeline import timeline_from_dict
from pptl.ir import Schedule
from pptl.timeline import Timeline

__all__ = ["Loaded", "load_any", "register_reader"]


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
        """The file's timeline. A plan's is read on first use: ``pptl check`` never needs it, and
        turning 400k stored times into events costs more than checking them."""
        if callable(self.stored_timeline):
            self.stored_timeline = self.stored_timeline()
        return self.stored_timeline


_READERS: dict[str, Callable[..., Loaded]] = {}


def register_reader(suffix: str, reader: Callable[..., Loaded]) -> None:
    """Readers take (path, **options) and return :class:`Loaded`."""
    _READERS[suffix.lower()] = reader


def load_any(path: str | Path, **options: Any) -> Loaded:
    """Read a plan, config, timeline or registered format. Options go to the format's reader
    (``microbatches``, ``placement``...) and override what a config file says."""
    path = Path(path)
    suffix = "".join(path.suffixes[-2:]).lower() if path.name.endswith(".json.gz") else path.suffix.lower()
    if suffix not in _READERS:
        _ensure_plugins()
    loaded = _READERS[suffix](path, **options) if suffix in _READERS else load_data(read_structured(path), str(path),
                                                                                      **options)
    _refuse_ignored(path, loaded, options)
    return loaded


#: The reader options each kind of file reads: given for another kind, one would be ignored silently.
_READ_BY = {"microbatches": ("config", "torch-csv"), "placement": ("torch-csv",)}
_FLAGS = {"microbatches": "-m/--microbatches", "placement": "--placement"}
_KIND_NAMES = {"config": "a config", "torch-csv": "a torch CSV"}


def _refuse_ignored(path: Path, loaded: Loaded, options: Mapping[str, Any]) -> None:
    for name, kinds in _READ_BY.items():
        if options.get(name) is not None and loaded.kind not in kinds:
            readers = " or ".join(_KIND_NAMES[k] for k in kinds)
            raise InputError(f"{path}: {_FLAGS[name]} applies to {readers}, not to a {loaded.kind}; drop it")


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
    raise InputError(f"{source}: not a pptl plan, timeline or config (expected 'format': 'pptl-plan' or "
                     "'pptl-timeline', or a 'schedule' field)")


def _ensure_plugins() -> None:
    """Import optional readers (they register themselves)."""
    import importlib

    for mod in ("pptl.formats.torch_csv", "pptl.formats.profiler"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise
