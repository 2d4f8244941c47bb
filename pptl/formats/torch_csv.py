"""torch.distributed.pipelining's schedule CSV: read both forms, write both forms.

The format (``_PipelineScheduleRuntime._load_csv`` / ``_dump_csv`` in
``torch/distributed/pipelining/schedules.py``): one row per rank, one action per cell, an empty
cell is an idle step. An action is ``[stage][type][micro-batch]``: ``0F0``, ``3I5``, ``3W5``,
``2B0``, ``1SEND_F1``, ``2RECV_B0``; FSDP and gradient actions have no micro-batch (``0UNSHARD``,
``0RESHARD``, ``0REDUCE_GRAD``); an overlapped forward and backward is
``(0F7;7B3)OVERLAP_F_B``. ``compute_only`` files hold compute actions and torch adds the
communication; ``compute_comms`` files list every SEND/RECV in the order a rank issues them.

Mapping to pptl: direction 0, pptl stage = torch stage index, rank = row, chunk from the
placement; F/I/B/W are compute ops, ``OVERLAP_F_B`` is pptl's FB (F half = the op's stage and
micro-batch, B half = ``pair``); SEND_F/SEND_B/RECV_F/RECV_B are SEND/RECV ops on the ``send`` and
``recv`` lanes with flow F or B; UNSHARD, RESHARD and REDUCE_GRAD stay on the compute lane (cost 0
unless a cost is given). A compute_comms file also keeps each rank's issue order (which lane each
action came from, ``meta["program_order"]``) so that P2P checks and the writer can use it.

Stricter than torch: torch's parser matches a prefix, so ``2BW0`` reads as ``2B`` with no
micro-batch; here it is an error naming the cell. torch's validator counts distinct
micro-batches, so a stage that runs {0, 1, 2, 7} passes for 4 micro-batches; here the count is
inferred from the file and index 7 is out of range (PP004) while 3 is missing (PP003).
"""
from __future__ import annotations

import csv
import io
import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from pptl.config import DEFAULT_COSTS, MAX_OPS, Config, Costs
from pptl.deps import facts_of_table
from pptl.errors import InputError
from pptl.formats import torch_csv_table as T
from pptl.formats._quote import counted, quoted
from pptl.formats.torch_csv_table import cells_of_rows, cells_of_text
from pptl.ir import Facts, Op, Schedule
from pptl.schedules._pipeline_meta import PipelineMeta

__all__ = [
    "Action",
    "FSDP_KINDS",
    "OP_KINDS",
    "PLACEMENTS",
    "parse_action",
    "torch_reading",
    "read_csv",
    "load_csv_text",
    "schedule_from_rows",
    "action_of",
    "to_rows",
    "dumps_rows",
    "export_csv",
]

#: Actions torch's runtime runs that pptl keeps as zero-cost ops on the compute lane.
FSDP_KINDS = ("UNSHARD", "RESHARD", "REDUCE_GRAD")
PLACEMENTS = ("loop", "v")
#: The op kinds this reader produces beyond training's (:func:`pptl.kinds.known_kinds` reads them).
OP_KINDS = frozenset(FSDP_KINDS)

_COMPUTE = ("F", "I", "B", "W")
_COMM = ("SEND_F", "RECV_F", "SEND_B", "RECV_B")
_STRICT = re.compile(r"(\d+)(SEND_F|RECV_F|SEND_B|RECV_B|UNSHARD|RESHARD|REDUCE_GRAD|F|I|B|W)(\d*)")
# torch's own pattern (alternatives in its order, matched as a prefix) to say what torch reads.
_TORCH = re.compile(r"(\d+)(F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*)")
_OVERLAP = re.compile(r"\((.*)\)OVERLAP_F_B")
_EXAMPLE = "[stage][F|I|B|W|SEND_F|RECV_F|SEND_B|RECV_B][micro-batch] such as 2F0, or (0F7;7B3)OVERLAP_F_B"


@dataclass(frozen=True, slots=True)
class Action:
    """One cell of a torch schedule CSV."""

    stage: int
    kind: str
    """F, I, B, W, SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD, REDUCE_GRAD or OVERLAP_F_B."""
    mb: int | None = None
    subs: tuple["Action", ...] = ()
    """OVERLAP_F_B only: its F and B, in the file's order."""

    def __str__(self) -> str:
        if self.kind == "OVERLAP_F_B":
            return "(" + ";".join(str(a) for a in self.subs) + ")OVERLAP_F_B"
        return f"{self.stage}{self.kind}{'' if self.mb is None else self.mb}"


