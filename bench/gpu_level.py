"""Does a rank's speed follow its GPU or its role? The calibrating 1F1B run of `pptl tune`'s
cross-validation gives one duty exponent from two ranks whose work and duty both differ, so a GPU
that is slower than its peer at the same duty reads as a duty effect. This runs each shape's
calibrating plan with the ranks on GPUs 0,1 and again on 1,0 (and 0,1 once more: the launch-to-launch
move), and a plain GEMM loop on each GPU alone and on both at once, at full duty and at about half.

    python3 bench/gpu_level.py OUTDIR [--shapes h3584-t8192-l4-m8,h5120-t1024-l10-m6] [--steps 7]

Per shape and order: each rank's busy share, its mean F and B per block (the stage's op over its
blocks), and the exponent `pptl tune` fits from that run. If a GPU is slower, the per-block ratio of
rank 1 over rank 0 moves by that GPU's factor twice (up in one order, down in the other) and the
fitted exponent with it; a role (the last stage's loss, its receives) keeps the ratio in both orders.
Writes OUTDIR/level.json and every measured timeline under OUTDIR/runs/.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import tune_crossval as tcv  # noqa: E402

ORDERS = ("0,1", "1,0", "0,1")

GEMM = r"""
import sys, time, torch
n, duty, seconds = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16); b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(20): a @ b
torch.cuda.synchronize()
times = []
t_end = time.perf_counter() + seconds
while time.perf_counter() < t_end:
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(8): a @ b
    e.record(); e.synchronize()
    ms = s.elapsed_time(e)
    times.append(ms / 8)
    if duty < 1: time.sleep(ms * (1 - duty) / duty / 1000)
times.sort()
half = times[len(times) // 2:]
print(f"{sum(half) / len(half):.5f} {len(times)}")
"""


BLOCK = r"""
import sys, time, torch
import torch.nn.functional as F
t, h, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
duties = [float(x) for x in sys.argv[4].split(",")]
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16, generator=g)
w1 = torch.randn(4 * h, h, device="cuda", dtype=torch.bfloat16, generator=g) / h ** 0.5
w2 = torch.randn(h, 4 * h, device="cuda", dtype=torch.bfloat16, generator=g) / (4 * h) ** 0.5
b1 = torch.zeros(4 * h, device="cuda", dtype=torch.bfloat16); b2 = torch.zeros(h, device="cuda", dtype=torch.bfloat16)
def block(x):
    return x + F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)
