"""Re-predict a saved `bench/gpu_tune.sh` run with today's cost model, without a GPU.

    PYTHONPATH=. python3 bench/tune_offline.py ROWS BASE [--config tune.json] [--json out.json]

ROWS is the run's tune_gpu.json (every candidate that ran: label, stage layers, measured step and
peak memory per rank), BASE the calibrating 1F1B timeline (base.measured.json). The script
calibrates from BASE as `pptl tune --costs-from` does, re-times every row's candidate with the
split that ran (synth rebuilds its order from the new costs), runs the full search at the run's
memory limit for the pick, and prints the rows and the checks of bench/gpu_tune.py against the
saved measurements: per-candidate error, Spearman per micro-batch count, the pick against the
fastest measured candidate that fits, and memory (predicted over measured peak per candidate and its
range; candidates whose fit by prediction differs from their fit by measurement at the run's limit;
fitting candidates over the limit). Without --config it uses the bench's own model for the run's pp and workload.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _tune_common import checks, executed_orders, retime, tune_config  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("rows", type=Path)
    ap.add_argument("base", type=Path, help="the calibrating timeline; cand<i>.measured.json beside it are "
                    "the candidates' timelines in row order (optional)")
    ap.add_argument("--config", type=Path)
    ap.add_argument("--json", type=Path, help="write the re-predicted rows and checks here")
    a = ap.parse_args()
    from pptl.tune import tune
    from pptl.tune.calibrate import calibrate_tune
    from pptl.tune.model import load_tune_config, tune_config_from_mapping

    saved = json.loads(a.rows.read_text())
    limit = float(saved["limit_mib"])
    if a.config is not None:
        tc = load_tune_config(a.config)
    else:
        meta = json.loads(a.base.read_text())["meta"]
        w = meta["extra"]["workload"]
        micro = sorted({r["microbatches"] for r in saved["rows"]})
        tc = tune_config_from_mapping(tune_config(int(meta["pp"]), micro, w["hidden"], w["tokens"], w["dtype"]),
                                      source="bench")
    tc, units, notes = calibrate_tune(tc, a.base)
    tc = replace(tc, memory_limit=limit)
    for n in notes:
        print(f"note: {n}")
    res = tune(tc)
    picks: dict[int, tuple[str, tuple[int, ...]] | None] = {}
    for m in tc.microbatches:
        best = next((r for r in res.results if r.structure.microbatches == m), None)
        picks[m] = (best.structure.label, best.split.layers) if best is not None and best.fits else None
    rows = []
    for i, old in enumerate(saved["rows"]):
        # bench/gpu_tune.py keeps every candidate's timeline beside the calibrating one, in row order:
        # synth is then re-timed on the order that ran, not rebuilt from the new costs.
        cand = a.base.parent / f"cand{i}.measured.json"
        orders = (executed_orders(json.loads(cand.read_text()))
                  if old["family"] == "synth" and cand.is_file() else None)
        r = retime(tc, old["label"], old["stage_layers"], orders)
        if r is None or r.step is None:
            print(f"{old['label']}: no longer builds ({getattr(r, 'rejected', None)})")
            continue
        rows.append({**{k: old[k] for k in ("label", "microbatches", "measured_ms", "measured_peak",
                                           "stage_layers")},
                     "old_predicted_ms": old["predicted_ms"], "old_peak": max(old["predicted_peak"]),
                     "predicted_ms": r.step, "predicted_peak": list(r.peak), "fits": r.fits,
                     "order": "as run" if orders is not None else "rebuilt"})
    labels: dict[int, str | None] = {}
    for m, p in picks.items():
        hit = next((x["label"] for x in rows if p is not None and x["label"].rsplit(" split=", 1)[0] == p[0]
                    and tuple(x["stage_layers"]) == p[1]), None)
        labels[m] = hit if hit is not None else (None if p is None else f"{p[0]} {list(p[1])}")
    c = checks(rows, limit, labels)
    print(f"memory limit {limit:.0f} MiB; units {units}")
    print(f"{'candidate':44s} {'layers':>22s} {'meas ms':>8s} {'old ms':>8s} {'err':>6s} {'new ms':>8s} "
          f"{'err':>6s} {'meas MiB':>8s} {'old MiB':>8s} {'new MiB':>8s} {'err':>6s} fits  fits(meas)")
    for x in sorted(rows, key=lambda x: (x["microbatches"], x["measured_ms"])):
        e0 = (x["old_predicted_ms"] - x["measured_ms"]) / x["measured_ms"]
        e1 = (x["predicted_ms"] - x["measured_ms"]) / x["measured_ms"]
        mp = max(x["measured_peak"]) if x["measured_peak"] else float("nan")
        print(f"{x['label'][:44]:44s} {str(x['stage_layers'])[:22]:>22s} {x['measured_ms']:8.2f} "
              f"{x['old_predicted_ms']:8.2f} {100 * e0:+5.1f}% {x['predicted_ms']:8.2f} {100 * e1:+5.1f}% "
              f"{mp:8.0f} {x['old_peak']:8.0f} {max(x['predicted_peak']):8.0f} "
              f"{100 * (max(x['predicted_peak']) - mp) / mp:+5.1f}% {'yes' if x['fits'] else 'no ':4s}  "
              f"{'yes' if mp <= limit else 'no'}"
              + ("  (synth order rebuilt from the new costs)" if x["label"].startswith("synth")
                 and x["order"] == "rebuilt" else ""))
    old = checks([{**x, "predicted_ms": x["old_predicted_ms"]} for x in rows], limit, labels)
    print("spearman as run: " + ", ".join(f"{k} {v:.3f}" for k, v in old.items() if k.endswith("spearman"))
          + f"; max abs err as run {old['max_abs_err']:.3f}")
    wrong = [x["label"] for x in rows if x["measured_peak"] and x["fits"] != (max(x["measured_peak"]) <= limit)]
    print(f"memory: predicted over measured peak {100 * c.get('peak_err_min', 0):+.1f}% .. "
          f"{100 * c.get('peak_err_max', 0):+.1f}%; fits by prediction != by measurement at {limit:.0f} MiB: "
          f"{', '.join(wrong) or 'none'}; reported fitting but over the limit: "
          f"{', '.join(c['fitting_over_limit']) or 'none'}; picks: "
          + ", ".join(f"m={m} {labels[m]} ({'within 2%' if c[f'm{m}_pick_within_2pct'] else 'NOT within 2%'} of "
                      f"{c[f'm{m}_fastest_fitting']})" for m in sorted(labels)))
    c["fits_mismatch"] = wrong
    print("checks: " + json.dumps(c))
    if a.json is not None:
        a.json.write_text(json.dumps({"limit_mib": limit, "notes": notes, "checks": c, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
