"""`python -m pptl.run` across two torchrun "nodes" on this host: 2 x 2 ranks, c10d rendezvous on localhost,
gloo, a pp 4 plan. Every rank runs exactly the plan's order (the same launch on 2 machines differs only in
the rendezvous address; bench/multinode.sh does it on 4 GPUs)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from runorder import assert_runs_the_plans_order  # noqa: E402

from pptl import planning  # noqa: E402
from pptl.formats.loader import load_any  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_of_two_ranks_run_the_plans_order(tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"schedule": "1f1b", "pp": 4, "microbatches": 4,
                               "workload": {"hidden": 16, "tokens": 4}}))
    plan = tmp_path / "plan.json"
    planning.write_plan(planning.plan(planning.make_config(cfg, {}, None, None)), plan)
    out = tmp_path / "measured.json"
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
                               "--node-rank", str(node), "--rdzv-backend", "c10d", "--rdzv-endpoint",
                               f"127.0.0.1:{port}", "--rdzv-id", "pptl-test", "-m", "pptl.run", str(plan),
                               "--device", "cpu", "--steps", "1", "--warmup", "0", "--timeout", "60", "-o", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
             for node in (0, 1)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=180)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    assert [p.returncode for p in procs] == [0, 0], "\n".join(logs)[-4000:]
    assert "pptl.run: 4 ranks done; wrote" in "".join(logs)
    schedule = load_any(plan).schedule
    tl = load_any(out).timeline
    assert tl.meta.source == "measured" and tl.meta.pp == 4
    assert_runs_the_plans_order(schedule, tl, serial_lanes=("compute",))
