"""What ``pptl export`` does, as library calls (no printing here).

``export_file`` turns anything ``load_any`` reads (plan, config, torch CSV, timeline, profiler
traces) into another tool's format. (``pptl plan --from`` is :func:`pptl.planning.plan_from_file`.)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pptl.errors import InputError, InvalidScheduleError
from pptl.formats._quote import counted, shell_word

if TYPE_CHECKING:
    from pptl.ir import Schedule

__all__ = ["EXPORT_FORMATS", "Exported", "TorchtitanFiles", "export_file", "export_torchtitan"]

EXPORT_FORMATS = ("torch-csv", "chrome", "torchtitan")


@dataclass(frozen=True)
class Exported:
    data: bytes
    notes: tuple[str, ...]


def export_file(path: str | Path, *, to: str, comms: bool = False, gzip_output: bool = False,
                microbatches: int | None = None, placement: str | None = None) -> Exported:
    """Read ``path`` and render it as ``to`` (``torch-csv`` or ``chrome``).

    Raises:
        InputError: unknown format, an option that does not apply, or input the format cannot hold.
        InvalidScheduleError: the schedule cannot be simulated (chrome, torch-csv with comms).
    """
    from pptl.formats.loader import load_any

    if to not in EXPORT_FORMATS:
        raise InputError(f"--to: got '{to}', expected one of {', '.join(EXPORT_FORMATS)}")
    if comms and to != "torch-csv":
        raise InputError("--comms applies to --to torch-csv only")
    if to == "torchtitan":
        raise InputError("--to torchtitan writes two files: give -o pp.toml (the CSV goes beside it, or --csv PATH)")
    loaded = load_any(path, microbatches=microbatches, placement=placement)
    notes = list(loaded.notes)
    if to == "torch-csv":
        if loaded.schedule is None:
            raise InputError(f"{path}: is a {loaded.kind}, not a schedule; torch CSV needs a plan, config or schedule")
        from pptl.formats.torch_csv import export_csv

        _ranks_in_range(loaded.schedule, path)
        text, more = export_csv(loaded.schedule, comms=comms)
        return Exported(text.encode("utf-8"), tuple(notes + more))
    from pptl.formats.chrome_trace import dumps_chrome
    from pptl.planning import timeline_of

    timeline = timeline_of(loaded)
    if timeline is None:
        raise InputError(f"{path}: has no schedule or timeline to export")
    cfg = loaded.schedule.config if loaded.schedule is not None else None
    act = cfg.activation if cfg is not None else 1.0
    wact = cfg.w_activation if cfg is not None else 0.0
    payloads = ({op.id: op.payload for op in loaded.schedule.ops if op.kind in ("OFFLOAD", "ONLOAD")}
                if loaded.schedule is not None else None)
    raw = dumps_chrome(timeline, activation=act, w_activation=wact, payloads=payloads).encode("utf-8")
    if gzip_output:
        import gzip

        raw = gzip.compress(raw, mtime=0)
    notes.append(f"{timeline.meta.source} timeline, {counted(len(timeline.events), 'event')}; open it in https://ui.perfetto.dev")
    return Exported(raw, tuple(notes))


@dataclass(frozen=True)
class TorchtitanFiles:
    toml: str
    """The ``[parallelism]`` (and ``[training]``) lines of a torchtitan job config."""
    csv: bytes
    """The schedule as torch's compute_only CSV (what torchtitan's ``_load_csv(path)`` reads)."""
    notes: tuple[str, ...]


def export_torchtitan(path: str | Path, *, csv_path: str, microbatches: int | None = None,
                      placement: str | None = None) -> TorchtitanFiles:
    """The torchtitan config lines that run ``path``'s schedule from a CSV, and that CSV.

    torchtitan (``torchtitan/distributed/pipeline_parallel.py``, ``config/job_config.py``) loads
    ``parallelism.pipeline_parallel_schedule_csv`` into ``_PipelineScheduleRuntime`` with the default
    compute_only format, takes the micro-batch count as ``training.local_batch_size /
    parallelism.pipeline_parallel_microbatch_size``, and still reads ``pipeline_parallel_schedule`` to
    place stages: a V (ZBVZeroBubble, DualPipeV: rank r holds stages r and 2p-1-r) or a loop, one stage
    per rank for single-stage classes (1F1B) and two for multi-stage ones (Interleaved1F1B) unless
    ``pipeline_parallel_layers_per_stage`` gives more.

    Raises:
        InputError: the input holds no schedule, or one torch's CSV cannot express (DualPipe).
    """
    from pptl.formats.loader import load_any
    from pptl.formats.torch_csv import export_csv
    from pptl.schedules import find_family
    from pptl.schedules._pipeline_meta import PipelineMeta

    loaded = load_any(path, microbatches=microbatches, placement=placement)
    s = loaded.schedule
    if s is None:
        raise InputError(f"{path}: is a {loaded.kind}, not a schedule; torchtitan needs a plan, config or schedule")
    _ranks_in_range(s, path)
    text, notes = export_csv(s, comms=False)
    per_rank = s.num_stages // max(1, s.pp)
    fam = find_family(s.family)
    # torch's get_schedule_class (what torchtitan calls on this name) knows "LoopedBFS", not the class
    # name "ScheduleLoopedBFS" some families record.
    own = fam.torch_schedule.removeprefix("Schedule") if fam is not None else ""  # "" for imported schedules too
    v_shaped = PipelineMeta.of(s).placement == "v"  # the V families (ZB-V, DualPipeV) say so in their meta
    name = own or ("ZBVZeroBubble" if v_shaped else "1F1B" if per_rank == 1 else "Interleaved1F1B")
    # The source path quoted as a TOML string: a newline in a file name would end the comment and
    # start a line TOML cannot read.
    lines = [f"# pptl export {_toml_str(_utf8(str(path)))} --to torchtitan: {s.family}, pp={s.pp}, {per_rank} stage(s) per rank, "
             f"{counted(s.microbatches, 'micro-batch', 'micro-batches')}",
             "[parallelism]",
             f"pipeline_parallel_degree = {s.pp}",
             f"# the CSV runs in torch's _PipelineScheduleRuntime; this name only places the stages "
             f"({'a V: rank r holds stages r and ' + str(2 * s.pp - 1) + '-r' if v_shaped else 'a loop: stage s on rank s % ' + str(s.pp)})",
             f'pipeline_parallel_schedule = "{name}"',
             f"pipeline_parallel_schedule_csv = {_toml_str(csv_path)}",
             "pipeline_parallel_microbatch_size = 1"]
    if per_rank > 2:
        lines.append(f"# {s.num_stages} stages in all: set pipeline_parallel_layers_per_stage so the model splits "
                     f"into {s.num_stages} (torchtitan defaults to 2 per rank for multi-stage schedules)")
    lines += ["", "[training]",
              f"# micro-batches = local_batch_size / pipeline_parallel_microbatch_size = {s.microbatches}",
              f"local_batch_size = {s.microbatches}", ""]
    notes.append(f"torchtitan runs {counted(s.microbatches, 'micro-batch', 'micro-batches')} only with local_batch_size = {s.microbatches} x "
                 "pipeline_parallel_microbatch_size; scale both together")
    return TorchtitanFiles("\n".join(lines), text.encode("utf-8"), tuple(list(loaded.notes) + notes))


def _ranks_in_range(schedule: Schedule, path: str | Path) -> None:
    """A CSV has one row per rank: an op on a rank outside the plan's would be dropped, and the
    file would describe another schedule. Refused as the invalid schedule it is (PP001)."""
    import numpy as np

    rank = schedule.table.rank
    bad = np.flatnonzero((rank < 0) | (rank >= schedule.pp))
    if bad.size:
        op = schedule.table.op(int(bad[0]))
        raise InvalidScheduleError(f"{path}: PP001: {op.id} is on rank {op.rank}, outside the plan's ranks "
                                   f"0-{schedule.pp - 1} ({counted(bad.size, 'op')} in all); 'pptl check {shell_word(path)}' lists every "
                                   "violation")


def _utf8(name: str) -> str:
    """A file name that may hold undecodable bytes (lone surrogates), with those spelled ``\\udcff``."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _toml_str(value: str) -> str:
    """``value`` as a TOML basic string.

    Not ``json.dumps``: JSON writes a character past U+FFFF as two ``\\uD83D``-style surrogate
    escapes, which TOML refuses ("not a Unicode scalar value"), and it leaves DEL unescaped, which
    TOML refuses too. Here every other character stays as it is (the file is UTF-8).

    Raises:
        InputError: ``value`` holds a lone surrogate (a file name that is not valid UTF-8): TOML
            cannot name it at all.
    """
    out = ['"']
    for ch in value:
        code = ord(ch)
        if 0xD800 <= code <= 0xDFFF:
            raise InputError(f"{_utf8(value)}: the name is not valid "
                             "UTF-8, and a TOML file can only name UTF-8 paths; rename the file")
        if ch in '"\\':
            out.append("\\" + ch)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)
