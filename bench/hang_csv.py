"""A torch CSV schedule that torch's own simulator accepts but NCCL cannot run:
fixtures/csv/invalid/hang_nccl_order.csv is `pptl plan --schedule 1f1b --pp 4 -m 8` exported with
`pptl export --to torch-csv --comms`, with rank 1's RECV_F mb3 moved after its SEND_B mb0. Rank 0 then sends F mb3 before it receives B mb0 while rank 1 sends
B mb0 before it receives F mb3: with messages too large for NCCL's buffers both sends wait for their receive
(`pptl check --p2p nccl` flags it, PP031). Run through _PipelineScheduleRuntime with the flight recorder on,
every rank's work times out and the watchdog dumps one file per rank under --dump-dir.

    python3 bench/_spawn.py -n 4 --timeout 150 --log-dir L -- python3 bench/hang_csv.py --dump-dir D
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import torch
from torch.distributed import pipelining as ppl
from torch.distributed.pipelining import schedules as sch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _fr  # noqa: E402
from _anchor_model import chunk, init, loss_fn  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ap = argparse.ArgumentParser()
ap.add_argument("--csv", default=str(ROOT / "fixtures" / "csv" / "invalid" / "hang_nccl_order.csv"))
ap.add_argument("--dump-dir", required=True)
ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
ap.add_argument("--hidden", type=int, default=4096)
# 8192 x 4096 bf16 = 64 MiB per message: far beyond what NCCL buffers per peer, so a send waits for its receive
ap.add_argument("--tokens", type=int, default=8192)
ap.add_argument("--mb", type=int, default=8)
ap.add_argument("--pg-timeout", type=float, default=20)
a = ap.parse_args()

dump_dir = Path(a.dump_dir)
_fr.enable(dump_dir)
rank, world, dev = init(a.device, a.pg_timeout)
dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
with open(a.csv, newline="") as f:
    actions = {r: [sch._Action.from_str(s) for s in row if s] for r, row in enumerate(csv.reader(f))}
n_stages = len(actions)
if rank == 0:
    sch._simulate_comms_compute(actions, lambda s: s % world, n_stages)  # raises if torch sees a deadlock
    print(f"torch _simulate_comms_compute accepts {a.csv} ({sum(map(len, actions.values()))} actions)", flush=True)

stage = ppl.PipelineStage(chunk(1, a.hidden, dev, dtype), rank, n_stages, dev)
sched = sch._PipelineScheduleRuntime([stage], a.mb, loss_fn=loss_fn)
sched._load_csv(a.csv, format="compute_comms")
x = torch.randn(a.mb * a.tokens, a.hidden, device=dev, dtype=dtype)
tgt = torch.randn(a.mb * a.tokens, a.hidden, device=dev, dtype=dtype)
print(f"rank {rank}: step starts", flush=True)
t0 = time.time()
try:
    sched.step(*((x,) if rank == 0 else ()), **(dict(target=tgt, losses=[]) if rank == n_stages - 1 else {}))
except Exception as e:  # gloo (cpu) blocks in the host and raises on the process-group timeout
    api = _fr.snapshot(dump_dir / f"{_fr.PREFIX}{rank}")
    print(f"rank {rank}: step raised after {time.time() - t0:.1f} s ({type(e).__name__}: {str(e)[:200]}); "
          f"recorder via {api}", flush=True)
    raise SystemExit(1)
print(f"rank {rank}: step enqueued in {time.time() - t0:.1f} s", flush=True)
if a.device == "cuda":
    _fr.wait_for_hang(dev, rank, dump_dir, a.pg_timeout / 2)
else:
    print(f"rank {rank}: NO HANG", flush=True)
    raise SystemExit(3)
