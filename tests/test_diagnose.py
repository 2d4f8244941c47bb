"""pptl diagnose: hostile dumps refused without running anything, and the three hangs explained the way
``pptl check --p2p nccl`` predicted them (fixtures from fixtures/flight_recorder/make_fixtures.py)."""
from __future__ import annotations

import json
import os
import pickle
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app
from pptl.diagnose import diagnose_dumps
from pptl.errors import InputError
from pptl.formats.flight_recorder import load_dump, loads_dump

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
FR = ROOT / "fixtures" / "flight_recorder"
HANG1_CSV = ROOT / "fixtures" / "invalid" / "p2p_nccl_hang.csv"
ISSUED = FR / "hang2_pptl_run" / "issued.json"
NODE = re.compile(r"\[[^\]]+\]")


def _one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


class _Evil:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_malicious_pickle_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_bytes(pickle.dumps({"version": "2.10", "entries": [_Evil(str(marker))]}))
    result = runner.invoke(app, ["diagnose", str(dump)])
    assert result.exit_code == 2, result.output
    line = _one_error_line(result)
    assert "refused: the pickle asks for posix.system" in line or "refused: the pickle asks for os.system" in line
    assert not marker.exists()
    # The same bytes through plain pickle would have run the command: the test can fail.
    pickle.loads(dump.read_bytes())
    assert marker.exists()


@pytest.mark.parametrize("data, expected", [
    (b"", "empty file"),
    (pickle.dumps({"version": "2.10", "entries": []})[:-5], "not a complete pickle"),
    (pickle.dumps([1, 2, 3]), "not a flight-recorder dump (expected a dict with 'version' and 'entries', got a list)"),
    (pickle.dumps({"version": "1.0", "entries": []}), "field 'version': got '1.0', expected a 2.x"),
    (pickle.dumps({"version": "2.10", "entries": [{"record_id": 0}]}), "entries[0]: field 'process_group'"),
], ids=["empty", "truncated", "list", "old-version", "bad-entry"])
def test_bad_dumps_give_one_line(tmp_path: Path, data: bytes, expected: str) -> None:
    dump = tmp_path / "trace_3"
    dump.write_bytes(data)
    result = runner.invoke(app, ["diagnose", str(dump)])
    assert result.exit_code == 2, result.output
    assert expected in _one_error_line(result)


def test_size_bound_and_rank_from_name(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="over the 10-byte limit"):
        loads_dump(pickle.dumps({"version": "2.10", "entries": []}), source="x", rank=0, max_bytes=10)
    f = tmp_path / "no_rank_here"
    f.write_bytes(pickle.dumps({"version": "2.10", "entries": []}))
    with pytest.raises(InputError, match="does not end with a rank"):
        load_dump(f)


def _check_nodes(plan: Path) -> set[str]:
    result = runner.invoke(app, ["check", str(plan), "--p2p", "nccl"])
    assert result.exit_code == 1, result.output
    line = next(x for x in result.stdout.splitlines() if "PP031" in x)
    return set(NODE.findall(line))


def _diagnose(args: list[str]) -> tuple[dict, str]:
    text = runner.invoke(app, ["diagnose", *args])
    assert text.exit_code == 1, text.output
    js = runner.invoke(app, ["diagnose", *args, "--output", "json"])
    assert js.exit_code == 1, js.output
    return json.loads(js.stdout), text.stdout


def test_hang1_torch_csv_cycle_is_the_one_check_predicted() -> None:
    data, text = _diagnose([str(FR / "hang1_torch_csv"), "--plan", str(HANG1_CSV)])
    assert data["cycle_ranks"] == [0, 1]
    nodes = {c["node"] for c in data["cycle"]}
    assert nodes == _check_nodes(HANG1_CSV) == {
        "[r0/send/SEND_F s0 mb1 ->r1 = r1/recv/RECV_F s1 mb1 <-r0]",
        "[r1/send/SEND_B s1 mb0 ->r0 = r0/recv/RECV_B s0 mb0 <-r1]"}
    assert data["ranks"]["0"]["front"]["op"] == "r0/send/SEND_F s0 mb1 ->r1"
    assert ("order: rank 0 sends to rank 1 (r0/send/SEND_F s0 mb1 ->r1) while rank 1 sends to rank 0 "
            "(r1/send/SEND_B s1 mb0 ->r0); rank 1 issues the matching receive 1 op(s) later") in text


def test_hang1_without_plan_names_ops_by_peer() -> None:
    data, text = _diagnose([str(FR / "hang1_torch_csv")])
    assert data["cycle_ranks"] == [0, 1]
    assert "[r0 send->1 #2 (group default_pg) = r1 recv<-0 #2 (group default_pg)]" in {c["node"] for c in data["cycle"]}


