"""``pptl export`` at sizes nobody built it on: pp 1, pp 12 (two-digit ranks), m 1, m = pp, vpp 3,
the families torch names differently, a measured timeline. Read back with independent parsers
(``json``, ``tomllib``, ``csv``, torch's own ``_load_csv`` and ``get_schedule_class``), values by hand."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import tomllib
from typer.testing import CliRunner

from pptl.cli import app

runner = CliRunner()


def _plan(tmp_path: Path, name: str, *args: str) -> Path:
    out = tmp_path / f"{name}.json"
    r = runner.invoke(app, ["plan", *args, "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out


def _export(src: Path, to: str, out: Path, *more: str) -> None:
    r = runner.invoke(app, ["export", str(src), "--to", to, "-o", str(out), *more])
    assert r.exit_code == 0, r.output


# --- bug: torchtitan got a class name torch's get_schedule_class refuses --------------------------------------

@pytest.mark.parametrize("family, args, name", [
    ("looped-bfs", ["--vpp", "3", "-m", "2"], "LoopedBFS"),
    ("interleaved-zb", ["--vpp", "2", "-m", "4"], "InterleavedZeroBubble"),
])
def test_torchtitan_names_a_schedule_torch_can_look_up(tmp_path: Path, family: str, args: list[str],
                                                       name: str) -> None:
    """torchtitan passes pipeline_parallel_schedule to torch's get_schedule_class, which knows
    "LoopedBFS" and "InterleavedZeroBubble"; the export wrote "ScheduleLoopedBFS" /
    "ScheduleInterleavedZeroBubble" (ValueError: Unknown schedule name)."""
    plan = _plan(tmp_path, family, "--schedule", family, "--pp", "2", *args)
    _export(plan, "torchtitan", tmp_path / "pp.toml")
    par = tomllib.loads((tmp_path / "pp.toml").read_text())["parallelism"]
    assert par["pipeline_parallel_schedule"] == name
    S = pytest.importorskip("torch.distributed.pipelining.schedules")
    assert S.get_schedule_class(par["pipeline_parallel_schedule"]).__name__ == "Schedule" + name


# --- pp 1, m 1: the smallest plan, in every target ------------------------------------------------------------

def test_pp1_m1_in_every_target(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "p", "--schedule", "1f1b", "--pp", "1", "-m", "1", "--cost", "F=1,B=2")
    _export(plan, "torch-csv", tmp_path / "s.csv")
    assert (tmp_path / "s.csv").read_text().splitlines() == ["0F0,0B0"]
    _export(plan, "chrome", tmp_path / "t.json")
    xs = [e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e["ph"] == "X"]
    # F runs 0..1 unit, B 1..3 units; 1 unit = 1 ms = 1000 us
    assert sorted((e["name"], e["pid"], e["tid"], e["ts"], e["dur"]) for e in xs) == [
        ("B s0 mb0", 0, 0, 1000.0, 2000.0), ("F s0 mb0", 0, 0, 0.0, 1000.0)]
    _export(plan, "torchtitan", tmp_path / "pp.toml")
    t = tomllib.loads((tmp_path / "pp.toml").read_text())
    assert t["parallelism"]["pipeline_parallel_degree"] == 1
    assert t["parallelism"]["pipeline_parallel_schedule"] == "1F1B"
    assert t["parallelism"]["pipeline_parallel_microbatch_size"] == 1
    assert t["training"]["local_batch_size"] == 1
    assert (tmp_path / "pp.csv").read_text().splitlines() == ["0F0,0B0"]


# --- pp 12, m = pp: two-digit ranks ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pp12(tmp_path_factory) -> Path:
    return _plan(tmp_path_factory.mktemp("pp12"), "pp12", "--schedule", "1f1b", "--pp", "12", "-m", "12")


def test_pp12_chrome_ranks_in_numeric_order(pp12: Path, tmp_path: Path) -> None:
    _export(pp12, "chrome", tmp_path / "t.json")
    ev = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    procs = [e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"]
    assert procs == list(range(12))  # rank 10 after rank 9, not after rank 1
    sort = {e["pid"]: e["args"]["sort_index"] for e in ev if e["ph"] == "M" and e["name"] == "process_sort_index"}
    assert sort == {r: r for r in range(12)}
    xs = [e for e in ev if e["ph"] == "X"]
    ids = [e["args"]["op"] for e in xs]
    assert len(ids) == len(set(ids))
    assert all(e["pid"] == int(e["args"]["op"].split("/")[0][1:]) and e["dur"] >= 0 for e in xs)
    # 24 compute ops a rank, and every compute op is on tid 0 of its rank
    assert sum(e["cat"] in ("F", "B") for e in xs) == 12 * 24
    assert all(e["tid"] == 0 for e in xs if e["cat"] in ("F", "B"))


def test_pp12_m_equals_pp_torch_csv_rows(pp12: Path, tmp_path: Path) -> None:
    _export(pp12, "torch-csv", tmp_path / "s.csv")
    rows = list(csv.reader(io.StringIO((tmp_path / "s.csv").read_text())))
    assert len(rows) == 12
    # rank 0: 11 warmup forwards + F11, so with m = pp every forward comes before the first backward
    assert rows[0] == [f"0F{i}" for i in range(12)] + [f"0B{i}" for i in range(12)]
    # rank 10: one warmup forward (p-1-r = 1), then 1F1B, then the last backward
    assert rows[10] == (["10F0"] + [c for i in range(1, 12) for c in (f"10F{i}", f"10B{i - 1}")] + ["10B11"])
    assert rows[11] == [c for i in range(12) for c in (f"11F{i}", f"11B{i}")]
    # torch's own loader accepts it with stage s on rank s
    S = pytest.importorskip("torch.distributed.pipelining.schedules")
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "check_vs_torch", Path(__file__).resolve().parent.parent / "bench/check_vs_torch.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rt = S._PipelineScheduleRuntime([bench._MockStage(10, 12, 12, 10)], 12)
    rt._load_csv(str(tmp_path / "s.csv"))
    assert rt.stage_index_to_group_rank == {s: s for s in range(12)}
    # and pptl reads it back as the same compute order
    r = runner.invoke(app, ["check", str(tmp_path / "s.csv")])
    assert r.exit_code == 0, r.output
    re = tmp_path / "re.json"
    r = runner.invoke(app, ["plan", "--from", str(tmp_path / "s.csv"), "-o", str(re)])
    assert r.exit_code == 0, r.output
    _export(re, "torch-csv", tmp_path / "again.csv")
    assert (tmp_path / "again.csv").read_text() == (tmp_path / "s.csv").read_text()


# --- vpp 3: more stages per rank than torchtitan's default two ------------------------------------------------

def test_vpp3_torchtitan_says_how_many_stages(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "v3", "--schedule", "interleaved-1f1b", "--pp", "4", "--vpp", "3", "-m", "8")
    _export(plan, "torchtitan", tmp_path / "pp.toml")
    text = (tmp_path / "pp.toml").read_text()
    t = tomllib.loads(text)
    assert t["parallelism"]["pipeline_parallel_degree"] == 4
    assert t["parallelism"]["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert t["training"]["local_batch_size"] == 8
    assert "# 12 stages in all: set pipeline_parallel_layers_per_stage" in text  # 4 ranks x 3 chunks
    rows = list(csv.reader(io.StringIO((tmp_path / "pp.csv").read_text())))
    # a loop: rank r holds stages r, r+4, r+8
    assert [sorted({int(c.split("F")[0]) for c in row if "F" in c}) for row in rows] == [
        [r, r + 4, r + 8] for r in range(4)]


# --- refusals: one line, exit 2 -------------------------------------------------------------------------------

@pytest.mark.parametrize("family, args", [
    ("dualpipe", ["--pp", "4", "-m", "8"]),
    ("weight-update", ["--pp", "2", "-m", "1"]),
])
@pytest.mark.parametrize("to", ["torch-csv", "torchtitan"])
def test_families_torch_csv_cannot_hold_are_refused_in_one_line(tmp_path: Path, family: str, args: list[str],
                                                                 to: str) -> None:
    plan = _plan(tmp_path, "p", "--schedule", family, *args)
    r = runner.invoke(app, ["export", str(plan), "--to", to, "-o", str(tmp_path / "x.toml")])
    assert r.exit_code == 2
    assert len(r.output.strip().splitlines()) == 1 and "error:" in r.output
    assert not (tmp_path / "x.toml").exists() and not (tmp_path / "x.csv").exists()


# --- a measured timeline: ms to microseconds, ranks numeric -----------------------------------------------------

def test_measured_timeline_in_microseconds_ranks_numeric(tmp_path: Path) -> None:
    def ev(rank: int, kind: str, mb: int, start: float, end: float) -> dict:
        return {"op": f"r{rank}/compute/{kind} s{rank} mb{mb}", "rank": rank, "lane": "compute", "start": start,
                "end": end, "kind": kind, "stage": rank, "mb": mb}

    events = [ev(10, "F", 0, 5.5, 6.0), ev(2, "F", 0, 5.0, 5.25), ev(9, "F", 0, 5.25, 5.5),
              ev(10, "B", 0, 6.0, 6.0)]  # a zero-length event stays, with dur 0
    src = tmp_path / "measured.json"
    src.write_text(json.dumps({"format": "pptl-timeline", "version": 1,
                               "meta": {"source": "measured", "units": "ms", "family": "1f1b", "pp": 11}, "events": events}))
    _export(src, "chrome", tmp_path / "t.json")
    trace = json.loads((tmp_path / "t.json").read_text())
    ev_ = trace["traceEvents"]
    assert [e["pid"] for e in ev_ if e["ph"] == "M" and e["name"] == "process_name"] == [2, 9, 10]
    xs = {e["args"]["op"]: (e["pid"], e["ts"], e["dur"]) for e in ev_ if e["ph"] == "X"}
    assert xs == {"r2/compute/F s2 mb0": (2, 0.0, 250.0), "r9/compute/F s9 mb0": (9, 250.0, 250.0),
                  "r10/compute/F s10 mb0": (10, 500.0, 500.0), "r10/compute/B s10 mb0": (10, 1000.0, 0.0)}
    assert trace["otherData"]["us_per_unit"] == 1000.0
