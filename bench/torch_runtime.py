"""pptl's schedules in torch's own runtime: each family exported with ``pptl export --to torch-csv --comms``,
loaded by ``_PipelineScheduleRuntime._load_csv(format="compute_comms")`` (what torchtitan's
``pipeline_parallel_schedule_csv`` uses), timed beside torch's built-in class for the same schedule and beside
``pptl run``, on the anchor workload (bench/torch_pp_anchor.py's MLP blocks), in one command:

    PYTHONPATH=. python3 bench/torch_runtime.py --out OUT [--gpus 4] [--mb 8] [--families gpipe,1f1b,...]

Per family:
1. verify  (float32, a small width): one step of the exported CSV in torch's runtime; every local parameter
           gradient against a single-process reference of the same stages (same seeds), relative error
           max|g - g_ref| / max|g_ref| under ``--tolerance``. float32 keeps the comparison tight; the timed runs
           use ``--dtype`` (bfloat16 on GPU, as the anchor).
2. timed   the same CSV at the anchor size, median of ``--steps`` steps (barrier + synchronize around each,
           the slowest rank's median), and torch's built-in class where one exists;
3. pptl    ``python3 -m pptl run PLAN`` on the same plan (median untimed wall time per step).

Each family's torch part runs inside one torchrun launch for all families; the driver watches the launch and
kills it when a family makes no progress for ``--family-timeout`` seconds (a hang), records the hang and
relaunches for the families after it. Writes OUT/torch_runtime.md (the table) and OUT/torch_runtime.json
(plans, CSVs and timelines in --work, a temporary folder by default).
On CPU (``--device cpu --hidden 32 --tokens 8``) it runs end to end with gloo, for testing.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import add_anchor_workload_args, env_info, log  # noqa: E402

#: pptl family -> torch's built-in class for the same schedule (None: torch has none).
BUILTIN = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B", "zb-h1": None,
           "zb-h2": None, "zbv": "ZBVZeroBubble", "dualpipev": "DualPipeV", "dualpipe": None,
           "looped-bfs": "LoopedBFS", "interleaved-zb": "InterleavedZeroBubble", "v-half": None, "v-min": None}
FAMILIES = list(BUILTIN)


# ----------------------------------------------------------------------------------------------
# Driver


def prepare(args: argparse.Namespace, work: Path) -> dict[str, dict]:
    """Plan and export every family: family -> job entry (plan, csv, stages per rank) or {"error": why}."""
    from gpu_suite import training_configs

    from pptl import planning
    from pptl.export import export_file

    wl = {"hidden": args.hidden, "tokens": args.tokens, "dtype": args.dtype}
    cfgs = training_configs(args.gpus, args.mb, wl, args.layers_per_rank)
    jobs: dict[str, dict] = {}
    for fam in args.families:
        if fam not in cfgs:
            jobs[fam] = {"error": f"pptl plans no {fam} at pp={args.gpus}, {args.mb} micro-batches"}
            continue
        cfg_path = work / f"cfg_{fam}.json"
        cfg_path.write_text(json.dumps(cfgs[fam], indent=1))
        plan_path = work / f"plan_{fam}.json"
        result = planning.plan(planning.make_config(cfg_path, {}, None, None))
        planning.write_plan(result, plan_path)
        s = result.schedule
        csv_path = work / f"{fam}.csv"
        try:
            csv_path.write_bytes(export_file(plan_path, to="torch-csv", comms=True).data)
        except Exception as e:  # dualpipe: two directions, which torch's CSV cannot hold
            jobs[fam] = {"error": f"export refused: {e}", "plan": str(plan_path)}
            continue
        stages: dict[int, list[int]] = {}
        for op in s.ops:
            if op.lane == "compute" and op.stage >= 0:
                stages.setdefault(op.rank, [])
                if op.stage not in stages[op.rank]:
                    stages[op.rank].append(op.stage)
        jobs[fam] = {"plan": str(plan_path), "csv": str(csv_path), "num_stages": s.num_stages,
                     "stages": {str(r): sorted(v) for r, v in stages.items()},
                     "layers_per_stage": cfgs[fam]["workload"]["layers_per_stage"], "builtin": BUILTIN.get(fam),
                     "v": s.meta.get("placement") == "v" or fam in ("zbv", "dualpipev")}
    return jobs


def run_torch(args: argparse.Namespace, jobs: dict[str, dict], work: Path) -> dict[str, dict]:
    """All families' torch parts in torchrun launches, relaunching past a family that hangs."""
    todo = [f for f in args.families if "error" not in jobs[f]]
    results: dict[str, dict] = {}
    progress = work / "progress.jsonl"
    while todo:
        job_file = work / "job.json"
        job_file.write_text(json.dumps({"families": todo, "jobs": jobs, "args": vars(args)}))
        progress.write_text("")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.gpus}",
               str(Path(__file__).resolve()), "--worker", str(job_file), "--progress", str(progress)]
        log("  " + " ".join(cmd[1:]))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        last, current, hung = time.time(), None, None
        seen = 0
        while proc.poll() is None:
            time.sleep(0.5)
            lines = progress.read_text().splitlines()
            for line in lines[seen:]:
                rec = json.loads(line)
                last = time.time()
                if rec["event"] == "start":
                    current = rec["family"]
                    log(f"  {current}: started")
                else:
                    results[rec["family"]] = rec["result"]
                    log(f"  {rec['family']}: {json.dumps(rec['result'])}")
                    current = None
            seen = len(lines)
            if time.time() - last > args.family_timeout:
                hung = current
                os.killpg(proc.pid, signal.SIGKILL)
                break
        output = proc.communicate()[0] or ""
        for line in progress.read_text().splitlines()[seen:]:
            rec = json.loads(line)
            if rec["event"] == "done":
                results[rec["family"]] = rec["result"]
        done_or_hung = set(results) | ({hung} if hung else set())
        if hung:
            results[hung] = {"error": f"no progress for {args.family_timeout:g} s (killed)"}
            log(f"  {hung}: hang, killed after {args.family_timeout:g} s")
        elif proc.returncode != 0:
            stuck = next((f for f in todo if f not in results), None)
            if stuck is None:
                break
            results[stuck] = {"error": f"launch exited {proc.returncode}: {output[-800:]}"}
            done_or_hung.add(stuck)
            log(f"  {stuck}: launch failed:\n{output[-3000:]}")
        todo = [f for f in todo if f not in done_or_hung]
    return results


