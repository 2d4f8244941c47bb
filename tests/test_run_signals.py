"""``pptl run`` stopped by a signal (CPU, gloo): SIGTERM (``timeout``, ``kill``, Slurm and CI
cancellation), SIGHUP (a closed terminal) and SIGINT (Ctrl-C) each stop every rank and the
spawner, write what was measured, and exit 128 + the signal's number with one line on stderr.

The signal goes to the ``pptl`` process alone, as ``kill PID`` sends it: the ranks live in the
spawner's own session, so only the launcher can stop them.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from procs import marked_processes

from pptl.config import config_from_mapping
from pptl.formats.plan import dumps, plan_to_dict
from pptl.schedules import build_schedule

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")

ROOT = Path(__file__).resolve().parents[1]
TINY = {"hidden": 32, "tokens": 8, "layers_per_stage": 1, "dtype": "float32"}
#: --timeout of the run: the whole stop (SIGTERM, then SIGKILL of what is left) must fit in it.
TIMEOUT = 10.0
_MARK = "PPTL_SIGNAL_TEST"


def _marked(mark: str) -> dict[int, str]:
    """pid -> state of every live process whose environment holds ``mark`` (zombies count)."""
    return marked_processes(f"{_MARK}={mark}".encode())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_signal_stops_every_process_and_writes_the_timeline(tmp_path, sig):
    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 4, "workload": TINY}))
    plan = tmp_path / "p.json"
    plan.write_text(dumps(plan_to_dict(s)))
    out = tmp_path / "x.json"
    mark = uuid.uuid4().hex
    env = dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path), **{_MARK: mark})
    proc = subprocess.Popen([sys.executable, "-m", "pptl", "run", str(plan), "--device", "cpu", "--steps",
                             "100000000", "--warmup", "0", "--timeout", str(TIMEOUT), "-o", str(out)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Signal once both ranks have completed a step (their records are on disk): mid-run, not at start-up.
        deadline = time.monotonic() + 120
        while not all(list(tmp_path.glob(f"pptl-run-*/plan0.rank{r}.json")) for r in (0, 1)):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never completed a step"
            time.sleep(0.05)
        seen = set(_marked(mark))
        assert len(seen) >= 4, f"expected pptl, the spawner and 2 ranks, saw {seen}"
        t0 = time.monotonic()
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=TIMEOUT + 30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + sig, (proc.returncode, stderr)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: run stopped by {sig.name} at step "), lines[0]
    assert f"measured so far written to {out}" in lines[0]
    assert took < TIMEOUT, f"{took:.1f} s from the signal to the exit"
    # Every process of the run is gone, not even a zombie left.
    assert _marked(mark) == {}, f"left behind: {_marked(mark)}"
    data = json.loads(out.read_text())
    assert data["meta"]["extra"]["failed"].startswith(f"run stopped by {sig.name}")
    ranks = {e["rank"] for e in data["events"]}
    assert ranks == {0, 1}, ranks
    assert stdout == ""


def test_pptl_killed_outright_leaves_no_rank_running(tmp_path):
    # SIGKILL cannot be handled: the spawner notices its parent is gone (polled every 0.5 s) and stops
    # the ranks (SIGTERM, SIGKILL 2 s later), so nothing runs on until its own collective timeout.
    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": 2, "microbatches": 4, "workload": TINY}))
    plan = tmp_path / "p.json"
    plan.write_text(dumps(plan_to_dict(s)))
    mark = uuid.uuid4().hex
    env = dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path), **{_MARK: mark})
    proc = subprocess.Popen([sys.executable, "-m", "pptl", "run", str(plan), "--device", "cpu", "--steps",
                             "100000000", "--warmup", "0", "--timeout", str(TIMEOUT), "-o", str(tmp_path / "x.json")],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("pptl-run-*/plan0.rank1.json")):
            assert proc.poll() is None and time.monotonic() < deadline, "the run never completed a step"
            time.sleep(0.05)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10  # 0.5 s to notice, 2 s of SIGTERM grace, then SIGKILL
        while _marked(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _marked(mark) == {}, f"left behind: {_marked(mark)}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
