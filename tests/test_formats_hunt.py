"""Defects found by hunting through export, render, serve and the file readers as a new user and
an adversary would. Each test fails without its fix; every expected answer is written out by hand.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
import tomllib

from pptl.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
ESC = "\x1b"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pptl", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def _one_line_error(r: subprocess.CompletedProcess, code: int) -> str:
    assert r.returncode == code, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


# 1F1B, pp 2, 2 micro-batches, F=1 B=2, no communication cost: rank 0 runs F0 F1 B0 B1, rank 1
# runs F0 B0 F1 B1. Written by hand as a version 3 plan (compute lanes only: SEND/RECV are left out,
# which the reader allows; the facts F s0 -> F s1 and B s1 -> B s0 are derived on load).
def _plan(kind_values: list[str] | None = None, family: str = "1f1b") -> dict:
    return {
        "format": "pptl-plan", "version": 3, "config": None,
        "schedule": {"family": family, "pp": 2, "num_stages": 2, "microbatches": 2, "directions": 1, "meta": {}},
        "lanes": [{"rank": 0, "lane": "compute", "count": 4}, {"rank": 1, "lane": "compute", "count": 4}],
        "ops": {"kind": {"values": kind_values or ["F", "B"], "index": [0, 0, 1, 1, 0, 1, 0, 1]},
                "stage": [0, 0, 0, 0, 1, 1, 1, 1], "mb": [0, 1, 0, 1, 0, 0, 1, 1]},
        "deps": [],
    }


def _write(tmp_path: Path, name: str, data: dict) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(data), encoding="utf-8")
    return p


def test_hand_plan_reads() -> None:
    """The plan the tests below spoil is a valid one as written."""
    from pptl.formats.plan import plan_from_dict

    s, _ = plan_from_dict(_plan())
    assert [op.id for op in s.lane_ops(0, "compute")] == ["r0/compute/F s0 mb0", "r0/compute/F s0 mb1",
                                                          "r0/compute/B s0 mb0", "r0/compute/B s0 mb1"]


# ----------------------------------------------------------------------------------------------
# Control characters in names: they reached the terminal (pptl check's messages, render's legend)


def test_plan_kind_with_escape_code_is_refused_naming_the_field(tmp_path: Path) -> None:
    p = _write(tmp_path, "evil.json", _plan(["F", "B\x1b[2J"]))  # ESC [2J clears the screen
    line = _one_line_error(_cli("check", str(p)), 2)
    assert "ops.kind.values" in line and "control characters" in line
    assert ESC not in line  # quoted as \x1b, not sent to the terminal


def test_plan_family_with_osc_title_sequence_is_refused(tmp_path: Path) -> None:
    p = _write(tmp_path, "evil.json", _plan(family="1f1b\x1b]0;pwned\x07"))
    line = _one_line_error(_cli("render", str(p)), 2)
    assert "schedule.family" in line and ESC not in line and "\x07" not in line


def test_plan_lane_with_newline_is_refused() -> None:
    from pptl.formats.plan import plan_from_dict

    data = _plan()
    data["lanes"][1]["lane"] = "comp\nute"
    with pytest.raises(InputError, match=r"lanes\[1\]\.lane: got 'comp\\nute', expected text without control"):
        plan_from_dict(data, source="p.json")


def _timeline(**event_changes: object) -> dict:
    ev = {"op": "r0/compute/F s0 mb0", "rank": 0, "lane": "compute", "start": 0.0, "end": 1.0, "kind": "F",
          "stage": 0, "mb": 0}
    ev.update(event_changes)
    return {"format": "pptl-timeline", "version": 1, "meta": {"source": "measured", "units": "ms", "pp": 1},
            "events": [ev]}


@pytest.mark.parametrize(("changes", "field"), [
    ({"kind": "X\x1b[2J"}, "events[0].kind"),
    ({"label": "Attn\x1b[31m"}, "events[0].label"),
    ({"waits_on": ["r0/compute/F s0 mb1\x9b2J"]}, "events[0].waits_on"),  # \x9b: the C1 form of ESC [
])
def test_timeline_names_with_control_characters_are_refused(changes: dict, field: str) -> None:
    from pptl.formats.timeline import timeline_from_dict

    with pytest.raises(InputError) as e:
        timeline_from_dict(_timeline(**changes), source="t.json")
    assert str(e.value).startswith(f"t.json: {field}: got ")
    assert "control characters" in str(e.value)


def test_timeline_title_with_escape_code_is_refused_by_render(tmp_path: Path) -> None:
    data = _timeline()
    data["meta"]["title"] = "step 1\x1b[2J"
    line = _one_line_error(_cli("render", str(_write(tmp_path, "t.json", data))), 2)
    assert "meta.title" in line and ESC not in line


def test_unicode_names_still_read() -> None:
    """Only control characters are refused: accents, emoji and markup-like text are names."""
    from pptl.formats.timeline import timeline_from_dict

    tl = timeline_from_dict(_timeline(label="Ünï 💥 <b>x</b>"), source="t.json")
    assert tl.events[0].label == "Ünï 💥 <b>x</b>"


# ----------------------------------------------------------------------------------------------
# The plan reader's error lines were as long as the bad value (a 200,000-character line)


@pytest.mark.parametrize(("change", "expected"), [
    (lambda d: d["lanes"][0].__setitem__("rank", "x" * 200_000),
     "p.json: lanes[0].rank: got '" + "x" * 60 + "... (200,000 characters), expected an integer"),
    (lambda d: d["ops"]["stage"].__setitem__(3, list(range(100_000))),
     "p.json: ops.stage: got a list of 100,000 items, expected integers in -10000000..10000000"),
    (lambda d: d["schedule"].__setitem__("pp", "9" * 5000),
     "p.json: field 'schedule.pp': got '" + "9" * 60 + "... (5,000 characters), expected an integer >= 1"),
])
def test_plan_reader_quotes_a_huge_bad_value_briefly(change, expected: str) -> None:
    from pptl.formats.plan import plan_from_dict

    data = _plan()
    change(data)
    with pytest.raises(InputError) as e:
        plan_from_dict(data, source="p.json")
    assert str(e.value) == expected


# ----------------------------------------------------------------------------------------------
# export --to torchtitan wrote TOML that TOML readers refuse


def test_torchtitan_csv_path_past_the_bmp_is_valid_toml(tmp_path: Path) -> None:
    """json.dumps wrote 😀 (U+1F600) as the surrogate escapes \\ud83d\\ude00, which TOML refuses."""
    from pptl.export import export_torchtitan

    csv = str(tmp_path / "plan_😀.csv")
    files = export_torchtitan(ROOT / "fixtures" / "1f1b.yaml", csv_path=csv)
    parsed = tomllib.loads(files.toml)
    assert parsed["parallelism"]["pipeline_parallel_schedule_csv"] == csv
    assert parsed["parallelism"]["pipeline_parallel_degree"] == 4  # fixtures/1f1b.yaml: pp 4, 8 micro-batches
    assert parsed["training"]["local_batch_size"] == 8


def test_torchtitan_source_path_with_newline_and_del_is_valid_toml(tmp_path: Path) -> None:
    """The source path went raw into a comment line: its newline started a line TOML cannot read."""
    from pptl.export import export_torchtitan

    src = tmp_path / 'a\n[x]"\x7f.yaml'
    src.write_text((ROOT / "fixtures" / "1f1b.yaml").read_text())
    csv = str(tmp_path / 'sched "1"\x7f.csv')
    files = export_torchtitan(src, csv_path=csv)
    parsed = tomllib.loads(files.toml)  # raised "Expected newline or end of document" before the fix
    assert parsed["parallelism"]["pipeline_parallel_schedule_csv"] == csv
    assert files.toml.splitlines()[0].startswith('# pptl export "')


def test_torchtitan_csv_path_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    from pptl.export import export_torchtitan

    with pytest.raises(InputError, match=r"\\udcff\.csv: the name is not valid UTF-8"):
        export_torchtitan(ROOT / "fixtures" / "1f1b.yaml", csv_path=str(tmp_path) + "/\udcff.csv")


# ----------------------------------------------------------------------------------------------
# A forward-only plan exported as a torch CSV: torch's loader refuses it, pptl check calls it invalid


def test_forward_only_plan_has_no_torch_csv() -> None:
    from pptl.config import Config
    from pptl.formats.torch_csv import export_csv
    from pptl.schedules import build_schedule

    s = build_schedule(Config(schedule="inference", pp=2, microbatches=2))  # 4 F ops, no backward
    for comms in (False, True):
        with pytest.raises(InputError, match="runs forwards only"):
            export_csv(s, comms=comms)


def test_export_of_inference_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "inference.csv"
    line = _one_line_error(_cli("export", "fixtures/inference.yaml", "--to", "torch-csv", "-o", str(out)), 2)
    assert "forwards only" in line
    assert not out.exists()
    toml = tmp_path / "pp.toml"
    _one_line_error(_cli("export", "fixtures/inference.yaml", "--to", "torchtitan", "-o", str(toml)), 2)
    assert not toml.exists() and not (tmp_path / "pp.csv").exists()


def test_training_plan_still_exports() -> None:
    """1F1B, pp 2, 2 micro-batches: rank 0 runs F0 F1 B0 B1, rank 1 F0 B0 F1 B1 (stage = rank)."""
    from pptl.config import Config
    from pptl.formats.torch_csv import export_csv
    from pptl.schedules import build_schedule

    text, _ = export_csv(build_schedule(Config(schedule="1f1b", pp=2, microbatches=2)))
    assert text == "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"


# ----------------------------------------------------------------------------------------------
# pptl serve: a Content-Length of non-ASCII digits was a 500; a request never finished held a
# thread forever


@pytest.fixture
def quick_server() -> Iterator[tuple[object, list[str]]]:
    from pptl.serve.server import make_server

    logged: list[str] = []
    srv = make_server("127.0.0.1", 0, log=logged.append, request_timeout=0.5)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield srv, logged
    srv.shutdown()
    srv.server_close()


def _exchange(srv: object, data: bytes, *, wait: float = 10.0) -> tuple[bytes, float]:
    """Send ``data``, read until the server closes (or ``wait`` passes): (reply, seconds)."""
    s = socket.create_connection(("127.0.0.1", srv.server_address[1]), timeout=wait)  # type: ignore[attr-defined]
    t0 = time.monotonic()
    s.sendall(data)
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except socket.timeout:
        out += b"<no answer>"
    finally:
        s.close()
    return out, time.monotonic() - t0


_POST = b"POST /api/plan HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


def test_superscript_content_length_is_411_not_500(server) -> None:
    srv, logged = server
    reply, _ = _exchange(srv, _POST + b"Content-Length: \xb2\r\n\r\n{}")  # \xb2 is "²": isdigit() but not int()
    assert reply.startswith(b"HTTP/1.1 411 ")
    assert reply.endswith(b'{"error":"request: Content-Length required","field":null}')
    assert logged == []  # no "internal error" line


def test_body_that_never_arrives_is_408_after_the_timeout(quick_server) -> None:
    srv, logged = quick_server
    reply, took = _exchange(srv, _POST + b'Content-Length: 100\r\n\r\n{"pa')  # 4 of 100 bytes, then silence
    assert reply.startswith(b"HTTP/1.1 408 ")
    assert b'"error":"request: body of 100 bytes did not arrive within 0.5 s"' in reply
    assert b"Connection: close" in reply
    assert took < 5
    assert logged == []


def test_headers_that_never_end_are_dropped_after_the_timeout(quick_server) -> None:
    srv, logged = quick_server
    reply, took = _exchange(srv, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no blank line: headers go on
    assert reply == b""  # nothing to answer: the connection is closed
    assert took < 5
    assert logged == []


def test_server_still_answers_after_a_stalled_client(quick_server) -> None:
    srv, _ = quick_server
    _exchange(srv, _POST + b"Content-Length: 10\r\n\r\n{")
    body = b'{"params":{"schedule":"1f1b","pp":"2","microbatches":"2"}}'
    reply, _ = _exchange(srv, _POST + b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
                         + body)
    assert reply.startswith(b"HTTP/1.1 200 ")
    # 1F1B pp 2, m 2, F=1 B=2, by hand: r0 F0 0-1, F1 1-2; r1 F0 1-2, B0 2-4; r0 B0 4-6; r1 F1 4-5,
    # B1 5-7; r0 B1 7-9
    assert b'"makespan":9.0' in reply


# ----------------------------------------------------------------------------------------------
# torch CSV: an index of thousands of digits, a cell at the csv module's field limit, a file whose
# every cell is unreadable


def test_index_of_5000_digits_names_the_cell_not_pythons_setting(tmp_path: Path) -> None:
    p = tmp_path / "long.csv"
    p.write_text("0F" + "1" * 5000 + "\n", encoding="utf-8")
    line = _one_line_error(_cli("render", str(p)), 2)
    assert "an index of 5,000 digits does not fit 64 bits" in line
    assert "set_int_max_str_digits" not in line


def test_cell_exactly_at_the_field_limit_reads_and_one_past_is_refused(tmp_path: Path) -> None:
    """csv.field_size_limit() is 131,072 characters. '0F' and 131,070 zeros is the action 0F0 (its
    micro-batch is zero, however many zeros spell it); one zero more is past the limit."""
    import csv

    from pptl.formats.loader import load_any

    limit = csv.field_size_limit()
    assert limit == 131_072
    at = tmp_path / "at.csv"
    at.write_text("0F" + "0" * (limit - 2) + ",0B0\n", encoding="utf-8")
    s = load_any(at).schedule
    assert [op.id for op in s.ops] == ["r0/compute/F s0 mb0", "r0/compute/B s0 mb0"]
    past = tmp_path / "past.csv"
    past.write_text("0F" + "0" * (limit - 1) + ",0B0\n", encoding="utf-8")
    assert _one_line_error(_cli("check", str(past)), 2) == \
        f"error: {past}:1: not valid CSV: field larger than field limit (131072)"


def test_check_of_a_csv_of_only_bad_cells_names_the_cell(tmp_path: Path) -> None:
    """Each bad cell was kept as a violation and its row dropped as empty: 'no actions' hid why."""
    p = tmp_path / "bad.csv"
    p.write_text("0X0\n", encoding="utf-8")
    line = _one_line_error(_cli("check", str(p)), 2)
    assert line.startswith(f"error: {p}:1: malformed op: rank 0, step 0: '0X0' is not an action")
