"""``pptl whatif``: several plans under one spread, sampled alike (what the command calls).

A plan file or config gives the schedule and its costs; ``--from`` a measured run replaces the
costs by the run's (:func:`pptl.planning.costs_from_timeline`, as ``pptl plan --costs-from``) and
adds the spread the run showed (:func:`pptl.whatif.spread.spread_from_timeline`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from pptl.config import Costs
from pptl.errors import InputError
from pptl.ir import Schedule
from pptl.whatif.montecarlo import Samples, monte_carlo
from pptl.whatif.spread import Jitter, Spread, Straggler, spread_from_timeline

__all__ = ["PlanOutcome", "Measured", "load_measured", "study", "study_plans"]


@dataclass(frozen=True)
class Measured:
    """A measured run read once: its costs and its spread."""

    costs: Costs
    spread: Spread
    sends_on_compute: bool
    """The run sent on the compute stream (CUDA, ``sync-send``): plans are sampled so."""


@dataclass(frozen=True)
class PlanOutcome:
    """One plan's samples, with what the report names."""

    name: str
    schedule: Schedule
    units: str
    samples: Samples
    ids: list[str]
    """Op ids, indexed like the schedule's ops."""
    spread: Spread
    sends_on_compute: bool = False
    """Sampled with its SENDs on the compute lane (:func:`pptl.whatif.lanes.sends_on_compute`)."""

    def top_critical(self, k: int) -> list[tuple[str, float]]:
        """The ``k`` ops with time most often on the critical path (ties in op order)."""
        import numpy as np

        # ops that take time: a message of no time is on the path only as its SEND's shadow
        timed = self.samples.planned_end > self.samples.planned_start
        crit = np.where(timed, self.samples.critical, 0.0)
        idx = np.argsort(-crit, kind="stable")[:k]
        return [(self.ids[i], float(crit[i])) for i in idx.tolist() if crit[i] > 0]


def load_measured(path: Path) -> Measured:
    """Costs and spread of a measured timeline (``pptl run -o`` or a profiler trace pptl reads).

    Raises:
        InputError: the file holds no timeline with compute ops, or a malformed per-step record.
    """
    from pptl.config import costs_from_mapping
    from pptl.formats.loader import load_any
    from pptl.planning import costs_from_timeline

    tl = load_any(path).timeline
    if tl is None or not tl.events:
        raise InputError(f"{path}: has no timeline to take durations from (expected the output of pptl run -o)")
    spread = spread_from_timeline(tl, str(path))
    extra = tl.meta.extra
    sync = extra.get("messages") == "sync-send" and extra.get("device") not in (None, "cpu")
    return Measured(costs_from_mapping(costs_from_timeline(tl), source=str(path)), spread, sync)


def study(schedule: Schedule, name: str, spread: Spread, *, costs: Costs | None = None, samples: int = 1000,
          seed: int = 0) -> PlanOutcome:
    """Sample one schedule (its own costs unless ``costs``)."""
    from pptl.optable import table_of

    units = spread.units or str(schedule.meta.get("units") or "unit")
    out = monte_carlo(schedule, costs, spread, samples=samples, seed=seed)
    t = table_of(schedule)
    ids = [op.id for op in schedule.ops] if schedule.has_ops() else [t.op(i).id for i in range(t.n)]
    return PlanOutcome(name, schedule, units, out, ids, spread)


def study_plans(paths: Sequence[Path], *, measured: Path | None = None, samples: int = 1000, seed: int = 0,
                jitter: Jitter | None = None, stragglers: Sequence[Straggler] = (),
                duty_exponent: float = 0.0) -> list[PlanOutcome]:
    """Every plan of ``paths`` under the same spread and seed.

    Raises:
        InputError: a file holds no schedule, or a spread does not fit a plan (see
            :func:`pptl.whatif.montecarlo.monte_carlo`).
    """
    from pptl.formats.loader import load_any

    m = load_measured(measured) if measured is not None else None
    spread = replace(m.spread if m is not None else Spread(), jitter=jitter, stragglers=tuple(stragglers),
                     duty_exponent=duty_exponent)
    out = []
    for p in paths:
        loaded = load_any(p)
        if loaded.schedule is None:
            raise InputError(f"{p}: is a {loaded.kind}, not a plan; pptl whatif takes plans and configs")
        schedule = loaded.schedule
        if m is not None and m.sends_on_compute:
            from pptl.whatif.lanes import sends_on_compute

            schedule = sends_on_compute(schedule)
        o = study(schedule, str(p), spread, costs=m.costs if m is not None else None, samples=samples, seed=seed)
        out.append(replace(o, sends_on_compute=schedule is not loaded.schedule))
    return out


