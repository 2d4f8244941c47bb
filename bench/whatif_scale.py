"""Speed of `pptl whatif` (issue 36): 1,000 samples of a 100k-op plan, target <= 5 s on 2 cores.

    PYTHONPATH=. python3 bench/whatif_scale.py [--pp 8] [--mb 1088] [--samples 1000] [--repeat 3]

The plan is interleaved 1F1B (V=2), built once; each timed call is `monte_carlo` as `pptl whatif --from`
runs it: a measured spread (per (stage, kind) quantile tables, a step factor, an offset) and a straggler,
with the critical-path walk; then the same with a 5% jitter on top (a normal draw per op). Prints one
markdown row per repeat: wall and CPU seconds (CPU time is what other work on the cores does not inflate).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    import numpy as np

    from pptl.config import Config
    from pptl.schedules import build_schedule
    from pptl.whatif import Jitter, Quantiles, Spread, Straggler, monte_carlo

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pp", type=int, default=8)
    ap.add_argument("--mb", type=int, default=1088)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    s = build_schedule(Config(schedule="interleaved-1f1b", pp=a.pp, microbatches=a.mb, vpp=2))
    rng = np.random.default_rng(0)
    stages = {(st, k): Quantiles.of(rng.gamma(50.0, 1 / 50.0, 400)) for st in range(2 * a.pp) for k in ("F", "B")}
    spread = Spread(stages=stages, step=Quantiles.of(rng.normal(1.0, 0.01, 20)), offset=(0.1, 0.12),
                    jitter=Jitter(0.05), stragglers=(Straggler(1, 1.3),), units="ms", source="synthetic", pp=a.pp)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"numpy {np.__version__}; {s.n_ops:,} ops, {a.samples:,} samples")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print("| spread | repeat | wall s | CPU s | p50 | p95 | p99 |\n|---|---:|---:|---:|---:|---:|---:|")
    from dataclasses import replace

    for name, sp in (("measured + straggler", replace(spread, jitter=None)), ("measured + straggler + 5% jitter", spread)):
        for k in range(a.repeat):
            t, c = time.perf_counter(), time.process_time()
            out = monte_carlo(s, None, sp, samples=a.samples, seed=k)
            dt, dc = time.perf_counter() - t, time.process_time() - c
            p50, p95, p99 = out.quantiles()
            print(f"| {name} | {k + 1} | {dt:.2f} | {dc:.2f} | {p50:.1f} | {p95:.1f} | {p99:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
