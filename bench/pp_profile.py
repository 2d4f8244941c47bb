"""Where a pipeline step's time goes: pptl's executor beside torch's built-in classes, in one launch.

    PYTHONPATH=. python3 bench/pp_profile.py --out OUT [--gpus 2] [--mbs 8,16] [--families gpipe,1f1b]

Under one torchrun launch (one process per rank), per micro-batch count and family:

1. torch    torch's built-in class (bench/torch_runtime.py's workload and timing: barrier and synchronize
            around each step, median of ``--steps``);
2. pptl     pptl's executor on the same plan ``pptl run`` runs, in each variant of ``--variants`` (message
            mode, receive gates, gradient handling), median untimed wall time (what ``pptl run`` reports);
3. torch    torch's class again (drift between 1 and 3 bounds what a difference means);
4. profile  one step of torch's class and of each pptl variant under torch.profiler: per rank, GPU time by
            kernel category (GEMM, NCCL, elementwise, memset...), the compute streams' busy time and idle
            time inside the step, the top kernels, and the host's launch calls.

Writes OUT/pp_profile.json and OUT/pp_profile.md. On CPU (``--device cpu --hidden 32 --tokens 8``) it runs
end to end with gloo (no kernel profile), for testing.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import add_anchor_workload_args, env_info, log  # noqa: E402

#: name -> (message mode, receive gates on, backward). Backward "fused": the executor's own (B as I then W,
#: each weight gradient accumulated by its GEMM, ``.grad`` dropped at the step's start); "autograd": B as one
#: autograd pass (each micro-batch's weight gradient added to ``.grad`` by a separate kernel); "zero": that,
#: with ``.grad`` zeroed in place at the step's start (pptl before issue 33).
VARIANTS = {"sync-send": ("sync-send", True, "fused"), "inline": ("inline", False, "fused"),
            "overlap": ("overlap", True, "fused"), "sync-send-nogates": ("sync-send", False, "fused"),
            "sync-send-autograd": ("sync-send", True, "autograd"), "inline-autograd": ("inline", False, "autograd"),
            "sync-send-zero": ("sync-send", True, "zero"), "inline-zero": ("inline", False, "zero")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=False)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--families", default="gpipe,1f1b")
    ap.add_argument("--mbs", default="8,16")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--profile-variants", default="sync-send,sync-send-autograd")
    add_anchor_workload_args(ap, steps=6)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(Path(a.worker))
    os.environ.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="pptl_pp_profile_"))
    import torch_runtime

    jobs: dict[str, dict] = {}
    for m in [int(x) for x in a.mbs.split(",")]:
        ns = argparse.Namespace(gpus=a.gpus, mb=m, hidden=a.hidden, tokens=a.tokens, dtype=a.dtype,
                                layers_per_rank=a.layers_per_rank, families=a.families.split(","))
        sub = work / f"m{m}"
        sub.mkdir()
        for fam, job in torch_runtime.prepare(ns, sub).items():
            jobs[f"{fam}@{m}"] = dict(job, family=fam, mb=m)
    job_file = work / "job.json"
    result_file = work / "result.json"
    job_file.write_text(json.dumps({"jobs": jobs, "args": vars(a), "result": str(result_file)}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={a.gpus}",
           str(Path(__file__).resolve()), "--worker", str(job_file)]
    log(" ".join(cmd[1:]))
    r = subprocess.run(cmd)
    if r.returncode != 0 or not result_file.exists():
        log(f"launch exited {r.returncode}")
        return 1
    res = json.loads(result_file.read_text())
    res["env"] = env_info()
    (out / "pp_profile.json").write_text(json.dumps(res, indent=1))
    lines = report(res)
    (out / "pp_profile.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return 0


def report(res: dict) -> list[str]:
    lines = ["| run | torch before ms | pptl ms | torch after ms | vs torch (mean of both) |", "|---|---:|---:|---:|---:|"]
    for key, r in res["runs"].items():
        tb, ta = r.get("torch_before"), r.get("torch_after")
        for v, ms in r.get("pptl", {}).items():
            ref = (tb + ta) / 2 if tb and ta else None
            d = f"{100 * (ms / ref - 1):+.2f}%" if ref and isinstance(ms, float) else "-"
            lines.append(f"| {key} {v} | {tb:.2f} | {ms if isinstance(ms, str) else f'{ms:.2f}'} | {ta:.2f} | {d} |")
    lines += ["", "Profiled step, per rank: span ms; kernel ms by category; compute busy / idle ms", ""]
    for key, r in res["runs"].items():
        for who, per_rank in (r.get("profile") or {}).items():
            for rank, p in enumerate(per_rank):
                if not p:
                    continue
                cats = ", ".join(f"{k} {v:.2f}" for k, v in sorted(p["by_category"].items(), key=lambda kv: -kv[1]))
                lines.append(f"- {key} {who} rank {rank}: span {p['span_ms']:.2f}; busy {p['busy_ms']:.2f}, idle "
                             f"{p['idle_ms']:.2f}; {cats}; launches {p['launches']}, host {p['host_ms']:.2f}")
    return lines


# ----------------------------------------------------------------------------------------------
# Worker


def worker(job_file: Path) -> int:
    import torch
    import torch.distributed as dist
    import torch_runtime as tr

    spec = json.loads(job_file.read_text())
    a = argparse.Namespace(**spec["args"])
    cuda = a.device == "cuda"
    rank = int(os.environ["RANK"])
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", device_id=dev)
    else:
        dist.init_process_group("gloo")
    world = dist.get_world_size()
    channels: dict = {}
    runs: dict[str, Any] = {}
    serial = [0]
    for key, job in spec["jobs"].items():
        if "error" in job:
            runs[key] = {"error": job["error"]}
            continue
        ta = argparse.Namespace(**vars(a), mb=job["mb"])
        r: dict[str, Any] = {"pptl": {}, "profile": {}}
        r["torch_before"] = _gathered_max(tr._timed(job, ta, rank, world, dev, builtin=True))
        _free(dev)
        for v in a.variants.split(","):
            try:
                walls, prof = _pptl(job, v, a, rank, world, dev, channels, serial, profile=v in a.profile_variants)
                r["pptl"][v] = statistics.median(walls)
                if prof is not None:
                    r["profile"][f"pptl {v}"] = _all(prof)
            except Exception as e:
                r["pptl"][v] = f"{type(e).__name__}: {str(e)[:200]}"
            _free(dev)
        r["torch_after"] = _gathered_max(tr._timed(job, ta, rank, world, dev, builtin=True))
        if cuda:
            r["profile"]["torch"] = _all(_torch_profile(job, ta, rank, world, dev))
        _free(dev)
        runs[key] = r
        if rank == 0:
            log(f"{key}: {json.dumps({k: r[k] for k in ('torch_before', 'pptl', 'torch_after')})}")
    if rank == 0:
        Path(spec["result"]).write_text(json.dumps({"runs": runs}, indent=1))
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _free(dev: Any) -> None:
    import torch

    gc.collect()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()


def _gathered_max(x: float) -> float:
    import torch.distributed as dist

    allx: list = [None] * dist.get_world_size()
    dist.all_gather_object(allx, x)
    return max(allx)


def _all(x: Any) -> list:
    import torch.distributed as dist

    allx: list = [None] * dist.get_world_size()
    dist.all_gather_object(allx, x)
    return allx


def _pptl(job: dict, variant: str, a: argparse.Namespace, rank: int, world: int, dev: Any, channels: dict,
          serial: list[int], *, profile: bool) -> tuple[list[float], dict | None]:
    """Median untimed wall time of pptl's executor in one variant (max over ranks per step), and a
    profiled step's summary."""
    import torch.distributed as dist

    from pptl.formats.loader import load_any
    from pptl.run.executor import Executor
    from pptl.run.program import build_program
    from pptl.run.worker import _open_channels

    messages, gated, grads = VARIANTS[variant]
    schedule = load_any(job["plan"]).schedule
    program = build_program(schedule, source=job["plan"])
    _open_channels(program, rank, dev, channels)
    gates = None
    if gated and dev.type == "cuda":
        from pptl.run.gates import Gates

        serial[0] += 1
        path = Path("/dev/shm") / f"pptl-prof-{os.environ.get('MASTER_PORT', '0')}-{serial[0]}.bin"
        gates = Gates(program, rank, dev, path)
        if not gates.enabled:
            gates = None
    ex = Executor(program, rank, dev, channels, timeout=120.0, gates=gates, messages=messages)
    _grads_variant(ex, grads)
    walls = []
    for k in range(a.warmup + a.steps):
        rec = ex.step(k, timed=False)
        if k >= a.warmup:
            walls.append(rec["wall_ms"])
    per: list = [None] * world
    dist.all_gather_object(per, walls)
    walls = [max(w) for w in zip(*per)]
    prof = None
    if profile and dev.type == "cuda":
        step, k = ex.step, a.warmup + a.steps
        prof = _profiled(lambda: step(k, timed=False))
    if gates is not None:
        gates.close(rank)
    del ex
    return walls, prof


