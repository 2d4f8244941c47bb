"""pptl diagnose against torchfrtrace (torch's ``python -m torch.distributed.flight_recorder.fr_trace DIR
--prefix nccl_trace_rank_``, torch 2.13.0) on hangs built here: on every one, pptl's first line names at
least what torchfrtrace names (ranks, group, sequence number, what differs), and it does not call a
mismatch what torchfrtrace accepts (an all_to_all's uneven splits, a scatter's root).

torchfrtrace is not needed here: its verdicts on the same dumps were recorded once (2026-11-27) and are
quoted in the comments, with the words it printed. The dumps follow torch's format 2.10 as
fixtures/flight_recorder/make_fixtures.py writes them.
"""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app

runner = CliRunner()
N = [16, 64]
DEF = ("0", "default_pg")


class _Rank:
    """One rank's ring buffer (collectives and sends/receives numbered as torch numbers them)."""

    def __init__(self, rank: int) -> None:
        self.rank, self.entries, self.p2p_seq, self.coll_seq = rank, [], {}, {}

    def _add(self, group, name, ins, outs, state, p2p, dt_in=None, dt_out=None) -> None:
        k = len(self.entries)
        t = 1_795_000_000_000_000_000 + 1000 * k
        self.entries.append({
            "record_id": k, "pg_id": int(group[0]), "process_group": group,
            "collective_seq_id": self.coll_seq.get(group[0], 0), "p2p_seq_id": self.p2p_seq.get(group[0], 0),
            "op_id": k + 1, "profiling_name": name, "time_created_ns": t, "input_sizes": ins,
            "input_dtypes": dt_in or ["Float"] * len(ins), "output_sizes": outs,
            "output_dtypes": dt_out or ["Float"] * len(outs), "state": state, "is_p2p": p2p,
            "time_discovered_started_ns": t + 10 if state != "scheduled" else None,
            "time_discovered_completed_ns": t + 20 if state == "completed" else None,
            "retired": state == "completed", "timeout_ms": 10000,
        })

    def coll(self, group, kind: str, ins, state: str = "completed", outs=None, dt=None) -> "_Rank":
        self.coll_seq[group[0]] = self.coll_seq.get(group[0], 0) + 1
        self._add(group, f"nccl:{kind}", ins, ins if outs is None else outs, state, False, dt, dt)
        return self

    def p2p(self, group, kind: str, me: int, peer: int, sizes, state: str = "completed") -> "_Rank":
        self.p2p_seq[group[0]] = self.p2p_seq.get(group[0], 0) + 1
        name = f"nccl:send {me}->{peer}" if kind == "send" else f"nccl:recv {me}<-{peer}"
        self._add(group, name, [sizes], [sizes], state, True)
        return self


def _write(folder: Path, ranks: list[_Rank], groups: dict, per_rank: dict | None = None) -> Path:
    folder.mkdir()
    for r in ranks:
        gs = (per_rank or {}).get(r.rank, groups)
        cfg = {g: {"name": g, "desc": desc, "ranks": str(m)} for g, (desc, m) in gs.items()}
        dump = {"version": "2.10", "comm_lib_version": "2.27.3", "pg_config": cfg, "entries": r.entries}
        (folder / f"nccl_trace_rank_{r.rank}").write_bytes(pickle.dumps(dump, protocol=2))
    return folder


def _diagnose(folder: Path, code: int = 1) -> tuple[list[str], dict]:
    text = runner.invoke(app, ["diagnose", str(folder)])
    assert text.exit_code == code, text.output
    js = runner.invoke(app, ["diagnose", str(folder), "--output", "json"])
    assert js.exit_code == code, js.output
    return text.stdout.splitlines(), json.loads(js.stdout)


def _ranks(n: int) -> list[_Rank]:
    return [_Rank(r) for r in range(n)]


# 1. all_to_all: splits that differ per rank are no fault -------------------------------------------------


