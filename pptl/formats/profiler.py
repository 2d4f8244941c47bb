"""Measured timelines from torch profiler traces and from per-rank event lists.

Two inputs, one file per rank (a folder of them, a glob such as ``"traces/rank*.json"``, or one
file for one rank):

- **torch profiler traces** (``prof.export_chrome_trace``, ``.json`` or ``.json.gz``) from a run
  of torch.distributed.pipelining, whose runtime names each action's range ``PP:<action>``
  (``PP:0F0``, ``PP:1SEND_F1``, ``PP:(0F7;7B3)OVERLAP_F_B``); single-stage schedules name none and
  are rebuilt from their forward ops and autograd nodes. Each action is timed by the kernels it
  launched (:mod:`pptl.formats.trace_actions`). The rank is the trace's ``distributedInfo.rank``,
  else the last number in the file name.
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
from pathlib import Path
from typing import Any, Mapping

from pptl.config import MAX_OPS
from pptl.errors import InputError
from pptl.fileio import MAX_FILE_BYTES
from pptl.formats._quote import counted, int_ranges, quoted
from pptl.formats.kineto import parse_trace
from pptl.formats.structured import parse_json
from pptl.formats.torch_csv import Action, schedule_from_rows
from pptl.formats.trace_actions import rank_actions
from pptl.schedules._pipeline_meta import PipelineMeta
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
        # {"rank": 5, "events": []} is a rank that recorded nothing, not some other file: it is read as an
        # empty rank rather than skipped as "not a trace" and then reported as having no file
        if not ev and ("rank" in data or "units" in data):
            return "events"
    return None


def read_json(path: str | Path, **options: Any) -> Any:
    """Reader for ``.json`` / ``.json.gz``: a trace or event list, a glob of them, or anything
    else ``load_any`` reads (plans, configs, timelines), which it hands back to the loader."""
    from pptl.formats.loaded import load_data

    p = Path(path)
    if any(ch in p.name for ch in "*?[") and not p.exists():
        files = sorted(glob.glob(str(p)))
        if not files:
            raise InputError(f"{p}: no file matches")
        return read_traces([Path(f) for f in files], source=str(p), **options)
    text = _text(p)
    try:
        # as strictly as read_structured reads a config or plan: a repeated key or a NaN is an error
        data = parse_json(text, p)
    except InputError as strict:
        data = _parse(p, text)  # a trace may hold either; its bad events are skipped, not refused
        if sniff(data) is None:
            raise strict from None
    if sniff(data) is None:
        return load_data(data, str(p), **options)
    return read_traces([p], source=str(p), preread={p: data}, **options)


def read_dir(path: str | Path, **options: Any) -> Any:
    """Reader for a folder of per-rank traces or event lists."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file")  # as a missing plan or config is worded, not "no file suffix"
    if not p.is_dir():
        from pptl.fileio import is_pickle

        try:
            with open(p, "rb") as f:
                head = f.read(2)
        except OSError:
            head = b""
        if is_pickle(head):  # torch names its dumps PREFIX<rank>, with no suffix
            raise InputError(f"{p}: a pickle with no file suffix (a flight-recorder dump? pptl diagnose reads those)")
        raise InputError(f"{p}: no file suffix; expected a folder of traces, or a .json, .yaml, .toml or .csv file")
    files = sorted(f for f in p.iterdir() if f.name.lower().endswith((".json", ".json.gz")))  # as load_any names them
    if not files:
        raise InputError(f"{p}: the folder holds no .json or .json.gz traces")
    return read_traces(files, source=str(p), skip_others=True, **options)