def torch_reading(text: str) -> str | None:
    """What torch's prefix parser makes of ``text`` (None when torch rejects it too)."""
    m = _TORCH.match(text.strip())
    if not m:
        return None
    return f"{m.group(1)}{m.group(2)}{m.group(3)}"


def parse_action(text: str) -> Action | None:
    """Parse one cell strictly (the whole cell must be one action). Empty means idle (None).

    Raises:
        ValueError: the cell is not an action; the message says what torch would read instead.
    """
    cell = text.strip()
    if not cell:
        return None
    if cell.startswith("("):
        m = _OVERLAP.fullmatch(cell)
        if not m:
            raise ValueError(f"{quoted(cell)} is not an overlapped action; expected (F;B)OVERLAP_F_B such as "
                             "(0F7;7B3)OVERLAP_F_B")
        subs = tuple(parse_action(s) for s in m.group(1).split(";"))
        kinds = sorted(a.kind for a in subs if a is not None)
        if len(subs) != 2 or None in subs or kinds != ["B", "F"]:
            raise ValueError(f"{quoted(cell)}: OVERLAP_F_B must overlap one F and one B (pptl's FB op), such as "
                             "(0F7;7B3)OVERLAP_F_B")
        return Action(-1, "OVERLAP_F_B", None, subs)  # type: ignore[arg-type]
    m = _STRICT.fullmatch(cell)
    if not m:
        torch_says = torch_reading(cell)
        hint = f" (torch reads it as {quoted(torch_says)} and drops the rest)" if torch_says else ""
        raise ValueError(f"{quoted(cell)} is not an action{hint}; expected {_EXAMPLE}")
    stage, kind, mb = _index(m.group(1), cell), m.group(2), m.group(3)
    if kind in FSDP_KINDS:
        if mb:
            raise ValueError(f"{quoted(cell)}: {kind} takes no micro-batch; expected {stage}{kind}")
        return Action(stage, kind)
    if not mb:
        raise ValueError(f"{quoted(cell)}: {kind} needs a micro-batch index, such as {stage}{kind}0")
    return Action(stage, kind, _index(mb, cell))


def _index(digits: str, cell: str) -> int:
    """A stage or micro-batch index. Past 4,300 digits Python's int() refuses the text with a message
    about its own settings (sys.set_int_max_str_digits), so the digits are judged here: leading
    zeros are no digits of the value, and past 19 digits no index fits 64 bits."""
    value = digits.lstrip("0") or "0"
    if len(value) > 19:
        raise ValueError(f"{quoted(cell)}: an index of {len(value):,} digits does not fit 64 bits")
    return int(value)


# ----------------------------------------------------------------------------------------------
# Reading


#: A parsed cell: (kind, stage, micro-batch or -1, B-half stage, B-half micro-batch); the B half is
#: -1 except for OVERLAP_F_B, whose kind here is "FB" and whose stage/micro-batch are its F half's.
_Parsed = tuple[str, int, int, int, int]

def _parsed(a: Action, rank: int) -> _Parsed:
    if a.kind == "OVERLAP_F_B":
        if sorted(x.kind for x in a.subs) != ["B", "F"]:  # parse_action makes none; a caller's Action may
            raise InputError(f"rank {rank}: {a} overlaps {counted(len(a.subs), 'action')}; expected one F and one B")
        f, bw = (a.subs if a.subs[0].kind == "F" else a.subs[::-1])
        return ("FB", f.stage, -1 if f.mb is None else f.mb, bw.stage, -1 if bw.mb is None else bw.mb)
    return (a.kind, a.stage, -1 if a.mb is None else a.mb, -1, -1)