def _a2a_uneven(state: str = "completed") -> list[_Rank]:
    # all_to_all_single with uneven splits: rank 0 sends 12 rows and receives 10, rank 1 sends 4 and
    # receives 6 (16 rows go in, 16 come out)
    rs = _ranks(2)
    rs[0].coll(DEF, "all_to_all", [[12, 8]], outs=[[10, 8]])
    rs[1].coll(DEF, "all_to_all", [[4, 8]], outs=[[6, 8]])
    for r in rs:
        r.coll(DEF, "all_reduce", [N], state)
    return rs


def test_uneven_all_to_all_that_completed_is_no_hang(tmp_path: Path) -> None:
    # torchfrtrace: no error on these dumps (its all_to_all check adds every member's input and output
    # numel: "Input/output mismatch" only where the totals differ). pptl said "collectives of different
    # sizes ... rank 0 all_to_all of 96 elements, rank 1 all_to_all of 32 elements" and exit 1.
    lines, data = _diagnose(_write(tmp_path / "d", _a2a_uneven(), {"0": ("default_pg", [0, 1])}), code=0)
    assert lines[0] == "no hang: every call completed and the counts, sizes and kinds match"
    assert data["collective_diffs"] == [] and data["cause"]["kind"] == "none"


def test_uneven_all_to_all_is_not_the_cause_of_a_later_hang(tmp_path: Path) -> None:
    lines, data = _diagnose(_write(tmp_path / "d", _a2a_uneven("started"), {"0": ("default_pg", [0, 1])}))
    assert "different sizes" not in "\n".join(lines)
    assert data["cause"]["kind"] == "pending" and data["collective_diffs"] == []


def test_uneven_all_to_all_a_member_has_not_reached(tmp_path: Path) -> None:
    # torchfrtrace: "Collective sequence number: 2 has errors ... collective: nccl:all_to_all ... error msg:
    # Culprit rank 2; Error type: COLLECTIVE_STATE_MISMATCH, Expected state: 'started' does not match found
    # state: 'scheduled'". pptl said "collectives of different sizes at one sequence number" (96, 32, 40).
    rs = _ranks(3)
    for r in rs:
        r.coll(DEF, "all_reduce", [[1]])
    rs[0].coll(DEF, "all_to_all", [[12, 8]], "started", outs=[[10, 8]])
    rs[1].coll(DEF, "all_to_all", [[4, 8]], "started", outs=[[6, 8]])
    rs[2].coll(DEF, "all_to_all", [[5, 8]], "scheduled", outs=[[5, 8]])
    lines, data = _diagnose(_write(tmp_path / "d", rs, {"0": ("default_pg", [0, 1, 2])}))
    assert lines[0].startswith("rank 2 has not reached all_to_all #2 (group default_pg; scheduled) that ranks 0, 1 "
                               "are in (started)"), lines[0]
    assert data["cause"]["kind"] == "collective_state" and data["cause"]["ranks"][0] == 2


def test_all_to_all_whose_totals_differ_is_a_size_fault(tmp_path: Path) -> None:
    # torchfrtrace: "Input/output mismatch in the collective sequence number: 1 ... collective:
    # nccl:all_to_all ... total input numel: 128 ... total output numel: 144"
    rs = _ranks(2)
    rs[0].coll(DEF, "all_to_all", [[12, 8]], "started", outs=[[10, 8]])
    rs[1].coll(DEF, "all_to_all", [[4, 8]], "started", outs=[[8, 8]])
    lines, data = _diagnose(_write(tmp_path / "d", rs, {"0": ("default_pg", [0, 1])}))
    assert lines[0] == ("collectives of different sizes at one sequence number: collective #1 of group default_pg is "
                        "rank 0 all_to_all of 96 elements into 80, rank 1 all_to_all of 32 elements into 64; the "
                        "members send 128 elements in all but receive 144 (an all_to_all's splits may differ per "
                        "rank, their totals may not)")
    d = data["collective_diffs"][0]
    assert (d["seq"], d["differs"], d["total_in"], d["total_out"]) == (1, "size", 128, 144)
    assert "hang: wait-for cycle" not in "\n".join(lines)  # one call with wrong splits, not two calls


