"""Each rank's SM clock, memory clock, temperature and board power while its timed steps run, read from NVML.

Why a run records them: under a power cap a GPU's clock follows how busy it is (a rank busy 0.9 of
the step ran at 1440-1635 MHz on H200s at their 700 W cap, one busy 0.6 at 1800-1965 MHz), and
``pptl tune`` carries op times from the calibrating run to plans whose ranks are busier or idler.
Whether the run's ranks sat on the cap, and at what clock, is what tells it whether that law applies.
The memory clock and the temperature are kept beside them: two launches of one plan at the same SM clock
can differ by several percent (a calibrating run slower than a later one), and those are what else a
launch's GPU can change under the same SM clock.

NVML is reached through ctypes (``libnvidia-ml.so.1``, shipped with the driver), so no Python package
is needed; where it cannot be loaded nothing is recorded and the run goes on. A daemon thread reads
the clock, the power and the clock-event reasons every ``period`` seconds, stamped with the host's
``perf_counter`` clock, the clock the executor stamps each step's anchor with; :func:`summarize`
(pure) keeps the samples inside the timed steps.
"""
from __future__ import annotations

import ctypes
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Sequence

__all__ = ["Sample", "GpuClock", "Sampler", "summarize", "open_sampler"]

_NVML_CLOCK_SM = 1
_NVML_CLOCK_MEM = 2
_NVML_TEMPERATURE_GPU = 0
#: nvmlClocksEventReasons: the software power cap (the board's power limit) holds the clock down.
_REASON_SW_POWER_CAP = 0x4
#: Every reason that slows the clock for heat or power (SW power cap, HW slowdown, SW and HW thermal,
#: HW power brake), not the idle or application-clock ones.
_REASON_SLOWING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


@dataclass(frozen=True)
class Sample:
    ms: float
    """Host time of the reading, ``perf_counter`` in ms."""
    sm_mhz: int
    power_w: float
    reasons: int
    """nvmlClocksEventReasons bits; -1 where the driver would not say."""
    mem_mhz: int | None = None
    temp_c: int | None = None
    """None where the driver would not say."""