def read_csv(path: str | Path, *, microbatches: int | None = None, placement: str | None = None,
             report_problems: bool = False, **_: Any) -> Any:
    """The reader ``load_any`` calls for ``.csv`` files; returns a :class:`~pptl.formats.loader.Loaded`.

    Args:
        path: the CSV file.
        microbatches: micro-batch count (default: inferred from the file).
        placement: ``loop`` or ``v`` to assert a stage placement (default: inferred).
        report_problems: collect unreadable cells and placement mismatches as violations (for
            ``pptl check``) instead of raising on the first.

    Raises:
        InputError: unreadable file, or (without ``report_problems``) a bad cell.
    """
    from pptl.fileio import MAX_FILE_BYTES, read_bounded, utf8_text
    from pptl.formats.loaded import Loaded

    p = Path(path)
    raw = read_bounded(p, MAX_FILE_BYTES, gunzip=False)
    # newlines as read_text(), which this replaced to word a gzip file as one, turned them
    text = utf8_text(raw, p).replace("\r\n", "\n").replace("\r", "\n")
    schedule, notes, problems, lines = load_csv_text(text, source=str(p), microbatches=microbatches,
                                                     placement=placement, report_problems=report_problems)

    def locate(op_id: str) -> int | None:
        rank = _rank_of_id(op_id)
        return lines[rank] if rank is not None and 0 <= rank < len(lines) else None

    return Loaded(str(p), schedule, None, "torch-csv", tuple(notes), problems=tuple(problems), locate=locate)


def _records(text: str, source: str) -> Iterator[tuple[int, str | list[str]]]:
    """Each CSV record with the line it starts on: a whole line when the text has no quotes, no
    carriage returns and no NULs (then a record is a line and its cells are its commas' pieces,
    exactly as the csv module splits it), else the csv module's cells."""
    if '"' not in text and "\r" not in text and "\x00" not in text:
        records = text.split("\n")
        if records[-1] == "":  # the final newline ends the last record; it starts none
            records.pop()
        yield from enumerate(records, 1)
        return
    reader = csv.reader(io.StringIO(text), strict=True)
    line = 1
    try:
        for raw in reader:
            yield line, raw
            line = reader.line_num + 1
    except csv.Error as e:
        raise InputError(f"{source}:{reader.line_num}: not valid CSV: {e}") from None


def load_csv_text(text: str, *, source: str = "<csv>", microbatches: int | None = None,
                  placement: str | None = None, report_problems: bool = False
                  ) -> tuple[Schedule, list[str], list[Any], list[int]]:
    """Parse CSV text into (schedule, notes, problems, line of each rank's row)."""
    from pptl.violation import Violation

    if placement is not None and placement not in PLACEMENTS:
        raise InputError(f"--placement: got '{placement}', expected one of {', '.join(PLACEMENTS)}")
    if microbatches is not None and microbatches < 1:
        raise InputError(f"--microbatches: got {microbatches}, expected an integer >= 1")
    # A file in the form torch writes is read in one pass of a regular expression; any other form
    # (spaces, quotes, a cell that is not an action) goes cell by cell below, through the parser
    # that says what is wrong. Both end in the same cells (:mod:`pptl.formats.torch_csv_table`).
    fast = cells_of_text(text)
    if fast is not None and fast[0].n <= MAX_OPS:
        every, ranks = fast
        row_lines = list(range(1, ranks + 1))
        made, made_notes, found = _table_schedule(every, ranks, source=source, microbatches=microbatches,
                                                  placement=placement, lines=row_lines, family="torch-csv")
        if found and not report_problems:
            raise InputError(f"{source}:{found[0].line}: {found[0].message}")
        return made, made_notes, found, row_lines
    rows: list[list[_Parsed]] = []
    lines: list[int] = []
    problems: list[Violation] = []
    count = 0
    for line, record in _records(text, source):
        rank = len(rows)
        if isinstance(record, str):
            record = record.split(",")
            limit = csv.field_size_limit()
            if any(len(v) > limit for v in record):  # as the csv module refuses it
                raise InputError(f"{source}:{line}: not valid CSV: field larger than field limit ({limit})")
        cells: list[_Parsed] = []
        for col, value in enumerate(record):
            try:
                action = parse_action(value)
            except ValueError as e:
                msg = f"rank {rank}, step {col}: {e}"
                if not report_problems:
                    raise InputError(f"{source}:{line}: {msg}") from None
                problems.append(Violation("PP001", f"malformed op: {msg}", (), "error", line))
                continue
            if action is not None:
                cells.append(_parsed(action, rank))
        count += len(cells)
        if count > MAX_OPS:
            raise InputError(f"{source}:{line}: more than the {MAX_OPS:,} actions pptl accepts")
        rows.append(cells)
        lines.append(line)
    while rows and not rows[-1]:  # trailing blank lines are not ranks
        rows.pop()
        lines.pop()
    if not rows:
        if problems:  # every cell was unreadable: say which, not that the file holds none
            raise InputError(f"{source}:{problems[0].line}: {problems[0].message}")
        raise InputError(f"{source}: no actions; expected one row per rank with cells such as 0F0")
    schedule, notes, more = _rows_schedule(rows, source=source, microbatches=microbatches, placement=placement,
                                           lines=lines, family="torch-csv")
    if more and not report_problems:
        raise InputError(f"{source}:{more[0].line}: {more[0].message}")
    problems.extend(more)
    return schedule, notes, problems, lines


