"""Time PP006, PP008 and PP030-PP033 on table-made schedules (the ops as columns, no ``Op`` objects).

Each file is read once; every repetition times each rule on a fresh context of a fresh table-made
copy (:func:`tests.table_copy.table_made`), keeps the least, and says whether any rule built the
``Op`` list (it should not on a valid schedule).

Run::

    pptl plan --schedule interleaved-1f1b --pp 64 --vpp 2 -m 512 -o p64.json
    PYTHONPATH=. python bench/rules_arrays.py p64.json torch_compute_comms.csv --p2p nccl --repeat 5
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pptl.checks import Context, comm, order, p2p  # noqa: E402
from pptl.formats.loader import load_any  # noqa: E402
from tests.table_copy import table_made  # noqa: E402

RULES = [("PP006", order.local_order), ("PP008", comm.unmatched_p2p), ("PP030", p2p.fifo_order),
         ("PP031", p2p.p2p_deadlock), ("PP032", p2p.send_before_data), ("PP033", p2p.recv_after_use)]


def time_file(path: str, mode: str, repeat: int) -> str:
    base = load_any(path, report_problems=True).schedule
    best: dict[str, float] = {}
    built: set[str] = set()
    found = 0
    for _ in range(repeat):
        s = table_made(base)
        ctx = Context(s, p2p=mode)
        assert ctx.table is not None  # the columns themselves are the reader's work, not the rules'
        for code, fn in RULES:
            gc.collect()
            t = time.perf_counter()
            found += len(fn(ctx))
            best[code] = min(best.get(code, float("inf")), time.perf_counter() - t)
            if s.has_ops() and not built:
                built.add(code)
    times = " ".join(f"{c} {best[c] * 1e3:.1f}" for c, _ in RULES)
    return (f"{Path(path).name} ops={base.n_ops} p2p={mode}: {times}  total {sum(best.values()) * 1e3:.1f} ms; "
            f"violations {found // repeat}; Op list built by: {', '.join(sorted(built)) or 'none'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--p2p", default="nccl", choices=("nonblocking", "nccl", "blocking"))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    for f in args.files:
        print(time_file(f, args.p2p, max(1, args.repeat)), flush=True)


if __name__ == "__main__":
    main()
