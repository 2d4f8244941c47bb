"""Measured timelines from torch profiler traces and from per-rank event lists.

Two inputs, one file per rank (a folder of them, a glob such as ``"traces/rank*.json"``, or one
file for one rank):

- **torch profiler traces** (``prof.export_chrome_trace``, ``.json`` or ``.json.gz``) from a run
  of torch.distributed.pipelining, whose runtime names each action's range ``PP:<action>``
  (``PP:0F0``, ``PP:1SEND_F1``, ``PP:(0F7;7B3)OVERLAP_F_B``). GPU ranges
  (``gpu_user_annotation``) are used when the trace has them, else the CPU ranges. The rank is
  the trace's ``distributedInfo.rank``, else the last number in the file name.
- **event lists**: ``[{"type": "F", "start_time": 0.0, "end_time": 1.2, "minibatch": 0}, ...]``,
  or ``{"rank": 0, "units": "ms", "events": [...]}``. ``type`` is F/B/I/W (or forward, backward,
  backward_input, backward_weight); optional ``stage`` or ``chunk`` (looped placement) and
  ``rank`` per event; ``end_time`` may be spelled ``completion_time``. Times are in ``units``
  (default ms).

Events get the same op ids as a plan of the same schedule (the actions are read through
:mod:`pptl.formats.torch_csv`), so ``pptl compare PLAN TRACES`` pairs them. Clocks: profiler
timestamps are absolute (``baseTimeNanoseconds`` + ``ts``), which lines ranks up on one host;
event lists are taken as they are. The timeline starts at the first event.
"""
from __future__ import annotations

import glob
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping

from pptl.config import MAX_FILE_BYTES, MAX_OPS
from pptl.errors import InputError
from pptl.formats.torch_csv import Action, parse_action, schedule_from_rows
from pptl.timeline import MAX_TIME, Event, Timeline, TimelineMeta

__all__ = ["MAX_RANKS", "read_json", "read_dir", "read_traces", "timeline_from_rows", "sniff"]

_TYPES = {"f": "F", "forward": "F", "fwd": "F", "b": "B", "backward": "B", "bwd": "B", "i": "I",
          "backward_input": "I", "dgrad": "I", "w": "W", "backward_weight": "W", "wgrad": "W"}
_UNITS = ("us", "ms", "s")
_MAX_BYTES = MAX_FILE_BYTES
#: Ranks a set of traces may name (every rank up to the highest one gets a row).
MAX_RANKS = 65536


def sniff(data: Any) -> str | None:
    """"profiler", "events", or None (not a trace pptl reads here)."""
    if isinstance(data, Mapping) and isinstance(data.get("traceEvents"), list):
        return "profiler"
    if isinstance(data, list) and (not data or (isinstance(data[0], Mapping) and "start_time" in data[0])):
        return "events" if data else None
    if isinstance(data, Mapping) and isinstance(data.get("events"), list) and "format" not in data:
        ev = data["events"]
        if ev and isinstance(ev[0], Mapping) and "start_time" in ev[0]:
            return "events"
    return None


def read_json(path: str | Path, **options: Any) -> Any:
    """Reader for ``.json`` / ``.json.gz``: a trace or event list, a glob of them, or anything
    else ``load_any`` reads (plans, configs, timelines), which it hands back to the loader."""
    from pptl.formats.loader import load_data

    p = Path(path)
    if any(ch in p.name for ch in "*?[") and not p.exists():
        files = sorted(glob.glob(str(p)))
        if not files:
            raise InputError(f"{p}: no file matches")
        return read_traces([Path(f) for f in files], source=str(p), **options)
    data = _read(p)
    if sniff(data) is None:
        return load_data(data, str(p), **options)
    return read_traces([p], source=str(p), preread={p: data}, **options)


def read_dir(path: str | Path, **options: Any) -> Any:
    """Reader for a folder of per-rank traces or event lists."""
    p = Path(path)
    if not p.is_dir():
        raise InputError(f"{p}: no file suffix; expected a folder of traces, or a .json, .yaml, .toml or .csv file")
    files = sorted(f for f in p.iterdir() if f.name.endswith((".json", ".json.gz")))
    if not files:
        raise InputError(f"{p}: the folder holds no .json or .json.gz traces")
    return read_traces(files, source=str(p), **options)


