"""pptl diagnose on the hang corpus: real dumps of 2x H200 (torch 2.11.0+cu130, NCCL 2.28.9, 2026-11-26,
bench/hang_corpus.sh), each folder as the watchdog left it (dumps, the ranks' logs, the plan rank 0 ran).

For every kind the first line names the cause and the ranks, and every fact torchfrtrace printed on the
same dumps (docs/diagnose.md quotes it) is in pptl's evidence. The expected numbers are read off the
dumps by hand: e.g. mb_count's rank 0 holds 4 ``send 0->1`` and 4 ``recv 0<-1`` entries, rank 1 holds 3
``recv 1<-0`` and 3 ``send 1->0``.
"""
from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.diagnose.counts import count_calls
from pptl.diagnose.ops import NcclOp
from pptl.errors import InputError
from pptl.formats.flight_recorder import find_dumps

runner = CliRunner()
FR = Path(__file__).resolve().parent.parent / "fixtures" / "flight_recorder"


def _run(kind: str, *, plan: bool = True, code: int = 1) -> tuple[list[str], dict]:
    args = ["diagnose", str(FR / kind)] + (["--plan", str(FR / kind / "plan.json")] if plan else [])
    text = runner.invoke(app, args)
    assert text.exit_code == code, text.output
    js = runner.invoke(app, [*args, "--output", "json"])
    assert js.exit_code == code, js.output
    return text.stdout.splitlines(), json.loads(js.stdout)


def test_mb_count_names_the_counts_of_both_directions() -> None:
    lines, data = _run("mb_count")
    assert lines[0] == (
        "rank 0 sent 4 activations to rank 1 (group default_pg), which posted only 3 receives; rank 1 sent 3 "
        "gradients back and rank 0 posted 4 receives (the ranks disagree on the number of transfers, 4 vs 3: "
        "micro-batches, vpp or schedule differ? rank 0's 4 is the plan's)")
    assert data["cause"] == {"kind": "p2p_count", "ranks": [0, 1], "text": lines[0]}
    counts = {(c["src"], c["dst"]): (c["sends"], c["recvs"], c["short"], c["moved_on"]) for c in data["p2p_counts"]}
    assert counts == {(0, 1): (4, 3, 1, True), (1, 0): (3, 4, 1, True)}
    # torchfrtrace: "Not all ranks joining collective ... nccl:recv 0<-1 ... missing ranks: {1}"
    assert ("  counts: group default_pg, rank 1 -> rank 0: 3 sends, 4 receives; without a counterpart: "
            "r0/recv/RECV_B s0 mb3 <-r1 (started)") in lines
    # rank 0's 4th send completed with no receive: rank 1's all_reduce ran while rank 0's had not started
    orphan = data["orphans"][0]
    assert orphan["op"]["op"] == "r0/send/SEND_F s0 mb3 ->r1" and orphan["op"]["state"] == "completed"
    assert [c["kind"] for c in orphan["candidates"]] == ["all_reduce"]
    # torchfrtrace: all_reduce #1 "COLLECTIVE_STATE_MISMATCH, Expected state: 'scheduled' ... found ... 'started'"
    assert "  collectives: group default_pg #1: rank 0 all_reduce scheduled, rank 1 all_reduce started (state differs)" \
        in lines


def test_mb_count_without_plan_says_messages() -> None:
    lines, _ = _run("mb_count", plan=False)
    assert lines[0].startswith("rank 0 sent 4 messages to rank 1 (group default_pg), which posted only 3 receives; "
                               "rank 1 sent 3 messages back")
    assert lines[0].endswith("vpp or schedule differ?)")


def test_collective_on_one_rank_names_the_extra_call() -> None:
    lines, data = _run("collective_one_rank")
    assert lines[0] == (
        "rank 0 issued all_reduce of 1 element (#1, group default_pg) that rank 1 never issued: a collective issued "
        "on rank 0 only (2 vs 1 collectives in the group); NCCL paired it with rank 1's all_reduce of 4194304 "
        "elements (started)")
    # torchfrtrace: #1 "Expected input sizes: '[[1]]' does not match found input sizes: '[[4194304]]'"
    assert ("  collectives: group default_pg #1: rank 0 all_reduce of 1 element (started), rank 1 all_reduce of "
            "4194304 elements (started) (size differs)") in lines
    # torchfrtrace: #2 "Not all ranks joining collective ... missing ranks: {1}"
    assert data["collective_gaps"][0]["first"] == 2 and data["collective_gaps"][0]["missing_ranks"] == [1]