def test_hang2_pptl_run_cycle_holds_every_transfer_check_named() -> None:
    data, _ = _diagnose([*map(str, sorted((FR / "hang2_pptl_run").glob("nccl_trace_rank_*"))), "--plan", str(ISSUED)])
    nodes = {c["node"] for c in data["cycle"]}
    predicted = _check_nodes(ISSUED)
    assert "[r1/send/SEND_F s1 mb7 ->r2 = r2/recv/RECV_F s2 mb7 <-r1]" in predicted
    assert predicted <= nodes, (predicted, nodes)
    # The set-up message of each channel comes first and is not taken for step 0's.
    assert all(o["op"] is None or "mb" in o["op"] for r in data["ranks"].values() for o in r["pending"])
    assert data["ranks"]["3"]["front"]["op"] == "r3/send/SEND_B s3 mb0 ->r2"


def test_hang3_ep_all_to_all_order() -> None:
    data, text = _diagnose([str(FR / "hang3_ep_a2a")])
    assert data["cycle_ranks"] == [0, 1]
    assert data["collective_mismatches"] == [
        "group ep collective #1: rank 0 issues all_to_all 256x64 but rank 1 issues all_to_all 128x64 (the ranks "
        "issue the group's collectives in different orders)"]
    assert data["ranks"]["2"]["front"] is None
    assert "rank 2: 1 op, all completed" in text


def test_no_hang_exits_0_and_figure_is_written(tmp_path: Path) -> None:
    d = loads_dump(pickle.dumps({"version": "2.10", "pg_config": {}, "entries": []}), source="x", rank=0)
    assert not diagnose_dumps([d]).hung
    fig = tmp_path / "hang.png"
    result = runner.invoke(app, ["diagnose", str(FR / "hang1_torch_csv"), "--plan", str(HANG1_CSV), "-o", str(fig)])
    assert result.exit_code == 1, result.output
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_usage_errors(tmp_path: Path) -> None:
    tl = tmp_path / "t.json"
    tl.write_text(json.dumps({"format": "pptl-timeline", "events": [], "meta": {}}))
    result = runner.invoke(app, ["diagnose", str(tl)])
    assert result.exit_code == 2
    assert "a pptl timeline needs --plan" in _one_error_line(result)
    result = runner.invoke(app, ["diagnose", str(FR / "hang1_torch_csv"), "-o", str(tmp_path / "x.gif")])
    assert result.exit_code == 2
    assert "cannot draw to '.gif'" in _one_error_line(result)