def read_traces(files: list[Path], *, source: str, preread: dict[Path, Any] | None = None,
                microbatches: int | None = None, units: str | None = None, step: int | None = None,
                **_: Any) -> Any:
    """Read per-rank files into a measured timeline (and the schedule that ran).

    Raises:
        InputError: a file is neither kind, two files claim one rank, or an action is unreadable.
    """
    from pptl.formats.loader import Loaded

    if units is not None and units not in _UNITS:
        raise InputError(f"units: got '{units}', expected one of {', '.join(_UNITS)}")
    per_rank: dict[int, list[tuple[Action, float, float]]] = {}
    origin: dict[int, Path] = {}
    kinds: set[str] = set()
    notes: list[str] = []
    file_units = units
    for i, f in enumerate(files):
        data = (preread or {}).get(f)
        if data is None:
            data = _read(f)
        kind = sniff(data)
        if kind is None:
            raise InputError(f"{f}: not a torch profiler trace or an event list "
                             "(expected 'traceEvents', or a list of {type, start_time, end_time, minibatch})")
        kinds.add(kind)
        if kind == "profiler":
            rank = _profiler_rank(data, f, i if len(files) > 1 else 0)
            rows, note = _profiler_rows(data, f, step)
            if note:
                notes.append(note)
        else:
            rank, rows, u = _event_rows(data, f, i if len(files) > 1 else 0)
            if u is not None:
                if file_units is not None and u != file_units and units is None:
                    raise InputError(f"{f}: units '{u}' differ from another file's '{file_units}'")
                file_units = units or u
        if isinstance(rank, bool) or not 0 <= rank < MAX_RANKS:
            # Every rank up to the highest gets a row: a rank of 10**30 would allocate without end.
            raise InputError(f"{f}: rank {rank!r}, expected an integer in 0..{MAX_RANKS - 1} (the rank comes from "
                             "distributedInfo.rank, the field 'rank', or the last number in the file name)")
        if rank in per_rank:
            raise InputError(f"{f}: rank {rank} also comes from {origin[rank]}; expected one file per rank")
        per_rank[rank] = rows
        origin[rank] = f
    if len(kinds) > 1:
        raise InputError(f"{source}: mixes profiler traces and event lists; expected one kind")
    kind = kinds.pop()
    unit = "us" if kind == "profiler" else (file_units or "ms")
    pp = max(per_rank) + 1
    missing = [r for r in range(pp) if r not in per_rank]
    if missing:
        notes.append(f"no file for rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}")
    rows = [_place(per_rank.get(r, []), r, pp) for r in range(pp)]
    schedule, timeline, more = timeline_from_rows(rows, source=source, units=unit, microbatches=microbatches)
    notes = [f"{'torch profiler traces' if kind == 'profiler' else 'event lists'}: {len(per_rank)} "
             f"file{'s' if len(per_rank) != 1 else ''}, {len(timeline.events)} events in {unit}"] + more + notes
    return Loaded(source, schedule, timeline, "profiler" if kind == "profiler" else "events", tuple(notes))


def timeline_from_rows(rows: list[list[tuple[Action, float, float]]], *, source: str, units: str,
                       microbatches: int | None = None) -> tuple[Any, Timeline, list[str]]:
    """(schedule, measured timeline, notes) from each rank's (action, start, end) in time order."""
    ordered = [sorted(r, key=lambda t: (t[1], t[2])) for r in rows]
    schedule, notes, _ = schedule_from_rows([[a for a, _, _ in r] for r in ordered], source=source,
                                            microbatches=microbatches, family="measured")
    t0 = min((s for r in ordered for _, s, _ in r), default=0.0)
    times = [(s - t0, e - t0) for r in ordered for _, s, e in r]
    events = [Event(op=op.id, rank=op.rank, lane=op.lane, start=st, end=en, kind=op.kind, stage=op.stage,
                    mb=op.mb, direction=op.direction, chunk=op.chunk, pair=op.pair, peer=op.peer)
              for op, (st, en) in zip(schedule.ops, times)]
    cfg = schedule.config
    meta = TimelineMeta(source="measured", units=units, family="measured", pp=schedule.pp,
                        vpp=cfg.vpp if cfg is not None else 1, microbatches=schedule.microbatches,
                        title=f"measured: pp={schedule.pp} microbatches={schedule.microbatches}",
                        clock="per-rank timestamps as recorded (one clock assumed), shifted to start at 0")
    return schedule, Timeline(events, meta), notes[1:]