def test_scatter_and_gather_roots_hold_the_list(tmp_path: Path) -> None:
    # scatter's input and gather's output are on the root only. torchfrtrace names only the hang:
    # "Not all ranks joining collective, sequence number: 4 ... collective: nccl:all_reduce ... missing
    # ranks: {2}". pptl led with "collectives of different sizes ... rank 0 scatter of 96 elements, rank 1
    # scatter (no sizes recorded)".
    rs = _ranks(3)
    rs[0].coll(DEF, "scatter", [[3, 4, 8]], outs=[[4, 8]])
    rs[1].coll(DEF, "scatter", [], outs=[[4, 8]])
    rs[2].coll(DEF, "scatter", [], outs=[[4, 8]])
    rs[0].coll(DEF, "gather", [[4, 8]], outs=[[3, 4, 8]])
    rs[1].coll(DEF, "gather", [[4, 8]], outs=[])
    rs[2].coll(DEF, "gather", [[4, 8]], outs=[])
    for r in rs:
        r.coll(DEF, "broadcast", [N])
    for r in rs[:2]:
        r.coll(DEF, "all_reduce", [N], "started")
    lines, data = _diagnose(_write(tmp_path / "d", rs, {"0": ("default_pg", [0, 1, 2])}))
    assert lines[0].startswith("rank 2 stopped issuing: its last call r2 broadcast #3 (group default_pg) completed, "
                               "and ranks 0, 1 wait for it in r0 all_reduce #4 (group default_pg)"), lines[0]
    assert data["collective_diffs"] == []
    assert [(g["first"], g["missing_ranks"]) for g in data["collective_gaps"]] == [(4, [2])]


# 2. outputs must agree too (a group size one rank has wrong) --------------------------------------------


@pytest.mark.parametrize("kind,ins,outs,seen", [
    # torchfrtrace: "Culprit rank 1; Error type: SIZE_OR_SYNTAX_MISMATCH, Expected output sizes: '[[8, 8]]'
    # does not match found output sizes: '[[12, 8]]'" (rank 1 gathers for 3 ranks in a group of 2)
    ("all_gather", [[4, 8]], ([[8, 8]], [[12, 8]]), "all_gather of 32 elements into 64, rank 1 all_gather of 32 "
                                                    "elements into 96"),
    # torchfrtrace: "... Expected output sizes: '[[2, 8]]' does not match found output sizes: '[[1, 8]]'"
    ("reduce_scatter", [[4, 8]], ([[2, 8]], [[1, 8]]), "reduce_scatter of 32 elements into 16, rank 1 "
                                                       "reduce_scatter of 32 elements into 8"),
])
def test_a_collective_whose_outputs_differ(tmp_path: Path, kind: str, ins, outs, seen: str) -> None:
    # pptl compared inputs only and said "ranks 0, 1 wait in ...; the dumps show no count, size, order or cycle"
    rs = _ranks(2)
    for r, out in zip(rs, outs):
        r.coll(DEF, kind, ins, "started", outs=out)
    lines, data = _diagnose(_write(tmp_path / "d", rs, {"0": ("default_pg", [0, 1])}))
    assert lines[0] == ("collectives of different sizes at one sequence number: collective #1 of group default_pg is "
                        f"rank 0 {seen}")
    assert data["cause"]["kind"] == "collective_size"