@pytest.mark.skipif(sys.platform != "linux", reason="gloo run")
def test_swapped_sends_hang_a_gloo_run_and_the_timeline_names_check_s_cycle(tmp_path: Path, monkeypatch) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    import subprocess

    from hang_pptl_run import FAULT

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, str(ROOT / "bench" / "hang_pptl_run.py"), str(tmp_path), "--cpu"], env=env,
                   check=True, capture_output=True)
    env["PPTL_RUN_FAULT"] = FAULT
    run = subprocess.run([sys.executable, "-m", "pptl", "run", str(tmp_path / "plan.json"), "--device", "cpu",
                          "--gpus", "4", "--steps", "1", "--warmup", "0", "--timeout", "3", "-o",
                          str(tmp_path / "measured.json")], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    assert "no rank made progress" in run.stderr
    data, text = _diagnose([str(tmp_path / "measured.json"), "--plan", str(tmp_path / "issued.json")])
    check = runner.invoke(app, ["check", str(tmp_path / "issued.json"), "--p2p", "nccl"])
    pp031 = next(x for x in check.stdout.splitlines() if "PP031" in x)
    assert set(NODE.findall(pp031)) == {c["node"] for c in data["cycle"] if c["node"].startswith("[")}
    assert ("order: rank 1 waits to receive from rank 2 (r1/recv/RECV_B s1 mb6 <-r2) while rank 2 waits to receive "
            "from rank 1 (r2/recv/RECV_F s2 mb7 <-r1)") in text


# ----------------------------------------------------------------------------------------------
# Real dumps: 4x H200, torch 2.11 (fixtures/flight_recorder/trim_real.py)

REAL_CSV = FR / "real_csv_nccl_order"
REAL_A2A = FR / "real_a2a_order"
HANG_CSV = ROOT / "fixtures" / "csv" / "invalid" / "hang_nccl_order.csv"


def test_real_torch_csv_hang_is_the_cycle_check_predicted() -> None:
    data, text = _diagnose([str(REAL_CSV), "--plan", str(HANG_CSV)])
    assert data["cycle_ranks"] == [0, 1]
    assert {c["node"] for c in data["cycle"]} == _check_nodes(HANG_CSV) == {
        "[r0/send/SEND_F s0 mb3 ->r1 = r1/recv/RECV_F s1 mb3 <-r0]",
        "[r1/send/SEND_B s1 mb0 ->r0 = r0/recv/RECV_B s0 mb0 <-r1]"}
    # torch 2.11 records every batch_isend_irecv as members plus a "coalesced" entry that holds the
    # state: read right, the shape-inference set-up and the first micro-batches completed.
    front = {r: (v["front"]["op"], v["front"]["state"], v["completed"]) for r, v in data["ranks"].items()}
    assert front == {"0": ("r0/send/SEND_F s0 mb3 ->r1", "started", 7),
                     "1": ("r1/send/SEND_B s1 mb0 ->r0", "started", 15),
                     "2": ("r2/send/SEND_B s2 mb1 ->r1", "started", 17),
                     "3": ("r3/send/SEND_B s3 mb2 ->r2", "started", 9)}
    assert ("order: rank 0 sends to rank 1 (r0/send/SEND_F s0 mb3 ->r1) while rank 1 sends to rank 0 "
            "(r1/send/SEND_B s1 mb0 ->r0); rank 1 issues the matching receive 1 op(s) later "
            "(r1/recv/RECV_F s1 mb3 <-r0)") in text
    assert len(data["order_mismatches"]) == 2 and len(data["blocked"]) == 2
    # pipelining sends a 0-d tensor the peer receives as [1]: the same count, no size mismatch
    assert data["size_mismatches"] == [] and data["notes"] == []


def test_real_a2a_order_names_the_groups_and_the_odd_rank() -> None:
    data, text = _diagnose([str(REAL_A2A)])
    assert data["cycle_ranks"] == [0, 1, 2, 3]
    assert [c["node"] for c in data["cycle"]] == ["[all_to_all #2 (group ep_dispatch) on ranks 0-3]",
                                                  "[all_to_all #2 (group ep_combine) on ranks 0-3]"]
    fronts = {r: (v["front"]["group_desc"], v["front"]["state"]) for r, v in data["ranks"].items()}
    assert fronts == {"0": ("ep_dispatch", "started"), "1": ("ep_combine", "started"),
                      "2": ("ep_dispatch", "started"), "3": ("ep_dispatch", "started")}
    assert data["order_mismatches"] == [
        "ranks 0, 2, 3 issue all_to_all #2 (group ep_dispatch) before all_to_all #2 (group ep_combine), but rank 1 "
        "issues them the other way round: each side waits in the call the other has not reached"]
    assert data["collective_mismatches"] == []  # each group's calls agree by sequence number


def test_real_dump_figure(tmp_path: Path) -> None:
    fig = tmp_path / "hang.svg"
    result = runner.invoke(app, ["diagnose", str(REAL_CSV), "--plan", str(HANG_CSV), "-o", str(fig)])
    assert result.exit_code == 1, result.output
    svg = fig.read_text()
    assert "SEND_F mb3" in svg and "RECV_B mb0" in svg and "SEND_B mb0" in svg


def _raw(path: Path) -> dict:
    return pickle.loads(path.read_bytes())  # our own fixture: plain data


def _fuzzed(raw: dict, how: str, seed: int) -> bytes:
    import random

    rnd = random.Random(seed)
    entries = list(raw["entries"])
    if how == "truncate":
        data = pickle.dumps(raw)
        return data[:rnd.randrange(1, len(data) - 1)]
    if how == "drop":
        del entries[rnd.randrange(len(entries))]
    elif how == "shuffle":
        rnd.shuffle(entries)
    elif how == "field":
        e = dict(entries[rnd.randrange(len(entries))])
        key = rnd.choice(sorted(e))
        e[key] = rnd.choice([None, "x", -1, 2**70, [], {"a": 1}, ("a",), 1.5])
        entries[entries.index(next(x for x in entries if x["record_id"] == e["record_id"]))] = e
    elif how == "config":
        raw = dict(raw, pg_config=rnd.choice([None, [], {"0": {"ranks": "[0, 1"}}, {"0": {"ranks": "__import__"}}]))
    return pickle.dumps(dict(raw, entries=entries))


@pytest.mark.parametrize("how", ["truncate", "drop", "shuffle", "field", "config"])
def test_fuzzed_real_dumps_give_a_diagnosis_or_one_line(tmp_path: Path, how: str) -> None:
    for case in range(4):
        d = tmp_path / f"{how}{case}"
        d.mkdir()
        for f in sorted(REAL_CSV.iterdir()):
            data = _fuzzed(_raw(f), how, case) if f.name.endswith("_1") else f.read_bytes()
            (d / f.name).write_bytes(data)
        result = runner.invoke(app, ["diagnose", str(d), "--plan", str(HANG_CSV)])
        assert result.exit_code in (0, 1, 2), (how, case, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), (how, case, result.exception)
        if result.exit_code == 2:
            assert "nccl_trace_rank_1" in _one_error_line(result)
        else:
            assert "rank 1:" in result.stdout


REAL_RUN = FR / "real_pptl_run"
REAL_RUN_ISSUED = FR / "real_pptl_run_issued.json"


def test_real_pptl_run_hang_holds_every_transfer_check_named() -> None:
    """Hang (2) on 4x H200: pptl run with rank 1's SEND_F mb7 issued before its SEND_B mb6."""
    data, text = _diagnose([str(REAL_RUN), "--plan", str(REAL_RUN_ISSUED)])
    predicted = _check_nodes(REAL_RUN_ISSUED)
    nodes = {c["node"] for c in data["cycle"]}
    assert "[r1/send/SEND_F s1 mb7 ->r2 = r2/recv/RECV_F s2 mb7 <-r1]" in predicted
    assert predicted <= nodes, (predicted, nodes)
    front = {r: (v["front"]["op"], v["front"]["state"]) for r, v in data["ranks"].items()}
    assert front == {"0": ("r0/recv/RECV_B s0 mb6 <-r1", "started"), "1": ("r1/recv/RECV_B s1 mb6 <-r2", "started"),
                     "2": ("r2/recv/RECV_F s2 mb7 <-r1", "started"), "3": ("r3/recv/RECV_F s3 mb7 <-r2", "started")}
    assert ("order: rank 1 waits to receive from rank 2 (r1/recv/RECV_B s1 mb6 <-r2) while rank 2 waits to receive "
            "from rank 1 (r2/recv/RECV_F s2 mb7 <-r1)") in text


def test_a_timeline_with_another_plan_is_one_line(tmp_path: Path) -> None:
    """A finished gloo run of 1F1B: with its own plan, no hang (exit 0); with a ZB-V plan or a 1F1B of
    other micro-batches, one error line naming the difference, exit 2 (another plan's ops read as the
    run's pending ones, a hang that never was)."""
    plan, zbv, m8, measured = (tmp_path / n for n in ("p.json", "z.json", "m8.json", "measured.json"))
    for args, out in ((["-s", "1f1b", "-m", "4"], plan), (["-s", "zbv", "-m", "4"], zbv), (["-s", "1f1b", "-m", "8"], m8)):
        assert runner.invoke(app, ["plan", *args, "--pp", "2", "-o", str(out)]).exit_code == 0
    run = runner.invoke(app, ["run", str(plan), "--device", "cpu", "--steps", "1", "--warmup", "0", "-o", str(measured)])
    assert run.exit_code == 0, run.output
    ok = runner.invoke(app, ["diagnose", str(measured), "--plan", str(plan)])
    assert ok.exit_code == 0 and "no hang" in ok.stdout, ok.output
    for other, says in ((zbv, "the plan is zbv, the run is 1f1b"), (m8, "the plan has microbatches 8, the run 4")):
        r = runner.invoke(app, ["diagnose", str(measured), "--plan", str(other)])
        assert r.exit_code == 2, r.output
        assert r.stderr.strip().splitlines() == [f"error: {other}: not the plan that ran measured.json: {says}"]


# ----------------------------------------------------------------------------------------------
# A real pptl run hang on 2 H200s (tests/data/hangs_pptl_run): interleaved 1F1B, m = G = 13

PPTL_HANG = ROOT / "tests" / "data" / "hangs_pptl_run"


def test_a_pptl_run_hang_is_matched_on_the_runs_own_communicators() -> None:
    """pptl run split this plan's messages into four communicators (per direction and flow: the pair's two
    orders disagree when F and B are pooled). Matched as one FIFO per pair, diagnose paired rank 0's SEND_F
    s2 mb10 with rank 1's RECV_B s1 mb5 and reported a wait-for cycle that the run could not have; matched
    per communicator, in the order the run issued (sync-send), there is none, and the fronts say what held
    the run: rank 1's compute in SEND_F s1 mb12, whose receive rank 0 issues 57 ops later, behind
    RECV_B s2 mb0, which waits for rank 1's SEND_B s3 mb0, 6 ops past rank 1's front."""
    data, text = _diagnose([str(PPTL_HANG / "interleaved_g13.partial.json"), "--plan",
                            str(PPTL_HANG / "interleaved_g13_plan.json")])
    assert data["cycle"] == [] and data["cycle_ranks"] == []
    # the cause: the held send and the receive rank 0 cannot post while rank 1's host stands there
    assert data["cause"]["kind"] == "held_send" and data["cause"]["ranks"] == [1, 0]
    assert text.splitlines()[0].startswith(
        "rank 1's compute stream is held in r1/send/SEND_F s1 mb12 ->r0 (sync-send) until rank 0 posts "
        "r0/recv/RECV_F s2 mb12 <-r1, which rank 0 issues 57 op(s) after r0/recv/RECV_B s2 mb0 <-r1; that receive "
        "waits for rank 1's host to issue r1/send/SEND_B s3 mb0 ->r0, 6 op(s) past the held send")
    assert data["ranks"]["1"]["front"]["op"] == "r1/send/SEND_F s1 mb12 ->r0"
    assert data["ranks"]["0"]["front"]["op"] == "r0/recv/RECV_B s2 mb0 <-r1"
    assert "pptl run ran these messages on 4 communicators, more than one a sender and receiver" in text
    assert ("rank 1 sends to rank 0 (r1/send/SEND_F s1 mb12 ->r0) while rank 0 waits to receive from rank 1 "
            "(r0/recv/RECV_B s2 mb0 <-r1); rank 0 issues the matching receive 57 op(s) later "
            "(r0/recv/RECV_F s2 mb12 <-r1)") in text


def test_held_send_is_named_only_for_a_sync_send_run(tmp_path: Path) -> None:
    # the same partial timeline recorded as an overlap run: its SENDs ran beside compute and held nothing,
    # so the held-send cause is not given (overlap issues the plan's own order: the fronts differ too)
    data = json.loads((PPTL_HANG / "interleaved_g13.partial.json").read_text())
    data["meta"]["extra"]["messages"] = "overlap"
    path = tmp_path / "overlap.partial.json"
    path.write_text(json.dumps(data))
    got, _ = _diagnose([str(path), "--plan", str(PPTL_HANG / "interleaved_g13_plan.json")])
    assert got["cause"]["kind"] != "held_send"


ALONE_PLAN = PPTL_HANG / "interleaved_g13_alone_plan.json"


@pytest.mark.parametrize("name,stuck", [("first_f", "r1/compute/F s3 mb0"), ("first_w", "r1/compute/B s3 mb0")])
def test_a_host_that_stopped_for_its_gpu_is_named(name: str, stuck: str) -> None:
    """The same plan as the only one of a fresh pptl run, on 2 H200s: rank 1's host stopped at the last stage's
    first F (a kernel's first load; with kernels loaded, at its first B, a new allocation) with every earlier
    compute op done. Its SEND_F s1 mb5 (beside compute, as held_sends says) spun for rank 0's RECV_F s2 mb5,
    rank 0's op 50, while rank 0 stood at op 35, RECV_B s2 mb0, whose SEND is rank 1's op 43 (SEND_B s3 mb0),
    past the host's op 40 or 42: 50 - 35 = 15 ops. No wait-for cycle: the run's own message names the op."""
    data, text = _diagnose([str(PPTL_HANG / f"interleaved_g13_alone_{name}.partial.json"), "--plan",
                            str(ALONE_PLAN)])
    assert data["cycle"] == [] and data["cause"]["kind"] == "host_stopped" and data["cause"]["ranks"] == [1, 0]
    assert text.splitlines()[0] == (
        f"rank 1's host stopped at {stuck} with its GPU done with every compute op before it, while "
        "r1/send/SEND_F s1 mb5 ->r0 waited on that GPU for rank 0 to post r0/recv/RECV_F s2 mb5 <-r1, 15 op(s) "
        "past rank 0's front r0/recv/RECV_B s2 mb0 <-r1, which waits for rank 1's host to issue "
        "r1/send/SEND_B s3 mb0 ->r0: a host that waits for its whole GPU (a kernel's first load, an allocation "
        "the caching allocator has no memory for) waits for that message too (pptl run now runs each rank's ops "
        "once before its first step: Executor.prime)")


def test_a_host_stopped_behind_its_gpu_is_not_a_first_use() -> None:
    # --messages overlap stopped in its second step with rank 1's compute behind (F s3 mb8 still waiting for
    # its data): a full launch queue stops a host without any first use, so that cause is not given
    data, _ = _diagnose([str(PPTL_HANG / "interleaved_g13_alone_overlap.partial.json"), "--plan", str(ALONE_PLAN)])
    assert data["cause"]["kind"] == "pending"
    # a timeline, not flight-recorder dumps, and the op pptl run last saw the stuck host at
    assert data["cause"]["text"] == (
        "ranks 0, 1 wait in r0/send/SEND_B s2 mb3 ->r1 and more; the timeline shows no count, size, order or cycle "
        "that explains it (a host blocked outside NCCL?); pptl run last saw rank 1's host at r1/compute/B s1 mb8")


@pytest.mark.parametrize("change", ["gpu_behind", "input_missing", "send_op", "no_message", "garbled", "huge",
                                    "gloo", "no_backend"])
def test_host_stopped_needs_the_run_to_say_so_and_an_idle_gpu(tmp_path: Path, change: str) -> None:
    data = json.loads((PPTL_HANG / "interleaved_g13_alone_first_f.partial.json").read_text())
    extra = data["meta"]["extra"]
    if change == "gpu_behind":  # F s1 mb12, the compute op before the stuck one, not done
        data["events"] = [e for e in data["events"] if e["op"] != "r1/compute/F s1 mb12"]
    elif change == "input_missing":  # the stuck F's own input not arrived: it waits for data, not for its GPU
        data["events"] = [e for e in data["events"] if e["op"] != "r1/recv/RECV_F s3 mb0 <-r0"]
    elif change == "send_op":
        extra["failed"] = extra["failed"].replace("r1/compute/F s3 mb0", "r1/send/SEND_F s1 mb5 ->r0")
    elif change == "no_message":
        del extra["failed"]
    elif change in ("gloo", "no_backend"):  # no GPU to wait for (a CPU run's host is its device), or not said
        extra["backend"] = "gloo"
        if change == "no_backend":
            del extra["backend"]
    elif change == "garbled":
        extra["failed"] = "rank 1 is stuck at op r1/compute/F s3 mb0"  # no step: not pptl run's sentence
    else:
        extra["failed"] = "x" * 100_000 + extra["failed"]  # only the first 2,000 characters are read
    path = tmp_path / "partial.json"
    path.write_text(json.dumps(data))
    got, _ = _diagnose([str(path), "--plan", str(ALONE_PLAN)])
    assert got["cause"]["kind"] != "host_stopped"


def test_a_peer_waiting_for_a_send_this_host_already_issued_is_not_its_wait(tmp_path: Path) -> None:
    # the first-F hang moved on by hand: F s3 mb0 and B s3 mb0 (ops 40, 42) and F s3 mb1's input done, the
    # host stuck at F s3 mb1 (op 45). Rank 0's front, RECV_B s2 mb0, waits for SEND_B s3 mb0, op 43: issued
    # before the stuck op, so the peer waits on rank 1's GPU, not on its host: no host_stopped
    data = json.loads((PPTL_HANG / "interleaved_g13_alone_first_f.partial.json").read_text())
    end = max(e["end"] for e in data["events"])
    for k, (op, kind, lane, mb) in enumerate([("r1/compute/F s3 mb0", "F", "compute", 0),
                                               ("r1/recv/RECV_F s3 mb1 <-r0", "RECV", "recv", 1),
                                               ("r1/compute/B s3 mb0", "B", "compute", 0)]):
        data["events"].append({"op": op, "rank": 1, "lane": lane, "start": end + 5 * k, "end": end + 5 * k + 4,
                               "kind": kind, "stage": 3, "mb": mb})
    data["meta"]["extra"]["failed"] = ("run stopped: no rank made progress for the --timeout; rank 1 is stuck at "
                                       "op r1/compute/F s3 mb1 (step 0)")
    path = tmp_path / "partial.json"
    path.write_text(json.dumps(data))
    got, _ = _diagnose([str(path), "--plan", str(ALONE_PLAN)])
    assert got["cause"]["kind"] != "host_stopped"


def test_a_partial_timeline_keeps_where_each_host_was() -> None:
    # the progress board's last post of each rank, for the plan that failed: ranks still in set-up (op -1 or
    # step -1) and ranks on another plan of the launch are left out; a rank of two digits keeps its number
    from pptl.formats.loader import load_any
    from pptl.run.launcher import hosts_at
    from pptl.run.progress import Post

    sched = load_any(str(ALONE_PLAN)).schedule
    posts = [Post(0, 1, 67, 0.0)] + [Post(0, -1, -1, 0.0)] * 9 + [Post(0, 0, 0, 0.0), Post(1, 1, 5, 0.0),
                                                                 Post(0, 0, -1, 0.0), Post(0, 3, 260, 0.0)]
    got = hosts_at(sched, 0, posts)  # the plan has 260 ops: 260 is none of them
    assert got == {"0": {"op": sched.ops[67].id, "step": 1}, "10": {"op": sched.ops[0].id, "step": 0}}
    assert len(sched.ops) == 260


def test_every_hosts_place_is_tried_not_only_the_one_the_failure_names(tmp_path: Path) -> None:
    # the overlap hang with both hosts' places kept, as runs now keep them: rank 1's (named by the failure,
    # B s1 mb8) had its GPU behind; rank 0's host at RECV_F s2 mb8 (op 67; a RECV allocates its buffer) with
    # every compute op before it done, its SEND_B s2 mb3 (op 56) spinning for rank 1's RECV_B s1 mb3, rank 1's op
    # 89, 56 past its front (op 33, SEND_F s1 mb10), which waits for rank 0 to post RECV_F s2 mb10 (its op 79)
    data = json.loads((PPTL_HANG / "interleaved_g13_alone_overlap.partial.json").read_text())
    data["meta"]["extra"]["hosts"] = {"1": {"op": "r1/compute/B s1 mb8", "step": 1},
                                      "0": {"op": "r0/recv/RECV_F s2 mb8 <-r1", "step": 1}}
    path = tmp_path / "partial.json"
    path.write_text(json.dumps(data))
    got, text = _diagnose([str(path), "--plan", str(ALONE_PLAN)])
    assert got["cause"]["kind"] == "host_stopped" and got["cause"]["ranks"] == [0, 1]
    assert text.splitlines()[0].startswith(
        "rank 0's host stopped at r0/recv/RECV_F s2 mb8 <-r1 with its GPU done with every compute op before it, "
        "while r0/send/SEND_B s2 mb3 ->r1 waited on that GPU for rank 1 to post r1/recv/RECV_B s1 mb3 <-r0, 56 "
        "op(s) past rank 1's front r1/send/SEND_F s1 mb10 ->r0, which waits for rank 0's host to issue "
        "r0/recv/RECV_F s2 mb10 <-r1: ")
    # hostile places are skipped, not trusted: a key not a rank number, an op not text, too long a name
    data["meta"]["extra"]["hosts"] = {"0 ": {"op": "r0/recv/RECV_F s2 mb8 <-r1"}, "x": {"op": 1},
                                      "0": {"op": "r0/recv/RECV_F s2 mb8 <-r1" + " " * 300}}
    path.write_text(json.dumps(data))
    got, _ = _diagnose([str(path), "--plan", str(ALONE_PLAN)])
    assert got["cause"]["kind"] == "pending"


def test_dumps_of_a_sync_send_pptl_run_are_named_with_the_plan_that_ran() -> None:
    """A pptl run issues a 1F1B plan's SENDs right after their producers (sync-send, its default), so its
    dumps' send/receive order is not the plan's own on any of the 4 ranks: named against the plan's order
    every rank fell back to peers only. Two steps of calls in the run's order are now named op for op."""
    from pptl.config import config_from_mapping
    from pptl.diagnose.ops import NcclOp
    from pptl.diagnose.plan_names import name_by_plan
    from pptl.run.program import build_program, issued_for
    from pptl.schedules import build_schedule

    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 4, "microbatches": 8}))
    issued = issued_for(build_program(s), "sync-send")
    ops = {}
    for rp in issued.ranks:
        p2p = [i for i in rp.issue if s.ops[i].kind in ("SEND", "RECV")] * 2
        ops[rp.rank] = [NcclOp(rp.rank, k, "0", "send" if s.ops[i].kind == "SEND" else "recv", s.ops[i].peer, k, 0,
                               ((1024, 1024),), "completed") for k, i in enumerate(p2p)]
    notes: list[str] = []
    named = name_by_plan(ops, s, notes)
    assert notes == ["the dumps' send/receive order is the one pptl run issues this plan in with --messages "
                     "sync-send: named in that order"]
    for rp in issued.ranks:
        want = [s.ops[i].id for i in rp.issue if s.ops[i].kind in ("SEND", "RECV")] * 2
        assert [o.name for o in named[rp.rank]] == want
        assert [o.step for o in named[rp.rank]] == [0] * (len(want) // 2) + [1] * (len(want) // 2)


def test_a_rank_with_no_send_or_receive_in_its_dump_does_not_stop_the_others_being_named() -> None:
    # the same run with rank 3's dump holding no send or receive (its ring buffer kept only collectives):
    # it says nothing about the order, and ranks 0-2 are named in the run's order all the same
    from pptl.config import config_from_mapping
    from pptl.diagnose.ops import NcclOp
    from pptl.diagnose.plan_names import name_by_plan
    from pptl.run.program import build_program, issued_for
    from pptl.schedules import build_schedule

    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 4, "microbatches": 8}))
    issued = issued_for(build_program(s), "sync-send")
    ops = {rp.rank: [NcclOp(rp.rank, k, "0", "send" if s.ops[i].kind == "SEND" else "recv", s.ops[i].peer, k, 0,
                            ((1024, 1024),), "completed")
                     for k, i in enumerate(i for i in rp.issue if s.ops[i].kind in ("SEND", "RECV"))]
           for rp in issued.ranks if rp.rank < 3}
    ops[3] = [NcclOp(3, 0, "0", "allreduce", -1, 0, 0, ((8,),), "scheduled")]
    named = name_by_plan(ops, s, [])
    for rp in issued.ranks[:3]:
        assert [o.name for o in named[rp.rank]] == [s.ops[i].id for i in rp.issue if s.ops[i].kind in ("SEND", "RECV")]