def _read(p: Path) -> Any:
    try:
        if p.stat().st_size > _MAX_BYTES:
            raise InputError(f"{p}: file is larger than the {_MAX_BYTES} bytes accepted")
        raw = p.read_bytes()
    except OSError as e:
        raise InputError(f"{p}: cannot read: {e.strerror or e}") from None
    if p.name.endswith(".gz"):
        raw = _gunzip(raw, p)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:  # worded as read_structured words it, for every command
        raise InputError(f"{p}: not UTF-8 text") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError(f"{p}: nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputError(f"{p}: not valid JSON: {first}") from None


def _gunzip(raw: bytes, p: Path) -> bytes:
    """Decompress with a bound, so a small file cannot expand into gigabytes (a gzip bomb)."""
    import zlib

    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(raw, _MAX_BYTES + 1)
    except zlib.error as e:
        raise InputError(f"{p}: not valid gzip: {e}") from None
    if len(out) > _MAX_BYTES or d.unconsumed_tail:
        raise InputError(f"{p}: decompresses to more than the {_MAX_BYTES} bytes accepted")
    return out


def _rank_from_name(p: Path, fallback: int) -> int:
    nums = re.findall(r"\d+", p.name.split(".")[0])
    return int(nums[-1]) if nums else fallback


def _profiler_rank(data: Mapping, p: Path, fallback: int) -> int:
    info = data.get("distributedInfo")
    if isinstance(info, Mapping) and isinstance(info.get("rank"), int):
        return info["rank"]
    return _rank_from_name(p, fallback)


def _profiler_rows(data: Mapping, p: Path, step: int | None) -> tuple[list[tuple[Action, float, float]], str]:
    base = data.get("baseTimeNanoseconds", 0)
    base_us = base / 1000.0 if isinstance(base, (int, float)) and not isinstance(base, bool) else 0.0
    if not -MAX_TIME <= base_us <= MAX_TIME:
        raise InputError(f"{p}: field 'baseTimeNanoseconds': got {base!r}, expected a finite number within "
                         f"+-{MAX_TIME * 1000:g}")
    spans: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
    found = 0
    for e in data["traceEvents"]:
        if not isinstance(e, Mapping) or e.get("ph") != "X":
            continue
        name = e.get("name")
        if not isinstance(name, str) or not name.startswith("PP:"):
            continue
        ts, dur = e.get("ts"), e.get("dur", 0)
        if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
            continue
        if not (-MAX_TIME <= ts <= MAX_TIME and 0 <= dur <= MAX_TIME):
            raise InputError(f"{p}: range '{name}' at ts {ts!r} has dur {dur!r}; expected a ts within +-{MAX_TIME:g} "
                             f"and a dur in 0..{MAX_TIME:g} microseconds")
        spans[str(e.get("cat", ""))].append((name[3:], base_us + ts, base_us + ts + dur))
        found += 1
        if found > MAX_OPS:
            raise InputError(f"{p}: more than the {MAX_OPS:,} 'PP:<action>' ranges pptl accepts")
    if not spans:
        raise InputError(f"{p}: no 'PP:<action>' ranges; record the run with torch.profiler around "
                         "schedule.step() (torch.distributed.pipelining names each action's range PP:<action>)")
    chosen = spans.get("gpu_user_annotation") or spans.get("user_annotation") or next(iter(spans.values()))
    # One action can show several ranges (one per GPU stream) and run once per profiled step:
    # merge overlapping ranges, then each remaining occurrence is one step.
    by_name: dict[str, list[list[float]]] = defaultdict(list)
    for name, s, e in sorted(chosen, key=lambda t: t[1]):
        runs = by_name[name]
        if runs and s <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], e)
        else:
            runs.append([s, e])
    steps = max(len(v) for v in by_name.values())
    pick = steps - 1 if step is None else step
    if not 0 <= pick < steps:
        raise InputError(f"{p}: step {step} is not in the trace's {steps} profiled step(s)")
    rows: list[tuple[Action, float, float]] = []
    for name, runs in by_name.items():
        if len(runs) != steps:
            continue  # an action outside the profiled window of some step
        try:
            action = parse_action(name)
        except ValueError as e:
            raise InputError(f"{p}: range 'PP:{name}': {e}") from None
        if action is not None:
            s, e = runs[pick]
            rows.append((action, s, e))
    note = f"{p.name}: {steps} profiled steps, using step {pick}" if steps > 1 else ""
    return rows, note