def test_rank_that_exited_is_named_from_the_missing_dump() -> None:
    lines, data = _run("rank_exits")
    assert lines[0] == ("rank 1 left no dump and rank 0 waits for it in r0/send/SEND_F s0 mb3 ->r1 (the plan's other "
                        "end: r1/recv/RECV_F s1 mb3 <-r0): rank 1 exited, crashed or was killed before the others "
                        "timed out (its log says why)")
    assert data["cause"]["ranks"] == [1, 0]
    # torchfrtrace: "AssertionError: Missing dump files from ranks {1}"
    assert [m["rank"] for m in data["missing_dumps"]] == [1]


def test_stalled_rank_and_the_plan_op_it_should_issue_next() -> None:
    lines, data = _run("rank_stalls")
    assert lines[0] == (
        "rank 1 stopped issuing: its last call r1/recv/RECV_F s1 mb1 <-r0 completed, and rank 0 waits for it in "
        "r0/send/SEND_F s0 mb3 ->r1; the plan's next call on rank 1 is r1/recv/RECV_F s1 mb2 <-r0 (after "
        "r1/compute/F s1 mb1)")
    assert data["stopped"][0]["plan_next"] == {"op": "r1/compute/F s1 mb1", "comm": "r1/recv/RECV_F s1 mb2 <-r0"}
    # torchfrtrace: "nccl:send 0->1 ... missing ranks: {1}"
    assert data["p2p_counts"][0] | {"unmatched": None} == {
        "group": "0", "src": 0, "dst": 1, "sends": 4, "recvs": 2, "short": 1, "moved_on": False, "unmatched": None}
    lines, _ = _run("rank_stalls", plan=False)
    assert lines[0].endswith("waits for it in r0 send->1 #4 (group default_pg)")


def test_p2p_size_names_both_shapes() -> None:
    lines, data = _run("p2p_size")
    assert lines[0] == (
        "a send and its receive of different sizes: rank 0 sends 8192x4096 to rank 1 (r0/send/SEND_F s0 mb0 ->r1), "
        "which receives 8192x2048 (r1/recv/RECV_F s1 mb0 <-r0): 33554432 vs 16777216 elements (4 of 4 transfers "
        "of the pair differ)")
    # torchfrtrace: "Culprit rank 1; Error type: SIZE_OR_SYNTAX_MISMATCH" (without rank 1's size)
    assert [(z["src"], z["dst"], z["send_elements"], z["recv_elements"]) for z in data["p2p_sizes"]] == [
        (0, 1, 8192 * 4096, 8192 * 2048), (1, 0, 8192 * 2048, 8192 * 4096)]


def test_schedule_family_is_a_cycle_and_the_odd_rank() -> None:
    lines, data = _run("schedule_family")
    assert data["cause"]["kind"] == "cycle" and data["cause"]["ranks"] == [0, 1]
    assert lines[0].startswith("wait-for cycle across ranks 0, 1: rank 0 waits to receive from rank 1 "
                               "(r0/recv/RECV_B s0 mb0 <-r1) while rank 1 waits to receive from rank 0")
    # torchfrtrace: "Culprit rank 1"; pptl: rank 1 is the one off the plan (GPipe against the plan's 1F1B)
    assert lines[0].endswith("; rank 1 does not issue the plan's send/receive order (another schedule?)")


def test_schedule_vpp_counts_twelve_against_four() -> None:
    lines, data = _run("schedule_vpp")
    # interleaved 1F1B, pp 2, vpp 2, m 4 on rank 0: 3 transfers each way per micro-batch; 1F1B on rank 1: 1
    assert lines[0].startswith("rank 0 sent 12 messages to rank 1 (group default_pg), which posted only 4 receives; "
                               "rank 1 sent 4 messages back and rank 0 posted 12 receives")
    assert "rank 0's 12 is the plan's" in lines[0]
    assert data["cause"] == {"kind": "p2p_count", "ranks": [0, 1], "text": lines[0]}


