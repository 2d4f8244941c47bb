"""The GPU clock record of `pptl run` (pptl.run.gpuclock): what is kept, and its absence without NVML."""
from __future__ import annotations

import time

import pytest

from pptl.run.gpuclock import Sample, Sampler, open_sampler, summarize
from pptl.run.report import summary_lines
from pptl.timeline import Event, Timeline, TimelineMeta


def _s(ms: float, mhz: int, w: float = 600.0, reasons: int = 0) -> Sample:
    return Sample(ms=ms, sm_mhz=mhz, power_w=w, reasons=reasons)


def test_only_samples_inside_timed_windows_count_ends_included():
    samples = [_s(9.99, 100), _s(10.0, 1500, 690, 0x4), _s(15.0, 1600, 680, 0x4), _s(20.0, 1700, 650, 0),
               _s(20.01, 100), _s(30.0, 1800, 640, 0x1), _s(40.0, 100)]
    g = summarize(samples, [(10.0, 20.0), (30.0, 35.0)], power_limit_w=700.0, max_sm_mhz=1980)
    assert g is not None
    # Inside: 1500, 1600, 1700 (20.0 is the window's end, kept) and 1800; 9.99, 20.01 and 40 are out.
    assert g.samples == 4
    assert g.sm_mhz == 1650.0  # median of 1500, 1600, 1700, 1800
    # p10 by linear interpolation: position 0.3 between 1500 and 1600 -> 1530; p90: 2.7 -> 1770.
    assert g.sm_mhz_p10 == pytest.approx(1530.0)
    assert g.sm_mhz_p90 == pytest.approx(1770.0)
    assert g.power_w == 665.0  # median of 690, 680, 650, 640
    assert g.power_capped == 0.5  # two of four carry the SW power cap bit (0x4); 0x1 is idle
    assert g.slowed == 0.5
    assert g.power_limit_w == 700.0 and g.max_sm_mhz == 1980


def test_no_sample_inside_gives_none_and_unknown_reasons_give_none():
    assert summarize([_s(1.0, 1500)], [(2.0, 3.0)]) is None
    assert summarize([], [(0.0, 1.0)]) is None
    g = summarize([_s(1.0, 1500, reasons=-1)], [(0.0, 2.0)])
    assert g is not None and g.power_capped is None and g.slowed is None


def test_thermal_slowdown_counts_as_slowed_not_power_capped():
    g = summarize([_s(1.0, 1400, reasons=0x20), _s(2.0, 1400, reasons=0x40)], [(0.0, 3.0)])
    assert g is not None and g.power_capped == 0.0 and g.slowed == 1.0


def test_every_power_and_thermal_bit_counts_as_slowed_and_no_other():
    # nvmlClocksEventReasons: 0x8 HW slowdown and 0x80 HW power brake hold the clock (slowed); 0x1 GPU idle,
    # 0x2 application clocks setting, 0x10 sync boost and 0x100 display clock do not. Four samples, two
    # held: slowed = 2 / 4 = 0.5. None carries the SW power cap bit 0x4: power_capped = 0 / 4 = 0.
    samples = [_s(1.0, 1400, reasons=0x8), _s(2.0, 1400, reasons=0x80), _s(3.0, 1900, reasons=0x1 | 0x2 | 0x10),
               _s(4.0, 1900, reasons=0x100)]
    g = summarize(samples, [(0.0, 5.0)])
    assert g is not None and g.samples == 4
    assert g.slowed == 0.5 and g.power_capped == 0.0


class _FakeNvml:
    def __init__(self) -> None:
        self.n = 0

    def power_limit_w(self) -> float:
        return 700.0

    def max_sm_mhz(self) -> int:
        return 1980

    def read(self) -> Sample:
        self.n += 1
        return Sample(ms=time.perf_counter() * 1e3, sm_mhz=1500 + self.n, power_w=690.0, reasons=0x4)