def _event_rows(data: Any, p: Path, fallback: int) -> tuple[int, list[tuple[Action, float, float]], str | None]:
    units = None
    rank = None
    events = data
    if isinstance(data, Mapping):
        events = data["events"]
        units = data.get("units")
        if units is not None and units not in _UNITS:
            raise InputError(f"{p}: field 'units': got {units!r}, expected one of {', '.join(_UNITS)}")
        if isinstance(data.get("rank"), int):
            rank = data["rank"]
    rows: list[tuple[Action, float, float]] = []
    ranks_seen: set[int] = set()
    if len(events) > MAX_OPS:
        raise InputError(f"{p}: {len(events):,} events, more than the {MAX_OPS:,} pptl accepts")
    for k, e in enumerate(events):
        where = f"{p}: events[{k}]"
        if not isinstance(e, Mapping):
            raise InputError(f"{where}: expected an object with type, start_time, end_time, minibatch")
        kind = _TYPES.get(str(e.get("type", "")).strip().lower())
        if kind is None:
            raise InputError(f"{where}.type: got {e.get('type')!r}, expected F, B, I or W (or forward, backward, "
                             "backward_input, backward_weight)")
        start = e.get("start_time")
        end = e.get("end_time", e.get("completion_time"))
        for name, v in (("start_time", start), ("end_time", end)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not -MAX_TIME <= v <= MAX_TIME:
                raise InputError(f"{where}.{name}: got {v!r}, expected a finite number within +-{MAX_TIME:g}")
        if end < start:
            raise InputError(f"{where}: end_time {end} is before start_time {start}")
        mb = e.get("minibatch", e.get("microbatch"))
        if isinstance(mb, bool) or not isinstance(mb, int) or mb < 0:
            raise InputError(f"{where}.minibatch: got {mb!r}, expected an integer >= 0")
        if isinstance(e.get("rank"), int):
            ranks_seen.add(e["rank"])
        stage = e.get("stage")
        if stage is not None and (isinstance(stage, bool) or not isinstance(stage, int) or stage < 0):
            raise InputError(f"{where}.stage: got {stage!r}, expected an integer >= 0")
        chunk = e.get("chunk", 0)
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0:
            raise InputError(f"{where}.chunk: got {chunk!r}, expected an integer >= 0")
        rows.append((Action(stage if stage is not None else -1 - chunk, kind, mb), float(start), float(end)))
    if len(ranks_seen) > 1:
        raise InputError(f"{p}: events name ranks {sorted(ranks_seen)}; expected one file per rank")
    if rank is None:
        rank = ranks_seen.pop() if ranks_seen else _rank_from_name(p, fallback)
    return rank, rows, units


def _place(rows: list[tuple[Action, float, float]], rank: int, pp: int) -> list[tuple[Action, float, float]]:
    """Events that gave a chunk rather than a stage (kept as -1 - chunk): looped placement."""
    return [((Action((-1 - a.stage) * pp + rank, a.kind, a.mb) if a.stage < 0 else a), s, e) for a, s, e in rows]


def _register() -> None:
    from pptl.formats.loader import register_reader

    register_reader(".json", read_json)
    register_reader(".json.gz", read_json)
    register_reader("", read_dir)


_register()
