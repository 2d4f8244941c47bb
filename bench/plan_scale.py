"""Scale of plan + check + simulate: interleaved 1F1B, V=2, pp x micro-batches.

Each case runs in a fresh subprocess so its peak memory (max RSS) is its own. Prints a markdown
table: ops, seconds per phase, total, peak MB. Target (issue 2): pp=64, V=2, 512 micro-batches
under 10 s and 4 GB on a 2-core machine, with every check run.

    python bench/plan_scale.py [--pp 8,32,64] [--mb 64,256,512,1024] [--schedule interleaved-1f1b]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

# This checkout's pptl, not the installed one: several checkouts are timed side by side.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def one(schedule: str, pp: int, mb: int, vpp: int) -> dict:
    import gc

    gc.set_threshold(200_000, 20, 100)  # as the CLI does
    from pptl.checks import Context, check_context
    from pptl.config import Config
    from pptl.schedules import build_schedule

    t0 = time.perf_counter()
    s = build_schedule(Config(schedule=schedule, pp=pp, microbatches=mb, vpp=vpp))
    t1 = time.perf_counter()
    ctx = Context(s)
    violations = check_context(ctx)
    t2 = time.perf_counter()
    sim = ctx.simulation  # the checker's graph and order; the rules may have run it already
    t3 = time.perf_counter()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"schedule": schedule, "pp": pp, "microbatches": mb, "vpp": vpp, "ops": len(s.ops),
            "plan_s": t1 - t0, "check_s": t2 - t1, "simulate_s": t3 - t2, "total_s": t3 - t0,
            "peak_mb": rss, "violations": len(violations), "makespan": sim.makespan}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pp", default="8,32,64")
    ap.add_argument("--mb", default="64,256,512,1024")
    ap.add_argument("--vpp", type=int, default=2)
    ap.add_argument("--schedule", default="interleaved-1f1b")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        pp, mb = map(int, a.one.split(","))
        print(json.dumps(one(a.schedule, pp, mb, a.vpp)))
        return
    print("| pp | micro-batches | ops | plan s | check s | simulate s | total s | peak MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for pp in map(int, a.pp.split(",")):
        for mb in map(int, a.mb.split(",")):
            proc = subprocess.run([sys.executable, __file__, "--one", f"{pp},{mb}", "--vpp", str(a.vpp),
                                   "--schedule", a.schedule], capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"| {pp} | {mb} | failed: {proc.stderr.strip().splitlines()[-1]} |||||")
                continue
            r = json.loads(proc.stdout)
            assert r["violations"] == 0, r
            print(f"| {pp} | {mb} | {r['ops']} | {r['plan_s']:.2f} | {r['check_s']:.2f} | {r['simulate_s']:.2f} "
                  f"| {r['total_s']:.2f} | {r['peak_mb']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