def test_ranks_that_disagree_on_a_groups_members(tmp_path: Path) -> None:
    # rank 1 made group "1" of ranks [0, 1], ranks 0 and 2 of [0, 1, 2]. torchfrtrace keys groups by name
    # and members, so it sees two groups: "Not all ranks joining collective, sequence number: 1 ... group
    # info: 1:dp ... missing ranks: {1}", then the same with "missing ranks: {0}". pptl said "ranks 0-2 wait
    # in r0 all_reduce #1 (group dp) and more; the dumps show no count, size, order or cycle that explains it".
    rs = _ranks(3)
    for r in rs:
        r.coll(DEF, "all_reduce", [[1]]).coll(("1", "dp"), "all_reduce", [N], "started")
    groups = {"0": ("default_pg", [0, 1, 2]), "1": ("dp", [0, 1, 2])}
    lines, data = _diagnose(_write(tmp_path / "d", rs, groups, {1: {"0": ("default_pg", [0, 1, 2]),
                                                                    "1": ("dp", [0, 1])}}))
    assert lines[0].startswith("the dumps disagree on the members of group dp: ranks 0, 2 list ranks 0-2, rank 1 "
                               "lists ranks 0, 1"), lines[0]
    assert "ranks 0-2 wait in r0 all_reduce #1 (group dp)" in lines[0]
    assert data["cause"]["kind"] == "group_members" and data["cause"]["ranks"][0] == 1
    assert data["group_members"][0]["views"] == [{"members": [0, 1, 2], "ranks": [0, 2]},
                                                 {"members": [0, 1], "ranks": [1]}]


def test_agreeing_members_are_no_fact(tmp_path: Path) -> None:
    rs = _ranks(2)
    for r in rs:
        r.coll(DEF, "all_reduce", [N])
    _, data = _diagnose(_write(tmp_path / "d", rs, {"0": ("default_pg", [0, 1])}), code=0)
    assert data["group_members"] == []


# 3. many ranks: the one that differs is named ----------------------------------------------------------


def test_twelve_ranks_one_size_differs(tmp_path: Path) -> None:
    # torchfrtrace: "Collective sequence number: 2 has errors ... error msg: Culprit rank 10; Error type:
    # SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[16, 64]]' does not match found input sizes:
    # '[[16, 65]]'". pptl listed the twelve ranks one by one and named no culprit.
    rs = _ranks(12)
    for r in rs:
        r.coll(DEF, "all_reduce", [N]).coll(DEF, "all_reduce", [[16, 65]] if r.rank == 10 else [N], "started")
    lines, data = _diagnose(_write(tmp_path / "d", rs, {"0": ("default_pg", list(range(12)))}))
    assert lines[0] == ("collectives of different sizes at one sequence number: collective #2 of group default_pg is "
                        "ranks 0-9, 11 all_reduce of 1024 elements, rank 10 all_reduce of 1040 elements: rank 10 "
                        "differs from the other 11")
    assert data["cause"]["ranks"][0] == 10


def test_twelve_ranks_subgroup_kind(tmp_path: Path) -> None:
    # torchfrtrace: "group info: 5:tp3 ... error msg: Culprit rank 9; Error type: COLLECTIVE_TYPE_MISMATCH,
    # Expected collective type: 'all_reduce' does not match found collective type: 'broadcast'"
    rs = _ranks(12)
    for r in rs:
        r.coll(DEF, "all_reduce", [[1]])
    for r in rs[8:]:
        r.coll(("5", "tp3"), "broadcast" if r.rank == 9 else "all_reduce", [N], "started")
    lines, data = _diagnose(_write(tmp_path / "d", rs, {"0": ("default_pg", list(range(12))),
                                                        "5": ("tp3", [8, 9, 10, 11])}))
    assert lines[0] == ("a collective of another kind at one sequence number: collective #1 of group tp3 is "
                        "ranks 8, 10, 11 all_reduce of 1024 elements, rank 9 broadcast of 1024 elements: rank 9 "
                        "differs from the other 3")
    assert data["cause"]["ranks"][0] == 9