def test_a_send_the_run_kept_beside_compute_is_not_named_as_held(tmp_path: Path) -> None:
    # a run made with held_sends records the SENDs it ran beside compute; SEND_F s1 mb12 among them held nothing,
    # so the hang is not put on it (the timeline above, written before the record existed, held every SEND)
    data = json.loads((PPTL_HANG / "interleaved_g13.partial.json").read_text())
    data["meta"]["extra"]["sends_beside_compute"] = ["r1/send/SEND_F s1 mb12 ->r0"]
    path = tmp_path / "beside.partial.json"
    path.write_text(json.dumps(data))
    got, _ = _diagnose([str(path), "--plan", str(PPTL_HANG / "interleaved_g13_plan.json")])
    assert got["cause"]["kind"] != "held_send"


OVERLAP_HOSTS = PPTL_HANG / "interleaved_g13_alone_overlap_hosts.partial.json"


def test_gpus_stopped_among_queued_work_name_the_shared_hardware_queues() -> None:
    """The same plan alone under --messages overlap (2 H200s, CUDA_DEVICE_MAX_CONNECTIONS unset): both hosts
    at their op 126 of 130. Rank 0's first pending message is its op 62, SEND_B s2 mb4, matched by rank 1's op 90;
    rank 1's is its op 36, SEND_F s1 mb11, matched by rank 0's op 85: all four before the hosts, none done. A rank
    runs compute + 4 channel streams + NCCL's 4 = 9 streams over CUDA's default 8 queues. (Two launches like it
    ran with 32.)"""
    data, text = _diagnose([str(OVERLAP_HOSTS), "--plan", str(ALONE_PLAN)])
    assert data["cycle"] == [] and data["cause"]["kind"] == "queues_shared" and data["cause"]["ranks"] == [1, 0]
    assert text.splitlines()[0] == (
        "each of ranks 0, 1 had posted its first pending message and its peer the match (e.g. r0/send/SEND_B s2 "
        "mb4 ->r1 and r1/recv/RECV_B s1 mb4 <-r0), yet none completed, and no wait-for cycle explains it: the GPUs "
        "stopped among work already queued. Rank 1 ran 9 CUDA streams (one per lane and per channel, and NCCL's "
        "per communicator) over CUDA_DEVICE_MAX_CONNECTIONS=8 (not recorded: CUDA's default) hardware queues: "
        "streams past them share a queue, where a message spinning for its peer holds what another stream queued "
        "behind it (pptl run now sets 32 where it is unset: pptl.run.options.CUDA_CONNECTIONS)")


