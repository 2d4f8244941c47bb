"""Measure each rank's host clock against rank 0's (the samples :mod:`pptl.run.timebase` fits).

Rank 0 and each other rank in turn exchange 16 stamps: rank 0 sends at ``t1``, the rank stamps
``tr`` on receipt and replies, rank 0 receives at ``t2``. The exchange with the shortest round
trip is kept: its offset ``tr - (t1 + t2) / 2`` is off by at most ``(t2 - t1) / 2`` (all of the
trip on one leg). Rank 0 sends each rank its sample back, so every rank's records carry their own.
It runs over gloo (the default group on CPU, a gloo group beside NCCL on CUDA): host clocks, host
messages, no GPU in the way.
"""
from __future__ import annotations

import os
import socket
import time
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["ROUNDS", "apply_offsets", "host_id", "measure_offset"]

ROUNDS = 16


def _now_ms() -> float:
    return time.perf_counter() * 1e3


def host_id() -> str:
    """What tells two ranks they read one monotonic clock: the host's name and its boot."""
    boot = ""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        pass
    return f"{socket.gethostname()}/{boot}"


def measure_offset(rank: int, world: int, group: Any = None) -> list[float]:
    """This rank's sample ``[at_ms, offset_ms, rtt_ms]`` against rank 0 (rank 0's own: offset 0).

    Every rank of ``group`` must call it at the same point of the program.
    """
    stamp = torch.zeros(1, dtype=torch.float64)
    if rank != 0:
        for _ in range(ROUNDS):
            dist.recv(stamp, 0, group=group)
            stamp[0] = _now_ms()
            dist.send(stamp, 0, group=group)
        out = torch.zeros(3, dtype=torch.float64)
        dist.recv(out, 0, group=group)
        return [float(x) for x in out]
    for r in range(1, world):
        best: list[float] | None = None
        for _ in range(ROUNDS):
            t1 = _now_ms()
            stamp[0] = t1
            dist.send(stamp, r, group=group)
            dist.recv(stamp, r, group=group)
            t2 = _now_ms()
            mid = (t1 + t2) / 2
            if best is None or t2 - t1 < best[2]:
                best = [mid, float(stamp[0]) - mid, t2 - t1]
        assert best is not None
        dist.send(torch.tensor(best, dtype=torch.float64), r, group=group)
    return [_now_ms(), 0.0, 0.0]


def apply_offsets() -> bool:
    """``PPTL_RUN_CLOCK=offsets``: map ranks through their measured offsets even on one host."""
    return os.environ.get("PPTL_RUN_CLOCK", "") == "offsets"
