"""Inputs from elsewhere that pptl's readers got wrong: real CPU (gloo) profiler traces whose receives were
timed as if they ended when posted, and paths that are not regular files (devices, pipes), whose reported
size of 0 let a reader read without end.

Each refusal is one ``error:`` line and exit 2, in bounded time and memory (the CLI runs in a child process
with a memory limit and a timeout, so a regression fails the test rather than hanging or killing the suite).
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import pptl
from pptl.checks.measured import RECV_BEFORE_SEND, measured_violations
from pptl.formats.loader import load_any

ROOT = Path(__file__).resolve().parent.parent
#: The pptl under test, for the child processes (the one imported here, wherever it was found): ``python -m``
#: puts the working folder first on the path, so a child run from another checkout would test that one.
PPTL_HOME = str(Path(pptl.__file__).resolve().parent.parent)
GLOO = ROOT / "fixtures" / "traces_cpu_gloo"
#: schedule -> kinds imported: 12 ranks x 12 micro-batches; 1F1B has 12 stages, Interleaved1F1B 24 (2 per rank),
#: and every stage boundary carries one SEND and one RECV per micro-batch in each direction.
EXPECTED = {
    "Schedule1F1B": {"F": 144, "B": 144, "SEND": 264, "RECV": 264},
    "ScheduleInterleaved1F1B": {"F": 288, "B": 288, "SEND": 552, "RECV": 552, "UNSHARD": 24, "RESHARD": 24,
                                "REDUCE_GRAD": 24},
}


def _cli(*args: str, cwd: str | Path = PPTL_HOME) -> subprocess.CompletedProcess:
    def limit() -> None:  # a reader that reads without end dies of MemoryError here, not the machine
        resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))

    return subprocess.run([sys.executable, "-m", "pptl", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60, preexec_fn=limit, env={**os.environ, "PYTHONPATH": PPTL_HOME})


def _one_line_error(r: subprocess.CompletedProcess, code: int = 2) -> str:
    assert r.returncode == code, r.stderr[-800:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr[-800:]
    return lines[0]


@pytest.mark.parametrize("schedule", sorted(EXPECTED))
def test_gloo_traces_import_every_op_of_all_12_ranks(schedule: str) -> None:
    tl = load_any(GLOO / schedule).timeline
    assert {e.rank for e in tl.events} == set(range(12))
    assert dict(Counter(e.kind for e in tl.events)) == EXPECTED[schedule]


@pytest.mark.parametrize("schedule", sorted(EXPECTED))
def test_gloo_receives_end_after_their_sends_and_consumers_start_after_them(schedule: str) -> None:
    # One host, one clock: a RECV that ends before its SEND starts is a misreading, not clock skew. The
    # RECV's own range only posts the receive (it ended before the sender had sent: 320 PP090 errors in
    # the interleaved trace), and the compute that needs the data waits inside its own range.
    tl = load_any(GLOO / schedule).timeline
    assert measured_violations(tl) == []


def test_a_gloo_compute_op_starts_when_its_wait_returned() -> None:
    # Rank 0 posts its receive of the gradient for micro-batch 0 early and opens B s0 mb0 long before the
    # gradient comes from rank 1 (which runs every warmup forward first): the wait is idle time, not backward.
    tl = load_any(GLOO / "ScheduleInterleaved1F1B").timeline
    ev = {e.op: e for e in tl.events}
    recv, bwd = ev["r0/recv/RECV_B s0 mb0 <-r1"], ev["r0/compute/B s0 mb0"]
    send = ev["r1/send/SEND_B s1 mb0 ->r0"]
    assert send.start <= recv.end <= bwd.start < bwd.end
    assert bwd.end - bwd.start < 0.1 * (recv.end - recv.start)


def test_pptl_check_passes_a_gloo_trace() -> None:
    r = _cli("check", str(GLOO / "ScheduleInterleaved1F1B"))
    assert r.returncode == 0, r.stderr[-800:]
    assert RECV_BEFORE_SEND not in r.stderr + r.stdout


@pytest.mark.parametrize("name", ["p.yaml", "p.toml", "s.csv", "t.json", "t.json.gz"])
@pytest.mark.parametrize("command", ["check", "render", "explain"])
def test_a_link_to_dev_zero_is_refused_not_read_forever(tmp_path: Path, name: str, command: str) -> None:
    # /dev/zero's size is 0, so the size check passed and read_bytes() filled memory until MemoryError.
    (tmp_path / name).symlink_to("/dev/zero")
    line = _one_line_error(_cli(command, name, cwd=tmp_path))
    assert line == f"error: {name}: not a regular file (a device, pipe or socket); expected a file"


def test_pptl_plan_refuses_a_config_that_is_a_device(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").symlink_to("/dev/zero")
    assert "c.yaml: not a regular file" in _one_line_error(_cli("plan", "c.yaml", cwd=tmp_path))


def test_a_pipe_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    # Opening a FIFO for reading blocks until someone writes to it: the command never returned.
    os.mkfifo(tmp_path / "p.yaml")
    os.mkfifo(tmp_path / "nccl_trace_rank_0")
    assert "p.yaml: not a regular file" in _one_line_error(_cli("check", "p.yaml", cwd=tmp_path))
    line = _one_line_error(_cli("diagnose", "nccl_trace_rank_0", cwd=tmp_path))
    assert line == "error: nccl_trace_rank_0: not a regular file (a device, pipe or socket); expected a file"


def test_a_device_among_a_folders_traces_is_refused(tmp_path: Path) -> None:
    (tmp_path / "rank0.json").symlink_to("/dev/zero")
    line = _one_line_error(_cli("explain", str(tmp_path)))
    assert line.endswith("rank0.json: not a regular file (a device, pipe or socket); expected a file")