def test_sampler_thread_reads_until_stopped_and_summarises_timed_steps_only():
    sm = Sampler(_FakeNvml(), period=0.001)  # type: ignore[arg-type]
    t0 = time.perf_counter() * 1e3
    sm.start()
    time.sleep(0.05)
    sm.stop()
    t1 = time.perf_counter() * 1e3
    n = len(sm.samples)
    assert n >= 3
    time.sleep(0.01)
    assert len(sm.samples) == n  # stopped: nothing more is read
    g = sm.summary([{"timed": True, "anchor_ms": t0, "step_ms": t1 - t0},
                    {"timed": False, "anchor_ms": t0, "step_ms": t1 - t0}])
    assert g is not None and g.samples == n and g.power_capped == 1.0
    assert sm.summary([{"timed": False, "anchor_ms": t0, "step_ms": t1 - t0}]) is None


def test_no_nvml_or_no_cuda_records_nothing(monkeypatch):
    assert open_sampler("cuda:0") is None  # this machine has no NVIDIA driver library (or no CUDA)
    monkeypatch.setenv("PPTL_RUN_GPU_CLOCK", "0")
    assert open_sampler("cuda:0") is None


def test_run_summary_prints_each_rank_clock_in_rank_order():
    ev = [Event(op="F0", rank=0, lane="compute", start=0.0, end=1.0, kind="F", stage=0, mb=0)]
    gpu = {"10": {"samples": 40, "sm_mhz": 1820.0, "sm_mhz_p10": 1800.0, "sm_mhz_p90": 1900.0, "power_w": 641.0,
                  "power_limit_w": 700.0, "power_capped": 0.1},
           "2": {"samples": 40, "sm_mhz": 1515.0, "sm_mhz_p10": 1440.0, "sm_mhz_p90": 1600.0, "power_w": 687.4,
                 "power_limit_w": 700.0, "power_capped": 0.95}}
    tl = Timeline(ev, TimelineMeta(source="measured", units="ms", family="1f1b", pp=1, extra={"gpu": gpu}))
    lines = [x for x in summary_lines(tl) if "SM clock" in x]
    assert lines == ["  rank 2: SM clock 1515 MHz (p10 1440, p90 1600), power 687 W of 700 W, held by the power cap "
                     "in 95% of 40 samples",
                     "  rank 10: SM clock 1820 MHz (p10 1800, p90 1900), power 641 W of 700 W, held by the power cap "
                     "in 10% of 40 samples"]


def test_memory_clock_and_temperature_are_medians_of_the_samples_that_have_them():
    # 2619, 1593 and one unknown inside the window: median of the two known (2106); 100 outside it
    samples = [Sample(1.0, 1500, 600.0, 0, mem_mhz=2619, temp_c=40), Sample(2.0, 1500, 600.0, 0, mem_mhz=1593, temp_c=44),
               Sample(3.0, 1500, 600.0, 0, mem_mhz=None, temp_c=51), Sample(9.0, 1500, 600.0, 0, mem_mhz=100, temp_c=99)]
    g = summarize(samples, [(0.0, 3.0)])
    assert g is not None and g.mem_mhz == 2106.0 and g.temp_c == 44.0
    # a driver that says neither: the record says None, not 0
    g = summarize([_s(1.0, 1500)], [(0.0, 2.0)])
    assert g is not None and g.mem_mhz is None and g.temp_c is None


def test_run_summary_adds_the_memory_clock_and_temperature_where_recorded():
    ev = [Event(op="F0", rank=0, lane="compute", start=0.0, end=1.0, kind="F", stage=0, mb=0)]
    gpu = {"0": {"samples": 40, "sm_mhz": 1965.0, "sm_mhz_p10": 1950.0, "sm_mhz_p90": 1980.0, "power_w": 381.4,
                 "power_limit_w": 700.0, "power_capped": 0.0, "mem_mhz": 3201.0, "temp_c": 38.0},
           "1": {"samples": 40, "sm_mhz": 1950.0, "sm_mhz_p10": 1950.0, "sm_mhz_p90": 1980.0, "power_w": 419.3,
                 "power_limit_w": 700.0, "power_capped": 0.0, "mem_mhz": None}}
    tl = Timeline(ev, TimelineMeta(source="measured", units="ms", family="1f1b", pp=1, extra={"gpu": gpu}))
    lines = [x for x in summary_lines(tl) if "SM clock" in x]
    assert lines[0].endswith("held by the power cap in 0% of 40 samples, memory clock 3201 MHz, GPU at 38 C")
    assert lines[1].endswith("held by the power cap in 0% of 40 samples")