@pytest.mark.parametrize("change,kind", [
    ("queues_8", "queues_shared"), ("queues_9", "pending"), ("queues_32", "pending"), ("queues_bool", "queues_shared"),
    ("host0_at_match", "pending"), ("host0_past_match", "queues_shared"), ("no_hosts", "pending"),
    ("gloo", "pending")])
def test_shared_queues_need_more_streams_than_queues_and_every_front_posted(tmp_path: Path, change: str,
                                                                            kind: str) -> None:
    # 9 streams a rank: 8 recorded queues share, 9 do not; a bool is no count (CUDA's 8). Rank 1's first pending
    # message is matched by rank 0's op 85 (RECV_F s2 mb11): rank 0's host at it may wait at its gate (not
    # posted); at op 86 it has posted it
    from pptl.formats.loader import load_any

    data = json.loads(OVERLAP_HOSTS.read_text())
    extra = data["meta"]["extra"]
    sched = load_any(str(ALONE_PLAN)).schedule
    rank0 = [op.id for op in sched.ops if op.rank == 0]
    from pptl.run.program import build_program, issued_for

    order0 = [sched.ops[i].id for i in issued_for(build_program(sched), "overlap").ranks[0].issue]
    assert order0[85] == "r0/recv/RECV_F s2 mb11 <-r1" and len(rank0) == 130
    if change.startswith("queues_"):
        extra["cuda_connections"] = True if change == "queues_bool" else int(change.split("_")[1])
    elif change.startswith("host0_"):
        extra["hosts"]["0"]["op"] = order0[85 if change == "host0_at_match" else 86]
        extra["failed"] = extra["failed"].replace("rank 1 is stuck", "rank 7 is stuck")  # only hosts tell
    elif change == "no_hosts":
        del extra["hosts"]
    else:
        extra["backend"] = "gloo"
    path = tmp_path / "partial.json"
    path.write_text(json.dumps(data))
    got, text = _diagnose([str(path), "--plan", str(ALONE_PLAN)])
    assert got["cause"]["kind"] == kind
    if change == "queues_8":
        assert "over CUDA_DEVICE_MAX_CONNECTIONS=8 hardware queues" in text.splitlines()[0]
    if change == "queues_bool":
        assert "over CUDA_DEVICE_MAX_CONNECTIONS=8 (not recorded: CUDA's default) hardware queues" in text.splitlines()[0]
