"""What one full backward (B) of `pptl run`'s MLP chunk holds on a GPU while it runs, against
`pptl.run.footprint.chunk_footprint(...).full_backward`, and what the first F and B leave allocated
for good (the GEMM libraries' workspaces, which no plan counts).

    PYTHONPATH=. python3 bench/gpu_backward_peak.py --out OUT/probe.json [--hidden 2048 --tokens 2048 --layers 16]

Per stage kind (first, last): run F then B once (the first GEMMs of the process's threads allocate
their workspaces), then again, measuring B's allocated peak above what was allocated at its start.
On CPU there are no allocator statistics: the sequence runs and every number is 0 (a dry run).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import env_info  # noqa: E402

from pptl.config import Workload  # noqa: E402
from pptl.run.footprint import chunk_footprint  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=16, help="MLP blocks in the chunk")
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    import torch

    from pptl.run.model import backward_full, forward, make_chunk, make_input, make_target

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cuda = dev.type == "cuda"

    def allocated() -> int:
        if not cuda:
            return 0
        torch.cuda.synchronize(dev)
        return torch.cuda.memory_allocated(dev)

    w = Workload(hidden=a.hidden, tokens=a.tokens, layers_per_stage=a.layers, dtype=a.dtype)
    rows = []
    for stage, last in ((0, False), (1, True)):
        chunk = make_chunk(w, stage, dev)
        x = make_input(w, 0, 0, dev)
        target = make_target(w, 0, 0, dev) if last else None
        dy = None if last else make_input(w, 0, 1, dev)

        def once(chunk, x, target, dy, stage=stage) -> tuple[int, int]:  # type: ignore[no-untyped-def]
            before = allocated()
            # keep_linears: the executor's B is I then W on a forward that kept its Linears
            act = forward(chunk, x, needs_input_grad=stage > 0, keep_linears=True, target=target, scale=0.125)
            at_b = allocated()
            if cuda:
                torch.cuda.reset_peak_memory_stats(dev)
            backward_full(chunk, act, dy)
            peak = torch.cuda.max_memory_allocated(dev) if cuda else 0
            return at_b - before, peak - at_b

        start = allocated()
        first = once(chunk, x, target, dy)
        kept = allocated() - start  # what the first F and B left: the workspaces (the rest is freed)
        second = once(chunk, x, target, dy)
        fp = chunk_footprint(w, stage, last=last)
        rows.append({"stage": "last" if last else "first", "forward_held": second[0], "plan_forward": fp.forward,
                     "b_peak_above_start": second[1], "plan_full_backward": fp.full_backward,
                     "first_b_peak_above_start": first[1], "kept_after_first_f_and_b": kept})
        del chunk, x, target, dy
    res = {"env": env_info(), "device": str(dev), "args": {k: str(v) for k, v in vars(a).items()}, "rows": rows,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1, default=str))
    mib = 2 ** 20
    for r in rows:
        print(f"{r['stage']}: forward held {r['forward_held'] / mib:.3f} MiB (plan {r['plan_forward'] / mib:.3f}); "
              f"B's peak above its start {r['b_peak_above_start'] / mib:.3f} MiB (plan {r['plan_full_backward'] / mib:.3f}; "
              f"first B {r['first_b_peak_above_start'] / mib:.3f}); kept after the first F and B "
              f"{r['kept_after_first_f_and_b'] / mib:.3f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
