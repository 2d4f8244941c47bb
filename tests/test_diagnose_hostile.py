"""pptl diagnose on dumps made to break it: every field of an entry checked, nesting and sizes bounded,
record ids unique, group ranks possible; each refusal is one ``error:`` line and exit 2, never a traceback.

Inputs are the corpus's dumps (fixtures/flight_recorder/) read as plain data, changed in one place and
pickled again, so that everything but the change is what torch wrote.
"""
from __future__ import annotations

import pickle
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.diagnose.counts import count_calls
from pptl.diagnose.ops import NcclOp
from pptl.formats.flight_recorder import MAX_ENTRIES, _describe, _scan_opcodes, _Unsafe, loads_plain

runner = CliRunner()
FR = Path(__file__).resolve().parent.parent / "fixtures" / "flight_recorder"
MB_COUNT = FR / "mb_count"


def _raw(rank: int, kind: Path = MB_COUNT) -> dict:
    return loads_plain((kind / f"nccl_trace_rank_{rank}").read_bytes(), source="fixture")


def _write(folder: Path, raws: dict[int, Any]) -> Path:
    folder.mkdir()
    for rank, raw in raws.items():
        data = raw if isinstance(raw, bytes) else pickle.dumps(raw)
        (folder / f"nccl_trace_rank_{rank}").write_bytes(data)
    return folder


def _refused(folder: Path) -> str:
    """The one error line ``pptl diagnose folder`` exits 2 with."""
    result = runner.invoke(app, ["diagnose", str(folder)])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


# 1. every field of an entry is type-checked ------------------------------------------------------------------


@pytest.mark.parametrize("field, value, expected", [
    ("state", ["completed"], "field 'state': got a list of 1 item, expected 'scheduled', 'started' or 'completed'"),
    ("state", "hung", "field 'state': got 'hung', expected"),
    ("record_id", -1, "field 'record_id': got -1, expected a non-negative 64-bit integer"),
    ("record_id", 2**64, "field 'record_id': got an integer of 65 bits"),
    ("collective_seq_id", True, "field 'collective_seq_id': got True"),
    ("retired", [1], "field 'retired': got a list of 1 item, expected True or False"),
    ("is_p2p", "yes", "field 'is_p2p': got 'yes', expected True or False"),
    ("time_discovered_started_ns", "x", "field 'time_discovered_started_ns': got 'x'"),
    ("input_sizes", [[True]], "field 'input_sizes': got a list of 1 item, expected a list of shapes"),
    ("output_sizes", [[-4]], "field 'output_sizes'"),
    ("process_group", ("0", ["default_pg"]), "field 'process_group': got a tuple of 2 items"),
    ("profiling_name", "nccl:send 0->" + "1" * 2000, "field 'profiling_name': got 'nccl:send 0->111"),
], ids=lambda v: str(v)[:20])
def test_a_bad_field_names_file_entry_and_field(tmp_path: Path, field: str, value: Any, expected: str) -> None:
    raw = _raw(0)
    raw["entries"][16] = dict(raw["entries"][16], **{field: value})
    line = _refused(_write(tmp_path / "d", {0: raw, 1: _raw(1)}))
    assert "nccl_trace_rank_0: entries[16]: " + expected in line, line


def test_an_unhashable_state_is_one_line(tmp_path: Path) -> None:
    entry = {"record_id": 0, "process_group": ("0", "g"), "profiling_name": "nccl:send 0->1", "state": ["completed"]}
    d = _write(tmp_path / "d4", {0: {"version": "2.10", "pg_config": {}, "entries": [entry]}})
    assert _refused(d).endswith("nccl_trace_rank_0: entries[0]: field 'state': got a list of 1 item, expected "
                                "'scheduled', 'started' or 'completed'")


# 2. deep nesting: no repr of it, and the unpickler never meets a tuple it cannot hash -------------------------


def _deep_list_in(field: str) -> bytes:
    """A dump whose ``field`` (of entries[0], or of the dump, or of pg_config) is a list nested 100,000 deep:
    100,000 EMPTY_LIST opcodes then 99,999 APPENDs, each putting the list on top into the one below."""
    entry = {"record_id": 0, "process_group": ("0", "g"), "profiling_name": "nccl:send 0->1", "state": "completed"}
    raw: dict[str, Any] = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "g", "ranks": "[0, 1]"}},
                           "entries": [entry]}
    if field == "version":
        raw["version"] = "@DEEP@"
    elif field == "ranks":
        raw["pg_config"]["0"]["ranks"] = "@DEEP@"
    else:
        entry[field] = "@DEEP@"
    data = pickle.dumps(raw, protocol=2)
    marker = b"X" + struct.pack("<I", 6) + b"@DEEP@"  # BINUNICODE "@DEEP@"
    assert data.count(marker) == 1
    return data.replace(marker, b"]" * 100_000 + b"a" * 99_999)


