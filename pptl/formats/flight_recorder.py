"""Read torch's NCCL flight-recorder dumps (one pickle per rank) without running anything in them.

torch writes a dump when a collective times out (``TORCH_NCCL_TRACE_BUFFER_SIZE=N``,
``TORCH_NCCL_DUMP_ON_TIMEOUT=1``, file ``${TORCH_FR_DUMP_TEMP_FILE}${rank}``, formerly
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``), or when asked (``torch._C._distributed_c10d._dump_nccl_trace()``).
A dump is a pickled dict (format versions 2.x)::

    {"version": "2.10", "pg_config": {pg name: {"name", "desc", "ranks": "[0, 1]"}},
     "pg_status": {...}, "entries": [{"record_id", "pg_id", "process_group": (name, desc),
     "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name": "nccl:send 0->1",
     "input_sizes", "output_sizes", "state": "scheduled"|"started"|"completed", "retired",
     "time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns", ...}]}

A pickle from elsewhere can run code while it loads (a ``GLOBAL``/``REDUCE`` pair calls any
function), so :class:`_PlainUnpickler` refuses every class lookup: what loads is dicts, lists,
tuples, strings, numbers, bools, None and bytes, or nothing. The file size is bounded too.

Vocabulary: *group* is a process group (its name is torch's ``pg_name``, its ranks global);
peers in ``profiling_name`` are ranks *within* the group and are turned into global ranks here.
The dump holds no global rank of its own: like ``torchfrtrace``, the rank is the number that ends
the file name (``nccl_trace_rank_3`` -> 3).
"""
from __future__ import annotations

import ast
import io
import itertools
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from pptl.errors import InputError

__all__ = ["MAX_DUMP_BYTES", "DEFAULT_PREFIX", "FrGroup", "FrEntry", "FrDump", "DumpInputs", "find_dumps",
           "load_dump", "loads_dump", "loads_plain", "rank_from_name", "P2P_KINDS"]

#: Largest dump read (a 20,000-entry buffer with stack traces is ~30 MB).
MAX_DUMP_BYTES = 256 * 1024 * 1024
P2P_KINDS = frozenset({"send", "recv"})
#: What torch's dumps are named in the examples and in torchfrtrace's docs (``TORCH_FR_DUMP_TEMP_FILE``).
DEFAULT_PREFIX = "nccl_trace_rank_"
#: Files walked under one folder at most (a dump folder holds one file per rank, logs and plans).
MAX_FOLDER_FILES = 100_000
_STATES = frozenset({"scheduled", "started", "completed"})
_NAME = re.compile(r"^(\w+):(\w+)(?: (\d+)(->|<-)(\d+))?$")
_RANK = re.compile(r"(\d+)(?:\.pkl|\.pickle)?$")


@dataclass(frozen=True)
class FrGroup:
    """One process group as a dump's ``pg_config`` describes it."""

    name: str
    desc: str
    ranks: tuple[int, ...]
    """Global ranks, in group-rank order (group rank i is ``ranks[i]``)."""


@dataclass(frozen=True)
class FrEntry:
    """One NCCL call a rank issued (an entry of the ring buffer)."""

    record_id: int
    group: str
    """Process-group name (``process_group[0]``)."""
    group_desc: str
    collective_seq_id: int
    p2p_seq_id: int
    op_id: int
    kind: str
    """``send``, ``recv``, ``all_to_all``, ``all_reduce``, ``coalesced``... (profiling name without backend)."""
    profiling_name: str
    peer: int
    """Global rank of the other end of a send/recv (-1 for collectives, or when unknown)."""
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    state: str
    retired: bool
    time_created_ns: int
    time_started_ns: int | None
    time_completed_ns: int | None

    is_p2p: bool
    """A point-to-point call (or a coalesced group of them): ``p2p_seq_id`` orders it, not
    ``collective_seq_id``."""


@dataclass(frozen=True)
class FrDump:
    """One rank's dump."""

    path: str
    rank: int
    version: str
    groups: Mapping[str, FrGroup]
    entries: tuple[FrEntry, ...]


@dataclass(frozen=True)
class DumpInputs:
    """What the paths a user gave hold: dumps by rank, pptl timelines, and files skipped."""

    dumps: tuple[tuple[int, Path], ...]
    """(rank, file), by rank."""
    timelines: tuple[Path, ...]
    """``.json`` files named on the command line (a stopped ``pptl run``'s partial timeline)."""
    skipped: tuple[Path, ...]
    """Files inside folders whose name is not PREFIX<rank> (logs, plans, ...)."""
    prefix: str

    @property
    def note(self) -> str:
        """One line that says what was skipped ("" when nothing was)."""
        if not self.skipped:
            return ""
        names = ", ".join(p.name for p in self.skipped[:4]) + (", ..." if len(self.skipped) > 4 else "")
        return (f"skipped {len(self.skipped)} file{'s' if len(self.skipped) > 1 else ''} not named "
                f"{self.prefix}<rank>: {names}")