def schedule_from_rows(rows: list[list[Action]], *, source: str = "<csv>", microbatches: int | None = None,
                       placement: str | None = None, lines: list[int] | None = None, family: str = "torch-csv",
                       ) -> tuple[Schedule, list[str], list[Any]]:
    """Build a pptl schedule from each rank's actions (in file order).

    Returns the schedule, notes saying what was inferred, and placement problems (violations
    with code PP036, when ``placement`` is given and the file disagrees).
    """
    return _rows_schedule([[_parsed(a, rank) for a in r] for rank, r in enumerate(rows)], source=source,
                          microbatches=microbatches, placement=placement, lines=lines, family=family)


def _rows_schedule(rows: list[list[_Parsed]], *, source: str, microbatches: int | None, placement: str | None,
                   lines: list[int] | None, family: str) -> tuple[Schedule, list[str], list[Any]]:
    """:func:`_table_schedule` of parsed rows (the cell-by-cell reader's, or a trace's actions)."""
    lines = lines or [r + 1 for r in range(len(rows))]
    cells = cells_of_rows(rows)
    if cells is None:
        rank, col = next((r, c) for r, row in enumerate(rows) for c, cell in enumerate(row)
                         if any(not -2**63 <= v < 2**63 for v in cell[1:]))
        raise InputError(f"{source}:{lines[rank]}: rank {rank}, step {col}: a stage or micro-batch index does not "
                         "fit 64 bits")
    return _table_schedule(cells, len(rows), source=source, microbatches=microbatches, placement=placement,
                           lines=lines, family=family)


@dataclass(frozen=True)
class _Layout:
    """What a file's stages and forwards decide: placement, stage count, micro-batches."""

    use: str
    detected: str
    asked: str | None
    spr: int
    num_stages: int
    microbatches: int
    asked_microbatches: int | None
    inferred: int
    top: int
    """The highest forward micro-batch index (-1: none)."""
    rank_of: Callable[[int], int]
    chunk_of: Callable[[int], int]
    problems: tuple[Any, ...]


def _layout(observed: dict[int, int], forward_counts: list[int], top: int, pp: int, *, source: str,
            microbatches: int | None, placement: str | None, lines: list[int]) -> _Layout:
    """Placement, stages and micro-batches from each stage's first rank (``observed``) and the
    number of distinct forwards of each stage that runs one.

    Raises:
        InputError: no actions, no forwards to count (without ``microbatches``), or too much work.
    """
    from pptl.violation import Violation

    if not observed:
        raise InputError(f"{source}: no actions; expected one row per rank with cells such as 0F0")
    detected = _classify(observed, pp)
    use = placement or detected
    problems: list[Violation] = []
    if placement is not None:
        place = _placer(placement, pp)
        for s, r in sorted(observed.items()):
            want = place(s)
            if want is not None and want != r:
                problems.append(Violation(
                    "PP036", f"stage {s} runs on rank {r}, but {placement} placement puts it on rank {want}",
                    (), "error", lines[r]))
    max_stage = max(observed)
    if use == "loop":
        spr = max_stage // pp + 1
        num_stages = pp * spr
    elif use == "v":
        spr, num_stages = 2, 2 * pp
        if max_stage >= num_stages:
            num_stages = max_stage + 1
    else:
        num_stages = max_stage + 1
        spr = max(Counter(observed.values()).values())
    counts = Counter(forward_counts)
    inferred = max(counts, key=lambda n: (counts[n], n)) if counts else 0
    if microbatches is None and inferred < 1:
        raise InputError(f"{source}: no forward actions to infer the micro-batch count from; pass --microbatches")
    m = microbatches if microbatches is not None else inferred
    # Checks and the simulator walk every (stage, micro-batch): bound that before building, so a
    # cell such as 99999999999F0 or --microbatches 1000000000 is refused at once, not after hours.
    if num_stages * m > MAX_OPS:
        raise InputError(f"{source}: {counted(num_stages, 'stage')} (highest stage index {max_stage}) x "
                         f"{counted(m, 'micro-batch', 'micro-batches')} is "
                         f"more than the {MAX_OPS:,} units of work pptl checks")
    return _Layout(use, detected, placement, spr, num_stages, m, microbatches, inferred, top,
                   _rank_map(use, pp, observed), _chunk_map(use, pp, observed), tuple(problems))