def test_collective_kind() -> None:
    lines, data = _run("collective_kind")
    assert lines[0] == ("a collective of another kind at one sequence number: collective #1 of group default_pg is "
                        "rank 0 all_reduce of 4194304 elements, rank 1 broadcast of 4194304 elements")
    # torchfrtrace: #1 COLLECTIVE_TYPE_MISMATCH; #2 COLLECTIVE_STATE_MISMATCH ('started' vs 'completed')
    assert "  collectives: group default_pg #2: rank 0 all_reduce started, rank 1 all_reduce completed (state differs)" \
        in lines
    assert [(d["seq"], d["differs"]) for d in data["collective_diffs"]] == [(1, "kind"), (2, "state")]


def test_collective_size_fails_although_every_call_completed() -> None:
    lines, data = _run("collective_size")
    assert lines[0] == ("collectives of different sizes at one sequence number: collective #1 of group default_pg is "
                        "rank 0 all_reduce of 4195328 elements, rank 1 all_reduce of 4194304 elements")
    assert not data["hung"]  # exit 1 for the mismatch, not for a hang


def test_collective_dtype_recorded_on_gpus_is_named_as_torchfrtrace_names_it() -> None:
    # 2x H200, 2026-11-27 (bench/hang_corpus.sh, ONLY=collective_dtype): the grads all_reduce in fp32 on rank 0
    # and bf16 on rank 1, 4194304 elements each. NCCL completed both (no hang: the two sides moved different
    # bytes and nothing waited); torchfrtrace: "Culprit rank 1; Error type: COLLECTIVE_DTYPE_MISMATCH, Expected
    # dtypes: '{'Float'}' does not match found dtype: '{'Float'}/{'BFloat16'}/{'BFloat16'}'".
    assert "COLLECTIVE_DTYPE_MISMATCH" in (FR / "collective_dtype" / "torchfrtrace.txt").read_text()
    lines, data = _run("collective_dtype")
    assert lines[0] == ("collectives of different dtypes at one sequence number: collective #1 of group default_pg is "
                        "rank 0 all_reduce of 4194304 elements Float, rank 1 all_reduce of 4194304 elements BFloat16")
    assert "  collectives: group default_pg #1: rank 0 all_reduce of 4194304 elements Float (completed), rank 1 " \
           "all_reduce of 4194304 elements BFloat16 (completed) (dtype differs)" in lines
    assert not data["hung"]
    assert [(d["seq"], d["differs"]) for d in data["collective_diffs"]] == [(1, "dtype")]


def test_p2p_order_receive_first_cycle() -> None:
    lines, data = _run("p2p_order")
    assert lines[0] == (
        "wait-for cycle across ranks 0, 1: rank 0 waits to receive from rank 1 (r0 recv<-1 #1 (group default_pg)) "
        "while rank 1 waits to receive from rank 0 (r1/recv/RECV_F s1 mb1 <-r0); rank 1 issues the matching send 1 "
        "op(s) later (r1/send/SEND_B s1 mb0 ->r0); rank 0 does not issue the plan's send/receive order (another "
        "schedule?)")
    # rank 0's calls are not named by the plan: its 3rd-8th calls only happen to end like a 1F1B step
    assert all(o["op"] is None for o in data["ranks"]["0"]["pending"])
    assert data["p2p_counts"] == [] and data["p2p_sizes"] == []  # 4 each way, equal sizes: order alone


def test_collective_order_on_two_gpus() -> None:
    lines, data = _run("collective_order", plan=False)
    assert lines[0] == ("wait-for cycle across ranks 0, 1: rank 0 issues all_to_all #2 (group ep_dispatch) before "
                        "all_to_all #2 (group ep_combine), but rank 1 issues them the other way round: each side waits "
                        "in the call the other has not reached")
    # torchfrtrace: "Culprit rank 1; COLLECTIVE_STATE_MISMATCH" at #2 of each group
    assert ("  collectives: group ep_dispatch #2: rank 0 all_to_all started, rank 1 all_to_all scheduled "
            "(state differs)") in lines


def test_real_dumps_that_completed_exit_0() -> None:
    """Rank 1 posted its receive of F mb1 after its send of B mb0; on NVLink the 64 MiB sends did not wait."""
    lines, data = _run("completed_p2p_reorder", code=0)
    assert lines[0] == "no hang: every call completed and the counts, sizes and kinds match"
    assert data["cause"]["kind"] == "none"


def test_the_folder_note_goes_to_stderr() -> None:
    r = runner.invoke(app, ["diagnose", str(FR / "mb_count")])
    assert r.stderr.strip() == ("note: skipped 4 files not named nccl_trace_rank_<rank>: plan.json, rank0.log, "
                                "rank1.log, torchfrtrace.txt")