def _grads_variant(ex: Any, grads: str) -> None:
    """Patch one executor's backward (``VARIANTS``); plans with I/W keep the executor's own."""
    import torch

    if grads == "fused" or any(op.kind == "I" for op in ex.ops):
        return
    ex.keep_linears = False  # B through autograd
    if grads == "zero":
        def zero() -> None:
            with torch.no_grad(), (torch.cuda.stream(ex.compute) if ex.cuda else _null()):
                for c in ex.chunks.values():
                    for p in c.params:
                        if p.grad is None:
                            p.grad = torch.zeros_like(p)
                        else:
                            p.grad.zero_()
        ex._zero_grads = zero


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: Any) -> None:
        return None


def _torch_profile(job: dict, a: argparse.Namespace, rank: int, world: int, dev: Any) -> dict:
    import torch
    import torch.distributed as dist
    import torch_runtime as tr

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[a.dtype]
    local = [rank + k * world for k in range(len(job["stages"][str(rank)]))] if not job["v"] else job["stages"][str(rank)]
    n = job["num_stages"]
    mods = [tr._stage_module(s, job["layers_per_stage"], a.hidden, dev, dtype) for s in local]
    x, y = tr._data(a.mb, a.tokens, a.hidden, dev, dtype)
    sched = tr._schedule(job, mods, local, a.mb, dev, builtin=True)

    def one() -> None:
        for mod in mods:
            mod.zero_grad(set_to_none=True)
        dist.barrier()
        torch.cuda.synchronize()
        tr._step(sched, x, y, 0 in local, n - 1 in local)
        torch.cuda.synchronize()
        dist.barrier()
    for _ in range(2):
        one()
    return _profiled(one)