def _finish(make: Callable[[Config, dict[str, Any]], Schedule], lay: _Layout, *, pp: int, n: int, family: str,
            source: str, has_comm: bool, program: tuple[str, ...]) -> tuple[Schedule, list[str], list[Any]]:
    """The schedule ``make`` builds with the file's config and meta, the notes, and the placement problems."""
    form = "compute_comms" if has_comm else "compute_only"
    cfg = Config(schedule=family, pp=pp, microbatches=lay.microbatches, vpp=lay.spr,
                 costs=Costs(base={**DEFAULT_COSTS, **{k: 0.0 for k in FSDP_KINDS}}), source=source)
    meta = PipelineMeta(source_format="torch-csv", csv_format=form, placement=lay.use,
                        program_order=program if has_comm else None).to_meta()
    schedule = make(cfg, meta)
    notes = [f"torch CSV ({form}): {counted(pp, 'rank')}, {counted(n, 'action')}"]
    notes.append(_placement_note(lay.use, lay.detected, lay.asked, pp, lay.num_stages, lay.spr))
    notes.append(_microbatch_note(lay.microbatches, lay.asked_microbatches, lay.inferred, lay.top))
    return schedule, notes, list(lay.problems)


def _table_schedule(cells: Any, pp: int, *, source: str, microbatches: int | None, placement: str | None,
                    lines: list[int], family: str) -> tuple[Schedule, list[str], list[Any]]:
    """The schedule of a file's cells (:mod:`pptl.formats.torch_csv_table`): placement, stages and
    micro-batches inferred (:func:`_layout`), then an op table, its lanes and facts, without an
    ``Op`` per cell."""
    counts, top = T.forwards(cells)
    lay = _layout(T.observed_stages(cells), counts, top, pp, source=source, microbatches=microbatches,
                  placement=placement, lines=lines)
    table = T.op_table(cells, lay.rank_of, lay.chunk_of)
    lanes = T.lanes_of(cells)
    has_comm = bool(((cells.kind >= T.KINDS.index("SEND_F")) & (cells.kind <= T.KINDS.index("RECV_B"))).any())
    program = T.program_of(cells, pp) if has_comm else ()
    num_stages, m = lay.num_stages, lay.microbatches
    try:
        derived = facts_of_table(table, num_stages)
    except InputError as e:
        raise InputError(f"{source}: {e}") from None

    def make(cfg: Config, meta: dict[str, Any]) -> Schedule:
        return Schedule(family, pp, num_stages, m, lanes=lanes, config=cfg, meta=meta, table=table,
                        facts=Facts(*derived))

    return _finish(make, lay, pp=pp, n=cells.n, family=family, source=source, has_comm=has_comm, program=program)


def _classify(observed: dict[int, int], pp: int) -> str:
    if all(r == s % pp for s, r in observed.items()):
        return "loop"
    if max(observed) < 2 * pp and all(r == (s if s < pp else 2 * pp - 1 - s) for s, r in observed.items()):
        return "v"
    return "custom"


def _placer(kind: str, pp: int):
    if kind == "loop":
        return lambda s: s % pp
    return lambda s: (s if s < pp else 2 * pp - 1 - s) if s < 2 * pp else None