# ----------------------------------------------------------------------------------------------
# Folders


def _dump(path: Path) -> None:
    path.write_bytes(pickle.dumps({"version": "2.10", "pg_config": {}, "entries": []}))


def test_find_dumps_by_prefix(tmp_path: Path) -> None:
    for name in ("nccl_trace_rank_10", "nccl_trace_rank_2.pkl", "rank10.log", "nccl_trace_rank_3.log", "plan.json"):
        _dump(tmp_path / name)
    found = find_dumps([tmp_path])
    assert [(r, f.name) for r, f in found.dumps] == [(2, "nccl_trace_rank_2.pkl"), (10, "nccl_trace_rank_10")]
    assert [f.name for f in found.skipped] == ["nccl_trace_rank_3.log", "plan.json", "rank10.log"]
    assert found.note == ("skipped 3 files not named nccl_trace_rank_<rank>: nccl_trace_rank_3.log, plan.json, "
                          "rank10.log")
    other = tmp_path / "other"
    other.mkdir()
    for name in ("job7.dump-3", "dump-12", "dump-12.log"):
        _dump(other / name)
    found = find_dumps([other], prefix="dump-")  # as torchfrtrace: the prefix anywhere in the name
    assert [(r, f.name) for r, f in found.dumps] == [(3, "job7.dump-3"), (12, "dump-12")]


@pytest.mark.parametrize("names, message", [
    (["a.log"], "no file named nccl_trace_rank_<rank> in the folder (1 other file(s)"),
    (["nccl_trace_rank_1", "sub/nccl_trace_rank_1"], "a second dump for rank 1"),
], ids=["no-dumps", "two-of-one-rank"])
def test_find_dumps_errors(tmp_path: Path, names: list[str], message: str) -> None:
    for n in names:
        (tmp_path / n).parent.mkdir(exist_ok=True)
        _dump(tmp_path / n)
    with pytest.raises(InputError, match=re.escape(message)):
        find_dumps([tmp_path])


def test_hostile_dump_in_a_folder_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text("Traceback ...\n")
    (tmp_path / "nccl_trace_rank_0").write_bytes(b"cos\nsystem\n(S'true'\ntR.")
    r = runner.invoke(app, ["diagnose", str(tmp_path)])
    assert r.exit_code == 2, r.output
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "refused: the pickle asks for os.system" in lines[0], r.output


# ----------------------------------------------------------------------------------------------
# The counting rules, on calls made by hand (two-digit ranks, a count of 0, first and last positions)


def _op(rank: int, index: int, kind: str, *, peer: int = -1, seq: int = 0, nth: int = 0, n: int = 8,
        state: str = "completed", group: str = "0") -> NcclOp:
    return NcclOp(rank, index, group, kind, peer, seq, nth, ((n,),), state)


def test_equal_counts_are_no_fact_and_a_count_of_zero_is_not_moved_on() -> None:
    ops = {10: (_op(10, 0, "send", peer=11), _op(10, 1, "send", peer=11, nth=1, state="started")),
           11: (_op(11, 0, "recv", peer=10),)}
    c = count_calls(ops, {"0": (10, 11)})
    (p,) = c.pairs
    assert (p.src, p.dst, len(p.sends), len(p.recvs), p.short) == (10, 11, 2, 1, 11)
    assert not p.moved_on  # rank 11's receive is its last call: it may not have got further yet
    assert [s.rank for s in c.stopped] == [11] and c.stopped[0].waiting[0].index == 1
    # the same, but rank 11 issued an all_reduce after its receive: it skipped the second one
    ops[11] += (_op(11, 1, "all_reduce", seq=1),)
    assert count_calls(ops, {"0": (10, 11)}).pairs[0].moved_on
    # a send with no receive at all: 0 vs 1 is never "moved on", whatever follows
    ops2 = {0: (_op(0, 0, "send", peer=1, state="started"),), 1: (_op(1, 0, "all_reduce", seq=1),)}
    assert not count_calls(ops2, {"0": (0, 1)}).pairs[0].moved_on


def test_a_rank_whose_dump_holds_no_call_stopped() -> None:
    ops: dict[int, tuple[NcclOp, ...]] = {0: (_op(0, 0, "all_reduce", seq=1, state="started"),), 1: ()}
    c = count_calls(ops, {"0": (0, 1)})
    assert [(s.rank, s.last, [o.rank for o in s.waiting]) for s in c.stopped] == [(1, None, [0])]
    assert [(g.first, g.missing) for g in c.gaps] == [(1, (1,))]


