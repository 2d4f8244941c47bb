"""Expert-parallel all-to-alls in different orders on different ranks: a cross-rank wait cycle.

Two process groups over the same 4 ranks, "ep_dispatch" (A) and "ep_combine" (B). One correct round first
(every rank: A then B, so the recorder holds completed entries), then the faulty round: rank 1 runs B then A,
the others A then B, each all-to-all taking the previous one's output (as combine takes the experts' output).
Rank 1's A waits for its B, whose peers wait in their A for rank 1: no rank can finish. With the flight
recorder on, every rank's work times out and the watchdog dumps one file per rank under --dump-dir.

    python3 bench/_spawn.py -n 4 --timeout 150 --log-dir L -- python3 bench/hang_a2a.py --dump-dir D
"""
from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _fr  # noqa: E402
from _anchor_model import init  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--dump-dir", required=True)
ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
ap.add_argument("--mib", type=int, default=64, help="all-to-all size per rank")
ap.add_argument("--swap-rank", type=int, default=1)
ap.add_argument("--pg-timeout", type=float, default=20)
a = ap.parse_args()

dump_dir = Path(a.dump_dir)
_fr.enable(dump_dir)
rank, world, dev = init(a.device, a.pg_timeout)
ranks = list(range(world))


def group(desc: str) -> dist.ProcessGroup:
    # new_group does not inherit init_process_group's timeout (it takes the backend's default, minutes)
    kw = {"timeout": timedelta(seconds=a.pg_timeout)}
    try:  # group_desc names the group in the recorder's dump (pg_desc)
        return dist.new_group(ranks, group_desc=desc, **kw)
    except TypeError:
        return dist.new_group(ranks, **kw)


A, B = group("ep_dispatch"), group("ep_combine")
x = torch.randn(a.mib * 2**20 // 4, device=dev)  # float32, divisible by world
y, z = torch.empty_like(x), torch.empty_like(x)


def layer(first: dist.ProcessGroup, second: dist.ProcessGroup) -> None:
    dist.all_to_all_single(y, x, group=first)
    dist.all_to_all_single(z, y, group=second)  # needs the first's output: a stream dependency on cuda


layer(A, B)
dist.barrier()
if dev.type == "cuda":
    torch.cuda.synchronize(dev)
print(f"rank {rank}: correct round done; faulty round: {'B then A' if rank == a.swap_rank else 'A then B'}",
      flush=True)
t0 = time.time()
try:
    layer(B, A) if rank == a.swap_rank else layer(A, B)
except Exception as e:  # gloo (cpu) blocks in the host and raises on the process-group timeout
    api = _fr.snapshot(dump_dir / f"{_fr.PREFIX}{rank}")
    print(f"rank {rank}: raised after {time.time() - t0:.1f} s ({type(e).__name__}: {str(e)[:200]}); "
          f"recorder via {api}", flush=True)
    raise SystemExit(1)
if dev.type == "cuda":
    _fr.wait_for_hang(dev, rank, dump_dir, a.pg_timeout / 2)
else:
    print(f"rank {rank}: NO HANG", flush=True)
    raise SystemExit(3)
