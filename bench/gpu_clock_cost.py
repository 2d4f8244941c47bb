"""What reading NVML costs: each call's time on an idle GPU (ctypes, as pptl.run.gpuclock reads it).
    python3 bench/gpu_clock_cost.py"""
from __future__ import annotations

import ctypes
import time

import torch

from pptl.run.gpuclock import open_sampler

sm = open_sampler(torch.device("cuda", 0))
assert sm is not None, "no NVML"
nv = sm.nvml
calls = {
    "clock": lambda: nv._uint(nv.lib.nvmlDeviceGetClockInfo, 1),
    "power": lambda: nv._uint(nv.lib.nvmlDeviceGetPowerUsage),
    "reasons": lambda: nv._reasons(nv.handle, ctypes.byref(ctypes.c_ulonglong())),
}
for name, fn in calls.items():
    fn()
    t0 = time.perf_counter()
    for _ in range(200):
        fn()
    print(f"{name}: {(time.perf_counter() - t0) / 200 * 1e6:.1f} us a call")
