"""How long `pptl tune`'s full search takes at pp 8, 64 micro-batches, 32 layers (goal: <= 10 s on a
2-core machine). Every family, every split, the synthesised orders, a memory limit that rules some
candidates out. Prints the minimum of --repeat runs (the machine may be shared).

    PYTHONPATH=. python3 bench/tune_scale.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pptl.tune.model import tune_config_from_mapping  # noqa: E402
from pptl.tune.rank import tune  # noqa: E402

CONFIG = {
    "pp": 8, "microbatches": 64, "memory_limit": 20.0,
    "model": {"layers": 32, "layer": {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0, "activation": 0.15, "weight": 0.5},
              "embedding": {"F": 2.0, "B": 4.0, "activation": 0.3, "weight": 1.0},
              "head": {"F": 2.0, "B": 4.0, "activation": 0.3, "weight": 1.0}},
    "comm": {"latency": 0.05},
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    tc = tune_config_from_mapping(CONFIG, source="bench")
    times = []
    for _ in range(a.repeat):
        t = time.perf_counter()
        res = tune(tc, workers=os.cpu_count() or 1)
        times.append(time.perf_counter() - t)
    n_fit = sum(r.fits for r in res.results)
    print(f"{os.cpu_count()} cores; pp=8 microbatches=64 layers=32: {len(res.results)} candidates ({n_fit} fit), "
          f"best {res.best.label if res.best else None}; min {min(times):.2f} s of {a.repeat} "
          f"({', '.join(f'{x:.2f}' for x in times)})")
    return 0 if min(times) <= 10.0 else 1


if __name__ == "__main__":
    sys.exit(main())