def read_traces(files: list[Path], *, source: str, preread: dict[Path, Any] | None = None,
                microbatches: int | None = None, units: str | None = None, step: int | None = None,
                skip_others: bool = False, **_: Any) -> Any:
    """Read per-rank files into a measured timeline (and the schedule that ran).

    Raises:
        InputError: a file is neither kind, two files claim one rank, or an action is unreadable.
    """
    from pptl.formats.loaded import Loaded

    if units is not None and units not in _UNITS:
        raise InputError(f"units: got '{units}', expected one of {', '.join(_UNITS)}")
    per_rank: dict[int, list[tuple[Action, float, float]]] = {}
    origin: dict[int, Path] = {}
    kinds: set[str] = set()
    notes: list[str] = []
    launch: dict[int, list[float | None]] = {}
    windows: list[tuple[float, float]] = []
    multi = True
    skipped: list[str] = []
    file_units = units
    for i, f in enumerate(files):
        data = (preread or {}).get(f)
        if data is None:
            data = _read(f)
        kind = sniff(data)
        if kind is None and skip_others:
            skipped.append(f.name)  # a folder of traces often holds the run's other files (configs, step times)
            continue
        if kind is None and isinstance(data, Mapping) and str(data.get("format", "")).startswith("pptl-"):
            what = "plan" if data["format"] == "pptl-plan" else "timeline"  # `pptl explain run.json run2.json`
            raise InputError(f"{f}: a pptl {what}, which is read alone, not as one rank's trace among {len(files)} "
                             "files; give it as the only file, or one torch profiler trace per rank")
        if kind is None:
            raise InputError(f"{f}: not a torch profiler trace or an event list "
                             "(expected 'traceEvents', or a list of {type, start_time, end_time, minibatch})")
        kinds.add(kind)
        if kind == "profiler" and _exported_by_pptl(data):
            raise InputError(f"{f}: a Chrome trace that pptl exported (for Perfetto), not a profiler trace; give "
                             "pptl the plan or timeline it was exported from")
        if kind == "profiler":
            rank = _check_rank(_profiler_rank(data, f, i if len(files) > 1 else 0), f)
            got = rank_actions(parse_trace(data, str(f)), f.name, rank=rank, step=step)
            issued = sorted(got.rows, key=lambda m: m.cpu)  # the rank's program order, as its thread issued them
            rows = [(m.action, m.start, m.end) for m in issued]
            launch[rank] = [m.launch for m in issued]
            if got.gpu_window is not None:
                windows.append(got.gpu_window)
            multi = multi and got.multi_stage
            notes.extend(got.notes)
        else:
            rank, rows, u = _event_rows(data, f, i if len(files) > 1 else 0)
            if u is not None:
                if file_units is not None and u != file_units and units is None:
                    raise InputError(f"{f}: units '{u}' differ from another file's '{file_units}'")
                file_units = units or u
        rank = _check_rank(rank, f)
        if rank in per_rank:
            raise InputError(f"{f}: rank {rank} also comes from {origin[rank]}; expected one file per rank")
        per_rank[rank] = rows
        origin[rank] = f
    if not kinds:
        raise InputError(f"{source}: none of its .json files is a torch profiler trace or an event list (expected "
                         "'traceEvents', or a list of {type, start_time, end_time, minibatch})")
    if skipped:
        notes.append(f"skipped {len(skipped)} file(s) that are not traces: {', '.join(skipped[:4])}"
                     + (" ..." if len(skipped) > 4 else ""))
    if len(kinds) > 1:
        raise InputError(f"{source}: mixes profiler traces and event lists; expected one kind")
    kind = kinds.pop()
    unit = "us" if kind == "profiler" else (file_units or "ms")
    pp = max(per_rank) + 1
    missing = [r for r in range(pp) if r not in per_rank]
    if missing:
        notes.append(f"no file for rank{'s' if len(missing) > 1 else ''} {int_ranges(missing)}")
    rows = [_place(per_rank.get(r, []), r, pp) for r in range(pp)]
    launches = [launch.get(r, [None] * len(rows[r])) for r in range(pp)] if launch else None
    schedule, timeline, more = timeline_from_rows(rows, source=source, units=unit, microbatches=microbatches,
                                                  launches=launches, gpu_windows=windows,
                                                  issue_order=kind == "profiler")
    notes = [f"{'torch profiler traces' if kind == 'profiler' else 'event lists'}: {len(per_rank)} "
             f"file{'s' if len(per_rank) != 1 else ''}, {counted(len(timeline.events), 'event')} in {unit}"] + more + notes
    if kind == "profiler":
        if not multi:
            # Single-stage schedules post P2P in groups (nccl:coalesced): no one sequential issue
            # order stands for a group, so the P2P checks derive a safe one (as for pptl's plans).
            schedule.meta = PipelineMeta.without_program_order(schedule.meta)
        notes.extend(import_report(schedule, timeline, multi_stage=multi))
    return Loaded(source, schedule, timeline, "profiler" if kind == "profiler" else "events", tuple(notes))


