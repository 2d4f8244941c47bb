"""How a GPU's compute speed depends on its own duty and on its neighbour's, under the power cap.

Two processes, one a GPU, each run bursts of bf16 GEMMs (about ``--burst-ms`` each) and then sleep, so
that its GPU is busy a chosen share of the time; every pair of shares in ``CONFIGS`` runs ``--seconds``
(the first ``--settle`` discarded). Per configuration and GPU: the median burst time (CUDA events), the
share achieved, the median SM clock and board power (NVML, as ``pptl run`` reads it). ``pptl tune``'s
duty law says a burst takes ``u ** alpha`` of its full-duty time on a GPU busy a share ``u``, whatever
its neighbour does; this measures both halves of that claim on the device itself, apart from any
pipeline schedule.

    python3 bench/gpu_duty.py OUT.json [--seconds 5] [--settle 1.5] [--burst-ms 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

#: (share of GPU 0, share of GPU 1); 0 is an idle GPU.
CONFIGS: tuple[tuple[float, float], ...] = (
    (1.0, 1.0), (0.65, 0.65), (1.0, 0.0), (0.65, 0.0), (0.65, 1.0), (1.0, 0.65),
    (0.85, 0.85), (0.5, 0.5), (0.85, 1.0), (0.5, 1.0), (1.0, 1.0),
)


def _worker(rank: int, args: Any, barrier: Any, out: Any) -> None:
    import torch

    from pptl.run.gpuclock import open_sampler

    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    b = torch.randn(4096, 8192, device=dev, dtype=torch.bfloat16)
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(50):
        a @ b
    torch.cuda.synchronize()
    per = (time.perf_counter() - t0) / 50 * 1e3
    n = max(1, round(args.burst_ms / per))
    sampler = open_sampler(dev)
    rows = []
    for cfg in CONFIGS:
        u = cfg[rank]
        barrier.wait()
        if sampler is not None:
            sampler.start()
        start = time.perf_counter()
        settle, end = start + args.settle, start + args.seconds
        bursts: list[float] = []
        busy = 0.0
        while True:
            now = time.perf_counter()
            if now >= end:
                break
            if u <= 0:
                time.sleep(0.005)
                continue
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            w0 = time.perf_counter()
            e0.record()
            for _ in range(n):
                a @ b
            e1.record()
            e1.synchronize()
            wall = time.perf_counter() - w0
            if w0 >= settle:
                bursts.append(e0.elapsed_time(e1))
                busy += wall
            if u < 1:
                time.sleep(wall * (1 - u) / u)
        if sampler is not None:
            sampler.stop()
            late = [s for s in sampler.samples if s.ms >= settle * 1e3]
        else:
            late = []
        rows.append({
            "config": list(cfg), "rank": rank, "share": u, "bursts": len(bursts),
            "burst_ms": statistics.median(bursts) if bursts else None,
            "burst_p10": sorted(bursts)[len(bursts) // 10] if bursts else None,
            "busy_share": busy / (end - settle),
            "sm_mhz": statistics.median(s.sm_mhz for s in late) if late else None,
            "power_w": statistics.median(s.power_w for s in late) if late else None,
        })
    out.put((rank, {"gemms_a_burst": n, "rows": rows,
                    "gpu": torch.cuda.get_device_name(dev)}))


def main() -> int:
    import torch.multiprocessing as mp

    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--settle", type=float, default=1.5)
    ap.add_argument("--burst-ms", type=float, default=3.0)
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    barrier, q = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, args, barrier, q)) for r in range(2)]
    for p in procs:
        p.start()
    res = dict(q.get() for _ in procs)
    for p in procs:
        p.join()
    full = {r: [x["burst_ms"] for x in res[r]["rows"] if x["config"] == [1.0, 1.0]][-1] for r in res}  # warm: the last
    print("config (u0, u1) | per GPU: burst ms (x full-duty both), busy share, SM MHz, W")
    for i, cfg in enumerate(CONFIGS):
        parts = []
        for r in (0, 1):
            x = res[r]["rows"][i]
            if x["burst_ms"] is None:
                parts.append(f"r{r} idle {x['sm_mhz'] or 0:.0f} MHz {x['power_w'] or 0:.0f} W")
                continue
            parts.append(f"r{r} {x['burst_ms']:.3f} (x{x['burst_ms'] / full[r]:.3f}) u {x['busy_share']:.2f} "
                         f"{x['sm_mhz'] or 0:.0f} MHz {x['power_w'] or 0:.0f} W")
        print(f"{cfg} | " + " | ".join(parts))
    args.out.write_text(json.dumps({"configs": [list(c) for c in CONFIGS], "ranks": res}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
