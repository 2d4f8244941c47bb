"""pptl against torch.distributed.pipelining, round after round (issue 7's "at or below torch").

    PYTHONPATH=. python3 bench/gpu_repeat.py --out OUT [--rounds 3] [--families gpipe,1f1b] [--mbs 8,16]

One suite run compares one pptl measurement with one torch measurement; step times drift by a
percent or two between launches (clocks, placement), which is as large as the differences in
question. Here each round runs, for every micro-batch count, the torch anchor script on the
schedules in question and then `pptl run` on the same schedules, back to back, so drift hits
both alike; the table gives each round's ratio and how many rounds pptl was at or below torch.
Writes OUT/repeat.json and OUT/repeat.md.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_suite import TORCH_TO_PPTL, _env, log, run_family_set, run_torch, training_configs, write_plans  # noqa: E402

PPTL_TO_TORCH = {v: k for k, v in TORCH_TO_PPTL.items()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--families", default="gpipe,1f1b")
    ap.add_argument("--mbs", default="8,16")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--layers-per-rank", type=int, default=4)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--steps", type=int, default=8, help="pptl timed steps (as many untimed ones are the measure)")
    ap.add_argument("--torch-steps", type=int, default=10, help="torch steps (the first two are dropped)")
    ap.add_argument("--messages", default=None, help="pptl run --messages (default: pptl's)")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--torch-timeout", type=float, default=240)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    out = Path(args.out)
    work = out / "repeat_work"
    work.mkdir(parents=True, exist_ok=True)
    families = args.families.split(",")
    torch_names = [PPTL_TO_TORCH[f] for f in families]
    mbs = [int(x) for x in args.mbs.split(",")]
    wl = {"hidden": args.hidden, "tokens": args.tokens, "dtype": args.dtype}
    plans = {}
    for m in mbs:
        cfgs = {n: c for n, c in training_configs(args.gpus, m, wl, args.layers_per_rank).items() if n in families}
        plans[m] = write_plans(cfgs, work, f"repeat_m{m}")
    rows: list[dict] = []
    for r in range(args.rounds):
        for m in mbs:
            t = run_torch(args, m, work, "--steps", str(args.torch_steps), "--schedules", ",".join(torch_names),
                          name=f"torch_m{m}_r{r}.json")
            with _env(f"messages={args.messages}" if args.messages else "default"):
                p = run_family_set(plans[m], args, steps=args.steps, warmup=1, verify=False)
            for fam in families:
                ts = t.get(PPTL_TO_TORCH[fam], {}).get("step_ms")
                ps = p.get(fam, {}).get("median_untimed_wall_ms")
                rows.append({"round": r, "m": m, "family": fam, "torch_ms": ts, "pptl_ms": ps,
                             "messages": p.get(fam, {}).get("messages"), "device": p.get(fam, {}).get("device")})
                log(f"round {r} m={m} {fam}: torch {ts} ms, pptl {ps} ms")
            (out / "repeat.json").write_text(json.dumps(rows, indent=1))
    lines = ["| micro-batches | schedule | torch ms per round | pptl ms per round | pptl vs torch per round | "
             "median pptl vs torch | rounds pptl <= torch |", "|---:|---|---|---|---|---:|---:|"]
    for m in mbs:
        for fam in families:
            rs = [x for x in rows if x["m"] == m and x["family"] == fam and x["torch_ms"] and x["pptl_ms"]]
            if not rs:
                continue
            d = [x["pptl_ms"] / x["torch_ms"] - 1 for x in rs]
            torch_ms = ", ".join(f"{x['torch_ms']:.1f}" for x in rs)
            pptl_ms = ", ".join(f"{x['pptl_ms']:.1f}" for x in rs)
            ratios = ", ".join(f"{v:+.1%}" for v in d)
            lines.append(f"| {m} | {PPTL_TO_TORCH[fam]} / {fam} | {torch_ms} | {pptl_ms} | {ratios} | "
                         f"{statistics.median(d):+.1%} | {sum(v <= 0 for v in d)} of {len(d)} |")
    (out / "repeat.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
