"""One entry point for "give me a schedule (and maybe a timeline) from this file".

Accepts plan files (``pptl plan -o``), configs (YAML, TOML, JSON with a ``schedule`` field) and
timelines; other tools' formats have a reader in :data:`READERS`, by suffix.
"""
from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Any, Callable, Mapping

from pptl.errors import InputError
from pptl.formats.loaded import Loaded, load_data
from pptl.formats.structured import STRUCTURED_SUFFIXES, read_structured

__all__ = ["Loaded", "READERS", "load_any", "load_data"]


#: The readers of other tools' formats, by suffix: (module, function). A reader takes (path,
#: **options) and returns a :class:`Loaded`; its module is imported on first use. This table is
#: the one place readers are declared (they do not import the loader back to register).
READERS: dict[str, tuple[str, str]] = {
    ".csv": ("pptl.formats.torch_csv", "read_csv"),
    ".json": ("pptl.formats.profiler", "read_json"),
    ".json.gz": ("pptl.formats.profiler", "read_json"),
    "": ("pptl.formats.profiler", "read_dir"),
}


def load_any(path: str | Path, **options: Any) -> Loaded:
    """Read a plan, config, timeline or registered format. Options go to the format's reader
    (``microbatches``, ``placement``...) and override what a config file says."""
    path = Path(path)
    # the name compared without case, as read_structured and read_bounded compare it: TRACE.JSON.GZ is a trace
    suffix = ".json.gz" if path.name.lower().endswith(".json.gz") else path.suffix.lower()
    if suffix in READERS and not (suffix == ".json" and _is_pptl_file(path)):
        module, name = READERS[suffix]
        reader: Callable[..., Loaded] = getattr(import_module(module), name)
        loaded = reader(path, **options)
    elif suffix in STRUCTURED_SUFFIXES or not path.is_file():  # a missing file or a folder: worded there
        loaded = load_data(read_structured(path), str(path), **options)
    else:  # a figure, a page, a log: read_structured's list would leave out the CSVs and folders taken here
        raise InputError(f"{path}: unknown file type '{suffix}', expected a plan, config, timeline, torch CSV or "
                         "traces: .json, .json.gz, .yaml, .yml, .toml, .csv, or a folder")
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


def _is_pptl_file(path: Path) -> bool:
    """Whether a .json file opens as pptl writes its plans and timelines (``{"format": "pptl-...``):
    those need none of the other tools' readers, so ``pptl check plan.json`` does not import them."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False  # the reader says what is wrong
    return head.replace(b" ", b"").startswith(b'{"format":"pptl-')