def test_extra_collective_only_when_inserted_before_the_end() -> None:
    grads, metric = 4096, 1
    a = (_op(0, 0, "all_reduce", seq=1, n=metric), _op(0, 1, "all_reduce", seq=2, n=grads, state="scheduled"))
    b = (_op(1, 0, "all_reduce", seq=1, n=grads),)
    (e,) = count_calls({0: a, 1: b}, {"0": (0, 1)}).extra
    assert (e.rank, e.other, e.counts, [o.seq for o in e.extra]) == (0, 1, (2, 1), [1])
    # rank 1 is only behind (its calls are a prefix of rank 0's): no extra call, a gap at #2
    b2 = (_op(1, 0, "all_reduce", seq=1, n=metric),)
    c = count_calls({0: a, 1: b2}, {"0": (0, 1)})
    assert c.extra == () and [(g.first, g.last, g.missing) for g in c.gaps] == [(2, 2, (1,))]


def test_a_wrapped_ring_buffer_is_not_a_missing_collective() -> None:
    # rank 0's buffer lost #1-#4; rank 1 still holds them: not calls rank 0 never issued
    a = tuple(_op(0, k, "all_reduce", seq=s) for k, s in enumerate(range(5, 7)))
    b = tuple(_op(1, k, "all_reduce", seq=s) for k, s in enumerate(range(1, 7)))
    c = count_calls({0: a, 1: b}, {"0": (0, 1)})
    assert c.gaps == () and not c.mismatched
    # its sends are not counted against the peer's receives either: they carry no shared number
    sends = tuple(_op(0, k, "send", peer=1, nth=k) for k in range(2))
    recvs = tuple(_op(1, k, "recv", peer=0, nth=k) for k in range(5))
    assert len(count_calls({0: sends, 1: recvs}, {"0": (0, 1)}).pairs) == 1
    assert count_calls({0: sends, 1: recvs}, {"0": (0, 1)}, frozenset({0})).pairs == ()


def test_same_calls_in_another_order_are_a_reorder_not_a_size_fault() -> None:
    a = (_op(0, 0, "all_to_all", seq=1, n=16, state="started"), _op(0, 1, "all_to_all", seq=2, n=8, state="scheduled"))
    b = (_op(1, 0, "all_to_all", seq=1, n=8, state="started"), _op(1, 1, "all_to_all", seq=2, n=16, state="scheduled"))
    c = count_calls({0: a, 1: b}, {"0": (0, 1)})
    assert [d.reordered for d in c.diffs] == [True, True]


# ----------------------------------------------------------------------------------------------
# The two kinds recorded before on 4x H200 (tests/test_diagnose.py pins their cycles): cycles lead.


def test_real_4gpu_p2p_order_leads_with_the_cycle() -> None:
    csv = FR.parent / "csv" / "invalid" / "hang_nccl_order.csv"
    r = runner.invoke(app, ["diagnose", str(FR / "real_csv_nccl_order"), "--plan", str(csv), "--output", "json"])
    assert r.exit_code == 1, r.output
    cause = json.loads(r.stdout)["cause"]
    assert cause["kind"] == "cycle" and cause["ranks"] == [0, 1]
    assert cause["text"] == ("wait-for cycle across ranks 0, 1: rank 0 sends to rank 1 (r0/send/SEND_F s0 mb3 ->r1) "
                             "while rank 1 sends to rank 0 (r1/send/SEND_B s1 mb0 ->r0); rank 1 issues the matching "
                             "receive 1 op(s) later (r1/recv/RECV_F s1 mb3 <-r0)")


def test_real_4gpu_collective_order_states_the_odd_rank() -> None:
    lines, data = _run("real_a2a_order", plan=False)
    assert lines[0] == ("wait-for cycle across ranks 0-3: ranks 0, 2, 3 issue all_to_all #2 (group ep_dispatch) before "
                        "all_to_all #2 (group ep_combine), but rank 1 issues them the other way round: each side waits "
                        "in the call the other has not reached")
    # torchfrtrace: "Culprit rank 1; Error type: COLLECTIVE_STATE_MISMATCH" on #2 of both groups
    assert [(d["group"], d["seq"], d["differs"], [o["state"] for o in d["ops"]]) for d in data["collective_diffs"]] == [
        ("1", 2, "state", ["started", "scheduled", "started", "started"]),
        ("2", 2, "state", ["scheduled", "started", "scheduled", "scheduled"])]


