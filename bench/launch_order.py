"""Whether a plan's place in its launch moves its step time (the question `pptl whatif`'s GPU proof raised).

    PYTHONPATH=. python3 bench/launch_order.py OUT [--hidden 3840 --tokens 2560 --layers 2 --steps 20]

Five launches on 2 GPUs of the same 1F1B (m=8) and GPipe (m=4) plans: 1F1B alone, GPipe then 1F1B, 1F1B then
GPipe, 1F1B alone, GPipe then 1F1B. Prints each plan's median timed step (and untimed) per launch; the
measured timelines stay in OUT.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LAUNCHES = (("A", ("1f1b",)), ("B", ("gpipe", "1f1b")), ("C", ("1f1b", "gpipe")), ("D", ("1f1b",)),
            ("E", ("gpipe", "1f1b")))


def main() -> int:
    from pptl import planning
    from pptl.config import config_from_mapping
    from pptl.run import run_plans

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--hidden", type=int, default=3840)
    ap.add_argument("--tokens", type=int, default=2560)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    wl = {"hidden": a.hidden, "tokens": a.tokens, "layers_per_stage": a.layers, "dtype": "bfloat16"}
    plans = {}
    for name, m in (("gpipe", 4), ("1f1b", 8)):
        p = a.out / f"plan_{name}.json"
        planning.write_plan(planning.plan(config_from_mapping({"schedule": name, "pp": 2, "microbatches": m,
                                                               "workload": wl})), p)
        plans[name] = p
    for tag, names in LAUNCHES:
        t = time.time()
        outs = [a.out / f"{tag}_{k}_{n}.json" for k, n in enumerate(names)]
        run_plans([(str(plans[n]), str(o)) for n, o in zip(names, outs)], gpus=2, device=a.device, steps=a.steps,
                  warmup=3, timeout=120.0)
        cells = []
        for k, (n, o) in enumerate(zip(names, outs)):
            e = json.loads(o.read_text())["meta"]["extra"]
            cells.append(f"{k}:{n} {statistics.median(e['step_ms']):.2f} (untimed "
                         f"{statistics.median(e['untimed_step_ms']):.2f})")
        print(tag, f"{time.time() - t:.0f}s", " | ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
