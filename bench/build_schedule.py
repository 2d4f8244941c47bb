"""Time ``build_schedule`` (a family's phase tables, SEND/RECV placement and the training facts) in
process, least of ``--repeat`` runs, per family at a large size. Prints a markdown table.

Run it from two checkouts to compare them (numpy is imported before timing: a large plan needs it
on either path, and ``pptl plan`` has it loaded by then):

    PYTHONPATH=$PWD python3 bench/build_schedule.py [--repeat 3] [--only interleaved-1f1b]
"""
from __future__ import annotations

import argparse
import gc
import time

CASES = [
    ("interleaved-1f1b", 64, 2, 512), ("interleaved-1f1b", 32, 2, 256), ("1f1b", 64, 1, 1024),
    ("gpipe", 64, 1, 1024), ("zb-h1", 64, 1, 1024), ("zbv", 64, 2, 512), ("dualpipe", 64, 1, 512),
    ("dualpipev", 64, 2, 512),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated family names")
    a = ap.parse_args()
    gc.set_threshold(200_000, 20, 100)  # as the CLI does
    import numpy  # noqa: F401  (see the module docstring)

    from pptl.config import Config
    from pptl.schedules import build_schedule

    only = set(filter(None, a.only.split(",")))
    print("| family | pp | V | micro-batches | ops | build s (least of %d) | Op objects built |" % a.repeat)
    print("|---|---:|---:|---:|---:|---:|---|")
    for family, pp, v, m in CASES:
        if only and family not in only:
            continue
        cfg = Config(schedule=family, pp=pp, vpp=v, microbatches=m)
        best = float("inf")
        for _ in range(a.repeat):
            t = time.perf_counter()
            s = build_schedule(cfg)
            best = min(best, time.perf_counter() - t)
            n, objects = s.n_ops, s.has_ops()
            del s
            gc.collect()
        print(f"| {family} | {pp} | {v} | {m} | {n:,} | {best:.3f} | {'yes' if objects else 'no'} |")


if __name__ == "__main__":
    main()
