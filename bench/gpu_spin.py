"""How much a waiting NCCL send or receive slows the compute beside it, apart from any schedule.

Two processes, one GPU each. GPU 1 runs MLP blocks (``x @ W1``, GELU, ``@ W2`` in bf16, hidden ``h``,
``t`` tokens, the block ``pptl run`` times) on its compute stream, one CUDA-event pair per block, in four
settings:

- ``quiet``: nothing else on the GPU;
- ``send_waits``: a send to GPU 0 is posted first, larger than NCCL's buffers, whose receive GPU 0 posts
  only after the blocks have run (its kernel waits the whole time);
- ``recv_waits``: the same with a receive on GPU 1 whose send GPU 0 posts late;
- ``send_buffered``: a send of one block's activations (``t x h`` bf16) posted first, received late.

The ratio of each setting's median block to ``quiet``'s is what a run's compute pays while a message of
that kind waits (``pptl run`` delays each receive's kernel until its sender is ready, see
:mod:`pptl.run.gates`; a SEND that runs beside compute is not delayed). Shapes: ``--shapes H:T,...``.

    python3 bench/gpu_spin.py --out OUT [--shapes 2688:1536,2944:1792,2816:5632,4096:4096] [--blocks 40]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

SETTINGS = ("quiet", "send_waits", "recv_waits", "send_buffered", "quiet")
#: Bytes of the waiting message: above NCCL's per-peer buffers (tens of MB on NVLink), so it cannot
#: complete before its peer posts the other side.
BIG = 512 << 20


def _worker(rank: int, args: Any, shapes: list[tuple[int, int]], out: Any) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as fn

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    # No device_id: an eagerly initialised group serialises its point-to-point ops with its collectives, so
    # the barrier below would wait behind the waiting message. Lazily, the pair's messages get a communicator
    # of their own.
    dist.init_process_group("nccl", rank=rank, world_size=2)
    side = torch.cuda.Stream(dev)
    big = torch.empty(BIG // 2, dtype=torch.bfloat16, device=dev)
    warm = torch.empty(1024, device=dev)
    if rank == 0:  # connect the pair both ways before anything is timed
        dist.send(warm, 1)
        dist.recv(warm, 1)
    else:
        dist.recv(warm, 0)
        dist.send(warm, 0)
    torch.cuda.synchronize()
    rows = []
    for h, t in shapes:
        x = torch.randn(t, h, device=dev, dtype=torch.bfloat16)
        w1 = torch.randn(h, 4 * h, device=dev, dtype=torch.bfloat16) * h ** -0.5
        w2 = torch.randn(4 * h, h, device=dev, dtype=torch.bfloat16) * (4 * h) ** -0.5
        act = torch.empty(t * h, dtype=torch.bfloat16, device=dev)
        for _ in range(10):
            fn.gelu(x @ w1) @ w2
        torch.cuda.synchronize()
        for setting in SETTINGS:
            dist.barrier()
            torch.cuda.synchronize()
            msg = act if setting == "send_buffered" else big
            work = None
            if rank == 1:
                with torch.cuda.stream(side):
                    if setting in ("send_waits", "send_buffered"):
                        work = dist.isend(msg, 0)
                    elif setting == "recv_waits":
                        work = dist.irecv(msg, 0)
                evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                       for _ in range(args.blocks)]
                for a, b in evs:
                    a.record()
                    fn.gelu(x @ w1) @ w2
                    b.record()
                evs[-1][1].synchronize()  # the blocks are done; the message still waits for GPU 0
                times = [a.elapsed_time(b) for a, b in evs]
                dist.barrier()  # GPU 0 now posts its side
                if work is not None:
                    work.wait()
                torch.cuda.synchronize()
                rows.append({"hidden": h, "tokens": t, "setting": setting, "median_ms": statistics.median(times),
                             "min_ms": min(times), "max_ms": max(times)})
            else:
                dist.barrier()
                if setting in ("send_waits", "send_buffered"):
                    dist.recv(msg, 1)
                elif setting == "recv_waits":
                    dist.send(msg, 1)
                torch.cuda.synchronize()
            time.sleep(0.05)
    if rank == 1:
        out.put(rows)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    import torch.multiprocessing as mp

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default=None, help="unused (the launcher's)")
    ap.add_argument("--shapes", default="2688:1536,2944:1792,2816:5632,4096:4096")
    ap.add_argument("--blocks", type=int, default=40)
    ap.add_argument("--port", type=int, default=29571)
    args = ap.parse_args(argv)
    shapes = [(int(a), int(b)) for a, b in (s.split(":") for s in args.shapes.split(","))]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, args, shapes, q)) for r in range(2)]
    for p in procs:
        p.start()
    rows = q.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "spin.json").write_text(json.dumps(rows, indent=1))
    quiet: dict[tuple[int, int], float] = {}
    for r in rows:
        key = (r["hidden"], r["tokens"])
        if r["setting"] == "quiet":
            quiet[key] = min(quiet.get(key, r["median_ms"]), r["median_ms"])
    for r in rows:
        q0 = quiet[(r["hidden"], r["tokens"])]
        print(f"h{r['hidden']}-t{r['tokens']} {r['setting']:14s} median {r['median_ms']:.3f} ms "
              f"(x{r['median_ms'] / q0:.3f}) min {r['min_ms']:.3f} max {r['max_ms']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
