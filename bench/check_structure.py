"""Time the structure rules (PP001-PP005) on a large plan read as a table-made schedule.

    PYTHONPATH=$PWD python3 -m pptl plan --schedule interleaved-1f1b --pp 64 --vpp 2 -m 512 -o p64.json
    PYTHONPATH=$PWD python3 bench/check_structure.py p64.json [repeats]

Each repeat checks a fresh table-made copy (no ``Op`` objects), so a rule that builds them pays
for it; prints the minimum time of each rule over the repeats and whether ops were built.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pptl.checks.base import Context  # noqa: E402
from pptl.checks.structure import duplicate_ops, index_out_of_range, malformed_ops, missing_work, stage_on_two_ranks  # noqa: E402
from pptl.formats.loader import load_any  # noqa: E402
from tests.table_copy import table_made  # noqa: E402

RULES = [("PP001", malformed_ops), ("PP002", duplicate_ops), ("PP003", missing_work),
         ("PP004", index_out_of_range), ("PP005", stage_on_two_ranks)]


def main() -> None:
    path = sys.argv[1]
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    loaded = load_any(path).schedule
    assert loaded is not None, f"{path} holds no schedule"
    best = {code: float("inf") for code, _ in RULES}
    built = False
    for _ in range(repeats):
        s = table_made(loaded)
        ctx = Context(s)
        _ = ctx.table, ctx.kinds  # shared by every rule of a check run: not any one rule's time
        for code, rule in RULES:
            t0 = time.perf_counter()
            out = rule(ctx)
            best[code] = min(best[code], time.perf_counter() - t0)
            assert not out, out[:3]
        built = built or s.has_ops()
    print(f"{path}: {loaded.n_ops} ops, Op objects built: {built}")
    for code, _ in RULES:
        print(f"  {code}  {best[code] * 1e3:8.1f} ms")
    print(f"  total  {sum(best.values()) * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
