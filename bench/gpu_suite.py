"""GPU suite (issue 7): every training family through `pptl run` on N GPUs, calibration error, and the
anchor comparison with torch.distributed.pipelining, in one command.

    PYTHONPATH=. python3 bench/gpu_suite.py --out OUT [--gpus 4] [--mbs 8,16]

Stages (each guarded: one failing stage does not hide the others):
1. smoke   every family, a small bf16 workload, --verify (loss and gradients vs one process);
2. anchor  every family on the anchor workload (hidden 4096, 2048 tokens, 4 layers per rank, bf16) for each
           micro-batch count, one launch per count; then each run calibrates a re-plan
           (`pptl plan --costs-from`) and `pptl compare` gives the remaining makespan error;
3. torch   bench/torch_pp_anchor.py under torchrun on the same workload, same call;
4. table   step time over the compute-only floor, schedule by schedule -> OUT/table.md, OUT/results.json.

On CPU (`--device cpu --skip-torch --hidden 32 --tokens 8`) it runs end to end without a GPU, for testing.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench"))

from _common import Stages, add_anchor_workload_args, calibrate_one, env_info, log  # noqa: E402

from pptl import planning  # noqa: E402
from pptl.config import config_from_mapping  # noqa: E402
from pptl.schedules import FAMILIES, build_schedule  # noqa: E402

#: torch.distributed.pipelining schedule -> the pptl family that runs the same schedule.
TORCH_TO_PPTL = {"GPipe": "gpipe", "1F1B": "1f1b", "Interleaved1F1B": "interleaved-1f1b",
                 "ZBVZeroBubble": "zbv", "DualPipeV": "dualpipev"}
RUN_KINDS = {"F", "B", "I", "W", "FB", "SEND", "RECV"}


def training_configs(pp: int, m: int, workload: dict, layers_per_rank: int | None) -> dict[str, dict]:
    """Family -> config mapping that the family accepts at (pp, m), with layers spread so every rank does
    ``layers_per_rank`` layers of work per micro-batch (None: the workload's layers_per_stage as given)."""
    out = {}
    for name in FAMILIES:
        for vpp in (1, 2):
            data = {"schedule": name, "pp": pp, "microbatches": m, "vpp": vpp, "workload": dict(workload)}
            try:
                s = build_schedule(config_from_mapping(data))
            except Exception:
                continue
            if not {op.kind for op in s.ops} <= RUN_KINDS:
                break
            if layers_per_rank is not None:
                per = layers_per_rank * pp / s.num_stages
                if per != int(per) or per < 1:
                    break
                data["workload"]["layers_per_stage"] = int(per)
            out[name] = data
            break
    return out


def write_plans(configs: dict[str, dict], work: Path, tag: str) -> dict[str, tuple[Path, Path, Path]]:
    """Family -> (config path, plan path, measured path)."""
    paths = {}
    for name, data in configs.items():
        cfg_path = work / f"cfg_{name}_{tag}.json"
        cfg_path.write_text(json.dumps(data, indent=1))
        plan_path = work / f"plan_{name}_{tag}.json"
        result = planning.plan(planning.make_config(cfg_path, {}, None, None))
        planning.write_plan(result, plan_path)
        paths[name] = (cfg_path, plan_path, work / f"measured_{name}_{tag}.json")
    return paths


def run_family_set(paths: dict, args: argparse.Namespace, *, steps: int, warmup: int, verify: bool) -> dict:
    from pptl.run import run_plans

    names = list(paths)
    t = time.time()
    tls = run_plans([(paths[n][1], paths[n][2]) for n in names], gpus=args.gpus, device=args.device, steps=steps,
                    warmup=warmup, verify=verify, timeout=args.timeout, messages=_env.messages)
    log(f"  {len(names)} plans in one launch: {time.time() - t:.1f} s")
    out = {}
    for n, tl in zip(names, tls):
        x = tl.meta.extra
        out[n] = {"median_step_ms": x.get("median_step_ms"), "median_untimed_step_ms": x.get("median_untimed_step_ms"),
                  "median_untimed_wall_ms": x.get("median_untimed_wall_ms"), "overhead": x.get("overhead"),
                  "makespan_ms": tl.makespan, "verify": x.get("verify"), "device": x.get("device"),
                  "gated_receives": x.get("gated_receives"), "messages": x.get("messages"),
                  "busy_ms": [s.busy for s in tl.rank_stats("compute")]}
        v = x.get("verify")
        log(f"  {n:18s} step {x.get('median_step_ms') or 0:9.3f} ms  wall {x.get('median_untimed_wall_ms') or 0:9.3f} ms"
            f"  overhead {100 * (x.get('overhead') or 0):+5.1f}%  {x.get('messages')} gated {x.get('gated_receives')}" + (f"  verify ok={v['ok']} grad err "
                                                                  f"{v['max_grad_rel_err']:.1e}" if v else ""))
    return out


def calibrate(paths: dict) -> dict:
    out = {}
    for n, (cfg_path, _plan, measured) in paths.items():
        try:
            _, _, cmp = calibrate_one(cfg_path, measured)
            out[n] = {"predicted_ms": cmp.makespan_planned, "measured_ms": cmp.makespan_measured,
                      "error": cmp.makespan_error, "bubble_planned": cmp.bubble_planned,
                      "bubble_measured": cmp.bubble_measured,
                      "kinds": {k.kind: [k.planned_mean, k.measured_mean] for k in cmp.kinds}}
            log(f"  {n:18s} calibrated plan {cmp.makespan_planned:9.3f} ms vs measured {cmp.makespan_measured:9.3f} ms "
                f"({100 * cmp.makespan_error:+.1f}%)")
        except Exception as e:
            out[n] = {"error": f"{type(e).__name__}: {e}"}
            log(f"  {n}: calibration failed: {e}")
    return out


def run_torch(args: argparse.Namespace, m: int, work: Path, *extra: str, name: str = "") -> dict:
    """bench/torch_pp_anchor.py under torchrun at ``m`` micro-batches (``extra``: more of its options)."""
    out_json = work / (name or f"torch_m{m}.json")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.gpus}",
           str(ROOT / "bench" / "torch_pp_anchor.py"), "--mb", str(m), "--hidden", str(args.hidden),
           "--tokens", str(args.tokens), "--layers-per-rank", str(args.layers_per_rank), "--out", str(out_json),
           *extra]
    log("  " + " ".join(cmd[1:]))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.torch_timeout)
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            log("  torch: " + line)
    if proc.returncode != 0:
        log("  torch stderr tail: " + proc.stderr[-1500:])
    return json.loads(out_json.read_text()) if out_json.exists() else {}