def find_dumps(paths: "list[Path] | tuple[Path, ...]", prefix: str = DEFAULT_PREFIX) -> DumpInputs:
    """Sort the paths given to ``pptl diagnose`` as torchfrtrace does: under a folder (walked), a file whose
    name holds ``prefix`` followed by the rank is a dump and any other file is skipped; a file named on
    the command line is a timeline when it ends in ``.json``, else a dump (its rank from its name).

    Raises:
        InputError: a path that does not exist, a folder without dumps, a named file without a rank,
            or two dumps of one rank.
    """
    dumps: dict[int, Path] = {}
    timelines: list[Path] = []
    skipped: list[Path] = []

    def add(rank: int, f: Path) -> None:
        if rank in dumps:
            raise InputError(f"{f}: a second dump for rank {rank} (the first is {dumps[rank]})")
        dumps[rank] = f

    for p in paths:
        if p.is_dir():
            found = 0
            walked = list(itertools.islice(p.rglob("*"), MAX_FOLDER_FILES + 1))  # stop early in a huge tree
            if len(walked) > MAX_FOLDER_FILES:
                raise InputError(f"{p}: over {MAX_FOLDER_FILES} entries; give the folder that holds the dumps")
            files = sorted(f for f in walked if f.is_file() and not f.name.startswith("."))
            for f in files:
                rank = _rank_after(f.name, prefix)
                if rank is None:
                    skipped.append(f)
                else:
                    add(rank, f)
                    found += 1
            if not found:
                raise InputError(f"{p}: no file named {prefix}<rank> in the folder ({len(files)} other "
                                 "file(s); torch names dumps by TORCH_FR_DUMP_TEMP_FILE: pass its name as --prefix)")
        elif p.is_file():
            if p.suffix.lower() == ".json":
                timelines.append(p)
                continue
            rank = _rank_after(p.name, prefix)
            rank = rank if rank is not None else rank_from_name(p)
            if rank is None:
                raise InputError(f"{p}: the file name does not end with a rank (torch names dumps PREFIX<rank>)")
            add(rank, p)
        else:
            raise InputError(f"{p}: no such file or folder")
    return DumpInputs(tuple(sorted(dumps.items())), tuple(timelines), tuple(skipped), prefix)


def _rank_after(name: str, prefix: str) -> int | None:
    """The rank in ``...PREFIX<rank>[.pkl]`` (torchfrtrace: the prefix anywhere in the name), else None."""
    at = name.rfind(prefix) if prefix else -1
    if at < 0:
        return None
    m = re.fullmatch(r"(\d{1,9})(?:\.pkl|\.pickle)?", name[at + len(prefix):])
    return int(m.group(1)) if m else None


class _PlainUnpickler(pickle.Unpickler):
    """Refuses every global: no class, function or module is ever looked up, so none can run."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"{module}.{name}")


class _Refused(Exception):
    pass


def rank_from_name(path: str | Path) -> int | None:
    """The rank a dump's file name ends with (``..._rank3`` -> 3), or None."""
    m = _RANK.search(Path(path).name)
    return int(m.group(1)) if m else None


def load_dump(path: str | Path, *, rank: int | None = None, max_bytes: int = MAX_DUMP_BYTES) -> FrDump:
    """Read one dump file.

    Raises:
        InputError: unreadable, too large, empty, truncated, not a plain-data pickle, or not a
            flight-recorder dump (the message names the file and what was expected).
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise InputError(f"{path}: {size} bytes, over the {max_bytes}-byte limit for a flight-recorder dump")
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    if rank is None:
        rank = rank_from_name(path)
        if rank is None:
            raise InputError(f"{path}: the file name does not end with a rank (torch names dumps PREFIX<rank>)")
    return loads_dump(data, source=str(path), rank=rank, max_bytes=max_bytes)


def loads_dump(data: bytes, *, source: str, rank: int, max_bytes: int = MAX_DUMP_BYTES) -> FrDump:
    """Parse a dump's bytes (see :func:`load_dump`)."""
    return _dump_from(loads_plain(data, source=source, max_bytes=max_bytes), source, rank)


def loads_plain(data: bytes, *, source: str, max_bytes: int = MAX_DUMP_BYTES) -> Any:
    """The plain data (dicts, lists, strings, numbers...) a pickle holds; refuses everything else.

    Raises:
        InputError: empty, too large, truncated, or asks for a class or function.
    """
    if not data:
        raise InputError(f"{source}: empty file, expected a flight-recorder dump (a pickle)")
    if len(data) > max_bytes:
        raise InputError(f"{source}: {len(data)} bytes, over the {max_bytes}-byte limit for a flight-recorder dump")
    try:
        raw = _PlainUnpickler(io.BytesIO(data)).load()
    except _Refused as e:
        raise InputError(f"{source}: refused: the pickle asks for {e} (a flight-recorder dump holds plain data only; "
                         "nothing was run)") from None
    except (EOFError, pickle.UnpicklingError) as e:
        raise InputError(f"{source}: not a complete pickle ({_first(e) or 'truncated'})") from None
    except (ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError, MemoryError,
            RecursionError, UnicodeDecodeError) as e:  # what a malformed opcode stream raises in pickle
        raise InputError(f"{source}: not a readable pickle ({type(e).__name__}: {_first(e)})") from None
    return raw