@dataclass(frozen=True)
class GpuClock:
    """One rank's clock and power over its timed steps."""

    samples: int
    sm_mhz: float
    """Median SM clock of the samples inside timed steps."""
    sm_mhz_p10: float
    sm_mhz_p90: float
    power_w: float
    """Median board power of those samples."""
    power_limit_w: float | None
    max_sm_mhz: int | None
    power_capped: float | None
    """Share of those samples the software power cap held the clock (None: reasons unknown)."""
    slowed: float | None
    """Share of those samples any power or thermal reason held the clock."""
    mem_mhz: float | None = None
    """Median memory clock of those samples that have one (None: none has)."""
    temp_c: float | None = None
    """Median GPU temperature of those samples that have one, in degrees Celsius."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _quantile(xs: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default), on a sorted copy."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(samples: Sequence[Sample], windows: Sequence[tuple[float, float]], *,
              power_limit_w: float | None = None, max_sm_mhz: int | None = None) -> GpuClock | None:
    """The samples whose time lies in a window (closed at both ends), summarised; None without any.

    Windows are the timed steps, ``(anchor_ms, anchor_ms + step_ms)`` on the same host clock."""
    inside = [s for s in samples if any(a <= s.ms <= b for a, b in windows)]
    if not inside:
        return None
    mhz = [float(s.sm_mhz) for s in inside]
    known = [s.reasons for s in inside if s.reasons >= 0]

    def share(mask: int) -> float | None:
        return sum(1 for r in known if r & mask) / len(known) if known else None

    def median_known(xs: list[int | None]) -> float | None:
        have = [float(x) for x in xs if x is not None]
        return statistics.median(have) if have else None

    return GpuClock(samples=len(inside), sm_mhz=statistics.median(mhz), sm_mhz_p10=_quantile(mhz, 0.1),
                    sm_mhz_p90=_quantile(mhz, 0.9), power_w=statistics.median(s.power_w for s in inside),
                    power_limit_w=power_limit_w, max_sm_mhz=max_sm_mhz,
                    power_capped=share(_REASON_SW_POWER_CAP), slowed=share(_REASON_SLOWING),
                    mem_mhz=median_known([s.mem_mhz for s in inside]), temp_c=median_known([s.temp_c for s in inside]))


class _Nvml:
    """The few NVML calls a sampler makes, on one device."""

    def __init__(self, uuid: str | None, pci: str | None) -> None:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        if lib.nvmlInit_v2() != 0:
            raise OSError("nvmlInit failed")
        self.lib = lib
        self.handle = ctypes.c_void_p()
        found = False
        if uuid:
            found = lib.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(self.handle)) == 0
        if not found and pci:
            found = lib.nvmlDeviceGetHandleByPciBusId_v2(pci.encode(), ctypes.byref(self.handle)) == 0
        if not found:
            raise OSError("no NVML device for this GPU")
        reasons = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self._reasons = reasons if reasons is not None else getattr(lib, "nvmlDeviceGetCurrentClocksThrottleReasons",
                                                                    None)

    def _uint(self, fn: Any, *args: Any) -> int | None:
        v = ctypes.c_uint()
        return int(v.value) if fn(self.handle, *args, ctypes.byref(v)) == 0 else None

    def power_limit_w(self) -> float | None:
        mw = self._uint(self.lib.nvmlDeviceGetEnforcedPowerLimit)
        return None if mw is None else mw / 1e3

    def max_sm_mhz(self) -> int | None:
        return self._uint(self.lib.nvmlDeviceGetMaxClockInfo, _NVML_CLOCK_SM)

    def read(self) -> Sample | None:
        mhz = self._uint(self.lib.nvmlDeviceGetClockInfo, _NVML_CLOCK_SM)
        mw = self._uint(self.lib.nvmlDeviceGetPowerUsage)
        if mhz is None or mw is None:
            return None
        reasons = -1
        if self._reasons is not None:
            v = ctypes.c_ulonglong()
            if self._reasons(self.handle, ctypes.byref(v)) == 0:
                reasons = int(v.value)
        return Sample(ms=time.perf_counter() * 1e3, sm_mhz=mhz, power_w=mw / 1e3, reasons=reasons,
                      mem_mhz=self._uint(self.lib.nvmlDeviceGetClockInfo, _NVML_CLOCK_MEM),
                      temp_c=self._uint(self.lib.nvmlDeviceGetTemperature, _NVML_TEMPERATURE_GPU))


class Sampler:
    """Reads one GPU every ``period`` seconds on a daemon thread, from :meth:`start` to :meth:`stop`."""

    def __init__(self, nvml: _Nvml, period: float = 0.02) -> None:
        self.nvml, self.period = nvml, period
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.power_limit_w = nvml.power_limit_w()
        self.max_sm_mhz = nvml.max_sm_mhz()

    def start(self) -> None:
        self.samples = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="pptl-gpuclock", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            s = self.nvml.read()
            if s is not None:
                self.samples.append(s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None

    def summary(self, steps: Sequence[dict[str, Any]]) -> GpuClock | None:
        """Over the timed steps of a rank's records (each with ``anchor_ms`` and ``step_ms``)."""
        windows = [(float(st["anchor_ms"]), float(st["anchor_ms"]) + float(st["step_ms"]))
                   for st in steps if st.get("timed") and "anchor_ms" in st and "step_ms" in st]
        return summarize(self.samples, windows, power_limit_w=self.power_limit_w, max_sm_mhz=self.max_sm_mhz)


def open_sampler(device: Any) -> Sampler | None:
    """A sampler of ``device`` (a CUDA torch device), or None where NVML is not there to read."""
    import os

    if os.environ.get("PPTL_RUN_GPU_CLOCK", "1") == "0":
        return None
    try:
        import torch

        props = torch.cuda.get_device_properties(device)
        uuid = str(getattr(props, "uuid", "") or "")
        if uuid and not uuid.startswith("GPU-"):
            uuid = "GPU-" + uuid
        bus = [getattr(props, f"pci_{k}_id", None) for k in ("domain", "bus", "device")]
        pci = f"{bus[0]:08x}:{bus[1]:02x}:{bus[2]:02x}.0" if None not in bus else None
        period = float(os.environ.get("PPTL_RUN_GPU_CLOCK_MS", "20")) / 1e3
        return Sampler(_Nvml(uuid or None, pci), period=period)
    except Exception:  # no driver library, an old driver, a GPU NVML does not list: record nothing
        return None
