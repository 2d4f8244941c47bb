"""Fault injection into ``pptl run`` (CPU, gloo): a rank that raises, a rank killed with SIGKILL, a
rank that hangs, and a peer that never posts its receive.

Each case runs the real command line and pins what a user relies on when a rank fails: exit code 1
and one line naming the failed rank and the op it was in; every other rank stopped within the
timeout; no process left behind (found through ``/proc``, by an environment marker every rank
inherits); and the timeline measured so far written and drawable with ``pptl render``.

Faults come from the run's test hook ``PPTL_RUN_FAULT=KIND:RANK:OP ID`` (``pptl.run.executor.Fault``):
it fires on that rank just before that op would start, in every step. "The peer never posts its
receive" is ``hang`` at a RECV: the rank stops before the receive is posted, so its sender's SEND
never meets it.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
from procs import marked_processes
from typer.testing import CliRunner

from pptl.cli import app
from pptl.config import config_from_mapping
from pptl.formats.plan import dumps, plan_to_dict
from pptl.schedules import build_schedule

torch = pytest.importorskip("torch")

from pptl.run.worker import _LAUNCHER_MARGIN  # noqa: E402  (needs torch)

# bench/run_faults.py measures the same cases on any device; one definition of "fault -> last exit".
_spec = importlib.util.spec_from_file_location("run_faults", Path(__file__).resolve().parents[1]
                                               / "bench" / "run_faults.py")
_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench)  # type: ignore[union-attr]

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")

TINY = {"hidden": 32, "tokens": 8, "layers_per_stage": 1, "dtype": "float32"}
#: --timeout of the hang cases (seconds): short, so they stay fast; long enough that a loaded 2-core
#: machine does not stall a healthy rank that long.
TIMEOUT = 4.0
#: What the launcher may add after the timeout: a SIGTERM, and a SIGKILL 2 s later for a rank that ignores it.
STOP_SLACK = 3.0
#: --timeout of the runs whose fault is a raise or a kill (found without waiting for it).
SLOW_TIMEOUT = 20.0

_MARK = "PPTL_FAULT_TEST"


def _timeout(fault: str) -> float:
    """A hang is found by its timeout, so those runs keep it short; a raise or a kill is seen at once,
    and a short --timeout would only let a loaded machine's slow op pass for a hang first."""
    return TIMEOUT if fault.startswith("hang") else SLOW_TIMEOUT


def _plan(tmp_path: Path, family: str, pp: int) -> Path:
    s = build_schedule(config_from_mapping({"schedule": family, "pp": pp, "microbatches": 2 * pp, "workload": TINY}))
    path = tmp_path / f"{family}-pp{pp}.json"
    path.write_text(dumps(plan_to_dict(s)))
    return path


def _marked() -> dict[int, str]:
    """pid -> state of every live process whose environment holds this test's marker."""
    return marked_processes(f"{_MARK}={os.environ.get(_MARK)}".encode())


