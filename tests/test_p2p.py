"""P2P semantics (PP030-PP033): non-blocking, NCCL per-peer FIFO, blocking rendezvous."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.checks import run_checks
from pptl.cli import app
from pptl.config import config_from_mapping
from pptl.errors import InputError
from pptl.formats.torch_csv import load_csv_text
from pptl.issue_order import given_program, program
from pptl.schedules import build_schedule

runner = CliRunner()
INVALID = Path(__file__).resolve().parent.parent / "fixtures/invalid"


def _csv(name: str):
    return load_csv_text((INVALID / name).read_text())[0]


def _codes(schedule, mode: str) -> list[str]:
    return [v.code for v in run_checks(schedule, p2p=mode) if v.severity == "error"]


# Each fixture under each model: which rules fire.
EXPECTED = {
    "p2p_nccl_reordered.csv": {"nonblocking": [], "nccl": ["PP030"], "blocking": ["PP030"]},
    "p2p_nccl_hang.csv": {"nonblocking": [], "nccl": ["PP031"], "blocking": ["PP031"]},
    "p2p_nccl_defer_recv.csv": {"nonblocking": [], "nccl": ["PP031"], "blocking": ["PP031"]},
    "p2p_blocking_send_first.csv": {"nonblocking": [], "nccl": ["PP031"], "blocking": ["PP031"]},
    "p2p_blocking_ring.csv": {"nonblocking": [], "nccl": [], "blocking": ["PP031"]},
    "p2p_send_before_data.csv": {"nonblocking": ["PP032"], "nccl": ["PP032"], "blocking": ["PP031", "PP032"]},
    "p2p_recv_after_use.csv": {"nonblocking": ["PP031", "PP033"], "nccl": ["PP031", "PP033"],
                               "blocking": ["PP031", "PP033"]},
}


@pytest.mark.parametrize("mode", ["nonblocking", "nccl", "blocking"])
@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_fixture_under_each_model(fixture: str, mode: str) -> None:
    assert _codes(_csv(fixture), mode) == EXPECTED[fixture][mode]


def test_every_p2p_fixture_is_covered() -> None:
    assert sorted(p.name for p in INVALID.glob("p2p_*")) == sorted(EXPECTED)


def test_fifo_message_names_both_sides() -> None:
    v = next(v for v in run_checks(_csv("p2p_nccl_reordered.csv")) if v.code == "PP030")
    assert v.message == ("nccl matches P2P in order per pair of ranks: rank 0's 1st send to rank 1 is SEND_F stage 0 "
                         "mb 0 but rank 1's 1st receive from rank 0 is RECV_F stage 1 mb 1; the data would land in "
                         "the wrong place (reorder one side)")
    assert v.ops == ("r0/send/SEND_F s0 mb0 ->r1", "r1/recv/RECV_F s1 mb1 <-r0")


def test_nccl_hang_walks_the_cycle() -> None:
    v = next(v for v in run_checks(_csv("p2p_nccl_hang.csv")) if v.code == "PP031")
    assert v.message.startswith("hangs under NCCL P2P (a send completes with its receive; per-peer order) "
                                "across ranks 0, 1: ")
    # The cycle: r0 sends F1 before receiving B0, r1 sends B0 before receiving F1, one channel.
    assert "[r0/send/SEND_F s0 mb1 ->r1 = r1/recv/RECV_F s1 mb1 <-r0]" in v.message
    assert "[r1/send/SEND_B s1 mb0 ->r0 = r0/recv/RECV_B s0 mb0 <-r1]" in v.message
    assert "(next P2P between ranks" in v.message


def test_blocking_ring_spans_three_ranks() -> None:
    v = next(v for v in run_checks(_csv("p2p_blocking_ring.csv"), p2p="blocking") if v.code == "PP031")
    assert "across ranks 0, 1, 2" in v.message and "(next on rank" in v.message


def test_issue_position_messages() -> None:
    v = next(v for v in run_checks(_csv("p2p_send_before_data.csv")) if v.code == "PP032")
    assert v.message == ("rank 0 issues SEND_F stage 0 mb 0 at step 0, before r0/compute/F s0 mb0 (step 1) "
                         "produces its data")
    v = next(v for v in run_checks(_csv("p2p_recv_after_use.csv")) if v.code == "PP033")
    assert v.message == ("rank 0 issues RECV_B stage 0 mb 0 at step 5, after r0/compute/B s0 mb0 (step 4) "
                         "needed its data")


def test_unknown_mode_is_an_input_error() -> None:
    with pytest.raises(InputError, match=r"--p2p: got 'mpi', expected one of nonblocking, nccl, blocking"):
        run_checks(_csv("p2p_nccl_hang.csv"), p2p="mpi")


@pytest.mark.parametrize("mode,code", [("nonblocking", 0), ("nccl", 1), ("blocking", 1)])
def test_cli_p2p_flag(mode: str, code: int) -> None:
    r = runner.invoke(app, ["check", str(INVALID / "p2p_nccl_hang.csv"), "--p2p", mode])
    assert r.exit_code == code, r.output


# ----------------------------------------------------------------------------------------------
# Programs


@pytest.mark.parametrize("name,kw", [("1f1b", {}), ("interleaved-1f1b", {"vpp": 2}), ("zbv", {"vpp": 2}),
                                     ("dualpipev", {"vpp": 2}), ("dualpipe", {})],
                         ids=["1f1b", "interleaved", "zbv", "dualpipev", "dualpipe"])
def test_plans_without_issue_order_pass_and_derive_a_safe_one(name: str, kw: dict) -> None:
    s = build_schedule(config_from_mapping({"schedule": name, "pp": 4, "microbatches": 8, **kw}))
    assert given_program(s) is None
    for mode in ("nonblocking", "nccl", "blocking"):
        assert [c for c in _codes(s, mode) if c.startswith("PP03")] == []
    prog = program(s)
    assert sorted(i for seq in prog.values() for i in seq) == list(range(len(s.ops)))
    # On each rank, every lane keeps its compute order, and each pair of ranks sees one transfer order.
    for r, seq in prog.items():
        assert [i for i in seq if s.ops[i].lane == "compute"] == s.lanes[r, "compute"]
    for a in range(s.pp):
        for b in range(s.pp):
            sent = [(s.ops[i].flow, s.ops[i].stage, s.ops[i].mb) for i in prog.get(a, [])
                    if s.ops[i].kind == "SEND" and s.ops[i].peer == b]
            got = [(s.ops[i].flow, s.ops[i].stage + (-1 if s.ops[i].flow == "F" else 1), s.ops[i].mb)
                   for i in prog.get(b, []) if s.ops[i].kind == "RECV" and s.ops[i].peer == a]
            assert sent == got, (a, b)


def test_reordered_lanes_drop_a_stale_program() -> None:
    s = _csv("p2p_nccl_hang.csv")
    assert given_program(s) is not None
    lanes = {k: [s.ops[i] for i in v] for k, v in s.lanes.items()}
    lanes[0, "compute"] = lanes[0, "compute"][:-1]  # one op fewer: the letters no longer fit
    assert given_program(s.with_lanes(lanes)) is None
