"""Every crash, hang or memory blow-up the reader fuzzers found, pinned as the smallest input that
showed it (the fix is in the reader named by each test). docs/reliability.md lists them."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from fuzzing import clean_run
from typer.testing import CliRunner

from pptl.cli import app
from pptl.config import Config
from pptl.planning import plan


@pytest.fixture(scope="module")
def timeline_data() -> dict:
    return plan(Config(schedule="1f1b", pp=2, microbatches=2)).timeline.to_dict()


def _refused(args: list[str], match: str, *, within: float = 5.0) -> None:
    # CPU seconds of this process (the CLI runs in it): unlike wall time, not stretched by a loaded machine.
    t0 = time.process_time()
    code, err = clean_run(args)
    assert code == 2 and re.search(match, err), (args, err)
    assert time.process_time() - t0 < within, "refused, but only after doing the work"


# --- torch CSV reader (pptl/formats/torch_csv.py): the checker walked every (stage, mb) for hours


@pytest.mark.parametrize("text,extra,match", [
    ("0F0,99999999999F0\n0B0\n", [], r"100000000000 stages \(highest stage index 99999999999\) x 1 micro-batch"),
    ("0F0,0B0\n", ["--microbatches", "1000000000"], r"1 stage \(highest stage index 0\) x 1000000000 micro-batches"),
], ids=["stage-index-1e11", "microbatches-1e9"])
def test_csv_huge_schedule_refused(tmp_path: Path, text: str, extra: list[str], match: str) -> None:
    p = tmp_path / "s.csv"
    p.write_text(text)
    for cmd in (["check"], ["export", "--to", "chrome"], ["plan", "--from"]):
        _refused(cmd + [str(p)] + extra, match + r" is more than the 5,000,000 units of work pptl checks")


# --- profiler / event-list reader (pptl/formats/profiler.py): a rank of 10**30 allocated a row per rank


@pytest.mark.parametrize("name,data,shown", [
    ("t.json", {"traceEvents": [{"ph": "X", "name": "PP:0F0", "ts": 0, "dur": 1}], "distributedInfo": {"rank": 10**30}},
     str(10**30)),
    ("e.json", [{"type": "F", "start_time": 0, "end_time": 1, "minibatch": 0, "rank": -3}], "-3"),
    ("rank99999999999.json", [{"type": "F", "start_time": 0, "end_time": 1, "minibatch": 0}], "99999999999"),
], ids=["distributedInfo-rank-1e30", "negative-event-rank", "rank-from-file-name"])
def test_trace_rank_out_of_range_refused(tmp_path: Path, name: str, data: object, shown: str) -> None:
    p = tmp_path / name
    p.write_text(json.dumps(data))
    _refused(["render", str(p)], rf"{name}: rank {shown}, expected an integer in 0\.\.65535")


# --- timeline reader (pptl/timeline.py) and terminal renderer (pptl/render/terminal.py, styles.py)


@pytest.mark.parametrize("label", ["", " "], ids=["empty", "blank"])
def test_blank_event_label_draws(tmp_path: Path, timeline_data: dict, label: str) -> None:
    """Used to raise IndexError in the terminal view (the first word of a blank label)."""
    data = json.loads(json.dumps(timeline_data))
    for e in data["events"]:
        e["label"] = label
    p = tmp_path / "t.json"
    p.write_text(json.dumps(data))
    code, _ = clean_run(["render", str(p), "--width", "80"])
    assert code == 0


@pytest.mark.parametrize("field", ["chunk", "stage", "mb", "rank"])
def test_huge_event_index_refused(tmp_path: Path, timeline_data: dict, field: str) -> None:
    """A chunk of 10**9 drew a legend tag of 10**9 primes (a memory blow-up)."""
    data = json.loads(json.dumps(timeline_data))
    data["events"][1][field] = 10**9
    p = tmp_path / "t.json"
    p.write_text(json.dumps(data))
    lo = "0" if field == "rank" else "-10000000"
    _refused(["render", str(p)], rf"events\[1\]\.{field}: got 1000000000, expected an integer in {lo}\.\.10000000")


def test_many_chunks_get_numbered_tags() -> None:
    from pptl.render.styles import _chunk_tag

    assert [_chunk_tag("F", c) for c in (0, 1, 2, 4, 5, 10_000_000)] == ["F", "f", "f'", "f'''", "f5", "f10000000"]


# --- Chrome trace export (pptl/formats/chrome_trace.py, pptl/export.py): OFFLOAD/ONLOAD read an
# event's payload, which events do not have (AttributeError on every MoE offload config)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.mark.parametrize("config", ["moe_paired_step.yaml", "moe_overlap.yaml"])
def test_chrome_export_counts_offloaded_memory(tmp_path: Path, config: str) -> None:
    out = tmp_path / "t.json"
    code, _ = clean_run(["export", str(FIXTURES / config), "--to", "chrome", "-o", str(out)])
    assert code == 0
    peak: dict[int, float] = {}
    for e in json.loads(out.read_text())["traceEvents"]:
        if e["ph"] == "C":
            peak[e["pid"]] = max(peak.get(e["pid"], 0.0), e["args"]["activation"])
    planned = json.loads(CliRunner().invoke(app, ["plan", str(FIXTURES / config), "--output", "json"]).stdout)
    assert peak == pytest.approx({r["rank"]: r["peak_activation"] for r in planned["ranks"]})


# --- times past a float: a config cost of 1e308 made the makespan inf (plan -o, export, render:
# ValueError tracebacks); a timeline time of 1.7e308 overflowed in microseconds (export --to chrome)


@pytest.mark.parametrize("text,match", [
    ('[costs]\nF = 1e308\nB = 1e308\n', r"field 'costs\.F': got 1e\+308, expected at most 1e\+15"),
    ('[comm]\nbytes = 1e15\nbandwidth = 1e-300\n', r"the timed schedule overflows a float \(makespan inf\)"),
], ids=["cost-1e308", "bytes-over-tiny-bandwidth"])
def test_costs_that_overflow_are_refused(tmp_path: Path, text: str, match: str) -> None:
    p = tmp_path / "c.toml"
    p.write_text('schedule = "1f1b"\npp = 2\nmicrobatches = 4\n' + text)
    for cmd in (["plan", str(p), "-o", str(tmp_path / "p.json")], ["export", str(p), "--to", "chrome"],
                ["render", str(p), "-o", str(tmp_path / "f.png")], ["render", str(p)]):
        _refused(cmd, match)


def test_largest_costs_still_draw_and_export(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('schedule = "1f1b"\npp = 2\nmicrobatches = 4\n[costs]\nF = 1e15\nB = 1e15\n')
    for cmd in (["export", str(p), "--to", "chrome"], ["render", str(p), "-o", str(tmp_path / "f.png")],
                ["render", str(p), "--width", "80"]):
        assert clean_run(cmd)[0] == 0, cmd


def test_timeline_times_past_1e18_refused(tmp_path: Path, timeline_data: dict) -> None:
    data = json.loads(json.dumps(timeline_data))
    data["events"][0]["end"] = 1.7976931348623157e308
    p = tmp_path / "t.json"
    p.write_text(json.dumps(data))
    _refused(["export", str(p), "--to", "chrome"], r"events\[0\]\.end: got 1\.79.*e\+308, expected a finite number "
                                                   r"within \+-1e\+18")


@pytest.mark.parametrize("data,match", [
    ([{"type": "F", "start_time": 0, "end_time": float("inf"), "minibatch": 0}],
     r"events\[0\]\.end_time: got inf, expected a finite number within \+-1e\+18"),
    ({"traceEvents": [{"ph": "X", "name": "PP:0F0", "ts": 0, "dur": 1}], "baseTimeNanoseconds": 1e308},
     r"field 'baseTimeNanoseconds': got 1e\+308, expected a finite number within \+-1e\+21"),
    ({"traceEvents": [{"ph": "X", "name": "PP:0F0", "ts": 1e300, "dur": 1}]},
     r"range 'PP:0F0' at ts 1e\+300 has dur 1; expected a ts within \+-1e\+18"),
    ({"traceEvents": [{"ph": "X", "name": "PP:0F0", "ts": 0, "dur": -5}]}, r"range 'PP:0F0' at ts 0 has dur -5"),
], ids=["event-list-inf", "base-time-1e308", "ts-1e300", "negative-dur"])
def test_trace_times_out_of_range_refused(tmp_path: Path, data: object, match: str) -> None:
    p = tmp_path / "rank0.json"
    p.write_text(json.dumps(data))
    _refused(["export", str(p), "--to", "chrome"], match)


# --- one line, always: a value quoted from the input may hold a line break


@pytest.mark.parametrize("name,text,shown", [
    ("s.csv", '"\x000\n0"\n', r"'\\x000\\n0' is not an action"),
    ("c.yaml", 'schedule: "1f1b\\nx"\npp: 2\nmicrobatches: 2\n', r"unknown schedule '1f1b\\nx'"),
    ("d.yaml", 'schedule: "1f1b\\u2028x"\npp: 2\nmicrobatches: 2\n', r"unknown schedule '1f1b\\u2028x'"),
], ids=["csv-cell-with-newline", "schedule-name-with-newline", "line-separator"])
def test_errors_quoting_line_breaks_stay_one_line(tmp_path: Path, name: str, text: str, shown: str) -> None:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    _refused(["render", str(p)], shown)
