"""GPU proof of `pptl whatif` (issue 36): predict step-time distributions from one calibrating run.

    PYTHONPATH=. python3 bench/whatif_gpu.py --out OUT --work WORK [--device cuda|cpu] [--hidden 4096 ...]

1. calibrate  one `pptl run` of 1F1B (--calib-steps timed steps) on --gpus ranks;
2. later      a second launch: 1F1B (the same plan), GPipe and interleaved 1F1B, --steps timed steps each,
              the same workload (every stage the same layers, so the run's per-(stage or rank, kind)
              durations carry over);
3. straggler  a third launch: the same three plans with --slow-rank slowed by --slow-factor
              (`pptl run --slow-rank`), --straggler-steps timed steps each;
4. predict    from the calibrating run alone (`pptl whatif --from`): per plan the step-time quantiles,
              and with `--straggler rank=R,xF` the mean step; checked against the measured steps:
              the measured median within the predicted 25-75% band, the measured p95 within 3% of the
              predicted p95, the straggler mean within 5%, and the families ranked alike by straggler
              sensitivity (mean step with the straggler over the mean step without), up to ties: two
              measured sensitivities closer than the launch spread (the 1F1B plan's mean step in the
              calibrating launch against the later one) ask no order (pptl.whatif.ranking).

With --first-launch, the calibrating plan runs once more before step 1, in a launch of its own
(WORK/measured_first.json, --calib-steps timed steps): the calibrating run is then not the first launch
on GPUs that sat idle, and the report says how the first launch's steps compare (the same plan, three
launches: first, calibrating, later).

Writes OUT/results.json, OUT/table.md, OUT/whatif_gpu.png and OUT/work.tar.gz (plans, measured timelines).
On CPU (`--device cpu --hidden 32 --tokens 8`) it runs end to end without a GPU, for testing (the numbers
then mean nothing: gloo on shared cores).
"""
from __future__ import annotations

import argparse
import json
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import env_info, log  # noqa: E402

#: (name, family, vpp, micro-batches): three families whose straggler sensitivity differs. Predicted
#: from a first call's calibrating run (2 H200s, 2026-11-26; rank 1, the last stage, is the heavier:
#: F 1.79 / B 3.88 ms against 1.60 / 3.23), rank 1 x1.3: gpipe m=4 1.240, 1f1b m=8 1.265,
#: interleaved m=16 1.282. Slowing rank 0 instead made it barely the heavier rank (1.09-1.11 for
#: every family, too close to rank).
PLANS = (("gpipe", "gpipe", 1, 4), ("1f1b", "1f1b", 1, 8), ("interleaved", "interleaved-1f1b", 2, 16))
CALIBRATE = "1f1b"


def _quantiles(xs: list[float]) -> dict[str, float]:
    import numpy as np

    a = np.asarray(xs, dtype=np.float64)
    q = np.quantile(a, (0.25, 0.5, 0.75, 0.95)).tolist()
    return {"n": int(a.size), "mean": float(a.mean()), "p25": q[0], "p50": q[1], "p75": q[2], "p95": q[3]}


def write_plans(a: argparse.Namespace, work: Path) -> dict[str, Path]:
    from pptl import planning
    from pptl.config import config_from_mapping

    out = {}
    for name, fam, vpp, m in PLANS:
        data = {"schedule": fam, "pp": a.gpus, "microbatches": m, "vpp": vpp,
                "workload": {"hidden": a.hidden, "tokens": a.tokens, "layers_per_stage": a.layers, "dtype": a.dtype}}
        path = work / f"plan_{name}.json"
        planning.write_plan(planning.plan(config_from_mapping(data)), path)
        out[name] = path
    return out


