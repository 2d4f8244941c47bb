"""Start N ranks of a script (RANK/WORLD_SIZE/LOCAL_RANK/MASTER_* set), wait up to --timeout seconds, then kill
the ranks still running; print each rank's exit code. Unlike torchrun, one rank dying does not stop the others,
so a rank that is still writing its flight-recorder dump is not killed by a peer's abort.

    python3 bench/_spawn.py -n 4 --timeout 120 --log-dir DIR -- python3 SCRIPT ARGS...
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("-n", type=int, default=4)
ap.add_argument("--timeout", type=float, default=120)
ap.add_argument("--log-dir", required=True)
ap.add_argument("--port", type=int, default=0, help="the rendezvous port (default: a free one)")
ap.add_argument("cmd", nargs=argparse.REMAINDER)
a = ap.parse_args()
cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
logs = Path(a.log_dir)
logs.mkdir(parents=True, exist_ok=True)
port = a.port
if not port:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
procs = []
for r in range(a.n):
    env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(a.n), LOCAL_WORLD_SIZE=str(a.n),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    f = open(logs / f"rank{r}.log", "w")
    # own session: the kill below reaches the rank and anything it started, and nothing else
    procs.append((subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True), f))
deadline = time.time() + a.timeout
while time.time() < deadline and any(p.poll() is None for p, _ in procs):
    time.sleep(0.5)
for r, (p, f) in enumerate(procs):
    if p.poll() is None:
        print(f"rank {r}: still running after {a.timeout:.0f} s, killed", flush=True)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    f.close()
    print(f"rank {r}: exit {p.returncode}", flush=True)
sys.exit(0)
