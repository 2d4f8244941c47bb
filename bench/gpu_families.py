"""The newer families on 2 GPUs: v-half, v-min, zbv, 1f1b, looped-bfs, interleaved-zb and inference through
`pptl run --verify` (one launch, the library call `pptl run` makes), step time and measured peak
activation per rank against the plan's.

    PYTHONPATH=. python3 bench/gpu_families.py --out OUT [--device cpu --hidden 32 --tokens 8]

Every family does the same work per rank: `--layers` MLP blocks per rank per micro-batch (1f1b: one
stage of that many; the two-chunk families: two chunks of half). Memory: a rank's measured activation
is what `pptl run` reads op by op on one step after the measured ones (`pptl.run.memory`): the
allocator's peak in each op less what the rank held at the step's start (weights, inputs, the GEMM
workspaces) and less what it holds outside the activations then (the weight gradients made so far,
the message buffers, the chunks' inputs and outputs), the largest over the step. The plan's is
`pptl.run.footprint.planned_peaks`: the bytes each chunk holds from F to its backward and from I to
W, and what a B or an I holds while it runs, counted from the model's tensors, at the plan's
simulated times. The check is measured / plan within 10% on every rank. Inference plans hold no
graph: their plan is 0 bytes. `whole_step_mib` keeps the older reading: the allocated peak over the
measured steps less what the rank held before its first step (weight gradients included, which a
step drops at its start) and less one activation-sized buffer per SEND and RECV.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import env_info, log  # noqa: E402

from pptl.config import config_from_mapping  # noqa: E402
from pptl.run.footprint import planned_peaks  # noqa: E402
from pptl.schedules import build_schedule  # noqa: E402
from pptl.simulate import simulate  # noqa: E402

FAMILIES = ("1f1b", "zbv", "v-half", "v-min", "looped-bfs", "interleaved-zb", "inference")
SPLIT = {"zbv", "v-half", "v-min", "interleaved-zb"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default=None)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--mb", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=8, help="MLP blocks per rank")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--no-verify", action="store_true", help="time and measure only (the reference step is slow)")
    ap.add_argument("--no-squeeze", action="store_true",
                    help="v-half and v-min in the paper's pattern's order, unsqueezed and uncapped (options squeeze: "
                         "false, memory: pattern), as the 2026-11-26 run")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    from pptl.run import run_plans

    p, m = a.gpus, a.mb
    plans, meta = [], {}
    for fam in a.families.split(","):
        vpp = 1 if fam == "1f1b" else 2
        data = {
            "schedule": fam, "pp": p, "microbatches": m, "vpp": vpp, "split_backward": fam in SPLIT,
            "w_activation": 1.0, "costs": {"F": 1, "B": 2, "I": 1, "W": 1},
            "workload": {"hidden": a.hidden, "tokens": a.tokens, "layers_per_stage": a.layers // vpp, "dtype": a.dtype}}
        if a.no_squeeze and fam in ("v-half", "v-min"):
            data["options"] = {"squeeze": False, "memory": "pattern"}
        # The config as a file too: `pptl plan` + `pptl run --verify` on it is the CLI's path.
        (a.out / f"{fam}.config.json").write_text(json.dumps(data))
        s = build_schedule(config_from_mapping(data))
        sim = simulate(s)
        msgs = {r: sum(1 for op in s.ops if op.rank == r and op.kind in ("SEND", "RECV")) for r in range(p)}
        plan_bytes = planned_peaks(s, sim.start, sim.end)
        meta[fam] = {"plan_peak": [r.peak_activation for r in sim.ranks], "messages": [msgs[r] for r in range(p)],
                     "plan_mib": [plan_bytes[r] / 2**20 for r in range(p)],
                     "plan_makespan": sim.makespan, "layers_per_chunk": a.layers // vpp,
                     # in chunk activations, held to I only (w_activation 0) or to W (1)
                     **{f"plan_peak_w{w}": [r.peak_activation for r in simulate(s, w_activation=float(w)).ranks]
                        for w in (0, 1)}}
        plans.append((s, a.out / f"{fam}.measured.json"))
    verify = not a.no_verify
    log(f"running {len(plans)} plans on {p} processes, one launch{', --verify' if verify else ''}")
    t = time.time()
    tls = run_plans(plans, gpus=p, device=a.device, steps=a.steps, warmup=1, verify=verify, timeout=120)
    log(f"launch took {time.time() - t:.1f}s")
    elem = {"float32": 4, "bfloat16": 2, "float16": 2}[a.dtype]
    msg_mib = a.tokens * a.hidden * elem / 2**20
    rows = []
    for (s, _), tl in zip(plans, tls):
        fam = s.family
        x = tl.meta.extra
        mem = x.get("memory") or {}
        row = dict(meta[fam], family=fam, step_ms=x.get("median_step_ms"), makespan_ms=tl.makespan,
                   verify=x.get("verify"), loss=x.get("loss"))
        if mem:
            row["whole_step_mib"] = [mem[str(r)]["peak_mib"] - mem[str(r)]["base_mib"]
                                     - meta[fam]["messages"][r] * msg_mib for r in range(p)]
            row["held_mib"] = [mem[str(r)]["peak_mib"] - mem[str(r)]["base_mib"] for r in range(p)]
            row["activation_op"] = [mem[str(r)].get("activation_op") for r in range(p)]
            act = [mem[str(r)].get("activation_mib", float("nan")) for r in range(p)]
            row["measured_activation_mib"] = act
            plan = meta[fam]["plan_mib"]
            if all(plan):
                row["measured_vs_plan"] = [act[r] / plan[r] for r in range(p)]
                row["plan_predicts_within_10pct"] = all(abs(x - 1) <= 0.10 for x in row["measured_vs_plan"])
        rows.append(row)
    res = {"env": env_info(), "args": {k: str(v) for k, v in vars(a).items()}, "rows": rows,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    (a.out / "families.json").write_text(json.dumps(res, indent=1, default=str))
    lines = ["| family | step ms | plan MiB per rank | measured MiB per rank | measured / plan | measured in op "
             "| whole-step reading MiB | verify |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        v = r.get("verify") or {}
        lines.append(f"| {r['family']} | {r['step_ms'] if r['step_ms'] is None else round(r['step_ms'], 2)} | "
                     f"{[round(u, 1) for u in r['plan_mib']]} | {[round(u, 1) for u in r.get('measured_activation_mib', [])]} | "
                     f"{[round(u, 3) for u in r.get('measured_vs_plan', [])]} | {r.get('activation_op')} | "
                     f"{[round(u, 1) for u in r.get('whole_step_mib', [])]} | {v.get('ok')} {v.get('max_grad_rel_err', '')} |")
    (a.out / "families.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if not verify or all((r.get("verify") or {}).get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
