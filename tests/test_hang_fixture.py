"""The NCCL-hang fixture that bench/hang_csv.py runs on GPUs: pptl flags it, torch's own simulator does not."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptl.cli import app

CSV = Path(__file__).resolve().parent.parent / "fixtures" / "csv" / "invalid" / "hang_nccl_order.csv"


def test_pptl_flags_the_nccl_order_cycle_between_ranks_0_and_1() -> None:
    r = CliRunner().invoke(app, ["check", str(CSV), "--p2p", "nccl"])
    assert r.exit_code == 1, r.output
    assert "PP031 error: hangs under NCCL P2P" in r.stdout and "across ranks 0, 1" in r.stdout
    ok = CliRunner().invoke(app, ["check", str(CSV), "--p2p", "nonblocking"])
    assert ok.exit_code == 0, ok.output  # only the NCCL semantics make it hang


def test_torch_simulator_accepts_it() -> None:
    sch = pytest.importorskip("torch.distributed.pipelining.schedules")
    with CSV.open(newline="") as f:
        actions = {r: [sch._Action.from_str(s) for s in row if s] for r, row in enumerate(csv.reader(f))}
    sch._simulate_comms_compute(actions, lambda s: s % 4, 4)  # raises on a deadlock it can see