for _ in range(10): block(x)
torch.cuda.synchronize()
burst = 1
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record(); block(x); e.record(); e.synchronize()
burst = max(1, int(8.0 / max(s.elapsed_time(e), 1e-3)))
out = []
for duty in duties:
    times = []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        s.record()
        for _ in range(burst): block(x)
        e.record(); e.synchronize()
        ms = s.elapsed_time(e)
        times.append(ms / burst)
        if duty < 1: time.sleep(ms * (1 - duty) / duty / 1000)
    half = times[len(times) // 2:]
    out.append(f"{sum(half) / len(half):.5f}")
print(" ".join(out))
"""
#: Busy shares the block probe holds each GPU at (bursts of about 8 ms, then idle).
PROBE_DUTIES = (1.0, 0.75, 0.5, 0.35)


def _on_gpus(program: str, args: list[object], gpus: list[str], timeout: float) -> dict[str, list[str]]:
    """Run ``program`` (python -c) once on each GPU at the same time; each one's printed words."""
    procs = {g: subprocess.Popen([sys.executable, "-c", program, *map(str, args)],
                                 env={**os.environ, "CUDA_VISIBLE_DEVICES": g}, stdout=subprocess.PIPE, text=True)
             for g in gpus}
    return {g: p.communicate(timeout=timeout)[0].split() for g, p in procs.items()}


def block_probe(tokens: int, hidden: int, seconds: float = 1.5) -> dict[str, dict[str, float]]:
    """Milliseconds per forward of the workload's MLP block (bf16) on both GPUs at once, at each of
    :data:`PROBE_DUTIES`: how this shape's own kernels slow with the share of time the GPU computes."""
    duties = ",".join(str(d) for d in PROBE_DUTIES)
    res = _on_gpus(BLOCK, [tokens, hidden, seconds, duties], ["0", "1"], timeout=300)
    return {g: {str(d): float(v) for d, v in zip(PROBE_DUTIES, r)} for g, r in res.items() if r}


def gemm_probe(n: int = 8192, seconds: float = 4.0) -> dict[str, Any]:
    """Milliseconds per n^3 bf16 GEMM (mean of the slower half of the samples, once the clock has
    settled) on each GPU alone and on both at once, at full duty and at duty 0.5."""
    out: dict[str, Any] = {}
    for duty in (1.0, 0.5):
        for which in ("0", "1", "both"):
            res = _on_gpus(GEMM, [n, duty, seconds], ["0", "1"] if which == "both" else [which], timeout=120)
            out[f"duty{duty}:{which}"] = {g: float(r[0]) for g, r in res.items() if r}
            print(f"gemm n={n} duty {duty} on {which}: {out[f'duty{duty}:{which}']}", flush=True)
    return out


def per_block(tl: Any, layers: list[int]) -> dict[int, dict[str, float]]:
    """Per rank: busy share of the step (as calibration reads it), mean F and B over the stage's blocks."""
    from pptl.tune.calibrate import rank_duty

    duty, _ = rank_duty(tl)
    out: dict[int, dict[str, float]] = {}
    for r in range(len(layers)):
        row = {"duty": duty[r]}
        for kind in ("F", "B"):
            d = [e.duration for e in tl.events if e.rank == r and e.lane == "compute" and e.kind == kind]
            row[kind] = sum(d) / len(d) / layers[r]
        out[r] = row
    return out


def _pair_alpha(even: dict[int, dict[str, float]], bal: dict[int, dict[str, float]], kind: str) -> float | None:
    """The exponent two runs of one shape tell when only the split moved: how rank 1's per-block time
    over rank 0's moved, against how their busy shares' ratio moved (the stage's role cancels)."""
    import math

    dr = (even[1]["duty"] / even[0]["duty"]) / (bal[1]["duty"] / bal[0]["duty"])
    tr = (even[1][kind] / even[0][kind]) / (bal[1][kind] / bal[0][kind])
    return None if abs(math.log(dr)) < 0.05 else math.log(tr) / math.log(dr)


def _probe_alpha(probe: dict[str, float], lo: float, hi: float) -> float:
    import math

    return math.log(probe[str(hi)] / probe[str(lo)]) / math.log(hi / lo)


def main() -> int:
    from pptl.formats.loader import load_any
    from pptl.run import run_plans
    from pptl.tune.calibrate import calibrate_tune
    from pptl.tune.model import tune_config_from_mapping
    from pptl.tune.split import balanced_split

    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shapes", default="h3584-t8192-l4-m8,h5120-t1024-l10-m6,h7680-t2048-l4-m6")
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--swap", action="store_true", help="the calibrating plan on GPUs 0,1, then 1,0, then 0,1")
    ap.add_argument("--no-gemm", action="store_true")
    ap.add_argument("--device", default="cuda", help="cpu: the script end to end on gloo (tiny shapes, no probes)")
    a = ap.parse_args()
    shapes = tcv.shapes_named(a.shapes.split(","))
    out = Path(a.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    cuda = a.device == "cuda"
    result: dict[str, Any] = {"machine": tcv._machine(cuda), "shapes": {}}
    t0 = time.time()
    if cuda and not a.no_gemm:
        result["gemm"] = gemm_probe()
    plans: list[tuple[Path, Path]] = []
    meta = {}
    for s in shapes:
        cfg = tcv._config(s, cuda)
        tc = tune_config_from_mapping(cfg, source=s.name)
        even = tcv._base_plan(s, cfg)
        bal = json.loads(json.dumps(even))
        sp = balanced_split(tc.model, 2)
        bal["workload"]["stage_layers"] = [sp[0] + s.embedding, sp[1] + s.head]
        for tag, plan in (("even", even), ("balanced", bal)):
            pth = out / "runs" / f"{s.name}.{tag}.json"
            pth.write_text(json.dumps(plan))
            plans.append((pth, out / "runs" / f"{s.name}.{tag}.measured.json"))
        meta[s.name] = (s, cfg, even["workload"]["stage_layers"], bal["workload"]["stage_layers"])
        entry: dict[str, Any] = {"even_layers": even["workload"]["stage_layers"],
                                 "balanced_layers": bal["workload"]["stage_layers"]}
        if cuda:
            entry["block_probe"] = block_probe(s.tokens, s.hidden)
            pr = entry["block_probe"]
            print(f"[{time.time() - t0:.0f}s] {s.name} block ms at duty {PROBE_DUTIES}: "
                  + "; ".join(f"gpu{g} " + " ".join(f"{v:.4f}" for v in d.values()) for g, d in pr.items())
                  + "; exponent 0.5-1 " + " ".join(f"{_probe_alpha(d, 0.5, 1.0):.3f}" for d in pr.values())
                  + ", 0.35-0.5 " + " ".join(f"{_probe_alpha(d, 0.35, 0.5):.3f}" for d in pr.values()), flush=True)
        result["shapes"][s.name] = entry
    run_plans(plans, gpus=2, device=a.device, steps=a.steps, warmup=a.warmup)
    for n, (s, cfg, le, lb) in meta.items():
        rows = {}
        for tag, layers in (("even", le), ("balanced", lb)):
            path = out / "runs" / f"{n}.{tag}.measured.json"
            tl = load_any(path).timeline
            rows[tag] = per_block(tl, layers)
            if tag == "even":
                _, _, notes = calibrate_tune(tune_config_from_mapping(cfg, source=n), path)
                result["shapes"][n]["fitted"] = next((x for x in notes if "duty exponent" in x), "")
        entry = result["shapes"][n]
        entry.update(rows)
        entry["pair_alpha"] = {k: _pair_alpha(rows["even"], rows["balanced"], k) for k in ("F", "B")}
        print(f"{n}: even {le} " + "; ".join(f"r{r} duty {v['duty']:.3f} F {v['F']:.4f} B {v['B']:.4f}"
                                                for r, v in rows["even"].items())
              + f" | balanced {lb} " + "; ".join(f"r{r} duty {v['duty']:.3f} F {v['F']:.4f} B {v['B']:.4f}"
                                                 for r, v in rows["balanced"].items())
              + f" | pair exponent F {entry['pair_alpha']['F']} B {entry['pair_alpha']['B']} | {entry['fitted'][:40]}",
              flush=True)
    if a.swap:
        result["swap"] = swap(meta, out, a)
    (out / "level.json").write_text(json.dumps(result, indent=1))
    print(f"done in {time.time() - t0:.0f} s")
    return 0


def swap(meta: dict[str, Any], out: Path, a: Any) -> dict[str, Any]:
    """Each shape's calibrating plan with the ranks on GPUs 0,1, then 1,0, then 0,1 again."""
    from pptl.formats.loader import load_any
    from pptl.run import run_plans

    res: dict[str, Any] = {n: [] for n in meta}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    for k, order in enumerate(ORDERS):
        os.environ["CUDA_VISIBLE_DEVICES"] = order
        plans = []
        for n in meta:
            plans.append((out / "runs" / f"{n}.even.json", out / "runs" / f"{n}.order{k}.measured.json"))
        run_plans(plans, gpus=2, device=a.device, steps=a.steps, warmup=a.warmup)
        for n, (s, cfg, le, _) in meta.items():
            rk = per_block(load_any(out / "runs" / f"{n}.order{k}.measured.json").timeline, le)
            res[n].append({"order": order, "ranks": rk})
            print(f"{n} gpus {order}: r1/r0 per block F {rk[1]['F'] / rk[0]['F']:.4f} B {rk[1]['B'] / rk[0]['B']:.4f}",
                  flush=True)
    if visible is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
    return res


if __name__ == "__main__":
    raise SystemExit(main())