@pytest.mark.parametrize("field, expected", [
    ("record_id", "entries[0]: field 'record_id': got a list of 1 item"),
    ("profiling_name", "entries[0]: field 'profiling_name': got a list of 1 item"),
    ("version", "field 'version': got a list of 1 item"),
    ("ranks", "field 'pg_config['0'].ranks': holds a list of 1 item"),
])
def test_a_deeply_nested_value_is_described_not_printed(tmp_path: Path, field: str, expected: str) -> None:
    line = _refused(_write(tmp_path / "d5", {0: _deep_list_in(field)}))
    assert expected in line, line
    assert len(line) < 400


def test_a_deep_tuple_key_is_refused_before_the_unpickler_hashes_it(tmp_path: Path) -> None:
    # {((((),),)...): 1} with 1,000,000 TUPLE1s: pickle's C unpickler hashes the key recursively and the
    # process dies of a segfault (no exception to catch), so this runs in a child process of its own.
    data = b"\x80\x02}" + b")" + b"\x85" * 1_000_000 + b"K\x01s."
    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_bytes(data)
    done = subprocess.run([sys.executable, "-m", "pptl", "diagnose", str(dump)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, (done.returncode, done.stderr[-500:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-500:]
    # ")" is depth 1, so the 64th TUPLE1 (byte 2 + 1 + 64 = 67) makes depth 65
    assert lines[0].endswith("nccl_trace_rank_0: refused: a tuple nested 65 deep at byte 67 (a dump's nest 1 "
                             "deep; at most 64); nothing was loaded")


def test_tuples_are_counted_as_deep_as_they_are() -> None:
    # depth 64 through the memo (BINPUT 0 / BINGET 0 each level) passes, depth 65 does not
    level = b"h\x00\x85q\x00"  # BINGET 0, TUPLE1, BINPUT 0
    ok = b"\x80\x02)q\x00" + level * 63 + b"."
    _scan_opcodes(ok)
    with pytest.raises(_Unsafe, match="nested 65 deep"):
        _scan_opcodes(ok[:-1] + level + b".")
    # tuples nested through lists do not add up: hashing stops at a list. Each level: BINPUT 0, POP,
    # EMPTY_LIST, BINGET 0, APPEND, TUPLE1 makes ([t],) of t
    _scan_opcodes(b"\x80\x02)" + b"q\x000]h\x00a\x85" * 100 + b".")


def test_describe_is_short_and_safe() -> None:
    assert _describe(10**400) == "an integer of 1329 bits"  # str() would raise past 4300 digits
    assert _describe("x" * 100) == repr("x" * 40) + "... (100 characters)"
    assert _describe("a\nb") == "'a\\nb'"  # one line
    assert _describe({1: 2, 3: 4}) == "a dict of 2 items"
    assert _describe(b"abc") == "bytes of length 3"


# 3. a record id twice in one dump is malformed; calls that repeat under new ids are diagnosed ------------------


def test_a_repeated_entry_is_refused(tmp_path: Path) -> None:
    raw0 = _raw(0)
    raw0["entries"].append(raw0["entries"][16])
    line = _refused(_write(tmp_path / "d6", {0: raw0, 1: _raw(1)}))
    assert line.endswith("nccl_trace_rank_0: entries[17]: field 'record_id': 16 again (entries[16] has it; a dump "
                         "holds each record id once)")


def test_a_collective_repeated_under_a_new_record_id_is_diagnosed(tmp_path: Path) -> None:
    # rank 0 issues all_reduce #1 twice: both get a node of the wait-for graph (a KeyError before)
    raw0 = _raw(0)
    raw0["entries"].append(dict(raw0["entries"][16], record_id=17))
    result = runner.invoke(app, ["diagnose", str(_write(tmp_path / "d", {0: raw0, 1: _raw(1)}))])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.stdout.startswith("rank 0 sent 4 messages to rank 1")
    assert "      8  scheduled  r0 all_reduce #1 (group default_pg)\n" \
           "      9  scheduled  r0 all_reduce #1 (group default_pg)\n" in result.stdout


def _coll(rank: int, index: int, seq: int) -> NcclOp:
    return NcclOp(rank, index, "0", "all_reduce", -1, seq, 0, ((4,),), "completed")


def test_extra_collectives_from_the_first_number_both_hold() -> None:
    # rank 1 holds 4 collectives (#1-#4), rank 0 3 (#5-#7): from #5 on rank 1 holds none, so none of its
    # calls was inserted (an IndexError before: the short side was the longer one from #5 on)
    ops = {0: tuple(_coll(0, k, 5 + k) for k in range(3)), 1: tuple(_coll(1, k, 1 + k) for k in range(4))}
    counts = count_calls(ops, {"0": (0, 1)})
    assert counts.extra == ()
    # rank 0's #1-#4 count as lost to its ring buffer, #5-#7 as never issued by rank 1
    assert [(g.first, g.last, g.missing) for g in counts.gaps] == [(5, 7, (1,))]


# 4. bounded: entries, values pushed while loading, string lengths ----------------------------------------------


def test_shared_references_cannot_make_a_million_entries(tmp_path: Path) -> None:
    raw = _raw(0)
    raw["entries"] = [raw["entries"][16]] * (MAX_ENTRIES + 1)  # pickled once, then a memo reference each
    data = pickle.dumps(raw)
    assert len(data) < 700_000
    line = _refused(_write(tmp_path / "big", {0: data}))
    assert line.endswith("nccl_trace_rank_0: field 'entries': 100001 entries, over the 100000 read from a dump "
                         "(torch keeps TORCH_NCCL_TRACE_BUFFER_SIZE, 2000 by default)")


def test_values_pushed_while_loading_are_counted_before_anything_is_built() -> None:
    # PROTO 2, 1,000 EMPTY_LISTs, a MARK and APPENDS: 1,000 + 1 (the MARK) pushes
    data = b"\x80\x02" + b"]" * 1000 + b"(e."
    _scan_opcodes(data, max_values=1001)
    with pytest.raises(_Unsafe, match="over 1000 values pushed"):
        _scan_opcodes(data, max_values=1000)


@pytest.mark.parametrize("data, expected", [
    (b"\x80\x02]r\xff\xff\xff\xff.", "refused: memo index 4294967295 at byte 3, past the 1 values pushed"),
    (b"\x80\x02]K\x01R.", "refused: opcode b'R' at byte 5, which builds no plain data"),
    (b"\x80\x02]", "not a complete pickle (ends at byte 3 without STOP)"),
])
def test_opcodes_a_dump_never_holds(tmp_path: Path, data: bytes, expected: str) -> None:
    assert expected in _refused(_write(tmp_path / "d", {0: data}))


# 5. group ranks that no job has ---------------------------------------------------------------------------------


@pytest.mark.parametrize("ranks, expected", [
    ("[0, -1]", "rank -1 is negative"),
    ("[0, 0]", "rank 0 appears twice"),
    ("[0, 1000000000000000000]", "rank 1000000000000000000 is over 1000000"),
    ("[0, 1000001]", "rank 1000001 is over 1000000"),
    ([0, 1.0], "holds 1.0"),
    ("[0, 1] + [2]", "got '[0, 1] + [2]'"),
    ("[[0], 1]", "got '[[0], 1]'"),
    ("__import__('os')", "got \"__import__('os')\""),
])
def test_impossible_group_ranks_are_refused(tmp_path: Path, ranks: Any, expected: str) -> None:
    raws = {r: _raw(r) for r in (0, 1)}
    raws[0]["pg_config"]["0"]["ranks"] = ranks
    line = _refused(_write(tmp_path / "d", raws))
    assert f"nccl_trace_rank_0: field 'pg_config['0'].ranks': {expected}" in line, line
    assert line.endswith(", expected a list of distinct ranks from 0 to 1000000")


def test_the_largest_rank_taken_is_1000000(tmp_path: Path) -> None:
    raws = {r: _raw(r) for r in (0, 1)}
    raws[0]["pg_config"]["0"]["ranks"] = "[0, 1, 1000000]"  # a group with a rank that left no dump
    result = runner.invoke(app, ["diagnose", str(_write(tmp_path / "d", raws))])
    assert result.exit_code == 1, result.output
    assert "missing: rank 1000000 left no dump" in result.stdout


def test_a_peer_outside_its_group_is_refused(tmp_path: Path) -> None:
    raws = {r: _raw(r) for r in (0, 1)}
    raws[0]["entries"][0] = dict(raws[0]["entries"][0], profiling_name="nccl:send 0->2")
    line = _refused(_write(tmp_path / "d", raws))
    assert line.endswith("nccl_trace_rank_0: entries[0]: field 'profiling_name': 'nccl:send 0->2' names group "
                         "rank 2, but group '0' has 2 rank(s) in 'pg_config'")
