"""``pptl run`` against torch's built-in schedule classes, family by family and micro-batch count by count,
torch timed before and after pptl in the same command:

    PYTHONPATH=. python3 bench/pp_vs_torch.py --out OUT [--gpus 2] [--mbs 8,16,32] [--families gpipe,1f1b,...]

1. torch (before)  every (family, micro-batch count) in torch's class (bench/torch_runtime.py's worker, one
                   torchrun launch: barrier and synchronize around each step, each step's slowest rank);
2. pptl            per micro-batch count, one ``pptl run`` launch of every family's plan (``pptl.run.run_plans``,
                   what the command calls; start-up paid once): median untimed wall time, barrier to barrier;
3. torch (after)   1 again.

"torch ms" is the median of every timed step of 1 and 3 (2 x ``--steps``); the table also gives each pass's
median, so drift between the passes shows. Writes OUT/pp_vs_torch.md and OUT/pp_vs_torch.json (and, while it
runs, OUT/pp_vs_torch.partial.json with what is measured so far). About 3 minutes on 2 GPUs (estimated). On CPU
(``--device cpu --hidden 32 --tokens 8``) it runs end to end with gloo, for testing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import add_anchor_workload_args, env_info, log  # noqa: E402

FAMILIES = "gpipe,1f1b,interleaved-1f1b,zbv,dualpipev"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--families", default=FAMILIES)
    ap.add_argument("--mbs", default="8,16,32")
    add_anchor_workload_args(ap)
    ap.add_argument("--family-timeout", type=float, default=90)
    a = ap.parse_args()
    os.environ.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    import torch_runtime as tr

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="pptl_pp_vs_torch_"))
    t0 = time.time()
    mbs = [int(x) for x in a.mbs.split(",")]
    jobs: dict[str, dict] = {}
    for m in mbs:
        ns = argparse.Namespace(**{**vars(a), "mb": m, "families": a.families.split(",")})
        sub = work / f"m{m}"
        sub.mkdir()
        for fam, job in tr.prepare(ns, sub).items():
            jobs[f"{fam}@{m}"] = dict(job, family=fam, mb=m)
    keys = [k for k, j in jobs.items() if "error" not in j and j.get("builtin")]
    targs = argparse.Namespace(**{**vars(a), "families": keys, "mb": mbs[0], "builtin_only": True})
    def keep(**parts: object) -> None:  # what is measured so far, in case the command is cut short
        (out / "pp_vs_torch.partial.json").write_text(json.dumps(parts, indent=1, default=str))

    log(f"planned {len(jobs)} runs ({time.time() - t0:.1f} s); torch, before")
    before = tr.run_torch(targs, jobs, work)
    keep(before=before)
    pptl: dict[str, dict] = {}
    for m in mbs:
        t = time.time()
        pptl.update(_pptl_launch(a, {k: j for k, j in jobs.items() if j["mb"] == m and k in keys}, work))
        log(f"pptl run m={m}: {time.time() - t:.1f} s: "
            + ", ".join(f"{k} {v.get('ms') or v.get('error')}" for k, v in pptl.items() if k.endswith(f"@{m}")))
        keep(before=before, pptl=pptl)
    log("torch, after")
    after = tr.run_torch(targs, jobs, work)
    rows = []
    for k in keys:
        b, f, p = before.get(k, {}), after.get(k, {}), pptl.get(k, {})
        pooled = (b.get("builtin_steps") or []) + (f.get("builtin_steps") or [])
        torch_ms = statistics.median(pooled) if pooled else None
        ms = p.get("ms")
        rows.append({"family": jobs[k]["family"], "mb": jobs[k]["mb"], "builtin": jobs[k]["builtin"],
                     "torch_ms": torch_ms, "torch_before_ms": b.get("builtin_ms"), "torch_after_ms": f.get("builtin_ms"),
                     "torch_steps": pooled, "pptl_ms": ms, "pptl_steps": p.get("steps"),
                     "delta": (ms / torch_ms - 1) if ms and torch_ms else None,
                     "error": b.get("builtin_error") or f.get("builtin_error") or p.get("error")})
    lines = table(rows)
    print("\n".join(lines), flush=True)
    (out / "pp_vs_torch.md").write_text("\n".join(lines) + "\n")
    (out / "pp_vs_torch.json").write_text(json.dumps({"args": vars(a), "env": env_info(), "rows": rows,
                                                      "seconds": time.time() - t0}, indent=1, default=str))
    (out / "pp_vs_torch.partial.json").unlink(missing_ok=True)
    log(f"done in {time.time() - t0:.1f} s")
    return 0 if all(r["delta"] is not None for r in rows) else 1


def _pptl_launch(a: argparse.Namespace, jobs: dict[str, dict], work: Path) -> dict[str, dict]:
    """One ``pptl run`` launch of the given plans: key -> {"ms": median untimed wall time, "steps": [...]}."""
    from pptl.formats.loader import load_any
    from pptl.run import run_plans

    if not jobs:
        return {}
    plans = [(load_any(Path(j["plan"])).schedule, work / f"measured_{k.replace('@', '_m')}.json")
             for k, j in jobs.items()]
    try:
        tls = run_plans(plans, gpus=a.gpus, device=a.device, steps=a.steps, warmup=a.warmup,
                        timeout=a.family_timeout, sources=[j["plan"] for j in jobs.values()])
    except Exception as e:
        return {k: {"error": f"{type(e).__name__}: {str(e)[:300]}"} for k in jobs}
    out = {}
    for k, tl in zip(jobs, tls):
        x = tl.meta.extra
        out[k] = {"ms": x.get("median_untimed_wall_ms"), "steps": x.get("untimed_wall_ms")}
    return out


def table(rows: list[dict]) -> list[str]:
    def f(x: object) -> str:
        return f"{x:.2f}" if isinstance(x, (int, float)) else "-"

    lines = ["| family | micro-batches | torch class | torch ms (before / after) | pptl run ms | pptl vs torch |",
             "|---|---:|---|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (list(FAMILIES.split(",")).index(r["family"])
                                         if r["family"] in FAMILIES.split(",") else 99, r["mb"])):
        d = f"{100 * r['delta']:+.1f}%" if r["delta"] is not None else (r["error"] or "-")[:120]
        lines.append(f"| {r['family']} | {r['mb']} | {r['builtin']} | {f(r['torch_ms'])} "
                     f"({f(r['torch_before_ms'])} / {f(r['torch_after_ms'])}) | {f(r['pptl_ms'])} | {d} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
