"""Real hangs and runs that are not the corpus's: what ``pptl diagnose``, ``explain`` and ``compare`` say
about dumps and timelines a user brings, built here by hand so that the expected answer is worked out
from what the files hold, not from the code under test.

Dumps follow torch's format 2.10 (the fields :mod:`pptl.formats.flight_recorder` documents); each test
says which ranks issued what, and so which rank and call the first line must name.
"""
from __future__ import annotations

import copy
import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from pptl.cli import app

runner = CliRunner()
DATA = Path(__file__).resolve().parent / "data"
T0 = 1_795_000_000_000_000_000


# ----------------------------------------------------------------------------------------------
# Dumps by hand


@dataclass
class _Rank:
    """One rank's ring buffer, written call by call as torch records them."""

    rank: int
    entries: list[dict[str, Any]] = field(default_factory=list)
    coll: dict[str, int] = field(default_factory=dict)
    p2p: dict[str, int] = field(default_factory=dict)

    def _add(self, group: tuple[str, str], name: str, shape: list[int], dtype: str, state: str, is_p2p: bool) -> None:
        k = len(self.entries)
        t = T0 + 1000 * k
        self.entries.append({
            "record_id": k, "pg_id": int(group[0]), "process_group": group,
            "collective_seq_id": self.coll.get(group[0], 0), "p2p_seq_id": self.p2p.get(group[0], 0),
            "op_id": k + 1, "profiling_name": name, "time_created_ns": t,
            "input_sizes": [shape], "input_dtypes": [dtype], "output_sizes": [shape], "output_dtypes": [dtype],
            "state": state, "is_p2p": is_p2p, "retired": state == "completed", "timeout_ms": 10000,
            "time_discovered_started_ns": t + 10 if state != "scheduled" else None,
            "time_discovered_completed_ns": t + 20 if state == "completed" else None})

    def collective(self, kind: str, state: str, *, group: tuple[str, str] = ("0", "default_pg"),
                   shape: tuple[int, ...] = (1024,), dtype: str = "Float") -> None:
        self.coll[group[0]] = self.coll.get(group[0], 0) + 1
        self._add(group, f"nccl:{kind}", list(shape), dtype, state, False)

    def send(self, peer: int, state: str, *, dtype: str = "Float", shape: tuple[int, ...] = (16, 64)) -> None:
        self.p2p["0"] = self.p2p.get("0", 0) + 1
        self._add(("0", "default_pg"), f"nccl:send {self.rank}->{peer}", list(shape), dtype, state, True)

    def recv(self, peer: int, state: str, *, dtype: str = "Float", shape: tuple[int, ...] = (16, 64)) -> None:
        self.p2p["0"] = self.p2p.get("0", 0) + 1
        self._add(("0", "default_pg"), f"nccl:recv {self.rank}<-{peer}", list(shape), dtype, state, True)


def _groups(**named: list[int]) -> dict[str, dict[str, str]]:
    """pg_config: the default group over ``world`` ranks, then one group per name, numbered from 1."""
    world = named.pop("world")
    out = {"0": {"name": "0", "desc": "default_pg", "ranks": str(world)}}
    for k, (desc, ranks) in enumerate(named.items(), start=1):
        out[str(k)] = {"name": str(k), "desc": desc, "ranks": str(ranks)}
    return out


def _dumps(folder: Path, ranks: list[_Rank], pg: dict[str, Any]) -> Path:
    folder.mkdir()
    for r in ranks:
        raw = {"version": "2.10", "pg_config": pg, "pg_status": {}, "entries": r.entries}
        (folder / f"nccl_trace_rank_{r.rank}").write_bytes(pickle.dumps(raw))
    return folder


def _diagnose(folder: Path) -> dict[str, Any]:
    result = runner.invoke(app, ["diagnose", str(folder), "--output", "json"])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return json.loads(result.stdout)