def run_pptl(args: argparse.Namespace, plan: str, work: Path, fam: str) -> dict:
    """``python3 -m pptl run PLAN`` as a user types it; the median untimed wall time per step."""
    from pptl.formats.loader import load_any

    measured = work / f"measured_{fam}.json"
    cmd = [sys.executable, "-m", "pptl", "run", plan, "--gpus", str(args.gpus), "--device", args.device,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--timeout", str(args.family_timeout),
           "-o", str(measured), "--output", "json"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.family_timeout + 60)
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1]}
    x = load_any(measured).timeline.meta.extra
    return {"ms": x.get("median_untimed_wall_ms") or x.get("median_untimed_step_ms"),
            "timed_ms": x.get("median_step_ms")}


def table(families: list[str], jobs: dict, torch_res: dict, pptl_res: dict) -> list[str]:
    def f(x: object) -> str:
        return f"{x:.2f}" if isinstance(x, (int, float)) else "-"

    lines = ["| family | torch built-in ms | pptl CSV in torch runtime ms | pptl run ms | gradients ok | note |",
             "|---|---:|---:|---:|---|---|"]
    for fam in families:
        t = torch_res.get(fam, {})
        p = pptl_res.get(fam, {})
        builtin = BUILTIN.get(fam)
        v = t.get("verify") or {}
        grads = (f"yes ({v['max_rel_err']:.1e})" if v.get("ok") else f"NO ({v['max_rel_err']:.1e})") if v else "-"
        notes = [n for n in (jobs.get(fam, {}).get("error"), t.get("error"), t.get("csv_error"),
                             t.get("builtin_error"), p.get("error")) if n]
        bcell = f(t.get("builtin_ms")) if builtin else "none"
        lines.append(f"| {fam} | {bcell}{f' ({builtin})' if builtin else ''} | {f(t.get('csv_ms'))} | "
                     f"{f(p.get('ms'))} | {grads} | {'; '.join(str(n)[:160] for n in notes)} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--mb", type=int, default=8)
    add_anchor_workload_args(ap)
    ap.add_argument("--verify-hidden", type=int, default=64)
    ap.add_argument("--verify-tokens", type=int, default=16)
    ap.add_argument("--tolerance", type=float, default=1e-4, help="float32 gradient relative error allowed")
    ap.add_argument("--family-timeout", type=float, default=90)
    ap.add_argument("--skip-pptl", action="store_true")
    ap.add_argument("--work", default="", help="folder for plans, CSVs, timelines (default: a temporary folder)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--progress", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(Path(args.worker), Path(args.progress))
    if not args.out:
        ap.error("--out is required")
    # NVLink multicast stays off (it can take a shared host's GPUs down), in every process we start.
    os.environ.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    args.families = [f.strip() for f in args.families.split(",") if f.strip()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # Plans, CSVs and measured timelines go beside OUT's two result files, not into OUT.
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="pptl_torch_runtime_"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    jobs = prepare(args, work)
    log(f"planned and exported {len(jobs)} families ({time.time() - t0:.1f} s)")
    torch_res = run_torch(args, jobs, work)
    pptl_res: dict[str, dict] = {}
    if not args.skip_pptl:
        for fam in args.families:
            if "plan" in jobs[fam] and "error" not in jobs[fam]:
                t = time.time()
                pptl_res[fam] = run_pptl(args, jobs[fam]["plan"], work, fam)
                log(f"  pptl run {fam}: {pptl_res[fam]} ({time.time() - t:.1f} s)")
    lines = table(args.families, jobs, torch_res, pptl_res)
    print("\n".join(lines), flush=True)
    (out / "torch_runtime.md").write_text("\n".join(lines) + "\n")
    result = {"args": vars(args), "env": env_info(), "jobs": jobs, "torch": torch_res, "pptl": pptl_res}
    (out / "torch_runtime.json").write_text(json.dumps(result, indent=1, default=str))
    log(f"done in {time.time() - t0:.1f} s")
    bad = [f for f in args.families if "error" not in jobs[f]
           and not (torch_res.get(f, {}).get("verify") or {}).get("ok")]
    return 1 if bad else 0


# ----------------------------------------------------------------------------------------------
# Worker (one per rank, under torchrun)


def worker(job_file: Path, progress: Path) -> int:
    import torch
    import torch.distributed as dist

    spec = json.loads(job_file.read_text())
    a = argparse.Namespace(**spec["args"])
    cuda = a.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)

    def note(rec: dict) -> None:
        if rank == 0:
            with open(progress, "a") as f:
                f.write(json.dumps(rec) + "\n")

    builtin_only = getattr(a, "builtin_only", False)  # bench/pp_vs_torch.py: torch's classes alone
    for fam in spec["families"]:
        note({"event": "start", "family": fam})
        job = spec["jobs"][fam]
        ja = argparse.Namespace(**{**vars(a), "mb": job.get("mb", a.mb)})
        res: dict = {}
        if not builtin_only:
            try:
                res["verify"] = _verify(job, ja, rank, world, dev)
            except Exception as e:
                res["csv_error"] = f"{type(e).__name__}: {str(e)[:300]}"
            if "csv_error" not in res:
                try:
                    res["csv_ms"] = _timed(job, ja, rank, world, dev, builtin=False)
                except Exception as e:
                    res["csv_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        if job.get("builtin"):
            try:
                steps: list[float] = []
                res["builtin_ms"] = _timed(job, ja, rank, world, dev, builtin=True, steps=steps)
                res["builtin_steps"] = steps
            except Exception as e:
                res["builtin_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        gathered: list = [None] * world
        dist.all_gather_object(gathered, res)
        merged = _merge(gathered)
        note({"event": "done", "family": fam, "result": merged})
        if cuda:
            torch.cuda.empty_cache()
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _merge(per_rank: list[dict]) -> dict:
    """The slowest rank's times; gradients ok only when every rank's are; the first error."""
    out: dict = {}
    for key in ("csv_ms", "builtin_ms"):
        vals = [r[key] for r in per_rank if key in r]
        if len(vals) == len(per_rank):
            out[key] = max(vals)
    per_step = [r["builtin_steps"] for r in per_rank if "builtin_steps" in r]
    if per_step and len(per_step) == len(per_rank):  # each step's slowest rank
        out["builtin_steps"] = [max(x) for x in zip(*per_step)]
    for key in ("csv_error", "builtin_error"):
        errs = [f"rank {i}: {r[key]}" for i, r in enumerate(per_rank) if key in r]
        if errs:
            out[key] = errs[0]
    ver = [r.get("verify") for r in per_rank]
    if all(ver):
        out["verify"] = {"ok": all(v["ok"] for v in ver), "max_rel_err": max(v["max_rel_err"] for v in ver),
                         "worst": max(ver, key=lambda v: v["max_rel_err"])["worst"]}
    return out


def _block(h: int):  # the anchor's block (bench/torch_pp_anchor.py)
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up, self.down = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

        def forward(self, x):
            return x + self.down(nn.functional.gelu(self.up(x)))

    return Block()


def _stage_module(stage: int, layers: int, h: int, dev, dtype):
    """Stage ``stage``'s chunk: seeded by its index, so every process (and the reference) gets the same
    weights. Built on ``dev`` itself: initialising the anchor's 537M parameters a rank on the CPU took
    about 5 s a schedule, most of a GPU call that times 15 of them twice."""
    import torch
    import torch.nn as nn

    torch.manual_seed(1000 + stage)
    with torch.device(dev):
        return nn.Sequential(*[_block(h) for _ in range(layers)]).to(dtype)


def _loss(out, tgt):
    return (out.float() - tgt.float()).pow(2).mean()


def _data(m: int, t: int, h: int, dev, dtype):
    import torch

    g = torch.Generator().manual_seed(7)
    x = torch.randn(m * t, h, generator=g).to(dev, dtype)
    y = torch.randn(m * t, h, generator=g).to(dev, dtype)
    return x, y


def _schedule(job: dict, mods: list, local: list[int], m: int, dev, *, builtin: bool):
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining import schedules as S

    n = job["num_stages"]
    stages = [PipelineStage(mod, s, n, dev) for mod, s in zip(mods, local)]
    if not builtin:
        sched = S._PipelineScheduleRuntime(stages, m, loss_fn=_loss)
        sched._load_csv(job["csv"], format="compute_comms")
        return sched
    cls = S.get_schedule_class(job["builtin"])
    single = issubclass(cls, S.PipelineScheduleSingle)
    return cls(stages[0] if single else stages, m, loss_fn=_loss)


def _step(sched, x, y, first: bool, last: bool) -> None:
    sched.step(*((x,) if first else ()), **(dict(target=y, losses=[]) if last else {}))


def _verify(job: dict, a: argparse.Namespace, rank: int, world: int, dev) -> dict:
    """One float32 step of the CSV in torch's runtime against a single-process reference on this rank."""
    import torch

    local = job["stages"][str(rank)]
    n, layers, h, t, m = job["num_stages"], job["layers_per_stage"], a.verify_hidden, a.verify_tokens, a.mb
    mods = [_stage_module(s, layers, h, dev, torch.float32) for s in local]
    x, y = _data(m, t, h, dev, torch.float32)
    sched = _schedule(job, mods, local, m, dev, builtin=False)
    _step(sched, x, y, 0 in local, n - 1 in local)
    # Reference: every stage in order, one process, the loss averaged over micro-batches as torch scales it.
    ref = [_stage_module(s, layers, h, dev, torch.float32) for s in range(n)]
    for xm, ym in zip(x.chunk(m), y.chunk(m)):
        out = xm
        for mod in ref:
            out = mod(out)
        (_loss(out, ym) / m).backward()
    worst, err = "", 0.0
    for mod, s in zip(mods, local):
        for (name, p), q in zip(mod.named_parameters(), ref[s].parameters()):
            if p.grad is None:
                return {"ok": False, "max_rel_err": float("inf"), "worst": f"stage {s} {name}: no gradient"}
            e = ((p.grad - q.grad).abs().max() / q.grad.abs().max().clamp_min(1e-30)).item()
            if e > err:
                err, worst = e, f"stage {s} {name}"
    return {"ok": err <= a.tolerance, "max_rel_err": err, "worst": worst}


def _timed(job: dict, a: argparse.Namespace, rank: int, world: int, dev, *, builtin: bool,
           steps: list[float] | None = None) -> float:
    """Median wall time of a step (ms) at the anchor size, barrier and synchronize around each (every
    timed step's time appended to ``steps`` if given)."""
    import torch
    import torch.distributed as dist

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[a.dtype]
    local = job["stages"][str(rank)]
    if builtin and not job["v"]:  # torch's built-in classes place stages in a loop: rank + k * world
        local = [rank + k * world for k in range(len(local))]
    n = job["num_stages"]
    mods = [_stage_module(s, job["layers_per_stage"], a.hidden, dev, dtype) for s in local]
    x, y = _data(a.mb, a.tokens, a.hidden, dev, dtype)
    sched = _schedule(job, mods, local, a.mb, dev, builtin=builtin)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    times = []
    for i in range(a.warmup + a.steps):
        for mod in mods:
            mod.zero_grad(set_to_none=True)
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        _step(sched, x, y, 0 in local, n - 1 in local)
        sync()
        dist.barrier()
        if i >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    if steps is not None:
        steps.extend(times)
    return statistics.median(times)


if __name__ == "__main__":
    sys.exit(main())
