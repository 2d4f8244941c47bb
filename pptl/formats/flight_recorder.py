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
tuples, strings, numbers, bools, None and bytes, or nothing. Before it runs, :func:`_scan_opcodes`
walks the opcodes once and bounds what they would build (the file size, the values pushed, the
nesting of tuples); after it, every field pptl reads is type-checked and bounded (entries, ranks,
names), and a bad value is described by its type and a short form, never by its ``repr``.

Vocabulary: *group* is a process group (its name is torch's ``pg_name``, its ranks global);
peers in ``profiling_name`` are ranks *within* the group and are turned into global ranks here.
The dump holds no global rank of its own: like ``torchfrtrace``, the rank is the number that ends
the file name (``nccl_trace_rank_3`` -> 3).
"""
from __future__ import annotations

import io
import itertools
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from pptl.errors import InputError
from pptl.fileio import check_regular

__all__ = ["MAX_DUMP_BYTES", "MAX_ENTRIES", "MAX_PICKLE_VALUES", "MAX_TUPLE_DEPTH", "MAX_RANK", "DEFAULT_PREFIX", "FrGroup", "FrEntry", "FrDump", "DumpInputs", "find_dumps",
           "load_dump", "loads_dump", "loads_plain", "rank_from_name", "P2P_KINDS"]

#: Largest dump read (a 20,000-entry buffer with stack traces is ~30 MB).
MAX_DUMP_BYTES = 256 * 1024 * 1024
#: Entries read from one dump at most. torch keeps the last TORCH_NCCL_TRACE_BUFFER_SIZE calls (2,000 by
#: default; jobs that raise it use up to ~20,000), yet a pickle's shared references let a 2 MB file hold a
#: million entries, each of which would become several objects here.
MAX_ENTRIES = 100_000
#: Values a dump's pickle may push while it loads (objects built and shared references): MAX_ENTRIES entries
#: of ~250 values (torch's entry with a 150-frame stack trace pushes ~200; the frames are shared). Checked
#: before anything is built, since a file of 1-byte EMPTY_LIST opcodes builds a 72-byte list per byte.
MAX_PICKLE_VALUES = 25_000_000
#: Deepest tuple a dump's pickle may build (torch's deepest is 1: ``process_group``). The unpickler hashes
#: dict keys and set items in C without a recursion check: a tuple key nested 1,000,000 deep (a 1 MB file)
#: overflows the C stack and kills the process, so this is checked before the unpickler runs.
MAX_TUPLE_DEPTH = 64
#: Largest global rank taken (the largest jobs run ~100,000 GPUs).
MAX_RANK = 1_000_000
#: Longest profiling name, group name or description taken (each is printed in every line about a call).
MAX_NAME_CHARS = 1024
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
    input_dtypes: tuple[str, ...] = ()
    """torch's dtype names per input tensor (``Float``, ``BFloat16``); empty where the dump has none."""
    output_dtypes: tuple[str, ...] = ()


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
            check_regular(p)  # it exists: a device or a pipe, which "no such file" would misname
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


class _Unsafe(Exception):
    """The opcodes would build more than a dump holds (:func:`_scan_opcodes`)."""


def _opcode_table() -> tuple[list[int], list[int]]:
    """Per opcode byte: how its argument is laid out, and what it does to the stack (``_A_*``, ``_E_*``)."""
    arg = [0] * 256
    eff = [_E_REFUSE] * 256

    def put(codes: str, a: int, e: int) -> None:
        for c in codes:
            arg[ord(c)], eff[ord(c)] = a, e

    put("N\x88\x89]}\x8f", 0, _E_PUSH)  # None, True, False, [], {}, set()
    put("K", 1, _E_PUSH)
    put("M", 2, _E_PUSH)
    put("J", 4, _E_PUSH)
    put("G", 8, _E_PUSH)
    put("\x8cUC\x8a", _A_LEN1, _E_PUSH)  # short strings, bytes, LONG1
    put("XTB\x8b", _A_LEN4, _E_PUSH)
    put("\x8d\x8e\x96", _A_LEN8, _E_PUSH)
    put("ILFSV", _A_LINE, _E_PUSH)  # protocol 0's text numbers and strings
    put(")", 0, _E_EMPTY_TUPLE)
    put("\x85\x86\x87", 0, _E_TUPLE_N)
    put("(", 0, _E_MARK)
    put("t", 0, _E_TUPLE_MARK)
    put("ld\x91", 0, _E_BUILD_MARK)  # list, dict, frozenset from the items above the mark
    put("eu\x901", 0, _E_POP_MARK)  # appends, setitems, additems, pop_mark
    put("a0", 0, _E_POP1)
    put("s", 0, _E_POP2)
    put("2", 0, _E_DUP)
    put("q", 1, _E_PUT)
    put("r", 4, _E_PUT)
    put("p", _A_LINE, _E_PUT)
    put("\x94", 0, _E_MEMOIZE)
    put("h", 1, _E_GET)
    put("j", 4, _E_GET)
    put("g", _A_LINE, _E_GET)
    put("\x80", 1, _E_NOP)  # PROTO
    put("\x95", 8, _E_NOP)  # FRAME: its opcodes follow inline
    put(".", 0, _E_STOP)
    put("c\x93i", 0, _E_LOOKUP)
    return arg, eff


_A_LEN1, _A_LEN4, _A_LEN8, _A_LINE = -1, -4, -8, -9
(_E_PUSH, _E_EMPTY_TUPLE, _E_TUPLE_N, _E_MARK, _E_TUPLE_MARK, _E_BUILD_MARK, _E_POP_MARK, _E_POP1, _E_POP2,
 _E_DUP, _E_PUT, _E_MEMOIZE, _E_GET, _E_NOP, _E_STOP, _E_LOOKUP, _E_REFUSE) = range(17)
_ARG, _EFFECT = _opcode_table()


def _scan_opcodes(data: bytes, max_values: int = MAX_PICKLE_VALUES, max_depth: int = MAX_TUPLE_DEPTH) -> None:
    """Walk a pickle's opcodes as the unpickler would, building nothing: count the values pushed and
    track how deep each tuple on the stack or in the memo is.

    Stops at the first class lookup (``GLOBAL``, ``STACK_GLOBAL``, ``INST``): the unpickler refuses it
    there, and names what it asked for. Any other opcode that needs a lookup or an object (``REDUCE``,
    ``BUILD``, persistent ids, out-of-band buffers) is refused here.

    Raises:
        _Unsafe: too many values, a tuple nested too deep, an unknown or refused opcode, a memo index
            no pickler writes.
        EOFError: the opcodes end before ``STOP``.

    Notes: one pass, O(bytes); only the stack height and the tuples on it are kept. ~0.5 us per opcode:
    0.1 s for torch's default 2,000-entry buffer, ~1 s for 20,000 entries with stack traces.
    """
    n = len(data)
    i = top = pushed = memo_next = 0
    marks: list[int] = []
    deep: dict[int, int] = {}  # stack position -> depth of the tuple there (other values are depth 0)
    memo_deep: dict[int, int] = {}  # memo index -> depth of the tuple stored there
    arg_of, effect_of = _ARG, _EFFECT
    while i < n:
        op = data[i]
        if op == 104 or op == 106:  # BINGET, LONG_BINGET: most of a dump (shared strings and frames)
            if op == 104:
                idx = data[i + 1] if i + 1 < n else 0
                i += 2
            else:
                idx = int.from_bytes(data[i + 1:i + 5], "little")
                i += 5
            if memo_deep:
                d = memo_deep.get(idx, 0)
                if d:
                    deep[top] = d
            top += 1
            pushed += 1
            if pushed > max_values:
                break
            continue
        at = i
        i += 1
        arg, eff = arg_of[op], effect_of[op]
        idx = 0
        if arg > 0:
            if eff == _E_PUT or eff == _E_GET:
                idx = int.from_bytes(data[i:i + arg], "little")
            i += arg
        elif arg == _A_LEN1:
            i += 1 + (data[i] if i < n else 0)
        elif arg == _A_LEN4 or arg == _A_LEN8:
            i += -arg + int.from_bytes(data[i:i - arg], "little")
        elif arg == _A_LINE:
            j = data.find(b"\n", i)
            if j < 0:
                raise EOFError(f"ends at byte {n} within a line")
            if eff == _E_PUT or eff == _E_GET:
                text = data[i:j]
                if not text.isdigit() or len(text) > 12:
                    raise _Unsafe(f"memo index {_describe(text)} at byte {at}")
                idx = int(text)
            i = j + 1
        if eff == _E_PUSH:
            top += 1
            pushed += 1
        elif eff == _E_GET:
            d = memo_deep.get(idx, 0) if memo_deep else 0
            if d:
                deep[top] = d
            top += 1
            pushed += 1
        elif eff == _E_MARK:
            marks.append(top)
            pushed += 1  # the scan's own list grows too
        elif eff == _E_POP_MARK or eff == _E_BUILD_MARK:
            if not marks:
                raise _Unsafe(f"no MARK before byte {at}")
            m = marks.pop()
            if deep:
                for k in [k for k in deep if k >= m]:
                    del deep[k]
            top = m
            if eff == _E_BUILD_MARK:
                top += 1
                pushed += 1
        elif eff == _E_PUT or eff == _E_MEMOIZE:
            if eff == _E_MEMOIZE:
                idx, memo_next = memo_next, memo_next + 1
            elif idx > pushed:  # picklers number the memo as they go; the unpickler sizes its memo by the index
                raise _Unsafe(f"memo index {idx} at byte {at}, past the {pushed} values pushed")
            d = deep.get(top - 1, 0) if deep else 0
            if d:
                memo_deep[idx] = d
            elif memo_deep:
                memo_deep.pop(idx, None)
        elif eff == _E_POP1 or eff == _E_POP2:
            k = 1 if eff == _E_POP1 else 2
            top -= k
            if deep:
                for p in range(top, top + k):
                    deep.pop(p, None)
        elif eff == _E_EMPTY_TUPLE or eff == _E_TUPLE_N or eff == _E_TUPLE_MARK:
            if eff == _E_TUPLE_MARK:
                if not marks:
                    raise _Unsafe(f"no MARK before byte {at}")
                m = marks.pop()
            else:
                m = top - (op - 0x84 if eff == _E_TUPLE_N else 0)  # TUPLE1..3 are 0x85..0x87
                if m < 0:
                    raise _Unsafe(f"the stack runs out at byte {at}")
            d = 1
            if deep:
                for p in range(m, top):
                    d = max(d, deep.pop(p, 0) + 1)
            if d > max_depth:
                raise _Unsafe(f"a tuple nested {d} deep at byte {at} (a dump's nest 1 deep; at most {max_depth})")
            top = m
            deep[top] = d
            top += 1
            pushed += 1
        elif eff == _E_DUP:
            if top - 1 in deep:
                deep[top] = deep[top - 1]
            top += 1
            pushed += 1
        elif eff == _E_STOP or eff == _E_LOOKUP:
            return
        elif eff == _E_REFUSE:
            raise _Unsafe(f"opcode {bytes([op])!r} at byte {at}, which builds no plain data")
        if top < 0:
            raise _Unsafe(f"the stack runs out at byte {at}")
        if pushed > max_values:
            break
    if pushed > max_values:
        raise _Unsafe(f"over {max_values} values pushed (a dump of {MAX_ENTRIES} entries pushes fewer)")
    raise EOFError(f"ends at byte {n} without STOP")


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
    if not 0 <= rank <= MAX_RANK:
        raise InputError(f"{source}: rank {rank} (from the file name) is over {MAX_RANK}, the largest rank taken")
    return _dump_from(loads_plain(data, source=source, max_bytes=max_bytes), source, rank)


def loads_plain(data: bytes, *, source: str, max_bytes: int = MAX_DUMP_BYTES) -> Any:
    """The plain data (dicts, lists, strings, numbers...) a pickle holds; refuses everything else.

    Raises:
        InputError: empty, too large, truncated, builds more than a dump holds (values, nesting), or
            asks for a class or function.
    """
    if not data:
        raise InputError(f"{source}: empty file, expected a flight-recorder dump (a pickle)")
    if len(data) > max_bytes:
        raise InputError(f"{source}: {len(data)} bytes, over the {max_bytes}-byte limit for a flight-recorder dump")
    # what a dump is often mistaken for, named before the opcode scan words it as "opcode b'{'"
    if data[:2] == b"\x1f\x8b":
        raise InputError(f"{source}: gzip data, not a flight-recorder dump (a pickle); gunzip it first")
    if data.lstrip()[:1] in (b"{", b"["):  # no pickle opcode: JSON text
        raise InputError(f"{source}: JSON text, not a flight-recorder dump (a pickle, as torch writes it)")
    try:
        _scan_opcodes(data)
        raw = _PlainUnpickler(io.BytesIO(data)).load()
    except _Refused as e:
        raise InputError(f"{source}: refused: the pickle asks for {e} (a flight-recorder dump holds plain data only; "
                         "nothing was run)") from None
    except _Unsafe as e:
        raise InputError(f"{source}: refused: {e}; nothing was loaded") from None
    except (EOFError, pickle.UnpicklingError) as e:
        raise InputError(f"{source}: not a complete pickle ({_first(e) or 'truncated'})") from None
    except (ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError, MemoryError,
            RecursionError, UnicodeDecodeError) as e:  # what a malformed opcode stream raises in pickle
        raise InputError(f"{source}: not a readable pickle ({type(e).__name__}: {_first(e)})") from None
    return raw


def _first(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else ""


def _describe(v: Any) -> str:
    """A value from a dump in a few words: its type and a short form. Never its ``repr``, which recurses
    into whatever the dump nested (and a huge int has no ``str``)."""
    if v is None or isinstance(v, bool):
        return repr(v)
    if isinstance(v, int):
        return str(v) if v.bit_length() <= 64 else f"an integer of {v.bit_length()} bits"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return repr(v[:40]) + (f"... ({len(v)} characters)" if len(v) > 40 else "")
    if isinstance(v, (bytes, bytearray)):
        return f"{type(v).__name__} of length {len(v)}"
    if isinstance(v, (list, tuple, dict, set, frozenset)):
        return f"a {type(v).__name__} of {len(v)} item{'' if len(v) == 1 else 's'}"
    return f"a {type(v).__name__}"


def _dump_from(raw: Any, source: str, rank: int) -> FrDump:
    if not isinstance(raw, dict) or "entries" not in raw or "version" not in raw:
        keys = ", ".join(_describe(k) for k in itertools.islice(raw, 6)) if isinstance(raw, dict) else ""
        got = f"a {type(raw).__name__}" + (f" with keys {keys}" if keys else "")
        raise InputError(f"{source}: not a flight-recorder dump (expected a dict with 'version' and 'entries', "
                         f"got {got})")
    version = raw["version"]
    if not isinstance(version, str) or not version.startswith("2.") or len(version) > 16:
        raise InputError(f"{source}: field 'version': got {_describe(version)}, expected a 2.x flight-recorder format")
    groups = _groups(raw.get("pg_config", {}), source)
    entries = raw["entries"]
    if not isinstance(entries, list):
        raise InputError(f"{source}: field 'entries': expected a list, got {_describe(entries)}")
    if len(entries) > MAX_ENTRIES:
        raise InputError(f"{source}: field 'entries': {len(entries)} entries, over the {MAX_ENTRIES} read from a dump "
                         "(torch keeps TORCH_NCCL_TRACE_BUFFER_SIZE, 2000 by default)")
    out = tuple(_entry(e, k, groups, source) for k, e in enumerate(entries))
    # torch numbers a rank's calls one by one (one recorder per process, epochs filtered out of a dump):
    # two entries with one record id are one call told twice, or two calls told as one.
    first: dict[int, int] = {}
    for k, e in enumerate(out):
        j = first.setdefault(e.record_id, k)
        if j != k:
            raise InputError(f"{source}: entries[{k}]: field 'record_id': {e.record_id} again (entries[{j}] has it; "
                             "a dump holds each record id once)")
    return FrDump(source, rank, version, groups, out)


_RANK_LIST = re.compile(r"\s*[\[(]\s*(.*?)\s*,?\s*[\])]\s*", re.S)
_RANK_ITEM = re.compile(r"[+-]?\d{1,20}")


def _groups(cfg: Any, source: str) -> dict[str, FrGroup]:
    if not isinstance(cfg, dict):
        raise InputError(f"{source}: field 'pg_config': expected a dict, got {_describe(cfg)}")
    out: dict[str, FrGroup] = {}
    for key, g in cfg.items():
        where = f"{source}: field 'pg_config[{_describe(key)}]"
        if not isinstance(key, str) or len(key) > MAX_NAME_CHARS:
            raise InputError(f"{where}': expected a group name (a string of at most {MAX_NAME_CHARS} characters)")
        if not isinstance(g, dict):
            raise InputError(f"{where}': expected a dict, got {_describe(g)}")
        name, desc = g.get("name", key), g.get("desc", "")
        for field_, v in (("name", name), ("desc", desc)):
            if not isinstance(v, str) or len(v) > MAX_NAME_CHARS:
                raise InputError(f"{where}.{field_}': got {_describe(v)}, expected a string of at most "
                                 f"{MAX_NAME_CHARS} characters")
        ranks = _group_ranks(g.get("ranks", "[]"), f"{where}.ranks'")
        out[name] = FrGroup(name, desc, ranks)
    return out


def _group_ranks(v: Any, where: str) -> tuple[int, ...]:
    """A group's global ranks: torch writes them as the text of a list (``"[0, 1]"``), read here without
    ``ast`` (a dump's text is parsed, never evaluated, and no nesting is allowed)."""
    expected = f"expected a list of distinct ranks from 0 to {MAX_RANK}"
    if isinstance(v, str):
        # a group of every rank up to MAX_RANK, as "[0, 1, ...]", is ~8 characters a rank
        m = _RANK_LIST.fullmatch(v) if len(v) <= 8 * (MAX_RANK + 1) else None
        items = m.group(1).split(",") if m is not None and m.group(1) else []
        if m is None or not all(_RANK_ITEM.fullmatch(x.strip()) for x in items):
            raise InputError(f"{where}: got {_describe(v)}, {expected}")
        ranks: list[Any] = [int(x) for x in items]
    elif isinstance(v, (list, tuple)) and len(v) <= MAX_RANK + 1:
        ranks = list(v)
    else:
        raise InputError(f"{where}: got {_describe(v)}, {expected}")
    seen: set[int] = set()
    for r in ranks:
        if not isinstance(r, int) or isinstance(r, bool):
            raise InputError(f"{where}: holds {_describe(r)}, {expected}")
        if r < 0 or r > MAX_RANK:
            raise InputError(f"{where}: rank {_describe(r)} is {'negative' if r < 0 else 'over ' + str(MAX_RANK)}, "
                             f"{expected}")
        if r in seen:
            raise InputError(f"{where}: rank {r} appears twice, {expected}")
        seen.add(r)
    return tuple(ranks)


#: Largest value of torch's int64 fields (ids, sequence numbers, times in ns, tensor sizes).
_INT64_MAX = 2**63 - 1


def _entry(e: Any, k: int, groups: Mapping[str, FrGroup], source: str) -> FrEntry:
    where = f"{source}: entries[{k}]"
    if not isinstance(e, dict):
        raise InputError(f"{where}: expected a dict, got {_describe(e)}")

    def bad(key: str, v: Any, expected: str) -> InputError:
        return InputError(f"{where}: field '{key}': got {_describe(v)}, expected {expected}")

    def num(key: str, default: int | None = None) -> int:
        v = e.get(key, default)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= _INT64_MAX:
            raise bad(key, v, "a non-negative 64-bit integer")
        return v

    def opt(key: str) -> int | None:
        return None if e.get(key) is None else num(key)

    def flag(key: str, default: bool) -> bool:
        v = e.get(key, default)
        if not isinstance(v, bool):
            raise bad(key, v, "True or False")
        return v

    pg = e.get("process_group")
    if not isinstance(pg, (tuple, list)) or len(pg) != 2 or \
            not all(isinstance(x, str) and len(x) <= MAX_NAME_CHARS for x in pg):
        raise bad("process_group", pg, f"(name, desc), two strings of at most {MAX_NAME_CHARS} characters")
    name = e.get("profiling_name")
    if not isinstance(name, str) or len(name) > MAX_NAME_CHARS or (m := _NAME.match(name)) is None:
        raise bad("profiling_name", name, "e.g. 'nccl:send 0->1'")
    kind = m.group(2)
    state = e.get("state")
    if not isinstance(state, str) or state not in _STATES:
        raise bad("state", state, "'scheduled', 'started' or 'completed'")
    peer = -1
    if kind in P2P_KINDS:
        if m.group(3) is None:
            raise InputError(f"{where}: field 'profiling_name': {_describe(name)} names no peer")
        local = int(m.group(5))  # "send 0->1": peer is the right side; "recv 0<-1": also the right side
        members = groups.get(pg[0])
        if members is not None and local >= len(members.ranks):
            raise InputError(f"{where}: field 'profiling_name': {_describe(name)} names group rank {local}, but "
                             f"group {_describe(pg[0])} has {len(members.ranks)} rank(s) in 'pg_config'")
        if members is None and local > MAX_RANK:
            raise InputError(f"{where}: field 'profiling_name': {_describe(name)} names rank {local}, over {MAX_RANK}")
        peer = members.ranks[local] if members is not None else local
    return FrEntry(record_id=num("record_id"), group=pg[0], group_desc=pg[1],
                   collective_seq_id=num("collective_seq_id", 0), p2p_seq_id=num("p2p_seq_id", 0),
                   op_id=num("op_id", 0), kind=kind, profiling_name=name, peer=peer,
                   input_sizes=_sizes(e.get("input_sizes", []), where, "input_sizes"),
                   output_sizes=_sizes(e.get("output_sizes", []), where, "output_sizes"),
                   state=state, retired=flag("retired", False), time_created_ns=num("time_created_ns", 0),
                   time_started_ns=opt("time_discovered_started_ns"),
                   time_completed_ns=opt("time_discovered_completed_ns"),
                   is_p2p=flag("is_p2p", kind in P2P_KINDS),
                   input_dtypes=_dtypes(e.get("input_dtypes", []), where, "input_dtypes"),
                   output_dtypes=_dtypes(e.get("output_dtypes", []), where, "output_dtypes"))


#: Longest dtype name taken (torch's longest is ``Float8_e4m3fnuz``).
MAX_DTYPE_CHARS = 64


def _dtypes(v: Any, where: str, key: str) -> tuple[str, ...]:
    """torch's dtype names, one per tensor: NCCL matches element counts *and* types, so two ranks that
    move the same count of Float and BFloat16 still disagree (torchfrtrace reports it too)."""
    if not isinstance(v, list) or not all(isinstance(x, str) and 0 < len(x) <= MAX_DTYPE_CHARS for x in v):
        raise InputError(f"{where}: field '{key}': got {_describe(v)}, expected a list of dtype names (strings of at "
                         f"most {MAX_DTYPE_CHARS} characters, such as 'Float')")
    return tuple(v)


def _sizes(v: Any, where: str, key: str) -> tuple[tuple[int, ...], ...]:
    def dim(x: Any) -> bool:
        return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= _INT64_MAX

    if not isinstance(v, list) or not all(isinstance(s, list) and all(dim(x) for x in s) for s in v):
        raise InputError(f"{where}: field '{key}': got {_describe(v)}, expected a list of shapes (lists of "
                         "non-negative integers)")
    return tuple(tuple(s) for s in v)
