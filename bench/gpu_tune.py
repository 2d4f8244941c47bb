"""Prove `pptl tune` on GPUs: costs from one `pptl run` of 1F1B predict every family, the pick is the
fastest measured candidate that fits, and nothing reported as fitting goes over the memory limit.

    python3 bench/gpu_tune.py OUTDIR [--device cuda|cpu]     (bench/gpu_tune.sh wraps it)

Workload: the anchor (hidden 4096, tokens 2048, bf16) on 4 ranks; a model of 32 MLP layers plus an
embedding and a head that each run as 2 MLP blocks (a heavier first and last stage); 8 and 16
micro-batches. Steps:
  1. `pptl run` of 1F1B, even split (stage_layers 10/8/8/10), 16 micro-batches;
  2. `pptl tune --costs-from` that timeline (no limit), to pick a memory limit that rules out the
     fastest candidate of each micro-batch count (in a gap between predicted peaks), then again with it;
  3. every family's fastest candidate and the top 5 at each micro-batch count, in one launch;
  4. the checks of issue 19; writes tune_gpu.md and tune_gpu.json (and pareto.png) to OUTDIR, with
     base.measured.json and every cand<i>.measured.json (bench/tune_offline.py re-predicts from them).
--device cpu runs a tiny float32 workload on gloo (a smoke test of the script; no memory numbers).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _tune_common import BLOCKS, pick_limit, tune_config  # noqa: E402
from _tune_common import checks as tune_checks  # noqa: E402

# PP=2 runs the same study on a 2-GPU machine (8 layers a stage, as at 4).
PP = int(os.environ.get("PP", "4"))
LAYERS, MBS = 8 * PP, (8, 16)


def _pptl(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pptl", *args]
    print("$ pptl " + " ".join(args), flush=True)
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        sys.exit(f"pptl {args[0]} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return p


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work" if a.device == "cpu" else Path("/tmp/pptl_gpu_tune")
    work.mkdir(parents=True, exist_ok=True)
    cuda = a.device == "cuda"
    h, t, dtype = (4096, 2048, "bfloat16") if cuda else (64, 16, "float32")
    t0 = time.time()

    tune_cfg = tune_config(PP, MBS, h, t, dtype)
    (work / "tune.json").write_text(json.dumps(tune_cfg))

    # 1. One measured run of 1F1B with the even split.
    even = [LAYERS // PP] * PP
    base = {"schedule": "1f1b", "pp": PP, "microbatches": max(MBS),
            "workload": {"hidden": h, "tokens": t, "dtype": dtype,
                         "stage_layers": [even[0] + BLOCKS] + even[1:-1] + [even[-1] + BLOCKS]}}
    (work / "base.json").write_text(json.dumps(base))
    p = _pptl("run", str(work / "base.json"), "--gpus", str(PP), "--device", a.device, "--steps", str(a.steps),
              "--warmup", str(a.warmup), "-o", str(work / "base.measured.json"))
    if p.returncode:
        sys.exit(f"baseline run failed: {p.stderr.strip()[-1000:]}")
    print(p.stdout, flush=True)
    shutil.copy(work / "base.measured.json", out / "base.measured.json")  # to re-predict offline

    # 2. Tune from it: once without a limit to place one, then with it.
    p = _pptl("tune", str(work / "tune.json"), "--costs-from", str(work / "base.measured.json"), "--output", "json")
    free = json.loads(p.stdout)
    timed = [c for c in free["candidates"] if c["step"] is not None and c["peak_memory"]]
    limit = pick_limit([(c["microbatches"], c["step"], max(c["peak_memory"])) for c in timed])
    p = _pptl("tune", str(work / "tune.json"), "--costs-from", str(work / "base.measured.json"), "--output", "json",
              "--memory-limit", f"{limit:.3f}", "--figure", str(out / "pareto.png"))
    ranked = json.loads(p.stdout)

    # The same search in process, for the plans to run (the library the CLI calls).
    from pptl.planning import costs_from_timeline
    from pptl.run import run_plans
    from pptl.tune import load_tune_config, tune
    from pptl.tune.calibrate import calibrate_tune
    from pptl.tune.rank import best_schedule

    tc, units, _ = calibrate_tune(load_tune_config(work / "tune.json"), work / "base.measured.json")
    tc = replace(tc, memory_limit=limit)
    res = tune(tc, workers=os.cpu_count() or 1)
    chosen: dict[str, object] = {}
    for m in MBS:
        timed = [r for r in res.results if r.step is not None and r.structure.microbatches == m]
        for r in timed[:5]:  # the top 5 (fitting first, by predicted step)
            chosen.setdefault(r.label, r)
        for fam in dict.fromkeys(r.structure.family for r in timed):  # each family's fastest (fitting first)
            r = next(x for x in timed if x.structure.family == fam)
            chosen.setdefault(r.label, r)
    plans = []
    for k, (label, r) in enumerate(chosen.items()):
        s = best_schedule(tc, r)
        plans.append((s, work / f"cand{k}.measured.json"))
    print(f"running {len(plans)} candidates in one launch", flush=True)
    tls = run_plans(plans, gpus=PP, device=a.device, steps=a.steps, warmup=a.warmup)
    for _, path in plans:  # beside base.measured.json: bench/tune_offline.py re-times synth on the order that ran
        if path.is_file() and path.parent != out:
            shutil.copy(path, out / path.name)

    # 3. Compare.
    rows = []
    for (label, r), tl in zip(chosen.items(), tls):
        x = tl.meta.extra
        mem = x.get("memory") or {}
        peak = [mem[str(k)]["peak_mib"] for k in range(PP)] if mem else None
        # What each rank held before the first step (weights, inputs, and what earlier plans of
        # this launch left allocated): tells a launch's leftovers from the plan's own peak.
        base_mem = [mem[str(k)]["base_mib"] for k in range(PP)] if mem else None
        # What each rank held when the plan started, before its own setup: 0 unless earlier plans
        # of the launch left something allocated.
        start_mem = [mem[str(k)].get("start_mib") for k in range(PP)] if mem else None
        rows.append({"label": label, "family": r.structure.family, "microbatches": r.structure.microbatches,
                     "predicted_ms": r.step, "predicted_peak": list(r.peak), "fits": r.fits,
                     "measured_ms": tl.makespan, "wall_ms": x.get("median_untimed_step_ms"),
                     "measured_peak": peak, "measured_base": base_mem, "measured_start": start_mem, "layout": r.layout, "stage_layers": list(r.split.layers),
                     # measured mean per (stage, kind): what a later model change is checked against
                     "op_means": costs_from_timeline(tl).get("stages")})
    checks = tune_checks(rows, limit, {m: _best_label(res, m) for m in MBS})
    errs = {x["label"]: (x["predicted_ms"] - x["measured_ms"]) / x["measured_ms"] for x in rows}
    result = {"device": a.device, "limit_mib": limit, "units": units, "checks": checks, "rows": rows,
              "tune_best": ranked.get("best"), "seconds": time.time() - t0}
    (out / "tune_gpu.json").write_text(json.dumps(result, indent=1))
    lines = [f"# pptl tune on {a.device}: {PP} ranks, hidden {h}, tokens {t}, {dtype}, {LAYERS} layers + "
             f"embedding/head of {BLOCKS} blocks each; memory limit {limit:.0f} MiB", "",
             "| candidate | stage layers | predicted ms | measured ms | error | wall ms | predicted peak MiB | "
             "measured peak MiB | fits |", "|---|---|---|---|---|---|---|---|---|"]
    for x in sorted(rows, key=lambda x: (x["microbatches"], x["predicted_ms"])):
        mp = "-" if x["measured_peak"] is None else f"{max(x['measured_peak']):.0f}"
        lines.append(f"| {x['label']} | {x['stage_layers']} | {x['predicted_ms']:.2f} | {x['measured_ms']:.2f} | "
                     f"{100 * errs[x['label']]:+.1f}% | {x['wall_ms'] or 0:.2f} | {max(x['predicted_peak']):.0f} | "
                     f"{mp} | {'yes' if x['fits'] else 'no'} |")
    starts = [v for x in rows for v in (x["measured_start"] or []) if v is not None]
    lines += ["", "checks: " + json.dumps(checks)]
    if starts:  # each plan of the launch should start from what a launch of it alone starts from
        lines.append(f"allocated at a plan's start, most on any rank: {max(starts):.1f} MiB")
    (out / "tune_gpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"done in {time.time() - t0:.0f} s")
    return 0


def _best_label(res: object, m: int) -> str | None:
    for r in res.results:  # type: ignore[attr-defined]
        if r.structure.microbatches == m:
            return r.label if r.fits else None
    return None


if __name__ == "__main__":
    sys.exit(main())
