"""Does a plan that leaves its GPUs idle more of the step run its ops at a higher clock? The GPUs'
SM clock and power, sampled while plans of one stored cross-validation shape run one after another.

    python3 bench/clock_probe.py write DIR SHAPE [SHAPE ...]     (CPU: the plans to run, from the stored launches)
    bash bench/clock_probe.sh DIR OUT                             (2 GPUs: each plan run alone, nvidia-smi sampling)
    python3 bench/clock_probe.py analyze OUT                      (CPU: clock, power and op time per plan)

Why: on every stored shape calibrated at the balanced split, the capped V orders (one micro-batch in
flight, each rank busy about 0.65 of the step) ran every op kind 2-6% faster than the model, which lets
no rank run faster than the calibrating run's least busy one. A faster clock under a power cap is one
cause; another is anything a schedule's order changes in an op's own work (caches, allocator). The SM
clock tells them apart: the same ops faster at the same clock are not the power cap's.

``write`` takes from each shape its calibrating 1F1B plan, the capped V-Half, ZB-V, GPipe and the
1F1B at the even split, each as ``pptl tune -o`` writes it (the stored candidate's order and split).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

DATA = ROOT / "tests" / "data" / "tune_crossval"
#: The candidates a shape's probe runs, by label prefix (the first stored row that starts so).
PROBED = ("v-half vpp=2", "zbv vpp=2", "gpipe", "1f1b m=")


def write(folder: Path, names: list[str]) -> int:
    from _tune_common import retime
    from tune_crossval import _base_plan, _calibrated, shapes_named

    from pptl.planning import plan_config, write_plan
    from pptl.tune.write import write_best

    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        saved = json.loads((DATA / f"{name}.json").read_text())
        tc = _calibrated(saved)
        shape = shapes_named([saved["shape"]["name"]])[0]
        cfg = folder / f"{name}__calibrating.config.json"
        cfg.write_text(json.dumps(_base_plan(shape, saved["config"], saved.get("calibrate", "even"))))
        write_plan(plan_config(cfg, {}, None, None), folder / f"{name}__1f1b-calibrating.json")
        cfg.unlink()
        for prefix in PROBED:
            row = next((r for r in saved["rows"] if r["label"].startswith(prefix)
                        and not (prefix == "1f1b m=" and "split=balanced" in r["label"])), None)
            if row is None:
                continue
            res = retime(replace(tc, memory_limit=None), row["label"], row["stage_layers"])
            if res is None or res.step is None:
                continue
            tag = row["label"].split()[0]
            out = folder / f"{name}__{tag}-{row['label'].rsplit('split=', 1)[-1]}.json"
            write_best(tc, res, out=out, csv=None, units="ms")
            print(f"{out.name}: {row['label']} predicted {res.step:.1f} ms, measured {row['measured_ms']:.1f}")
    return 0


def _when(text: str) -> float:
    """Seconds of a ``YYYY/MM/DD HH:MM:SS.ffffff`` local time, as nvidia-smi and the runner write it."""
    return datetime.strptime(text.strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()


def _smi(path: Path) -> list[tuple[float, int, float, float, float]]:
    """(time, gpu, sm clock MHz, power W, utilization %) per sample line of nvidia-smi's csv."""
    out = []
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5:
            continue
        try:
            out.append((_when(parts[0]), int(parts[1]), float(parts[2]), float(parts[3]), float(parts[4])))
        except ValueError:
            continue
    return out


def _over_model(plan: Path, tl: dict[str, Any]) -> dict[tuple[int, str], float]:
    """(rank, kind) -> the recorded step's compute ops over the plan's own durations (the ranking's
    model), summed per rank and kind; empty for a plan in cost-model units."""
    from pptl.planning import plan_from_file
    from pptl.simulate import durations

    sched = plan_from_file(plan).schedule
    if sched.meta.get("units") in (None, "unit") or sched.config is None:
        return {}
    dur = durations(sched, sched.config.costs)
    pred = {(op.rank, op.kind, op.stage, op.mb): dur[i] for i, op in enumerate(sched.ops) if op.lane == "compute"}
    sums: dict[tuple[int, str], list[float]] = {}
    for e in tl["events"]:
        d = pred.get((e["rank"], e["kind"], e.get("stage"), e.get("mb")))
        if d and e.get("lane", "compute") == "compute":
            s = sums.setdefault((e["rank"], e["kind"]), [0.0, 0.0])
            s[0] += e["end"] - e["start"]
            s[1] += d
    return {k: v[0] / v[1] for k, v in sorted(sums.items())}


def analyze(out: Path) -> int:
    samples = _smi(out / "smi.csv")
    windows = [line.split("|") for line in (out / "windows.txt").read_text().splitlines() if line.count("|") == 2]
    print("plan                                   gpu  SM MHz p10/p50/p90   power W p50  util% p50  step ms   busy")
    for name, t0, t1 in windows:
        a, b = _when(t0), _when(t1)
        # the timed steps are the run's last part: its process start and warm-up are left out
        lo = a + 0.6 * (b - a)
        tl_path = out / f"{name}.measured.json"
        tl = json.loads(tl_path.read_text()) if tl_path.exists() else None
        tl = tl if tl and tl.get("events") else None
        step = None
        busy = {}
        if tl:
            span = max(e["end"] for e in tl["events"]) - min(e["start"] for e in tl["events"])
            step = tl["meta"]["extra"].get("makespan") or span
            for e in tl["events"]:
                if e.get("lane", "compute") == "compute" and e["kind"] in ("F", "B", "I", "W"):
                    busy[e["rank"]] = busy.get(e["rank"], 0.0) + (e["end"] - e["start"]) / span
        for gpu in (0, 1):
            s = [x for x in samples if x[1] == gpu and lo <= x[0] <= b]
            if not s:
                continue
            clk = sorted(x[2] for x in s)
            q = lambda p: clk[min(len(clk) - 1, int(p * len(clk)))]  # noqa: E731
            print(f"{name:38s} {gpu}  {q(0.1):5.0f} {q(0.5):5.0f} {q(0.9):5.0f}   {statistics.median(x[3] for x in s):6.0f}"
                  f"   {statistics.median(x[4] for x in s):5.0f}   {step or 0:8.1f}  {busy.get(gpu, 0):.2f}")
        ratio = _over_model(out / "plans" / f"{name}.json", tl) if tl else {}
        if ratio:
            print("    measured / model:", "  ".join(f"r{r}{k} {v:.3f}" for (r, k), v in ratio.items()))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("folder", type=Path)
    w.add_argument("shapes", nargs="+")
    an = sub.add_parser("analyze")
    an.add_argument("out", type=Path)
    a = ap.parse_args()
    return write(a.folder, a.shapes) if a.cmd == "write" else analyze(a.out)


if __name__ == "__main__":
    raise SystemExit(main())