def _first(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else ""


def _dump_from(raw: Any, source: str, rank: int) -> FrDump:
    if not isinstance(raw, dict) or "entries" not in raw or "version" not in raw:
        got = f"a {type(raw).__name__}" + (f" with keys {sorted(map(str, raw))[:6]}" if isinstance(raw, dict) else "")
        raise InputError(f"{source}: not a flight-recorder dump (expected a dict with 'version' and 'entries', "
                         f"got {got})")
    version = raw["version"]
    if not isinstance(version, str) or not version.startswith("2."):
        raise InputError(f"{source}: field 'version': got {version!r}, expected a 2.x flight-recorder format")
    groups = _groups(raw.get("pg_config", {}), source)
    entries = raw["entries"]
    if not isinstance(entries, list):
        raise InputError(f"{source}: field 'entries': expected a list, got {type(entries).__name__}")
    out = tuple(_entry(e, k, groups, source) for k, e in enumerate(entries))
    return FrDump(source, rank, version, groups, out)


def _groups(cfg: Any, source: str) -> dict[str, FrGroup]:
    if not isinstance(cfg, dict):
        raise InputError(f"{source}: field 'pg_config': expected a dict, got {type(cfg).__name__}")
    out: dict[str, FrGroup] = {}
    for key, g in cfg.items():
        if not isinstance(g, dict):
            raise InputError(f"{source}: field 'pg_config[{key!r}]': expected a dict")
        ranks_text = g.get("ranks", "[]")
        try:  # torch writes the ranks as the text of a Python list
            ranks = ast.literal_eval(ranks_text) if isinstance(ranks_text, str) else ranks_text
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            ranks = None
        if not isinstance(ranks, (list, tuple)) or not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            raise InputError(f"{source}: field 'pg_config[{key!r}].ranks': got {str(ranks_text)[:60]!r}, "
                             "expected a list of ranks")
        name = str(g.get("name", key))
        out[name] = FrGroup(name, str(g.get("desc", "")), tuple(ranks))
    return out


def _entry(e: Any, k: int, groups: Mapping[str, FrGroup], source: str) -> FrEntry:
    where = f"{source}: entries[{k}]"
    if not isinstance(e, dict):
        raise InputError(f"{where}: expected a dict, got {type(e).__name__}")

    def num(key: str, default: int | None = None) -> int:
        v = e.get(key, default)
        if not isinstance(v, int) or isinstance(v, bool):
            raise InputError(f"{where}: field '{key}': got {str(v)[:40]!r}, expected an integer")
        return v

    def opt(key: str) -> int | None:
        v = e.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    pg = e.get("process_group")
    if not isinstance(pg, (tuple, list)) or len(pg) != 2 or not all(isinstance(x, str) for x in pg):
        raise InputError(f"{where}: field 'process_group': expected (name, desc)")
    name = e.get("profiling_name")
    m = _NAME.match(name) if isinstance(name, str) else None
    if m is None:
        raise InputError(f"{where}: field 'profiling_name': got {str(name)[:60]!r}, expected e.g. 'nccl:send 0->1'")
    kind = m.group(2)
    state = e.get("state")
    if state not in _STATES:
        raise InputError(f"{where}: field 'state': got {str(state)[:30]!r}, expected scheduled, started or completed")
    peer = -1
    if kind in P2P_KINDS:
        if m.group(3) is None:
            raise InputError(f"{where}: field 'profiling_name': {name!r} names no peer")
        local = int(m.group(5))  # "send 0->1": peer is the right side; "recv 0<-1": also the right side
        members = groups.get(pg[0])
        peer = members.ranks[local] if members is not None and local < len(members.ranks) else local
    return FrEntry(record_id=num("record_id"), group=pg[0], group_desc=pg[1],
                   collective_seq_id=num("collective_seq_id", 0), p2p_seq_id=num("p2p_seq_id", 0),
                   op_id=num("op_id", 0), kind=kind, profiling_name=name, peer=peer,
                   input_sizes=_sizes(e.get("input_sizes", []), where, "input_sizes"),
                   output_sizes=_sizes(e.get("output_sizes", []), where, "output_sizes"),
                   state=state, retired=bool(e.get("retired", False)), time_created_ns=num("time_created_ns", 0),
                   time_started_ns=opt("time_discovered_started_ns"),
                   time_completed_ns=opt("time_discovered_completed_ns"),
                   is_p2p=bool(e.get("is_p2p", kind in P2P_KINDS)))


def _sizes(v: Any, where: str, key: str) -> tuple[tuple[int, ...], ...]:
    if not isinstance(v, list) or not all(isinstance(s, list) and all(isinstance(x, int) for x in s) for s in v):
        raise InputError(f"{where}: field '{key}': expected a list of shapes")
    return tuple(tuple(s) for s in v)