def timeline_from_rows(rows: list[list[tuple[Action, float, float]]], *, source: str, units: str,
                       microbatches: int | None = None, launches: list[list[float | None]] | None = None,
                       gpu_windows: list[tuple[float, float]] | None = None, issue_order: bool = False
                       ) -> tuple[Any, Timeline, list[str]]:
    """(schedule, measured timeline, notes) from each rank's (action, start, end).

    ``launches`` (same shape as ``rows``): the CPU time each action's first kernel was launched,
    kept in the timeline's ``meta.extra["launch"]`` (op id -> time) for ``pptl explain``'s host
    gaps; ``gpu_windows``: each rank's first kernel start and last kernel end of the step;
    ``issue_order``: the rows are in each rank's program order already (else sorted by time).
    """
    if launches is not None:
        rows = [[(a, s, e, launches[r][k]) for k, (a, s, e) in enumerate(row)] for r, row in enumerate(rows)]
    # Profiler rows come in the order each rank issued them (what P2P checks need: a RECV's kernel
    # may start after the op that waits for it); event lists only have their times.
    ordered = rows if issue_order else [sorted(r, key=lambda t: (t[1], t[2])) for r in rows]
    schedule, notes, _ = schedule_from_rows([[t[0] for t in r] for r in ordered], source=source,
                                            microbatches=microbatches, family="measured")
    t0 = min((t[1] for r in ordered for t in r), default=0.0)
    times = [(t[1] - t0, t[2] - t0) for r in ordered for t in r]
    events = [Event(op=op.id, rank=op.rank, lane=op.lane, start=st, end=en, kind=op.kind, stage=op.stage,
                    mb=op.mb, direction=op.direction, chunk=op.chunk, pair=op.pair, peer=op.peer, flow=op.flow)
              for op, (st, en) in zip(schedule.ops, times)]
    meta = TimelineMeta(source="measured", units=units, family="measured", pp=schedule.pp,
                        vpp=schedule.chunks_per_rank, microbatches=schedule.microbatches,
                        title=f"measured: pp={schedule.pp} microbatches={schedule.microbatches}",
                        clock="per-rank timestamps as recorded (one clock assumed), shifted to start at 0",
                        extra=_extra(schedule, ordered, t0, gpu_windows))
    return schedule, Timeline(events, meta), notes[1:]


def _extra(schedule: Any, ordered: list[list[tuple]], t0: float,
           gpu_windows: list[tuple[float, float]] | None) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    launch = {op.id: t[3] - t0 for op, t in zip(schedule.ops, (t for r in ordered for t in r))
              if len(t) > 3 and t[3] is not None}
    if launch:
        extra["launch"] = launch
    if gpu_windows:
        extra["gpu_window"] = [min(w[0] for w in gpu_windows) - t0, max(w[1] for w in gpu_windows) - t0]
    return extra


def import_report(schedule: Any, timeline: Timeline, *, multi_stage: bool) -> list[str]:
    """Notes on what a trace import missed: work of the step with no action, and how far the
    makespan is from the GPU time of the step (first kernel to last kernel, every rank)."""
    from pptl.deps import roles

    notes: list[str] = []
    have = {key for op in schedule.ops for key in roles(op)}
    split = any(op.kind in ("I", "W") for op in schedule.ops)
    missing = []
    for s in range(schedule.num_stages):
        for mb in range(schedule.microbatches):
            for role, name in (("F", "F"), ("G", "I" if split else "B"), ("W", "W" if split else "B")):
                if (role, 0, s, mb) not in have and f"{s}{name}{mb}" not in missing:
                    missing.append(f"{s}{name}{mb}")
    if missing:
        why = ("no PP:<action> range for it in the profiled step (outside the profiling window, or the step was "
               "cut short)") if multi_stage else "not found among the forward and backward runs of the step"
        notes.append(f"missing {len(missing)} action(s): {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}"
                     f": {why}")
    window = timeline.meta.extra.get("gpu_window")
    if window and timeline.events:
        gpu = window[1] - window[0]
        span = timeline.makespan
        if gpu > 0:
            notes.append(f"makespan {span / 1000:.4g} ms; GPU time of the step (first kernel to last kernel) "
                         f"{gpu / 1000:.4g} ms ({100 * span / gpu:.1f}%)")
    return notes