def _one_error_line(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


# ----------------------------------------------------------------------------------------------
# 1. dtypes: NCCL matches element types too; a Float all_reduce against a BFloat16 one of the same
#    count hangs or reduces garbage, and the dumps record both (input_dtypes / output_dtypes).


def test_a_collective_of_another_dtype_is_the_cause(tmp_path: Path) -> None:
    # both ranks: all_reduce #1 of 1024 Float completed; #2 of 1024 elements, Float on rank 0 and
    # BFloat16 on rank 1, both started and never done. Counts, kinds and sizes agree: only the dtype differs.
    a, b = _Rank(0), _Rank(1)
    for r in (a, b):
        r.collective("all_reduce", "completed")
    a.collective("all_reduce", "started", dtype="Float")
    b.collective("all_reduce", "started", dtype="BFloat16")
    out = _diagnose(_dumps(tmp_path / "d", [a, b], _groups(world=[0, 1])))
    assert out["cause"]["kind"] == "collective_dtype"
    assert out["cause"]["ranks"] == [0, 1]
    assert out["cause"]["text"] == (
        "collectives of different dtypes at one sequence number: collective #2 of group default_pg is "
        "rank 0 all_reduce of 1024 elements Float, rank 1 all_reduce of 1024 elements BFloat16")
    assert [(d["seq"], d["differs"]) for d in out["collective_diffs"]] == [(2, "dtype")]


def test_a_send_and_its_receive_of_other_dtypes_are_the_cause(tmp_path: Path) -> None:
    # rank 0 sends 16x64 Float (4 KiB), rank 1 receives 16x64 BFloat16 (2 KiB): the same 1024 elements
    a, b = _Rank(0), _Rank(1)
    a.send(1, "started", dtype="Float")
    b.recv(0, "started", dtype="BFloat16")
    out = _diagnose(_dumps(tmp_path / "d", [a, b], _groups(world=[0, 1])))
    assert out["cause"]["kind"] == "p2p_size"
    assert out["cause"]["ranks"] == [0, 1]
    assert out["cause"]["text"] == (
        "a send and its receive of different dtypes: rank 0 sends 16x64 Float to rank 1 "
        "(r0 send->1 #1 (group default_pg)), which receives 16x64 BFloat16 (r1 recv<-0 #1 (group default_pg)): "
        "1024 elements of Float vs BFloat16 (1 of 1 transfer of the pair differ)")


def test_matching_dtypes_are_no_fact_and_a_bad_dtype_field_is_one_line(tmp_path: Path) -> None:
    a, b = _Rank(0), _Rank(1)
    for r in (a, b):
        r.collective("all_reduce", "completed", dtype="BFloat16")
    ok = runner.invoke(app, ["diagnose", str(_dumps(tmp_path / "ok", [a, b], _groups(world=[0, 1])))])
    assert ok.exit_code == 0, ok.output
    a.entries[0]["input_dtypes"] = [7]
    line = _one_error_line(["diagnose", str(_dumps(tmp_path / "bad", [a, b], _groups(world=[0, 1])))])
    assert line.endswith("nccl_trace_rank_0: entries[0]: field 'input_dtypes': got a list of 1 item, expected a "
                         "list of dtype names (strings of at most 64 characters, such as 'Float')")


def test_a_call_recorded_without_dtypes_is_no_evidence_of_a_dtype_mismatch(tmp_path: Path) -> None:
    # A dump of a torch that records no dtypes (input_dtypes and output_dtypes absent) beside one that does:
    # rank 0's all_reduce #1 of 1024 Float and its send of 16x64 Float to rank 1, rank 1's all_reduce #1 of
    # 1024 elements and its receive of 16x64 from rank 0 with no dtypes. All completed, counts and sizes
    # agree: nothing hung and nothing is known to differ, so diagnose exits 0 as for matching dtypes.
    a, b = _Rank(0), _Rank(1)
    for r in (a, b):
        r.collective("all_reduce", "completed")
    a.send(1, "completed")
    b.recv(0, "completed")
    for e in b.entries:
        del e["input_dtypes"], e["output_dtypes"]
    ok = runner.invoke(app, ["diagnose", str(_dumps(tmp_path / "coll", [a, b], _groups(world=[0, 1]))),
                             "--output", "json"])
    assert ok.exit_code == 0, ok.output
    out = json.loads(ok.stdout)
    assert out["collective_diffs"] == [] and out["size_mismatches"] == []


# ----------------------------------------------------------------------------------------------
# 2. ranks stuck in collectives of different groups: a cycle that no order sentence describes; the
#    first line must still name the two calls.


def test_ranks_stuck_in_different_groups_name_both_calls(tmp_path: Path) -> None:
    # rank 0 waits in all_reduce #1 of group tp, which rank 1 never issued; rank 1 waits in
    # all_gather #1 of group dp, which rank 0 never issued (both groups are ranks 0 and 1)
    a, b = _Rank(0), _Rank(1)
    a.collective("all_reduce", "started", group=("1", "tp"))
    b.collective("all_gather", "started", group=("2", "dp"))
    out = _diagnose(_dumps(tmp_path / "d", [a, b], _groups(world=[0, 1], tp=[0, 1], dp=[0, 1])))
    assert out["cause"]["kind"] == "cycle"
    text = out["cause"]["text"]
    assert text.startswith("wait-for cycle across ranks 0, 1: ")
    # before: the sentence ended after the ranks, naming no call
    assert "r0 all_reduce #1 (group tp) waits for r1 all_gather #1 (group dp) (rank 1 issues its side only " \
           "after this)" in text
    assert "r1 all_gather #1 (group dp) waits for r0 all_reduce #1 (group tp) (rank 0 issues its side only " \
           "after this)" in text


# ----------------------------------------------------------------------------------------------
# 3. a group made again under its name numbers its collectives from #1 again; the recorder keeps the
#    older calls, so one dump holds two calls "#2".


def test_a_group_numbered_again_blames_the_rank_that_stopped(tmp_path: Path) -> None:
    # both ranks: #1, #2 completed; the group is made again; #1 completed on both. Then rank 0 issues the new
    # #2 (started) and rank 1 issues nothing more. Rank 1 stopped; rank 0 is not behind anything.
    a, b = _Rank(0), _Rank(1)
    for r in (a, b):
        r.collective("all_reduce", "completed")
        r.collective("all_reduce", "completed")
        r.coll["0"] = 0  # destroy_process_group + init_process_group: numbers start again
        r.collective("all_reduce", "completed")
    a.collective("all_reduce", "started")
    out = _diagnose(_dumps(tmp_path / "d", [a, b], _groups(world=[0, 1])))
    # before: "rank 0 has not reached all_reduce #2 ... that rank 1 is in (completed)" -- the old #2
    assert out["cause"]["kind"] == "stopped"
    assert out["cause"]["ranks"] == [1, 0]
    assert out["cause"]["text"] == (
        "rank 1 stopped issuing: its last call r1 all_reduce #1 (group default_pg) completed, and rank 0 waits for "
        "it in r0 all_reduce #2 (group default_pg)")
    assert [(g["first"], g["last"], g["missing_ranks"]) for g in out["collective_gaps"]] == [(2, 2, [1])]
    assert any("start again at #1 after #2" in n for n in out["notes"])


def test_a_coalesced_collective_shares_one_number_and_is_no_new_numbering(tmp_path: Path) -> None:
    # torch bumps the collective number once per coalesced group (startCoalescing): both ranks record two
    # all_reduce members at #1 (no events of their own: "scheduled") and then the nccl:coalesced entry #1,
    # completed. Then rank 0 issues all_reduce #2 (started) and rank 1 nothing more. Two calls at #1 on a
    # rank are one group, not a group made again: no note, and the diagnosis is an ordinary stop, rank 1's
    # last call (its second member, which takes the group's state) completed, rank 0 waiting in #2.
    a, b = _Rank(0), _Rank(1)
    for r in (a, b):
        r.coll["0"] = 1
        for _ in range(2):
            r._add(("0", "default_pg"), "nccl:all_reduce", [1024], "Float", "scheduled", False)
        r._add(("0", "default_pg"), "nccl:coalesced", [], "Float", "completed", False)
        r.entries[-1].update(input_sizes=[], output_sizes=[], input_dtypes=[], output_dtypes=[])
    a.collective("all_reduce", "started")
    out = _diagnose(_dumps(tmp_path / "d", [a, b], _groups(world=[0, 1])))
    assert not any("start again" in n for n in out["notes"]), out["notes"]
    assert out["cause"]["kind"] == "stopped"
    assert out["cause"]["ranks"] == [1, 0]
    assert out["cause"]["text"] == (
        "rank 1 stopped issuing: its last call r1 all_reduce #1 (group default_pg) completed, and rank 0 waits for "
        "it in r0 all_reduce #2 (group default_pg)")
    assert [(g["first"], g["last"], g["missing_ranks"]) for g in out["collective_gaps"]] == [(2, 2, [1])]


# ----------------------------------------------------------------------------------------------
# 4. two-digit ranks: file names sort rank_10 before rank_2; every rank and range must still be numeric


def test_twelve_ranks_with_rank_10_missing(tmp_path: Path) -> None:
    ranks = [_Rank(r) for r in range(12)]
    for r in ranks:
        r.collective("all_reduce", "completed")
        r.collective("all_reduce", "started")
    out = _diagnose(_dumps(tmp_path / "d", [r for r in ranks if r.rank != 10], _groups(world=list(range(12)))))
    assert out["cause"]["kind"] == "missing_dump"
    assert out["cause"]["ranks"] == [10, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11]
    assert out["cause"]["text"].startswith("rank 10 left no dump and ranks 0-9, 11 wait for it in "
                                           "r0 all_reduce #2 (group default_pg)")


# ----------------------------------------------------------------------------------------------
# 5. explain: a rank of the run that the timeline does not hold is said, not dropped in silence


def test_explain_notes_ranks_without_events_or_compute(tmp_path: Path) -> None:
    src = json.loads((DATA / "runs" / "1f1b_h200.measured.json").read_text())
    assert src["meta"]["pp"] == 4
    no3 = copy.deepcopy(src)
    no3["events"] = [e for e in no3["events"] if e["rank"] != 3]
    (tmp_path / "no3.json").write_text(json.dumps(no3))
    out = runner.invoke(app, ["explain", str(tmp_path / "no3.json"), "--output", "json"])
    assert out.exit_code == 0, out.output
    x = json.loads(out.stdout)
    assert [r["rank"] for r in x["ranks"]] == [0, 1, 2]
    assert "rank 3 has no events in the timeline (pp=4): the waits of the ranks that take its outputs show as " \
           "transfer or host gap, not as its delay" in x["notes"]
    no_compute = copy.deepcopy(src)
    no_compute["events"] = [e for e in no_compute["events"] if not (e["rank"] == 2 and e["lane"] == "compute")]
    (tmp_path / "nc2.json").write_text(json.dumps(no_compute))
    out = runner.invoke(app, ["explain", str(tmp_path / "nc2.json"), "--output", "json"])
    assert out.exit_code == 0, out.output
    assert any(n.startswith("rank 2 has no compute events in the timeline (pp=4)") for n in json.loads(out.stdout)["notes"])


def test_an_event_list_of_a_rank_that_recorded_nothing_is_that_rank(tmp_path: Path) -> None:
    # three ranks of GPipe (F then B, 1 ms each, 2 micro-batches, stage = rank); rank 1's file has no events
    folder = tmp_path / "ev"
    folder.mkdir()
    for r in range(3):
        events = [] if r == 1 else [
            {"type": "F", "start_time": r + mb, "end_time": r + mb + 1, "minibatch": mb, "stage": r} for mb in range(2)
        ] + [{"type": "B", "start_time": 10 - r + mb, "end_time": 11 - r + mb, "minibatch": mb, "stage": r}
             for mb in range(2)]
        (folder / f"rank{r}.json").write_text(json.dumps({"rank": r, "units": "ms", "events": events}))
    result = runner.invoke(app, ["explain", str(folder)])
    assert result.exit_code == 0, result.output
    # before: "skipped 1 file(s) that are not traces: rank1.json" and then "no file for rank 1"
    assert "not traces" not in result.stderr and "no file for rank 1" not in result.stderr
    assert "note: event lists: 3 files, 8 events in ms" in result.stderr
    assert "note: rank 1 has no events in the timeline (pp=3)" in result.stdout


def test_a_chrome_trace_pptl_exported_is_one_clear_line(tmp_path: Path) -> None:
    chrome = tmp_path / "run.chrome.json"
    exported = runner.invoke(app, ["export", str(DATA / "runs" / "1f1b_h200.measured.json"), "--to", "chrome",
                                   "-o", str(chrome)])
    assert exported.exit_code == 0, exported.output
    for args in (["explain", str(chrome)], ["compare", str(DATA / "runs" / "1f1b_plan.json"), str(chrome)]):
        line = _one_error_line(args)
        # before: "no 'PP:<action>' ranges ...; record the run with torch.profiler around schedule.step()"
        assert line == (f"error: {chrome}: a Chrome trace that pptl exported (for Perfetto), not a profiler trace; "
                        "give pptl the plan or timeline it was exported from")
