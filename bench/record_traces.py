"""torch.profiler traces of torch.distributed.pipelining schedules on the anchor workload, one step per schedule.

    torchrun --nproc-per-node 4 bench/record_traces.py --out OUT [--device cuda|cpu] [--mb 8]

For each schedule class: WARMUP steps, one unprofiled step and one step under torch.profiler (CPU and, on
cuda, CUDA activities), written per rank as OUT/traces/<ClassName>/rank<k>.json.gz (Chrome trace) and
OUT/traces/<ClassName>/step_rank<k>.json (host wall time of both steps, device synchronized around each).
On cpu (gloo) with --hidden 64 --tokens 32 it checks the same code path without a GPU.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed import pipelining as ppl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _anchor_model import chunk, init, loss_fn, stage_ids, sync  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
ap.add_argument("--mb", type=int, default=8)
ap.add_argument("--hidden", type=int, default=4096)
ap.add_argument("--tokens", type=int, default=2048)
ap.add_argument("--layers-per-rank", type=int, default=4)
ap.add_argument("--warmup", type=int, default=2)
ap.add_argument("--schedules", default="1F1B,GPipe,Interleaved1F1B,InterleavedZeroBubble,ZBVZeroBubble,DualPipeV")
a = ap.parse_args()

rank, world, dev = init(a.device)
dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
H, T = a.hidden, a.tokens
acts = [torch.profiler.ProfilerActivity.CPU]
if a.device == "cuda":
    acts.append(torch.profiler.ProfilerActivity.CUDA)

for name in a.schedules.split(","):
    cls = ppl.schedules.get_schedule_class(name)
    out = Path(a.out) / "traces" / cls.__name__
    out.mkdir(parents=True, exist_ok=True)
    try:
        multi = issubclass(cls, ppl.schedules.PipelineScheduleMulti)
        v = 2 if multi else 1
        n_stages = world * v
        ids = stage_ids(name, rank, world, v)
        mods = [chunk(a.layers_per_rank // v, H, dev, dtype) for _ in ids]
        stages = [ppl.PipelineStage(m, s, n_stages, dev) for m, s in zip(mods, ids)]
        sched = cls(stages if multi else stages[0], a.mb, loss_fn=loss_fn)
        x = torch.randn(a.mb * T, H, device=dev, dtype=dtype)
        tgt = torch.randn(a.mb * T, H, device=dev, dtype=dtype)
        first, last = 0 in ids, (n_stages - 1) in ids

        def step() -> float:
            dist.barrier(); sync(dev)
            t0 = time.perf_counter()
            sched.step(*((x,) if first else ()), **(dict(target=tgt, losses=[]) if last else {}))
            sync(dev)
            return time.perf_counter() - t0

        for _ in range(a.warmup):
            step()
        plain = step()
        with torch.profiler.profile(activities=acts) as prof:
            profiled = step()
        dist.barrier()
        prof.export_chrome_trace(str(out / f"rank{rank}.json.gz"))  # .gz: torch writes it gzipped
        (out / f"step_rank{rank}.json").write_text(json.dumps({
            "schedule": cls.__name__, "rank": rank, "world": world, "stages": ids, "microbatches": a.mb,
            "hidden": H, "tokens": T, "layers_per_rank": a.layers_per_rank, "dtype": str(dtype),
            "device": torch.cuda.get_device_name(dev) if a.device == "cuda" else "cpu",
            "torch": torch.__version__, "unprofiled_step_s": plain, "profiled_step_s": profiled}, indent=1))
        if rank == 0:
            print(f"{cls.__name__:34s} step {plain * 1e3:8.1f} ms  profiled {profiled * 1e3:8.1f} ms", flush=True)
        del sched, stages, mods
    except Exception as e:  # one schedule failing must not hide the others
        (out / f"error_rank{rank}.txt").write_text(traceback.format_exc())
        print(f"rank {rank} {name} FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
    if a.device == "cuda":
        torch.cuda.empty_cache()
    dist.barrier()
dist.destroy_process_group()