def _rank_map(use: str, pp: int, observed: dict[int, int]):
    place = _placer(use, pp) if use in PLACEMENTS else (lambda s: None)

    def rank_of(s: int) -> int:
        if s in observed:
            return observed[s]
        r = place(s)
        return -1 if r is None else r

    return rank_of


def _chunk_map(use: str, pp: int, observed: dict[int, int]):
    if use == "loop":
        return lambda s: s // pp
    if use == "v":
        return lambda s: 0 if s < pp else 1
    per_rank: dict[int, list[int]] = {}
    for s, r in sorted(observed.items()):
        per_rank.setdefault(r, []).append(s)
    index = {s: i for ss in per_rank.values() for i, s in enumerate(ss)}
    return lambda s: index.get(s, -1)


def _placement_note(use: str, detected: str, asked: str | None, pp: int, n: int, spr: int) -> str:
    what = {"loop": f"loop (stage s on rank s % {pp}, {spr} per rank)",
            "v": f"V (rank r holds stages r and {2 * pp - 1}-r)",
            "custom": f"custom ({counted(spr, 'stage')} on the busiest rank)"}[use]
    how = "from --placement" if asked else "inferred"
    extra = f"; the file looks {detected}" if asked and detected != asked else ""
    return f"placement: {what}, {counted(n, 'stage')} ({how}{extra})"


def _microbatch_note(m: int, asked: int | None, inferred: int, top: int) -> str:
    if asked is not None:
        return f"micro-batches: {m} (from --microbatches; the file runs {inferred} distinct forwards per stage)"
    text = f"micro-batches: {m} (inferred: the number of distinct forwards per stage; override with --microbatches)"
    if top + 1 != m:
        text += f"; indices go up to {top}, so some are outside 0..{m - 1}"
    return text


def _rank_of_id(op_id: str) -> int | None:
    head = op_id.split("/", 1)[0]
    if head.startswith("r") and head[1:].isdigit():
        return int(head[1:])
    return None


# ----------------------------------------------------------------------------------------------
# Writing


def action_of(op: Op) -> Action:
    """The torch action for one pptl op.

    Raises:
        InputError: the op has no torch equivalent (direction 1, MoE sub-ops, weight updates...).
    """
    if op.direction != 0:
        raise InputError(f"{op.id}: torch's CSV has one direction; this op is in direction {op.direction}")
    k = op.kind
    if k in _COMPUTE:
        return Action(op.stage, k, op.mb)
    if k == "FB" and op.pair is not None:
        s, m, d = op.pair
        if d != 0:
            raise InputError(f"{op.id}: torch's CSV has one direction; the B half is in direction {d}")
        return Action(-1, "OVERLAP_F_B", None, (Action(op.stage, "F", op.mb), Action(s, "B", m)))
    if k in FSDP_KINDS:
        return Action(op.stage, k)
    if k in ("SEND", "RECV") and op.flow in ("F", "B"):
        return Action(op.stage, f"{k}_{op.flow}", op.mb)
    raise InputError(f"{op.id}: kind {k} has no torch CSV action (torch has F, I, B, W, OVERLAP_F_B, "
                     "SEND/RECV, UNSHARD, RESHARD, REDUCE_GRAD)")