def table(results: dict, mbs: list[int]) -> list[str]:
    lines = ["| micro-batches | schedule | torch step ms | pptl step ms | floor ms | torch / floor | pptl / floor | "
             "pptl vs torch | calibrated plan error |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for m in mbs:
        tr = results.get("torch", {}).get(str(m), {})
        pr = results.get("anchor", {}).get(str(m), {})
        cal = results.get("calibration", {}).get(str(m), {})
        floors = [v["floor_ms"] for v in tr.values() if "floor_ms" in v]
        base_floor = tr.get("1F1B", {}).get("floor_ms") or (sorted(floors)[len(floors) // 2] if floors else None)
        seen = set()
        rows = []
        for tname, v in tr.items():
            fam = TORCH_TO_PPTL.get(tname)
            seen.add(fam)
            rows.append((tname, fam, v))
        for fam in pr:
            if fam not in seen:
                rows.append(("-", fam, {}))
        for tname, fam, v in rows:
            p = pr.get(fam, {}) if fam else {}
            floor = v.get("floor_ms") or base_floor
            ts, ps = v.get("step_ms"), p.get("median_untimed_wall_ms")
            c = cal.get(fam, {}) if fam else {}

            def f(x, fmt="{:.1f}"):
                return fmt.format(x) if isinstance(x, (int, float)) else "-"
            lines.append(f"| {m} | {tname} / {fam or '-'} | {f(ts)} | {f(ps)} | {f(floor)} | "
                         f"{f(ts / floor if ts and floor else None, '{:.3f}')} | "
                         f"{f(ps / floor if ps and floor else None, '{:.3f}')} | "
                         f"{f((ps / ts - 1) * 100 if ps and ts else None, '{:+.1f}%')} | "
                         f"{f(c['error'] * 100 if c.get('error') is not None else None, '{:+.1f}%')} |")
    return lines


class _env:
    """Set "VAR=VALUE,VAR2=VALUE2" (or "default": nothing) for the duration of a with block;
    "messages=MODE" among them picks `pptl run --messages` instead of an environment variable."""

    messages: str | None = None

    def __init__(self, spec: str) -> None:
        pairs = [] if spec == "default" else [p.split("=", 1) for p in spec.split(",") if p]
        self.mode = next((v for k, v in pairs if k == "messages"), None)
        self.pairs = [(k, v) for k, v in pairs if k != "messages"]
        self.old: dict = {}

    def __enter__(self) -> None:
        _env.messages = self.mode
        for k, v in self.pairs:
            self.old[k] = os.environ.get(k)
            os.environ[k] = v

    def __exit__(self, *exc: object) -> None:
        _env.messages = None
        for k, v in self.old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _slug(spec: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in spec)[:40]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--mbs", default="8,16")
    add_anchor_workload_args(ap)
    ap.add_argument("--smoke-hidden", type=int, default=1024)
    ap.add_argument("--smoke-tokens", type=int, default=512)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--torch-timeout", type=float, default=240)
    ap.add_argument("--skip-smoke", action="store_true")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--work", default="", help="folder for configs, plans, timelines (default OUT/work); "
                    "OUT gets them as work.tar.gz either way")
    ap.add_argument("--variants", default="default",
                    help="';'-separated environments for pptl run, e.g. 'default;NCCL_MAX_P2P_NCHANNELS=1;"
                    "messages=inline' (messages=MODE: pptl run --messages MODE)")
    ap.add_argument("--variants-at-every-m", action="store_true",
                    help="run every variant at every micro-batch count, not only the largest")
    args = ap.parse_args()
    out = Path(args.out)
    work = Path(args.work) if args.work else out / "work"
    work.mkdir(parents=True, exist_ok=True)
    mbs = [int(x) for x in args.mbs.split(",")]
    results: dict = {"args": vars(args), "env": env_info()}
    log(f"env {results['env']}")
    stage = Stages(results, out)

    variants = [v.strip() for v in args.variants.split(";") if v.strip()] or ["default"]
    if not args.skip_smoke:
        wl = {"hidden": args.smoke_hidden, "tokens": args.smoke_tokens, "layers_per_stage": 2, "dtype": args.dtype}
        cfgs = training_configs(args.gpus, 2 * args.gpus, wl, None)
        smoke_paths = write_plans(cfgs, work, "smoke")
        # --verify once per message mode among the variants (environment-only variants share one).
        modes = list(dict.fromkeys(_env(v).mode for v in variants))
        for mode in modes:
            spec = f"messages={mode}" if mode else "default"
            with _env(spec):
                res = stage(f"smoke (verify) [{spec}]", lambda: run_family_set(smoke_paths, args, steps=1, warmup=1,
                                                                               verify=True))
            results.setdefault("smoke_modes", {})[spec] = res
        results["smoke"] = results["smoke_modes"][f"messages={modes[0]}" if modes[0] else "default"]
    results["anchor"], results["calibration"], results["torch"], results["variants"] = {}, {}, {}, {}
    wl = {"hidden": args.hidden, "tokens": args.tokens, "dtype": args.dtype}
    # Environment variants for pptl run, tried on the largest micro-batch count (--variants-at-every-m:
    # on every count); the best (least total step time over the families) is then used for the other
    # counts. Each is "VAR=VALUE,..." or "default".
    m_last = mbs[-1]
    chosen_paths: dict = {}

    def anchor_variant(m: int, v: str) -> tuple[dict, dict]:
        with _env(v):
            paths = write_plans(training_configs(args.gpus, m, wl, args.layers_per_rank), work, f"m{m}_{_slug(v)}")
            res = stage(f"anchor m={m} [{v}]", lambda: run_family_set(
                paths, args, steps=args.steps, warmup=args.warmup, verify=False)) or {}
        return res, paths

    if args.variants_at_every_m:
        for m in mbs[:-1]:
            for v in variants:
                res, chosen_paths[(m, v)] = anchor_variant(m, v)
                results.setdefault("variants_by_m", {}).setdefault(str(m), {})[v] = res
    for v in variants:
        results["variants"][v], chosen_paths[v] = anchor_variant(m_last, v)
    complete = [v for v in variants if len(results["variants"][v]) == len(chosen_paths[v])]
    best = min(complete or variants, key=lambda v: sum(r.get("median_untimed_wall_ms") or 1e18
                                                       for r in results["variants"][v].values()))
    results["chosen_env"] = best
    log(f"chosen environment for pptl run: {best}")
    for m in mbs:
        if m == m_last:
            paths = chosen_paths[best]
            results["anchor"][str(m)] = results["variants"][best]
        elif (m, best) in chosen_paths:
            paths = chosen_paths[(m, best)]
            results["anchor"][str(m)] = results["variants_by_m"][str(m)][best]
        else:
            with _env(best):
                paths = write_plans(training_configs(args.gpus, m, wl, args.layers_per_rank), work, f"m{m}")
                results["anchor"][str(m)] = stage(f"anchor m={m} [{best}]", lambda: run_family_set(
                    paths, args, steps=args.steps, warmup=args.warmup, verify=False)) or {}
        results["calibration"][str(m)] = stage(f"calibrate m={m}", lambda: calibrate(
            {n: p for n, p in paths.items() if p[2].exists()})) or {}
        if not args.skip_torch:
            results["torch"][str(m)] = stage(f"torch m={m}", lambda: run_torch(args, m, work)) or {}
    lines = table(results, mbs)
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    with tarfile.open(out / "work.tar.gz", "w:gz") as tar:
        tar.add(work, arcname="work")
    return 0


if __name__ == "__main__":
    sys.exit(main())