def run(plans: list[tuple[Path, Path]], a: argparse.Namespace, steps: int, **kw: object) -> None:
    from pptl.run import run_plans

    t = time.time()
    run_plans([(str(p), str(o)) for p, o in plans], gpus=a.gpus, device=a.device, steps=steps, warmup=a.warmup,
              timeout=120.0, **kw)  # type: ignore[arg-type]
    log(f"   {len(plans)} plan(s) x {steps} timed steps in {time.time() - t:.1f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=2, help="MLP blocks per stage")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--calib-steps", type=int, default=20)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--straggler-steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--slow-rank", type=int, default=1)
    ap.add_argument("--slow-factor", type=float, default=1.3)
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--duty-exponent", default="learn",
                    help="pptl whatif --duty-exponent for every prediction: learn (from the calibrating run), "
                    "or a number (0: off; docs/whatif.md)")
    ap.add_argument("--held-factor", action="store_true",
                    help="predict each straggler with the factor its lane held (a launch whose hold was off)")
    ap.add_argument("--first-launch", action="store_true",
                    help="run the calibrating plan in a launch of its own before the calibrating launch")
    ap.add_argument("--replay", action="store_true", help="no runs: predict again from the timelines in --work "
                    "(a work.tar.gz of an earlier call, unpacked)")
    a = ap.parse_args()
    from pptl.whatif.spread import parse_duty_exponent

    a.alpha = parse_duty_exponent(a.duty_exponent)
    a.out.mkdir(parents=True, exist_ok=True)
    a.work.mkdir(parents=True, exist_ok=True)
    res: dict = {"env": env_info(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                 "args": {k: str(v) for k, v in vars(a).items()}}
    plans = {n: a.work / f"plan_{n}.json" for n, *_ in PLANS} if a.replay else write_plans(a, a.work)
    calib = a.work / "measured_calibrate.json"
    later = {n: a.work / f"measured_{n}.json" for n in plans}
    slow = {n: a.work / f"measured_{n}_slow.json" for n in plans}
    ok = False
    try:  # whatever fails, the measured timelines come back for a look
        if a.replay:
            return _predict_and_report(a, res, plans, calib, later, slow)
        if a.first_launch:
            log(f"== first launch: {CALIBRATE}, {a.calib_steps} steps")
            run([(plans[CALIBRATE], a.work / "measured_first.json")], a, a.calib_steps)
        log(f"== calibrate: {CALIBRATE}, {a.calib_steps} steps")
        run([(plans[CALIBRATE], calib)], a, a.calib_steps)
        log(f"== later: {', '.join(plans)}, {a.steps} steps each")
        run([(plans[n], later[n]) for n in plans], a, a.steps)
        log(f"== straggler: rank {a.slow_rank} x{a.slow_factor}, {a.straggler_steps} steps each")
        run([(plans[n], slow[n]) for n in plans], a, a.straggler_steps, slow_rank=a.slow_rank,
            slow_factor=a.slow_factor)
        ok = _predict_and_report(a, res, plans, calib, later, slow) == 0
    finally:
        (a.out / "results.json").write_text(json.dumps(res, indent=1))
        with tarfile.open(a.out / "work.tar.gz", "w:gz") as tar:
            tar.add(a.work, arcname="work")
    return 0 if ok else 1


def _predict_and_report(a: argparse.Namespace, res: dict, plans: dict[str, Path], calib: Path,
                        later: dict[str, Path], slow: dict[str, Path]) -> int:
    log("== predict")
    from pptl.formats.loader import load_any
    from pptl.whatif.ranking import launch_spread

    res["rows"] = predict(a, plans, calib, later, slow)
    steps_cal = load_any(calib).timeline.meta.extra["step_ms"]
    steps_later = load_any(later[CALIBRATE]).timeline.meta.extra["step_ms"]
    res["launch_spread"] = launch_spread(sum(steps_cal) / len(steps_cal), sum(steps_later) / len(steps_later))
    first = a.work / "measured_first.json"
    if first.exists():  # the same plan in three launches: medians, ms
        res["launches"] = {k: _quantiles(load_any(p).timeline.meta.extra["step_ms"])["p50"]
                           for k, p in (("first", first), ("calibrating", calib), ("later", later[CALIBRATE]))}
    res["checks"] = checks(res["rows"], res["launch_spread"])
    (a.out / "table.md").write_text(table(res))
    figure(res["rows"], a, a.out / "whatif_gpu.png")
    print(table(res))
    (a.out / "results.json").write_text(json.dumps(res, indent=1))
    return 0 if all(res["checks"].values()) else 1


def predict(a: argparse.Namespace, plans: dict[str, Path], calib: Path, later: dict[str, Path],
            slow: dict[str, Path]) -> list[dict]:
    from pptl.formats.loader import load_any
    from pptl.whatif.spread import Straggler
    from pptl.whatif.study import study_plans

    rows = []
    base = study_plans([plans[n] for n in plans], measured=calib, samples=a.samples, seed=0,
                       duty_exponent=a.alpha)
    held = {n: held_factor(load_any(slow[n]).timeline, a.slow_rank) for n in plans}
    strag = [study_plans([plans[n]], measured=calib, samples=a.samples, seed=0, duty_exponent=a.alpha,
                         stragglers=[Straggler(a.slow_rank, round(held[n] or a.slow_factor, 3) if a.held_factor
                                               else a.slow_factor)])[0] for n in plans]
    res_alpha = base[0].spread.duty_exponent
    for (name, *_), o, s in zip(PLANS, base, strag):
        meas = load_any(later[name]).timeline
        meas_slow = load_any(slow[name]).timeline
        m = _quantiles(meas.meta.extra["step_ms"])
        ms = _quantiles(meas_slow.meta.extra["step_ms"])
        p = _quantiles(o.samples.makespan.tolist())
        ps = _quantiles(s.samples.makespan.tolist())
        rows.append({"plan": name, "family": o.schedule.family, "microbatches": o.schedule.microbatches,
                     "duty_exponent": res_alpha, "straggler": s.spread.stragglers[0].factor,
                     "held_factor": held_factor(meas_slow, a.slow_rank),
                     "planned_ms": o.samples.planned, "predicted": p, "measured": m,
                     "predicted_slow": ps, "measured_slow": ms,
                     "sensitivity_predicted": ps["mean"] / p["mean"], "sensitivity_measured": ms["mean"] / m["mean"],
                     "steps_ms": meas.meta.extra["step_ms"], "steps_slow_ms": meas_slow.meta.extra["step_ms"],
                     "samples_ms": o.samples.makespan[:: max(1, a.samples // 400)].tolist(),
                     "samples_slow_ms": s.samples.makespan[:: max(1, a.samples // 400)].tolist(),
                     "self": self_prediction(a, plans[name], later[name]),
                     "op_time_vs_calibration": op_ratios(calib, later[name]),
                     "op_time_predicted_vs_measured": predicted_op_ratios(o, meas),
                     "op_time_slow_vs_base": op_ratios(later[name], slow[name])})
    return rows


def self_prediction(a: argparse.Namespace, plan: Path, run: Path) -> dict:
    """The plan predicted from its own run (its op times, not the calibrating run's): what is left
    is the schedule model's error, not how op times moved between plans."""
    from pptl.whatif.spread import Straggler
    from pptl.whatif.study import study_plans

    base = study_plans([plan], measured=run, samples=a.samples, seed=0,
                       duty_exponent=a.alpha)[0].samples.makespan
    slow = study_plans([plan], measured=run, samples=a.samples, seed=0, stragglers=[Straggler(a.slow_rank, a.slow_factor)],
                       duty_exponent=a.alpha)[0].samples.makespan
    return {"p50": float(sorted(base)[len(base) // 2]), "mean": float(base.mean()), "slow_mean": float(slow.mean()),
            "sensitivity": float(slow.mean() / base.mean())}


def every_step(tl: Any) -> Callable[[Any], list[float]]:
    """An event's time in every timed step (``meta.extra.step_ops``), or its one recorded time where the
    run kept no per-step record. Not the recorded step alone: a single step's ops stray by up to 9%
    (call 6's recorded GPipe step had rank 0's Bs at the slowest of 50 steps)."""
    per_step = (tl.meta.extra.get("step_ops") or {}).get("ms")
    per_step = per_step if isinstance(per_step, dict) else {}

    def times(e: Any) -> list[float]:
        xs = per_step.get(e.op)
        return xs if isinstance(xs, list) and xs else [e.duration]

    return times


def predicted_op_ratios(o: object, tl: object) -> dict[str, float]:
    """Per (stage, rank, kind) of compute ops: the mean time the plan's samples were drawn around
    (the calibrating run's costs moved by stage role and duty) over the mean measured time over
    every timed step, the first op of each rank's step included in both. Where a plan's step time
    misses, this says which stage's ops carried it."""
    import statistics

    from pptl.optable import table_of

    t = table_of(o.schedule)  # type: ignore[attr-defined]
    kinds = t.strings("kind")
    dur = o.samples.planned_end - o.samples.planned_start  # type: ignore[attr-defined]
    pred: dict[tuple[int, int, str], list[float]] = {}
    comp = [k for k, n in enumerate(t.lane_names) if n == "compute"]
    for i in range(t.n):
        if int(t.lane[i]) in comp and int(t.stage[i]) >= 0:
            pred.setdefault((int(t.stage[i]), int(t.rank[i]), kinds[i]), []).append(float(dur[i]))
    meas: dict[tuple[int, int, str], list[float]] = {}
    times = every_step(tl)
    for e in tl.events:  # type: ignore[attr-defined]
        if e.lane == "compute" and e.stage >= 0:
            meas.setdefault((e.stage, e.rank, e.kind), []).extend(times(e))
    return {f"s{s} r{r} {k}": statistics.mean(pred[(s, r, k)]) / statistics.mean(v)
            for (s, r, k), v in sorted(meas.items()) if (s, r, k) in pred and statistics.mean(v) > 0}


def op_ratios(ref: Path, run: Path) -> dict[str, float]:
    """Mean compute-op time per (rank, kind) of ``run`` over ``ref``'s, over every timed step."""
    import statistics

    from pptl.formats.loader import load_any

    def means(p: Path) -> dict[str, float]:
        tl = load_any(p).timeline
        by: dict[str, list[float]] = {}
        times = every_step(tl)
        for e in tl.events:  # type: ignore[union-attr]
            if e.lane == "compute":
                by.setdefault(f"r{e.rank} {e.kind}", []).extend(times(e))
        return {k: statistics.mean(v) for k, v in by.items()}

    a, b = means(ref), means(run)
    return {k: b[k] / a[k] for k in sorted(a) if k in b and a[k] > 0}


def held_factor(tl: object, rank: int) -> float | None:
    """How long the slow rank's lane was held per compute op, over the op's time: the median of
    (next op's start - op's start) / op's time, over ops whose successor on the rank's compute
    stream (compute, or a SEND under sync-send) followed within the hold (not after a wait)."""
    import statistics

    evs = sorted((e for e in tl.events if e.rank == rank and (e.lane == "compute" or e.kind == "SEND")),  # type: ignore[attr-defined]
                 key=lambda e: e.start)
    r = [(b.start - a.start) / a.duration for a, b in zip(evs, evs[1:])
         if a.lane == "compute" and a.duration > 0 and b.start - a.end < 0.6 * a.duration]
    return statistics.median(r) if r else None


def checks(rows: list[dict], tie: float) -> dict[str, bool]:
    """The Done-means checks; ``tie``: the launch spread under which two measured sensitivities tie."""
    from pptl.whatif.ranking import rank_agreement

    out = {}
    for r in rows:
        p, m = r["predicted"], r["measured"]
        out[f"{r['plan']}: measured median in predicted p25-p75"] = p["p25"] <= m["p50"] <= p["p75"]
        out[f"{r['plan']}: measured p95 within 3% of predicted"] = abs(m["p95"] - p["p95"]) <= 0.03 * p["p95"]
        out[f"{r['plan']}: straggler mean within 5%"] = (abs(r["predicted_slow"]["mean"] - r["measured_slow"]["mean"])
                                                         <= 0.05 * r["measured_slow"]["mean"])
    got = rank_agreement({r["plan"]: r["sensitivity_measured"] for r in rows},
                         {r["plan"]: r["sensitivity_predicted"] for r in rows}, tie)
    ties = "; ".join(f"{a} ~ {b}" for a, b in got.ties) or "none"
    out[f"families ranked alike by straggler sensitivity, up to ties within the launch spread {100 * tie:.2f}% "
        f"({len(got.resolved)} of {len(got.resolved) + len(got.ties)} pairs resolved; ties: {ties})"] = got.alike
    return out


def table(res: dict) -> str:
    env = res["env"]
    lines = [f"{res['date']}; {', '.join(env.get('gpus', [])) or 'no GPU'}; torch {env.get('torch', '?')}; "
             f"duty exponent {res['args'].get('duty_exponent', '0.0')}"
             f" ({res['rows'][0]['duty_exponent']:.3f} as used); straggler x"
             f"{', x'.join(format(r['straggler'], 'g') for r in res['rows'])}", "",
             "| plan | measured p50 | predicted p25-p75 | measured p95 | predicted p95 | p95 error | "
             "straggler: measured mean | predicted mean | error | sensitivity measured | predicted | lane held |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["rows"]:
        p, m, ps, ms = r["predicted"], r["measured"], r["predicted_slow"], r["measured_slow"]
        lines.append(f"| {r['family']} m={r['microbatches']} | {m['p50']:.2f} | {p['p25']:.2f}-{p['p75']:.2f} | "
                     f"{m['p95']:.2f} | {p['p95']:.2f} | {100 * (m['p95'] - p['p95']) / p['p95']:+.1f}% | "
                     f"{ms['mean']:.2f} | {ps['mean']:.2f} | {100 * (ps['mean'] - ms['mean']) / ms['mean']:+.1f}% | "
                     f"{r['sensitivity_measured']:.3f} | {r['sensitivity_predicted']:.3f} | "
                     f"{'-' if r['held_factor'] is None else format(r['held_factor'], '.3f')} |")
    lines += ["", "Each plan predicted from its own run instead (the schedule model's error alone), and how its op "
              "times moved against the calibrating run's and under the straggler:", "",
              "| plan | measured p50 | self-predicted p50 | error | straggler: measured mean | self-predicted | error | "
              "op time / calibration's | op time with straggler / without |", "|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in res["rows"]:
        sp, m, ms = r["self"], r["measured"], r["measured_slow"]
        fmt = ", ".join(f"{k} {v:.3f}" for k, v in r["op_time_vs_calibration"].items())
        fmt2 = ", ".join(f"{k} {v:.3f}" for k, v in r["op_time_slow_vs_base"].items())
        lines.append(f"| {r['family']} m={r['microbatches']} | {m['p50']:.2f} | {sp['p50']:.2f} | "
                     f"{100 * (sp['p50'] - m['p50']) / m['p50']:+.1f}% | {ms['mean']:.2f} | {sp['slow_mean']:.2f} | "
                     f"{100 * (sp['slow_mean'] - ms['mean']) / ms['mean']:+.1f}% | {fmt} | {fmt2} |")
    lines += ["", "Each stage's ops: the mean time predicted (from the calibrating run) over the mean measured:", "",
              "| plan | predicted / measured op time, per (stage, rank, kind) |", "|---|---|"]
    for r in res["rows"]:
        fmt = ", ".join(f"{k} {v:.3f}" for k, v in r.get("op_time_predicted_vs_measured", {}).items())
        lines.append(f"| {r['family']} m={r['microbatches']} | {fmt} |")
    lines.append("")
    if "launches" in res:
        lines += ["The calibrating plan in three launches (median step, ms): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in res["launches"].items()), ""]
    lines += [f"- {'PASS' if ok else 'FAIL'}: {k}" for k, ok in res["checks"].items()]
    return "\n".join(lines) + "\n"


def figure(rows: list[dict], a: argparse.Namespace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 1.6 * len(rows) + 1.2), layout="constrained")
    axes = fig.subplots(len(rows), 2, squeeze=False)
    for i, r in enumerate(rows):
        for j, (pk, mk, what) in enumerate((("samples_ms", "steps_ms", "as run"),
                                            ("samples_slow_ms", "steps_slow_ms",
                                             f"rank {a.slow_rank} x{a.slow_factor}"))):
            ax = axes[i][j]
            ax.hist(r[pk], bins=40, density=True, color="#7a9cc6", alpha=0.75, label="predicted")
            ax.hist(r[mk], bins=20, density=True, histtype="step", color="#c0392b", linewidth=1.4, label="measured")
            ax.set_title(f"{r['family']} m={r['microbatches']}: {what}", fontsize=9)
            ax.set_xlabel("step time (ms)", fontsize=8)
            ax.tick_params(labelsize=7)
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
    fig.suptitle("pptl whatif: step-time distributions predicted from one 1F1B run vs measured", fontsize=10)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