def to_rows(schedule: Schedule, *, comms: bool = False) -> tuple[list[list[str]], list[str]]:
    """Each rank's actions as CSV cells, and notes about what was changed.

    ``comms=False`` writes compute_only: the compute lane's F/I/B/W/FB (torch's runtime refuses
    other actions there and adds UNSHARD/RESHARD/REDUCE_GRAD itself). ``comms=True`` writes
    compute_comms: every op in the order each rank issues it (see :func:`program`).

    Raises:
        InputError: the schedule has ops torch cannot express, or (comms) it cannot be simulated.
    """
    if schedule.directions != 1:
        raise InputError(f"schedule '{schedule.family}' has {schedule.directions} directions; torch's CSV has one "
                         "(export dualpipev rather than dualpipe)")
    bad = sorted({op.lane for op in schedule.ops} - {"compute", "send", "recv"})
    if bad:
        raise InputError(f"schedule '{schedule.family}' uses lane '{bad[0]}'; torch's CSV has compute, send and "
                         "recv only")
    _refuse_forward_only(schedule)
    notes: list[str] = []
    rows: list[list[str]] = []
    if not comms:
        dropped = Counter()
        for r in range(schedule.pp):
            row = []
            for op in schedule.lane_ops(r, "compute"):
                if op.kind in FSDP_KINDS:
                    dropped[op.kind] += 1
                    continue
                row.append(str(action_of(op)))
            rows.append(row)
        if dropped:
            notes.append("compute_only leaves out " + ", ".join(f"{n} {k}" for k, n in sorted(dropped.items()))
                         + " (torch's runtime adds them when it lowers a compute_only schedule)")
        return rows, notes
    from pptl.issue_order import program

    sched = with_comms(schedule)
    if sched is not schedule:
        notes.append("added SEND/RECV for every crossing between ranks")
    order = program(sched)
    for r in range(sched.pp):
        rows.append([str(action_of(sched.ops[i])) for i in order.get(r, [])])
    if not any(op.kind == "REDUCE_GRAD" for op in sched.ops):
        rows = [_with_reduce_grad(row, sched.microbatches) for row in rows]
        notes.append("REDUCE_GRAD after each stage's last backward (torch's runtime scales the gradients there; "
                     "its compute_only lowering adds the same)")
    if PipelineMeta.of(sched).program_order is None or sched is not schedule:
        notes.append("SEND right after the op that produces its data; RECV at the moment its data is sent "
                     "(so every pair of ranks sees its transfers in one order: no NCCL hang)")
    return rows, notes


def _refuse_forward_only(schedule: Schedule) -> None:
    """A plan with forwards and no backward (inference) has no torch CSV: torch's ``_load_csv``
    validates a backward (B, or I and W) for every forward of every stage in both forms, and
    pptl's reader takes a CSV for a training schedule too (so it would report every backward
    missing, PP003)."""
    kinds = {op.kind for op in schedule.ops}
    if "F" in kinds and not kinds & {"B", "I", "W", "FB"}:
        raise InputError(f"schedule '{schedule.family}' runs forwards only; torch's CSV is a training schedule (its "
                         "loader requires a backward for every forward), so a forward-only plan has none")


def _with_reduce_grad(row: list[str], microbatches: int) -> list[str]:
    """``row`` with ``{stage}REDUCE_GRAD`` right after the backward (B or W) that completes a stage's
    micro-batches, as torch's ``_add_reduce_grad`` lowers a compute_only schedule. A compute_comms file
    is run as written, and without REDUCE_GRAD torch's runtime never divides the gradients by the
    number of micro-batches (nor finishes FSDP's reduction)."""
    done: Counter = Counter()
    out: list[str] = []
    for cell in row:
        out.append(cell)
        action = parse_action(cell)
        for a in (action.subs if action is not None and action.kind == "OVERLAP_F_B" else (action,)):
            if a is not None and a.kind in ("B", "W"):
                done[a.stage] += 1
                if done[a.stage] == microbatches:
                    out.append(f"{a.stage}REDUCE_GRAD")
    return out


def with_comms(schedule: Schedule) -> Schedule:
    """``schedule`` itself when it lists its SEND/RECV, else a copy with them added the way
    pptl's families add them (:func:`pptl.schedules.assemble`)."""
    if any(op.kind in ("SEND", "RECV") for op in schedule.ops):
        return schedule
    from pptl.schedules import assemble

    cfg = schedule.config or Config(schedule=schedule.family, pp=schedule.pp, microbatches=schedule.microbatches)
    orders = {r: schedule.lane_ops(r, "compute") for r in range(schedule.pp)}
    meta = PipelineMeta.without_program_order(schedule.meta)
    out = assemble(cfg, schedule.family, orders, num_stages=schedule.num_stages,
                   microbatches=schedule.microbatches, directions=schedule.directions, meta=meta)
    return replace(out, config=schedule.config)


def dumps_rows(rows: list[list[str]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for row in rows:
        w.writerow(row)
    return buf.getvalue()


def export_csv(schedule: Schedule, *, comms: bool = False) -> tuple[str, list[str]]:
    """The CSV text torch's ``_load_csv(format="compute_comms" if comms else "compute_only")``
    reads, and notes about what was changed."""
    rows, notes = to_rows(schedule, comms=comms)
    return dumps_rows(rows), notes
