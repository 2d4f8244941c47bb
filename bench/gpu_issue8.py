"""GPU runs of issue 8: the MoE overlap plan (pp x ep grid, real all-to-alls), the same with activation
offloading (real copies to pinned host memory), and the weight-update plan (H2D, IPC halves, broadcast,
reload), each planned, run, calibrated and compared, and drawn in the seed figures' styles.

    PYTHONPATH=. python3 bench/gpu_issue8.py --out OUT [--gpus 4] [--device cuda]

Stages (each guarded: one failing stage does not hide the others; OUT/results.json is rewritten after each):
1. smoke    tiny MoE (offload) and weight-update plans with --verify (loss and every gradient against one
            process; parameters bit for bit against the host copy);
2. run      moe-overlap, moe-offload, moe-no-overlap (interleaved 1F1B of the same layers: the all-to-alls
            left exposed) and weight-update in one launch;
3. calibrate each run: ``pptl plan --costs-from`` (mean per cost key, all-to-all and broadcast copies timed
            from the last member to arrive) and ``pptl compare``: makespan error;
4. rerun    the calibrated plans in a second launch, compared with the same calibrated plans (skipped
            when the time budget is spent);
5. report   OUT/table.md (the tables of docs/benchmarks.md), OUT/*.png (planned above measured, in the
            moe and weight-update styles), OUT/work.tar.gz (configs, plans, timelines, more figures).

On CPU (``--device cpu --hidden 64 --tokens 32 --wu-model 4MiB --wu-tensor 256KiB --wu-bucket 1MiB``) it
runs end to end without a GPU, for testing.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench"))

from _common import T0, Stages, add_moe_workload_args, calibrate_one, env_info, log  # noqa: E402

from pptl import planning  # noqa: E402
from pptl.compare import compare_timelines  # noqa: E402
from pptl.formats.loader import load_any  # noqa: E402

MiB = float(1 << 20)
MOE_RUNS = ("moe-overlap", "moe-offload", "moe-no-overlap")
FIGURES = {"moe-overlap": "moe_overlap.png", "moe-offload": "moe_offload.png", "weight-update": "weight_update.png"}


# ------------------------------------------------------------------------------------------------
# Configs


def moe_config(a: argparse.Namespace, *, overlap: bool, offload: bool, hidden: int, tokens: int,
               microbatches: int) -> dict:
    from pptl.config import Workload
    from pptl.run.moe_model import layer_bytes, offload_bytes

    w = Workload(hidden=hidden, tokens=tokens, layers_per_stage=1, dtype=a.dtype)
    chunk_mib = a.layers * layer_bytes(w) / MiB
    return {"schedule": "moe-1f1b-overlap", "pp": a.gpus // a.ep, "vpp": 2, "microbatches": microbatches,
            "activation": chunk_mib,  # memory in MiB: one chunk's saved activations for one micro-batch
            "workload": {"hidden": hidden, "tokens": tokens, "dtype": a.dtype},
            "options": {"ep": a.ep, "layers_per_chunk": a.layers, "overlap": overlap, "offload": offload,
                        "costs": {"offload_bytes": offload_bytes(w) / MiB}}}


def wu_config(a: argparse.Namespace, model: str, tensor: str, bucket: str) -> dict:
    return {"schedule": "weight-update", "pp": a.gpus, "microbatches": 1,
            "options": {"model_size": model, "tensor_size": tensor, "bucket_size": bucket, "free_memory": "64GiB",
                        "h2d_buffer": True, "h2d_overlap": True}}


def write_plan(name: str, data: dict, work: Path, tag: str) -> dict[str, Path]:
    cfg_path = work / f"cfg_{name}_{tag}.json"
    cfg_path.write_text(json.dumps(data, indent=1))
    plan_path = work / f"plan_{name}_{tag}.json"
    result = planning.plan(planning.make_config(cfg_path, {}, None, None))
    planning.write_plan(result, plan_path)
    return {"cfg": cfg_path, "plan": plan_path, "measured": work / f"measured_{name}_{tag}.json"}


# ------------------------------------------------------------------------------------------------
# Running


def launch(paths: dict[str, dict[str, Path]], a: argparse.Namespace, *, plan_key: str, out_key: str, steps: int,
           warmup: int, verify: bool) -> dict[str, Any]:
    """One launch for every plan; returns name -> summary (what finished before a failure is kept)."""
    from pptl.run import run_plans

    names = list(paths)
    t = time.time()
    error = None
    try:
        run_plans([(paths[n][plan_key], paths[n][out_key]) for n in names], gpus=a.gpus, device=a.device,
                  steps=steps, warmup=warmup, verify=verify, timeout=a.timeout)
    except Exception as e:  # keep the plans that finished: each writes its timeline when it ends
        error = f"{type(e).__name__}: {e}"
        log(f"  launch failed: {error}")
    log(f"  {len(names)} plans in one launch: {time.time() - t:.1f} s")
    return summarize(paths, out_key, error)


def summarize(paths: dict[str, dict[str, Path]], out_key: str, error: str | None = None) -> dict[str, Any]:
    """Name -> summary of the timeline each plan wrote (step times, memory and reports per rank)."""
    out: dict[str, Any] = {}
    for n in paths:
        p = paths[n][out_key]
        if not p.exists():
            out[n] = {"error": error or "no timeline"}
            continue
        tl = load_any(p).timeline
        x = tl.meta.extra
        if x.get("partial"):
            out[n] = {"error": error or "partial", "partial": True}
            continue
        row = {"median_step_ms": x.get("median_step_ms"), "median_untimed_step_ms": x.get("median_untimed_step_ms"),
               "overhead": x.get("overhead"), "makespan_ms": tl.makespan, "device": x.get("device"),
               "verify": x.get("verify"), "moe": x.get("moe"), "weight_update": x.get("weight_update"),
               "reports": x.get("reports")}
        out[n] = row
        v = x.get("verify")
        log(f"  {n:16s} makespan {tl.makespan:9.3f} ms  step {x.get('median_step_ms') or 0:9.3f} ms  overhead "
            f"{100 * (x.get('overhead') or 0):+5.1f}%" + (f"  verify ok={v['ok']} ({v['worst']}, "
                                                         f"{v['max_grad_rel_err']:.1e})" if v else ""))
    return out


def calibrate(paths: dict[str, dict[str, Path]], out_dir: Path | None = None) -> dict[str, Any]:
    """``calibrate_one`` per plan; the calibrated plans go beside the timelines, or in ``out_dir``."""
    out: dict[str, Any] = {}
    for n, p in paths.items():
        if not p["measured"].exists():
            continue
        try:
            result, p["calibrated"], cmp = calibrate_one(p["cfg"], p["measured"], out_dir)
            out[n] = {"predicted_ms": cmp.makespan_planned, "measured_ms": cmp.makespan_measured,
                      "error": cmp.makespan_error, "kinds": {k.kind: [k.planned_mean, k.measured_mean]
                                                             for k in cmp.kinds},
                      "metrics": {k: v for k, v in result.metrics.items() if k in ("moe", "weight_update")}}
            log(f"  {n:16s} calibrated plan {cmp.makespan_planned:9.3f} ms vs measured {cmp.makespan_measured:9.3f} "
                f"ms ({100 * cmp.makespan_error:+.1f}%)")
        except Exception as e:
            out[n] = {"error": f"{type(e).__name__}: {e}"}
            log(f"  {n}: calibration failed: {e}\n{traceback.format_exc()}")
    return out


def compare_rerun(paths: dict[str, dict[str, Path]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n, p in paths.items():
        if "calibrated" not in p or not p.get("rerun", Path("/nonexistent")).exists():
            continue
        cmp = compare_timelines(load_any(p["calibrated"]).timeline, load_any(p["rerun"]).timeline)
        out[n] = {"predicted_ms": cmp.makespan_planned, "measured_ms": cmp.makespan_measured,
                  "error": cmp.makespan_error}
        log(f"  {n:16s} rerun: calibrated plan {cmp.makespan_planned:9.3f} ms vs measured "
            f"{cmp.makespan_measured:9.3f} ms ({100 * cmp.makespan_error:+.1f}%)")
    return out


# ------------------------------------------------------------------------------------------------
# Metrics of the plan and of the run, side by side


def exposure(paths: dict[str, dict[str, Path]]) -> dict[str, Any]:
    from pptl.schedules._moe_metrics import COPY_KINDS, EP_KINDS, exposed_in_timeline

    out: dict[str, Any] = {}
    for n in MOE_RUNS:
        p = paths.get(n, {})
        if "calibrated" not in p:
            continue
        row: dict[str, Any] = {}
        for side, path in (("planned", p["calibrated"]), ("measured", p["measured"])):
            tl = load_any(path).timeline
            ep_t, ep_x = exposed_in_timeline(tl, EP_KINDS)
            cp_t, cp_x = exposed_in_timeline(tl, COPY_KINDS)
            row[side] = {"ep_ms": max(ep_t.values(), default=0.0), "exposed_ep_ms": max(ep_x.values(), default=0.0),
                         "copy_ms": max(cp_t.values(), default=0.0),
                         "exposed_copy_ms": max(cp_x.values(), default=0.0), "makespan_ms": tl.makespan}
        out[n] = row
    return out


def memory(paths: dict[str, dict[str, Path]], results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cal = results.get("calibration", {})
    for n in ("moe-overlap", "moe-offload"):
        metrics = (cal.get(n) or {}).get("metrics", {}).get("moe", {})
        run = (results.get("run", {}).get(n) or {}).get("moe") or {}
        out[n] = {"plan_peak_mib": metrics.get("peak_activation"),
                  "plan_peak_no_offload_mib": metrics.get("peak_activation_no_offload"),
                  "measured_activation_peak_mib": run.get("activation_peak_mib"),
                  "measured_peak_mib": run.get("peak_mib"), "measured_reserved_peak_mib": run.get("reserved_peak_mib"),
                  "per_rank_activation_peak_mib": (run.get("per_rank") or {}).get("activation_peak_mib"),
                  "plan_per_rank_peak": metrics.get("per_rank", {}).get("peak_activation")}
    return out


# ------------------------------------------------------------------------------------------------
# Tables


def _f(x: Any, fmt: str = "{:.1f}") -> str:
    return fmt.format(x) if isinstance(x, (int, float)) else "-"


def tables(results: dict[str, Any]) -> list[str]:
    lines = ["### Makespan: measured vs the calibrated plan", "",
             "| run | measured ms | calibrated plan ms | error | rerun measured ms | error (rerun) |",
             "|---|---:|---:|---:|---:|---:|"]
    cal, rerun = results.get("calibration", {}), results.get("rerun_compare", {})
    for n in (*MOE_RUNS, "weight-update"):
        c, r = cal.get(n, {}), rerun.get(n, {})
        lines.append(f"| {n} | {_f(c.get('measured_ms'), '{:.2f}')} | {_f(c.get('predicted_ms'), '{:.2f}')} | "
                     f"{_f(100 * c['error'] if c.get('error') is not None else None, '{:+.1f}%')} | "
                     f"{_f(r.get('measured_ms'), '{:.2f}')} | "
                     f"{_f(100 * r['error'] if r.get('error') is not None else None, '{:+.1f}%')} |")
    lines += ["", "### EP all-to-all and offload copies: time per rank and exposed (compute lane idle), worst rank",
              "", "| run | EP ms planned | EP ms measured | exposed EP planned | exposed EP measured | "
              "copies ms planned | copies ms measured | exposed copies planned | exposed copies measured |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n, row in results.get("exposure", {}).items():
        p, m = row.get("planned", {}), row.get("measured", {})
        lines.append(f"| {n} | {_f(p.get('ep_ms'), '{:.2f}')} | {_f(m.get('ep_ms'), '{:.2f}')} | "
                     f"{_f(p.get('exposed_ep_ms'), '{:.2f}')} | {_f(m.get('exposed_ep_ms'), '{:.2f}')} | "
                     f"{_f(p.get('copy_ms'), '{:.2f}')} | {_f(m.get('copy_ms'), '{:.2f}')} | "
                     f"{_f(p.get('exposed_copy_ms'), '{:.2f}')} | {_f(m.get('exposed_copy_ms'), '{:.2f}')} |")
    mem = results.get("memory", {})
    lines += ["", "### Peak activation memory per rank (MiB; measured: max_memory_allocated above the step's start)",
              "", "| run | plan: with offloading | plan: without | measured activation peak | measured "
              "max_memory_allocated | measured max_memory_reserved |", "|---|---:|---:|---:|---:|---:|"]
    for n, row in mem.items():
        lines.append(f"| {n} | {_f(row.get('plan_peak_mib'), '{:.0f}')} | "
                     f"{_f(row.get('plan_peak_no_offload_mib'), '{:.0f}')} | "
                     f"{_f(row.get('measured_activation_peak_mib'), '{:.0f}')} | "
                     f"{_f(row.get('measured_peak_mib'), '{:.0f}')} | "
                     f"{_f(row.get('measured_reserved_peak_mib'), '{:.0f}')} |")
    wu = (results.get("run", {}).get("weight-update") or {}).get("weight_update") or {}
    if wu:
        lines += ["", "### Weight update: GB/s per stage (bytes moved / measured op time)", "",
                  "| stage | median over ops | all bytes / all time |", "|---|---:|---:|"]
        for k in ("H2D", "COPY", "BCAST src", "BCAST dst", "RELOAD"):
            lines.append(f"| {k} | {_f(wu.get('gbps_median', {}).get(k))} | {_f(wu.get('gbps_total', {}).get(k))} |")
        lines += ["", f"Update time {_f(wu.get('update_ms'), '{:.2f}')} ms; reloaded parameters bit-exact on every "
                      f"rank: {wu.get('bitexact')}."]
    return lines


# ------------------------------------------------------------------------------------------------
# Figures: the calibrated plan above the measured run, each in the family's seed style


def _png(tl: Any, style: str, window: tuple[float, float] | None) -> Any:
    from PIL import Image

    from pptl.render.layout import build_layout
    from pptl.render.mpl import figure_from_layout, figure_options, image_bytes
    from pptl.render.options import RenderOptions

    # The defaults of `pptl render`: a 7-inch column, no text under 6 pt, 200 dpi.
    lay = build_layout(tl, style, window=window)
    fig = figure_from_layout(lay, figure_options(RenderOptions(style=style), lay))
    return Image.open(io.BytesIO(image_bytes(fig, "png")))


def stacked(plan: Path, measured: Path, style: str, out: Path, *, window: float | None = None,
            width: int | None = None) -> None:
    """Planned (top) and measured (bottom); ``window`` draws the middle fraction of each step only."""
    from PIL import Image

    imgs = []
    for path in (plan, measured):
        tl = load_any(path).timeline
        win = None
        if window is not None:
            mid, half = tl.start + tl.makespan / 2, tl.makespan * window / 2
            win = (mid - half, mid + half)
        img = _png(tl, style, win).convert("RGB")
        width = width or img.width  # both are drawn at the same size; resample only if asked to
        if img.width != width:
            img = img.resize((width, max(1, round(img.height * width / img.width))), Image.LANCZOS)
        imgs.append(img)
    canvas = Image.new("RGB", (width, sum(i.height for i in imgs) + 20), "white")
    y = 0
    for img in imgs:
        canvas.paste(img, (0, y))
        y += img.height + 20
    try:  # a palette keeps the PNG small; any Pillow without it saves RGB
        canvas = canvas.quantize(colors=128, method=Image.Quantize.MEDIANCUT)
    except Exception:
        pass
    canvas.save(out, optimize=True)


def figures(paths: dict[str, dict[str, Path]], out: Path, work: Path) -> dict[str, str]:
    made: dict[str, str] = {}
    for n, p in paths.items():
        if "calibrated" not in p or not p["measured"].exists():
            continue
        style = "weight-update" if n == "weight-update" else "moe"
        target = out / FIGURES[n] if n in FIGURES else work / f"{n}.png"
        stacked(p["calibrated"], p["measured"], style, target)
        made[n] = str(target)
        if style == "moe":
            zoom = out / "moe_overlap_step.png" if n == "moe-overlap" else work / f"{n}_step.png"
            stacked(p["calibrated"], p["measured"], style, zoom, window=0.12)
            made[n + " (step window)"] = str(zoom)
        log(f"  drew {n}")
    return made


# ------------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser()
    add_moe_workload_args(ap)
    ap.add_argument("--wu-model", default="8GiB")
    ap.add_argument("--wu-tensor", default="128MiB")
    ap.add_argument("--wu-bucket", default="512MiB")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--budget", type=float, default=330, help="seconds after which the rerun is skipped")
    ap.add_argument("--skip-smoke", action="store_true")
    ap.add_argument("--work", default="")
    a = ap.parse_args()
    out = Path(a.out)
    work = Path(a.work) if a.work else out / "work"
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"args": vars(a), "env": env_info()}
    log(f"env {results['env']}")
    stage = Stages(results, out)

    if not a.skip_smoke:
        def smoke() -> Any:
            small = {"moe-smoke": write_plan("moe-smoke", moe_config(a, overlap=True, offload=True, hidden=256,
                                                                      tokens=64 * a.ep, microbatches=4), work, "smoke"),
                     "wu-smoke": write_plan("wu-smoke", wu_config(a, "8MiB", "1MiB", "2MiB"), work, "smoke")}
            return launch(small, a, plan_key="plan", out_key="measured", steps=1, warmup=1, verify=True)
        results["smoke"] = stage("smoke (--verify)", smoke)

    paths: dict[str, dict[str, Path]] = {}

    def build() -> None:
        for n, overlap, offload in (("moe-overlap", True, False), ("moe-offload", True, True),
                                    ("moe-no-overlap", False, False)):
            paths[n] = write_plan(n, moe_config(a, overlap=overlap, offload=offload, hidden=a.hidden,
                                                tokens=a.tokens, microbatches=a.microbatches), work, "main")
        paths["weight-update"] = write_plan("weight-update", wu_config(a, a.wu_model, a.wu_tensor, a.wu_bucket),
                                            work, "main")
    stage("plan", build)
    results["run"] = stage("run", lambda: launch(paths, a, plan_key="plan", out_key="measured", steps=a.steps,
                                                 warmup=a.warmup, verify=False))
    results["calibration"] = stage("calibrate", lambda: calibrate(paths))
    if time.time() - T0 < a.budget:
        def rerun() -> Any:
            todo = {n: p for n, p in paths.items() if "calibrated" in p}
            for p in todo.values():
                p["rerun"] = p["measured"].with_name(p["measured"].name.replace("measured_", "rerun_"))
            res = launch(todo, a, plan_key="calibrated", out_key="rerun", steps=a.steps, warmup=a.warmup,
                         verify=False)
            results["rerun_compare"] = compare_rerun(todo)
            return res
        results["rerun"] = stage("rerun calibrated plans", rerun)
    else:
        log(f"rerun skipped: {time.time() - T0:.0f} s spent (budget {a.budget:.0f} s)")
    results["exposure"] = stage("exposure", lambda: exposure(paths))
    results["memory"] = stage("memory", lambda: memory(paths, results))
    results["figures"] = stage("figures", lambda: figures(paths, out, work))
    lines = tables(results)
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    with tarfile.open(out / "work.tar.gz", "w:gz") as tar:
        tar.add(work, arcname="work")
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