def _read(p: Path) -> Any:
    return _parse(p, _text(p))


def _text(p: Path) -> str:
    from pptl.fileio import read_bounded, utf8_text

    return utf8_text(read_bounded(p, _MAX_BYTES), p)  # worded as read_structured words it, for every command


def _parse(p: Path, text: str) -> Any:
    if not text.strip():  # worded as read_structured words an empty .json
        raise InputError(f"{p}: the file is empty")
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError(f"{p}: nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputError(f"{p}: not valid JSON: {first}") from None


def _exported_by_pptl(data: Mapping[str, Any]) -> bool:
    """pptl's own Chrome export (``otherData.generator``): its slices carry no profiler ranges or CPU ops, so
    the trace reader would tell the user to record the run with torch.profiler, which they did not need."""
    other = data.get("otherData")
    return isinstance(other, Mapping) and other.get("generator") == "pptl"


def _check_rank(rank: Any, f: Path) -> int:
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < MAX_RANKS:
        # Every rank up to the highest gets a row: a rank of 10**30 would allocate without end.
        raise InputError(f"{f}: rank {quoted(rank)}, expected an integer in 0..{MAX_RANKS - 1} (the rank comes from "
                         "distributedInfo.rank, the field 'rank', or the last number in the file name)")
    return rank


def _rank_from_name(p: Path, fallback: int) -> int:
    nums = re.findall(r"\d+", p.name.split(".")[0])
    return int(nums[-1]) if nums else fallback


def _profiler_rank(data: Mapping, p: Path, fallback: int) -> int:
    info = data.get("distributedInfo")
    if isinstance(info, Mapping) and isinstance(info.get("rank"), int):
        return info["rank"]
    return _rank_from_name(p, fallback)


def _event_rows(data: Any, p: Path, fallback: int) -> tuple[int, list[tuple[Action, float, float]], str | None]:
    units = None
    rank = None
    events = data
    if isinstance(data, Mapping):
        events = data["events"]
        units = data.get("units")
        if units is not None and units not in _UNITS:
            raise InputError(f"{p}: field 'units': got {quoted(units)}, expected one of {', '.join(_UNITS)}")
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
            raise InputError(f"{where}.type: got {quoted(e.get('type'))}, expected F, B, I or W (or forward, backward, "
                             "backward_input, backward_weight)")
        start = e.get("start_time")
        end = e.get("end_time", e.get("completion_time"))
        for name, v in (("start_time", start), ("end_time", end)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not -MAX_TIME <= v <= MAX_TIME:
                raise InputError(f"{where}.{name}: got {quoted(v)}, expected a finite number within +-{MAX_TIME:g}")
        if end < start:
            raise InputError(f"{where}: end_time {end} is before start_time {start}")
        mb = e.get("minibatch", e.get("microbatch"))
        if isinstance(mb, bool) or not isinstance(mb, int) or mb < 0:
            raise InputError(f"{where}.minibatch: got {quoted(mb)}, expected an integer >= 0")
        if isinstance(e.get("rank"), int):
            ranks_seen.add(e["rank"])
        stage = e.get("stage")
        if stage is not None and (isinstance(stage, bool) or not isinstance(stage, int) or stage < 0):
            raise InputError(f"{where}.stage: got {quoted(stage)}, expected an integer >= 0")
        chunk = e.get("chunk", 0)
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0:
            raise InputError(f"{where}.chunk: got {quoted(chunk)}, expected an integer >= 0")
        rows.append((Action(stage if stage is not None else -1 - chunk, kind, mb), float(start), float(end)))
    if len(ranks_seen) > 1:
        raise InputError(f"{p}: events name ranks {sorted(ranks_seen)}; expected one file per rank")
    if rank is None:
        rank = ranks_seen.pop() if ranks_seen else _rank_from_name(p, fallback)
    return rank, rows, units


def _place(rows: list[tuple[Action, float, float]], rank: int, pp: int) -> list[tuple[Action, float, float]]:
    """Events that gave a chunk rather than a stage (kept as -1 - chunk): looped placement."""
    # An OVERLAP_F_B has stage -1 too, with its stages in its sub-actions: it is not a chunk.
    return [((Action((-1 - a.stage) * pp + rank, a.kind, a.mb) if a.stage < 0 and not a.subs else a), s, e)
            for a, s, e in rows]