def test_cli_prefix_option(tmp_path: Path) -> None:
    for r in (0, 1):
        (tmp_path / f"job.trace-{r}").write_bytes((FR / "mb_count" / f"nccl_trace_rank_{r}").read_bytes())
    (tmp_path / "job.log").write_text("...\n")
    r = runner.invoke(app, ["diagnose", str(tmp_path)])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip() == (f"error: {tmp_path}: no file named nccl_trace_rank_<rank> in the folder (3 other "
                                "file(s); torch names dumps by TORCH_FR_DUMP_TEMP_FILE: pass its name as --prefix)")
    r = runner.invoke(app, ["diagnose", str(tmp_path), "--prefix", "trace-"])
    assert r.exit_code == 1, r.output
    assert r.stdout.startswith("rank 0 sent 4 messages to rank 1 (group default_pg), which posted only 3 receives")
    assert r.stderr.strip() == "note: skipped 1 file not named trace-<rank>: job.log"


@pytest.mark.parametrize("kind", ["mb_count", "collective_one_rank", "rank_stalls"])
def test_fuzzed_corpus_dumps_give_a_diagnosis_or_one_line(tmp_path: Path, kind: str) -> None:
    import random

    rnd = random.Random(kind)
    bad = [None, "x", -1, 2**70, [], {"a": 1}, 1.5, ("a",), "nccl:send 0->9"]
    for case in range(12):
        d = tmp_path / f"c{case}"
        d.mkdir()
        for f in sorted((FR / kind).iterdir()):
            data = f.read_bytes()
            if f.name == "nccl_trace_rank_0":
                raw = pickle.loads(data)  # our own fixture: plain data
                entries = [dict(e) for e in raw["entries"]]
                e = rnd.choice(entries)
                e[rnd.choice(sorted(e))] = rnd.choice(bad)
                if case % 3 == 0:
                    del entries[rnd.randrange(len(entries))]
                data = pickle.dumps(dict(raw, entries=entries))
            (d / f.name).write_bytes(data)
        r = runner.invoke(app, ["diagnose", str(d), "--plan", str(FR / kind / "plan.json"), "--output", "json"])
        assert r.exit_code in (0, 1, 2), (kind, case, r.output)
        assert r.exception is None or isinstance(r.exception, SystemExit), (kind, case, r.exception)
        if r.exit_code == 2:
            assert len([x for x in r.stderr.splitlines() if x.startswith("error")]) == 1, r.stderr
        else:
            assert json.loads(r.stdout)["cause"]["text"]


def test_a_member_that_has_not_reached_a_collective_is_named() -> None:
    from pptl.diagnose.cause import find_cause

    ops = {r: (_op(r, 0, "all_reduce", seq=1), _op(r, 1, "all_reduce", seq=2, state=st))
           for r, st in ((0, "started"), (1, "started"), (2, "scheduled"), (3, "started"))}
    c = count_calls(ops, {"0": (0, 1, 2, 3)})
    cause = find_cause(c, ops)
    assert (cause.kind, cause.ranks) == ("collective_state", (2, 0, 1, 3))
    assert cause.text == ("rank 2 has not reached all_reduce #2 (group 0; scheduled) that ranks 0, 1, 3 are in "
                          "(started): its stream is held up by earlier work, or its host stopped feeding it")


# ----------------------------------------------------------------------------------------------
# Every fact torchfrtrace states on a corpus hang (its output is kept beside the dumps) is in pptl's report.

CORPUS = sorted(p.parent.name for p in FR.glob("*/torchfrtrace.txt"))


def _numel(text: str) -> int:
    n = 1
    for x in re.findall(r"\d+", text):
        n *= int(x)
    return n


