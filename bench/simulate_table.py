"""Simulation of a large plan whose ``Op`` view was built against a copy that has built none, in one
process, the cycle collector off (as the CLI runs), in CPU seconds.

Times, least of ``--repeat`` runs: the DAG's successor lists and topological order, ``simulate``
given them, and the plan's summary (``Simulation.metrics`` and the family's metrics); then whether
the table-made schedule built ``Op`` objects, and whether both give the same metrics.

    python bench/simulate_table.py [--schedule interleaved-1f1b] [--pp 64] [--vpp 2] [--mb 512] [--repeat 5]
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--schedule", default="interleaved-1f1b")
    ap.add_argument("--pp", type=int, default=64)
    ap.add_argument("--vpp", type=int, default=2)
    ap.add_argument("--mb", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    gc.disable()
    from pptl.config import Config
    from pptl.dag import kahn_order, successors
    from pptl.schedules import build_schedule, get_family
    from pptl.simulate import simulate
    from tests.table_copy import table_made

    cfg = Config(schedule=a.schedule, pp=a.pp, vpp=a.vpp, microbatches=a.mb)
    fam = get_family(cfg.schedule)
    objects = build_schedule(cfg)
    print(f"{a.schedule} pp {a.pp} V {a.vpp} {a.mb} micro-batches: {len(objects.ops):,} ops")
    print("| schedule | successors s | order s | simulate s | summary s | total s | Op objects built |")
    print("|---|---:|---:|---:|---:|---:|---|")
    results = {}
    for name in ("objects", "table-made"):
        rows = []
        for _ in range(a.repeat):
            s = objects if name == "objects" else table_made(objects)
            t0 = time.process_time()
            adj = successors(s)
            t1 = time.process_time()
            order = kahn_order(adj)
            t2 = time.process_time()
            sim = simulate(s, dag=adj, order=order)
            t3 = time.process_time()
            summary = sim.metrics()
            if fam.extra_metrics is not None:
                summary.update(fam.extra_metrics(s, sim))
            t4 = time.process_time()
            rows.append((t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0))
        best = [min(r[k] for r in rows) for k in range(5)]
        results[name] = summary
        built = "yes" if name == "objects" or s.has_ops() else "no"
        print(f"| {name} | " + " | ".join(f"{x:.3f}" for x in best) + f" | {built} |")
    print("same metrics:", results["objects"] == results["table-made"])


if __name__ == "__main__":
    main()
