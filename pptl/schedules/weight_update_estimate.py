"""Weight-update time estimates without building the plan: a one-pass model of the bucket pipeline
and the table of update time over ranks and model sizes (docs/weight_update.md).
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from pptl.schedules.weight_update import (
    KINDS,
    UpdateSpec,
    plan_buckets,
    spec_from_options,
)

__all__ = ["fast_update_time", "estimate_grid", "estimate_markdown", "ESTIMATE_RANKS", "ESTIMATE_PARAMS",
           "ESTIMATE_ASSUMPTIONS"]


def fast_update_time(spec: UpdateSpec) -> dict[str, float]:
    """The plan's makespan and stage totals without building it: one pass over the buckets.

    Valid because every rank broadcasts and reloads at the same rate, so all ranks' BCAST(g) (and
    RELOAD(g)) start and end together; the tests hold it equal to the simulator's makespan. Used for
    grids too large to build (1024 ranks x 1T parameters is 2M ops). Notes: O(buckets).
    """
    buckets = plan_buckets(spec)
    h2d_free: dict[int, float] = {}  # owner -> when its h2d lane and H2D buffer are free
    copy_end: dict[int, float] = {}
    bc_end: list[float] = []
    rl_end: list[float] = []
    round_last: dict[int, float] = {}
    totals = dict.fromkeys(KINDS, 0.0)
    for bk in buckets:
        g, o = bk.index, bk.owner
        d = {k: spec.duration(k, bk.nbytes) for k in KINDS}
        guard = rl_end[g - spec.ipc_halves] if g >= spec.ipc_halves else 0.0
        if spec.h2d_buffer:
            gate = round_last[bk.round - 1] if bk.round > 0 and not spec.h2d_overlap else 0.0
            h_end = max(h2d_free.get(o, 0.0), copy_end.get(o, 0.0), gate) + d["H2D"]
            h2d_free[o] = h_end
            copy_end[o] = ready = max(h_end, copy_end.get(o, 0.0), guard) + d["COPY"]
            totals["COPY"] += d["COPY"]
        else:
            gate = bc_end[g - 1] if g > 0 and not spec.h2d_overlap else 0.0
            h2d_free[o] = ready = max(h2d_free.get(o, 0.0), guard, gate) + d["H2D"]
        bc_end.append(max(ready, bc_end[-1] if bc_end else 0.0) + d["BCAST"])
        rl_end.append(max(bc_end[-1], rl_end[-1] if rl_end else 0.0) + d["RELOAD"])
        round_last[bk.round] = bc_end[-1]
        totals["H2D"] += d["H2D"]
        totals["BCAST"] += d["BCAST"]
        totals["RELOAD"] += d["RELOAD"]
    return {"update_time": max(rl_end, default=0.0), "buckets": float(len(buckets)), **totals}


ESTIMATE_RANKS = (8, 16, 32, 64, 128, 256, 512, 1024)
ESTIMATE_PARAMS = (10e9, 70e9, 235e9, 671e9, 1e12)
#: The assumptions of the estimate tables in docs/weight_update.md (stated there, one a line).
ESTIMATE_ASSUMPTIONS: dict[str, Any] = {
    "bytes_per_param": 2, "tensor_size": "256MiB", "free_memory": "32GiB", "h2d_bandwidth": "25GB/s",
    "d2d_bandwidth": "1000GB/s", "bcast_bandwidth": "64GB/s", "reload_rate": "80GB/s",
}
#: Broadcast latency per tree level (ms): a broadcast over p ranks costs this x ceil(log2 p).
ESTIMATE_LATENCY_PER_LEVEL = 0.05


def estimate_grid(ranks: Iterable[int] = ESTIMATE_RANKS, params: Iterable[float] = ESTIMATE_PARAMS,
                  **overrides: Any) -> list[list[float]]:
    """Update time in seconds for every (ranks, parameters) pair, by :func:`fast_update_time`."""
    out = []
    for p in ranks:
        opts = {**ESTIMATE_ASSUMPTIONS, "bcast_latency": ESTIMATE_LATENCY_PER_LEVEL * math.ceil(math.log2(p))}
        opts.update(overrides)
        row = []
        for n in params:
            row.append(fast_update_time(spec_from_options({**opts, "params": n}, pp=p))["update_time"] / 1e3)
        out.append(row)
    return out


def _params_name(n: float) -> str:
    return f"{n / 1e12:g}T" if n >= 1e12 else f"{n / 1e9:g}B"


def _table(title: str, grid: list[list[float]]) -> list[str]:
    head = "| ranks | " + " | ".join(_params_name(n) for n in ESTIMATE_PARAMS) + " |"
    lines = [title, "", head, "|" + "---:|" * (len(ESTIMATE_PARAMS) + 1)]
    for p, row in zip(ESTIMATE_RANKS, grid):
        lines.append(f"| {p} | " + " | ".join(f"{t:.2f}" for t in row) + " |")
    return lines + [""]


def estimate_markdown() -> str:
    """The estimate section of docs/weight_update.md, between its ``estimate`` markers.

    Regenerate: ``python -c "from pptl.schedules.weight_update import estimate_markdown as e; print(e())"``;
    tests/schedules/test_weight_update.py fails when the doc and this output differ.
    """
    a = ESTIMATE_ASSUMPTIONS
    lines = [
        "Assumptions (`pptl.schedules.weight_update.ESTIMATE_ASSUMPTIONS`):",
        "",
        f"- {a['bytes_per_param']} bytes per parameter (BF16), split evenly over the ranks as the trainer's shards, "
        f"in tensors of {a['tensor_size']}; buckets chosen by checkpoint-engine's rule with {a['free_memory']} free "
        "per GPU (8 GiB buckets).",
        f"- H2D {a['h2d_bandwidth']} per rank, device copy {a['d2d_bandwidth']}, broadcast {a['bcast_bandwidth']} "
        f"whatever the rank count, plus {ESTIMATE_LATENCY_PER_LEVEL} ms x ceil(log2 ranks) per broadcast; "
        f"reload {a['reload_rate']}.",
        "- Every rank receives the whole model (a full broadcast), so the bytes on the wire do not shrink "
        "with more ranks; more ranks mean more, smaller buckets and more broadcast latency.",
        "",
    ]
    lines += _table("Update time in seconds, three-stage pipeline (`h2d_overlap: true`, the paper's figure):",
                    estimate_grid())
    lines += _table("Update time in seconds, checkpoint-engine's current loop (`h2d_overlap: false`):",
                    estimate_grid(h2d_overlap=False))
    return "\n".join(lines)