def _profiled(fn: Any) -> dict:
    """One call of ``fn`` under torch.profiler: the GPU's kernels by category and the compute streams' idle time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        fn()
        host_ms = (time.perf_counter() - t0) * 1e3
    path = Path(tempfile.mkstemp(suffix=".json")[1])
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    path.unlink()
    torch.cuda.synchronize()
    return summarize(trace.get("traceEvents", []), host_ms)


def _category(name: str) -> str:
    n = name.lower()
    if "nccl" in n:
        return "nccl"
    if any(k in n for k in ("gemm", "nvjet", "xmma", "cutlass", "sm90_", "sm80_")):
        return "gemm"
    if "gelu" in n:
        return "gelu"
    if "reduce" in n:
        return "reduce"
    if "fill" in n:
        return "fill"
    if "elementwise" in n or "vectorized" in n:
        return "elementwise"
    return "other"


def summarize(events: list[dict], host_ms: float) -> dict:
    """Kernel time by category, busy and idle time of the non-NCCL kernels between the step's first and last
    kernel, the top kernels, and the host's CUDA launch calls."""
    kern = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")]
    launches = sum(1 for e in events if e.get("cat") == "cuda_runtime" and "Launch" in str(e.get("name", "")))
    if not kern:
        return {"span_ms": 0.0, "busy_ms": 0.0, "idle_ms": 0.0, "by_category": {}, "top": [], "launches": launches,
                "host_ms": host_ms, "streams": {}}
    by: dict[str, float] = {}
    names: dict[str, list[float]] = {}
    streams: dict[str, float] = {}
    for e in kern:
        c = "memset" if e["cat"] == "gpu_memset" else "memcpy" if e["cat"] == "gpu_memcpy" else _category(e["name"])
        by[c] = by.get(c, 0.0) + e["dur"] / 1e3
        nm = names.setdefault(e["name"][:90], [0.0, 0])
        nm[0] += e["dur"] / 1e3
        nm[1] += 1
        s = str((e.get("args") or {}).get("stream", "?"))
        streams[s] = streams.get(s, 0.0) + e["dur"] / 1e3
    t0 = min(e["ts"] for e in kern)
    t1 = max(e["ts"] + e["dur"] for e in kern)
    compute = sorted((e["ts"], e["ts"] + e["dur"]) for e in kern if _category(e["name"]) != "nccl")
    busy, cur_s, cur_e = 0.0, None, None
    for s, e in compute:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        busy += cur_e - cur_s
    top = sorted(names.items(), key=lambda kv: -kv[1][0])[:12]
    return {"span_ms": (t1 - t0) / 1e3, "busy_ms": busy / 1e3, "idle_ms": (t1 - t0 - busy) / 1e3,
            "by_category": {k: round(v, 3) for k, v in by.items()},
            "top": [[n, round(v[0], 3), v[1]] for n, v in top], "launches": launches, "host_ms": host_ms,
            "streams": {k: round(v, 3) for k, v in streams.items()}}


if __name__ == "__main__":
    sys.exit(main())