def test_dtype_of_one_rank_in_three(tmp_path: Path) -> None:
    # torchfrtrace: "Culprit rank 1; Error type: COLLECTIVE_DTYPE_MISMATCH, Expected dtypes: '{'Float'}' does
    # not match found dtype: '{'Float'}/{'BFloat16'}/{'BFloat16'}'"
    rs = _ranks(3)
    for r in rs:
        r.coll(DEF, "all_reduce", [N], "started", dt=["BFloat16"] if r.rank == 1 else ["Float"])
    lines, data = _diagnose(_write(tmp_path / "d", rs, {"0": ("default_pg", [0, 1, 2])}))
    assert lines[0] == ("collectives of different dtypes at one sequence number: collective #1 of group default_pg is "
                        "ranks 0, 2 all_reduce of 1024 elements Float, rank 1 all_reduce of 1024 elements BFloat16: "
                        "rank 1 differs from the other 2")
    assert data["cause"]["ranks"][0] == 1


# 4. cases where pptl already said what torchfrtrace says (kept so that it stays so) ---------------------


def test_rank_that_never_joined_a_group(tmp_path: Path) -> None:
    # torchfrtrace: "Not all ranks joining collective, sequence number: 1 ... group info: 1:tp ... missing ranks: {2}"
    rs = _ranks(3)
    for r in rs:
        r.coll(DEF, "all_reduce", [[1]])
    for r in rs[:2]:
        r.coll(("1", "tp"), "all_reduce", [N], "started")
    lines, data = _diagnose(_write(tmp_path / "d", rs, {"0": ("default_pg", [0, 1, 2]), "1": ("tp", [0, 1, 2])}))
    assert lines[0].startswith("rank 2 stopped issuing") and "ranks 0, 1 wait for it in r0 all_reduce #1 (group tp)" \
        in lines[0]
    assert [(g["first"], g["missing_ranks"]) for g in data["collective_gaps"]] == [(1, [2])]


def test_one_group_fine_and_another_hung(tmp_path: Path) -> None:
    # torchfrtrace: "Not all ranks joining collective, sequence number: 3 ... group info: 2:dp_b ... missing ranks: {3}"
    rs = _ranks(4)
    for r in rs:
        r.coll(DEF, "barrier", [[1]])
    for r in rs[:2]:
        for _ in range(3):
            r.coll(("1", "dp_a"), "all_reduce", [N])
    for k in range(3):
        rs[2].coll(("2", "dp_b"), "all_reduce", [N], "started" if k == 2 else "completed")
    for _ in range(2):
        rs[3].coll(("2", "dp_b"), "all_reduce", [N])
    lines, _ = _diagnose(_write(tmp_path / "d", rs, {"0": ("default_pg", [0, 1, 2, 3]), "1": ("dp_a", [0, 1]),
                                                     "2": ("dp_b", [2, 3])}))
    assert lines[0] == ("rank 3 stopped issuing: its last call r3 all_reduce #2 (group dp_b) completed, and rank 2 "
                        "waits for it in r2 all_reduce #3 (group dp_b)")


def test_send_that_waits_while_the_peer_is_in_a_collective(tmp_path: Path) -> None:
    # torchfrtrace: "Not all ranks joining collective ... collective: nccl:send 0->1 ... missing ranks: {1}",
    # then "collective: nccl:all_reduce ... missing ranks: {0}"
    rs = _ranks(2)
    for r in rs:
        r.coll(DEF, "all_reduce", [[1]])
    rs[0].p2p(("1", "pp"), "send", 0, 1, N).p2p(("1", "pp"), "send", 0, 1, N, "started")
    rs[1].p2p(("1", "pp"), "recv", 1, 0, N).coll(DEF, "all_reduce", [N], "started")
    lines, data = _diagnose(_write(tmp_path / "d", rs, {"0": ("default_pg", [0, 1]), "1": ("pp", [0, 1])}))
    assert lines[0].startswith("rank 0 sent 2 messages to rank 1 (group pp), which posted only 1 receive")
    assert [(g["first"], g["missing_ranks"]) for g in data["collective_gaps"]] == [(2, [0])]