class _Watch:
    """Every marked process seen while a run is in flight (polled), to check none outlives it."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.seen |= set(_marked())
            time.sleep(0.05)

    def __enter__(self) -> "_Watch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _alive(pids: set[int]) -> dict[int, str]:
    """pid -> state for the pids still in /proc (a zombie counts: nobody reaped it)."""
    out = {}
    for pid in pids:
        try:
            out[pid] = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            pass
    return out


def _shutdown_seconds(rundir: Path, fault: str) -> float:
    """bench/run_faults.py's measure, which must find the ranks' exits."""
    seconds = _bench.shutdown_seconds(rundir, fault)
    assert seconds is not None, f"no rank exit recorded in {rundir}"
    return seconds


# (fault, plan, message): the message must name the failed rank and its op.
CASES = [
    pytest.param("raise:1:r1/compute/F s1 mb2", ("1f1b", 2),
                 r"rank 1 failed at op r1/compute/F s1 mb2 \(step 0\): RuntimeError: injected fault", id="raise"),
    pytest.param("kill:1:r1/compute/B s1 mb1", ("1f1b", 2),
                 r"rank 1 was lost \(killed by SIGKILL\) at op r1/compute/B s1 mb1 \(step 0\)", id="sigkill"),
    pytest.param("hang:1:r1/compute/B s1 mb1", ("1f1b", 2),
                 r"no rank made progress for the --timeout; rank 1 is stuck at op r1/compute/B s1 mb1 \(step 0\)",
                 id="hang"),
    pytest.param("hang:1:r1/recv/RECV_F s1 mb2 <-r0", ("1f1b", 2),
                 r"no rank made progress for the --timeout; rank 1 is stuck at op r1/recv/RECV_F s1 mb2 <-r0 "
                 r"\(step 0\)", id="receive-never-posted"),
    pytest.param("kill:1:r1/compute/F s1 mb3", ("1f1b", 4),
                 r"rank 1 was lost \(killed by SIGKILL\) at op r1/compute/F s1 mb3 \(step 0\)",
                 id="sigkill-middle-of-4"),
    pytest.param("hang:2:r2/recv/RECV_B s2 mb1 <-r3", ("1f1b", 4),
                 r"rank 2 is stuck at op r2/recv/RECV_B s2 mb1 <-r3 \(step 0\)", id="receive-never-posted-of-4"),
]

#: Shutdown times measured by the cases above (seconds).
SHUTDOWN: dict[str, float] = {}


@pytest.mark.parametrize("fault,plan,message", CASES)
def test_fault_stops_every_rank_and_keeps_measurements(tmp_path, monkeypatch, fault, plan, message):
    monkeypatch.setenv(_MARK, uuid.uuid4().hex)
    monkeypatch.setenv("PPTL_RUN_FAULT", fault)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the run folder the launcher keeps on failure
    plan_file = _plan(tmp_path, *plan)
    out = tmp_path / "measured.json"
    runner = CliRunner()
    with _Watch() as watch:
        t0 = time.monotonic()
        r = runner.invoke(app, ["run", str(plan_file), "--device", "cpu", "--steps", "2", "--warmup", "0",
                                "--timeout", str(_timeout(fault)), "-o", str(out)])
        took = time.monotonic() - t0
    assert r.exit_code == 1, r.output
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(err) == 1, err
    assert re.search(message, err[0]), err[0]
    assert f"measured so far written to {out}" in err[0]

    # No process left behind: every rank and the spawner are gone (not even a zombie).
    assert len(watch.seen) >= plan[1], f"saw {watch.seen}: the watcher missed the ranks"
    assert _alive(watch.seen) == {}, f"left behind: {_alive(watch.seen)}"
    assert _marked() == {}

    # Every other rank stopped within the timeout of the fault (plus the stop's own slack).
    rundir = Path(re.search(r"\(logs in (\S+)\)", err[0]).group(1))
    shutdown = _shutdown_seconds(rundir, fault)
    SHUTDOWN[fault] = shutdown
    print(f"shutdown after {fault}: {shutdown:.2f} s (run {took:.2f} s)")  # for docs/reliability.md (-rP)
    # Stopped by the launcher (TIMEOUT + STOP_SLACK, about 5 s on an idle machine; bench/run_faults.py
    # measures it), not by each rank's own collective timeout, TIMEOUT + the launcher's margin: that bound
    # separates the two on a loaded machine, where a wall-clock budget for the whole run does not.
    assert shutdown < TIMEOUT + _LAUNCHER_MARGIN, f"{shutdown:.2f} s from the fault to the last exit"

    # What was measured is written, marked partial, and drawable.
    data = json.loads(out.read_text())
    assert data["meta"]["extra"]["partial"] is True
    assert re.search(message, data["meta"]["extra"]["failed"])
    assert data["events"], "the ops that finished before the fault are kept"
    if fault.startswith("hang"):  # the stuck host's last post, kept for pptl diagnose (meta.extra.hosts)
        _, rank, op = fault.split(":", 2)
        assert data["meta"]["extra"]["hosts"][rank] == {"op": op, "step": 0}
        # and where its Python stood when the launcher stopped it: in the fault's sleep, inside the step
        log = (rundir / f"rank{rank}.log").read_text()
        assert f"rank {rank}: stopped by the launcher; every thread's stack:" in log
        assert re.search(r"executor\.py\", line \d+ in fire\n.*executor\.py\", line \d+ in _step_cpu", log), log[-2000:]
    drawn = runner.invoke(app, ["render", str(out), "--width", "100"])
    assert drawn.exit_code == 0, drawn.output
    assert "r0" in drawn.stdout or "rank 0" in drawn.stdout.lower(), drawn.stdout
    svg = tmp_path / "measured.svg"
    drawn = runner.invoke(app, ["render", str(out), "-o", str(svg)])
    assert drawn.exit_code == 0 and svg.read_bytes().startswith(b"<?xml"), drawn.output


def test_fault_hook_fires_only_on_its_rank_and_op(tmp_path, monkeypatch):
    """Without a matching op the hook does nothing: the same run succeeds (the cases above are real faults)."""
    monkeypatch.setenv("PPTL_RUN_FAULT", "raise:1:r1/compute/F s9 mb9")
    plan_file = _plan(tmp_path, "1f1b", 2)
    out = tmp_path / "m.json"
    r = CliRunner().invoke(app, ["run", str(plan_file), "--device", "cpu", "--steps", "1", "--warmup", "0",
                                 "--timeout", "20", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "partial" not in json.loads(out.read_text())["meta"]["extra"]
