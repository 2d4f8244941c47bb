"""Bounded work on hostile input: every reader refuses a 1 GiB file, a gzip bomb and 10**9
micro-batches (or ranks) early, with one line, before reading or building anything big."""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from fuzzing import clean_run, gzip_bomb

from pptl.fileio import MAX_FILE_BYTES
from pptl.schedules import FAMILIES

GIB = 2**30
_TOO_BIG = rf"larger than the {MAX_FILE_BYTES}"


def _sparse(path: Path, size: int = GIB) -> Path:
    """A file of ``size`` bytes that takes no disk (a hole): enough to be refused by its size."""
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def _refused_fast(args: list[str], match: str, within: float = 3.0) -> str:
    # CPU seconds of this process (the CLI runs in it), not wall time: a refusal before the work
    # costs well under a second of CPU however loaded the machine is; doing the work costs minutes.
    t0 = time.process_time()
    code, err = clean_run(args)
    took = time.process_time() - t0
    assert code == 2 and re.search(match, err), (args, code, err)
    assert took < within, f"{args}: refused after {took:.1f} CPU s"
    return err


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("plan") / "plan.json"
    code, _ = clean_run(["plan", "--schedule", "1f1b", "--pp", "2", "--microbatches", "2", "-o", str(p)])
    assert code == 0
    return p


@pytest.mark.parametrize("name,command", [
    ("c.yaml", ["plan"]), ("c.toml", ["plan"]), ("c.json", ["plan"]), ("c.yml", ["check"]),
    ("p.json", ["check"]), ("p.json", ["render"]), ("p.json", ["export", "--to", "chrome"]),
    ("p.json", ["plan", "--from"]), ("s.csv", ["check"]), ("s.csv", ["export", "--to", "torch-csv"]),
    ("s.csv", ["render"]), ("t.json.gz", ["render"]), ("t.json.gz", ["check"]), ("p.json", ["run"]),
], ids=lambda v: v if isinstance(v, str) else "-".join(v))
def test_a_gigabyte_file_is_refused_by_its_size(tmp_path: Path, name: str, command: list[str]) -> None:
    big = _sparse(tmp_path / name)
    _refused_fast(command + [str(big)], rf"{re.escape(str(big))}: file is .*{_TOO_BIG}")


def test_a_gigabyte_file_as_second_input(tmp_path: Path, plan_file: Path) -> None:
    big = _sparse(tmp_path / "m.json")
    _refused_fast(["compare", str(plan_file), str(big)], _TOO_BIG)
    _refused_fast(["plan", "--schedule", "1f1b", "--pp", "2", "--microbatches", "2", "--costs-from", str(big)],
                  _TOO_BIG)


def test_a_gigabyte_trace_in_a_folder(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "rank0.json").write_text(json.dumps([{"type": "F", "start_time": 0, "end_time": 1, "minibatch": 0}]))
    _sparse(folder / "rank1.json")
    _refused_fast(["render", str(folder)], rf"rank1\.json: file is .*{_TOO_BIG}")


def test_a_gzip_bomb_is_refused_while_inflating(tmp_path: Path) -> None:
    """513 MiB of '[' in 0.5 MB of gzip: inflation stops at the limit, nothing is parsed."""
    bomb = tmp_path / "rank0.json.gz"
    bomb.write_bytes(gzip_bomb(MAX_FILE_BYTES + 2**20))
    assert os.path.getsize(bomb) < 2**20
    _refused_fast(["render", str(bomb)], rf"decompresses to more than the {MAX_FILE_BYTES} bytes accepted",
                  within=10.0)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("field,value", [("microbatches", 10**9), ("pp", 10**9), ("vpp", 10**9)])
def test_a_billion_of_anything_is_refused_before_building(tmp_path: Path, family: str, field: str, value: int) -> None:
    cfg = {"schedule": family, "pp": 4, "microbatches": 8, field: value}
    p = tmp_path / "c.json"
    p.write_text(json.dumps(cfg))
    err = _refused_fast(["plan", str(p)], r"^error: ")
    assert str(value) in err.replace(",", ""), err  # the message shows the value it refused


def test_a_billion_microbatches_from_flags() -> None:
    _refused_fast(["plan", "--schedule", "1f1b", "--pp", "4", "--microbatches", "1000000000"],
                  r"--microbatches: got 1000000000, expected at most 1000000")
    _refused_fast(["plan", "--schedule", "1f1b", "--pp", "1000", "--microbatches", "100000"],
                  r"would plan at least 100,000,000 ops, more than the 2,000,000 pptl plans")


def test_event_indices_of_a_billion_stay_small(tmp_path: Path) -> None:
    """A micro-batch index of 10**9 in an event list names one micro-batch, not 10**9 of them."""
    p = tmp_path / "rank0.json"
    p.write_text(json.dumps([{"type": "F", "start_time": 0, "end_time": 1, "minibatch": 10**9},
                             {"type": "B", "start_time": 1, "end_time": 3, "minibatch": 10**9}]))
    t0 = time.process_time()  # CPU seconds: a 10**9 walk would take minutes, a loaded machine does not
    code, _ = clean_run(["render", str(p), "--width", "80"])
    assert code == 0 and time.process_time() - t0 < 3


# Op counts: a file under the size limit can still list more ops than pptl checks (MAX_OPS). The
# limit is lowered here so the test stays small; each reader reads it where it counts.


def _one_timeline(n: int) -> dict:
    ev = [{"op": f"r0/compute/F s0 mb{i}", "rank": 0, "lane": "compute", "kind": "F", "start": i, "end": i + 1}
          for i in range(n)]
    return {"format": "pptl-timeline", "version": 1, "meta": {}, "events": ev}


@pytest.mark.parametrize("module,name,content,match", [
    ("pptl.formats.timeline", "t.json", json.dumps(_one_timeline(11)), r"11 events, more than the 10 pptl accepts"),
    ("pptl.formats.torch_csv", "s.csv", ",".join(f"0F{i}" for i in range(11)) + "\n",
     r"s\.csv:1: more than the 10 actions pptl accepts"),
    ("pptl.formats.profiler", "rank0.json",
     json.dumps([{"type": "F", "start_time": i, "end_time": i + 1, "minibatch": i} for i in range(11)]),
     r"11 events, more than the 10 pptl accepts"),
    ("pptl.formats.trace_actions", "trace.json",
     json.dumps({"traceEvents": [{"ph": "X", "name": f"PP:0F{i}", "ts": i, "dur": 1} for i in range(11)]}),
     r"more than the 10 'PP:<action>' ranges pptl accepts"),
], ids=["timeline-events", "csv-actions", "event-list", "profiler-ranges"])
def test_more_ops_than_max_ops_are_refused(tmp_path: Path, monkeypatch, module: str, name: str, content: str,
                                           match: str) -> None:
    import importlib

    monkeypatch.setattr(importlib.import_module(module), "MAX_OPS", 10)
    p = tmp_path / name
    p.write_text(content)
    _refused_fast(["render", str(p)], match)


def test_a_plan_listing_more_than_max_ops_is_refused(tmp_path: Path, plan_file: Path, monkeypatch) -> None:
    import pptl.formats.plan

    monkeypatch.setattr(pptl.formats.plan, "MAX_OPS", 10)
    _refused_fast(["check", str(plan_file)], r"ops, more than the 10 pptl accepts")