def _torchfrtrace_facts(text: str) -> set[tuple]:
    facts: set[tuple] = set()
    for line in text.splitlines():
        if m := re.match(r"missing ranks: \{(.+)\}", line):
            facts |= {("missing", int(r)) for r in m.group(1).split(",")}
        if m := re.search(r"Missing dump files from ranks \{(.+)\}", line):
            facts |= {("no_dump", int(r)) for r in m.group(1).split(",")}
        facts |= {("culprit", int(r)) for r in re.findall(r"Culprit rank (\d+)", line)}
        if m := re.search(r"Expected input sizes: '(.*)' does not match found input sizes: '(.*)'", line):
            facts.add(("sizes", _numel(m.group(1)), _numel(m.group(2))))
        if m := re.search(r"Expected collective type: '(\w+)' does not match found collective type: '(\w+)'", line):
            facts.add(("kinds", m.group(1), m.group(2)))
        if m := re.search(r"Expected state: '(\w+)' does not match found state: '(\w+)'", line):
            facts.add(("states", m.group(1), m.group(2)))
    return facts


@pytest.mark.parametrize("kind", CORPUS)
def test_pptl_states_every_fact_torchfrtrace_states(kind: str) -> None:
    facts = _torchfrtrace_facts((FR / kind / "torchfrtrace.txt").read_text())
    assert facts, kind  # torchfrtrace reported something on every corpus hang
    plan = ["--plan", str(FR / kind / "plan.json")] if (FR / kind / "plan.json").exists() else []
    r = runner.invoke(app, ["diagnose", str(FR / kind), *plan, "--output", "json"])
    assert r.exit_code == 1, r.output
    d = json.loads(r.stdout)
    evidence = "\n".join(d["evidence"])
    behind = ({p["short"] for p in d["p2p_counts"]} | {m for g in d["collective_gaps"] for m in g["missing_ranks"]}
              | {s["rank"] for s in d["stopped"]} | {m["rank"] for m in d["missing_dumps"]})
    diffs = [(d_["differs"], {o["kind"] for o in d_["ops"]}, {o["state"] for o in d_["ops"]})
             for d_ in d["collective_diffs"]]
    for fact in sorted(facts, key=str):
        what, *v = fact
        if what == "missing":  # a member that never issued the call: pptl names it as short, missing or stopped
            assert v[0] in behind, (kind, fact, behind)
        elif what == "no_dump":
            assert v[0] in {m["rank"] for m in d["missing_dumps"]}, (kind, fact)
        elif what == "culprit":  # pptl's first line names that rank
            assert v[0] in d["cause"]["ranks"], (kind, fact, d["cause"])
        elif what == "sizes":
            assert f"of {v[0]} element" in evidence and f"of {v[1]} element" in evidence, (kind, fact)
        elif what == "kinds":
            assert ("kind", {v[0], v[1]}) in [(x, k) for x, k, _ in diffs], (kind, fact, diffs)
        elif what == "states":
            assert any(x == "state" and {v[0], v[1]} <= s for x, _, s in diffs), (kind, fact, diffs)


def test_the_issue_example_all_reduce_against_a_send() -> None:
    """As reported on other dumps: rank 0 issued 4 sends and 4 receives and no all_reduce (its host waited);
    rank 1 posted 3 receives, sent 3, and its all_reduce completed against rank 0's 4th send."""
    from pptl.diagnose.cause import evidence, find_cause

    r0 = tuple(_op(0, k, "send", peer=1, nth=k) for k in range(4)) + tuple(
        _op(0, 4 + k, "recv", peer=1, nth=k, state="started" if k == 3 else "completed") for k in range(4))
    r1 = tuple(_op(1, k, "recv", peer=0, nth=k) for k in range(3)) + tuple(
        _op(1, 3 + k, "send", peer=0, nth=k) for k in range(3)) + (_op(1, 6, "all_reduce", seq=1, n=4096),)
    ops = {0: r0, 1: r1}
    c = count_calls(ops, {"0": (0, 1)})
    cause = find_cause(c, ops)
    assert cause.kind == "p2p_count" and cause.ranks == (0, 1)
    assert cause.text.startswith("rank 0 sent 4 messages to rank 1 (group 0), which posted only 3 receives; rank 1 "
                                 "sent 3 messages back and rank 0 posted 4 receives")
    lines = evidence(c)
    assert "collectives: group 0 #1: issued by rank 1 all_reduce of 4096 elements (completed); never by rank 0" in lines
    assert ("completed without a counterpart: r1 all_reduce #1 (group 0) completed although rank 0 never issued its "
            "counterpart: NCCL may have paired it with rank 0's r0 send->1 #4 (group 0) (completed), r0 recv<-1 #4 "
            "(group 0) (started), which ran while their own counterparts had not started") in lines
