"""``pptl compare``'s use of what-if: the measured step times against the band the plan predicts
when its ops vary as the run's did (the run's spread on the plan's own costs)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pptl.formats._quote import counted
from pptl.ir import Schedule

__all__ = ["StepBand", "plan_step_band", "step_band"]


@dataclass(frozen=True)
class StepBand:
    p5: float
    p50: float
    p95: float
    measured_median: float
    percentile: float
    """Share of the predicted steps shorter than the measured median (0.5: right on the plan)."""
    steps: int
    units: str

    def line(self) -> str:
        u = self.units
        return (f"step time: measured median {self.measured_median:.4g} {u} over {counted(self.steps, 'step')}, at percentile "
                f"{100 * self.percentile:.0f} of the plan under this run's spread (p5 {self.p5:.4g}, "
                f"p50 {self.p50:.4g}, p95 {self.p95:.4g} {u}; pptl whatif --from)")

    def to_dict(self) -> dict[str, Any]:
        return {"p5": self.p5, "p50": self.p50, "p95": self.p95, "measured_median": self.measured_median,
                "percentile": self.percentile, "steps": self.steps, "units": self.units}


def plan_step_band(plan: str | Path, measured: Any, source: str) -> StepBand | None:
    """:func:`step_band` of the schedule in the file ``plan`` (a plan or config); None for a file that
    holds no schedule (a timeline standing in for a plan)."""
    from pptl.formats.loader import load_any

    schedule = load_any(plan).schedule
    return step_band(schedule, measured, source) if schedule is not None else None


def step_band(schedule: Schedule, measured: Any, source: str, *, samples: int = 400, seed: int = 0) -> StepBand | None:
    """The band, or None where it means nothing: a plan not in the run's time unit (not calibrated
    with ``--costs-from``), a run with fewer than two step times, or a spread that does not fit the
    plan (the comparison itself reports a mismatch)."""
    import statistics

    import numpy as np

    from pptl.errors import InputError
    from pptl.whatif.lanes import sends_on_compute
    from pptl.whatif.montecarlo import monte_carlo
    from pptl.whatif.spread import spread_from_timeline

    extra = measured.meta.extra
    steps = extra.get("step_ms")
    if schedule.meta.get("units") != measured.meta.units or not isinstance(steps, list) or len(steps) < 2:
        return None
    try:
        spread = spread_from_timeline(measured, source)
        # the comparison names another plan's ranks itself; the plan's costs (--costs-from) hold each
        # rank's first op of the step in its group's mean already
        spread = replace(spread, pp=0, first={})
        if extra.get("messages") == "sync-send" and extra.get("device") not in (None, "cpu"):
            schedule = sends_on_compute(schedule)
        out = monte_carlo(schedule, None, spread, samples=samples, seed=seed, critical=False)
    except InputError:
        return None
    ms = out.makespan
    med = float(statistics.median(float(x) for x in steps))
    p5, p50, p95 = np.quantile(ms, (0.05, 0.5, 0.95)).tolist()
    # ties count half: a run right on a plan that draws one step time (no spread) is at percentile 50, not 0
    at = float((ms < med).mean() + 0.5 * (ms == med).mean())
    return StepBand(p5, p50, p95, med, at, len(steps), measured.meta.units)
