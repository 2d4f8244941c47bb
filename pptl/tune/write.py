"""What ``pptl tune -o/--csv`` writes: the plan the ranking timed, through the one plan writer
(:func:`pptl.planning.write_plan`) and the torch CSV exporter.

The plan is :func:`pptl.tune.rank.best_schedule`: the candidate's own order and split, with the costs
its step was timed with, checked by every rule and simulated again here; the two steps agree (the
plan's simulated makespan is the ranked step), and the plan's metrics carry the ranking's row under
``tune``. Before a ranking, ``--calibration-plan`` writes the run to measure
(:func:`calibration_config`: 1F1B at the balanced split) through the same writer.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pptl.config import Config
    from pptl.ir import Schedule
    from pptl.planning import PlanResult
    from pptl.tune.model import TuneConfig
    from pptl.tune.rank import Result
    from pptl.tune.split import Split

__all__ = ["calibration_config", "plan_result", "write_best", "NO_CSV_FAMILIES", "refuse_csv_without_families",
           "beside_sends_note"]

#: Tune families whose plans torch's CSV cannot hold: DualPipe runs micro-batches in two
#: directions, and the CSV has one (DualPipeV holds the same pairs on one direction).
NO_CSV_FAMILIES = frozenset({"dualpipe"})


def refuse_csv_without_families(tc: TuneConfig) -> None:
    """Before a ranking with ``--csv``: refuse when no family of the config can be written as a torch
    CSV (the best could never be); with some that can, a best that cannot is noted instead
    (:func:`write_best`), and the ranking stands.

    Raises:
        InputError: every family of ``tc`` is in :data:`NO_CSV_FAMILIES`.
    """
    from pptl.errors import InputError

    if tc.families and all(f in NO_CSV_FAMILIES for f in tc.families):
        raise InputError(f"--csv: {tc.source} lists only {', '.join(tc.families)}, which runs micro-batches in two "
                         f"directions; torch's CSV has one: drop --csv, or add a family it holds (dualpipev pairs "
                         f"F and B as dualpipe does)")


def beside_sends_note(schedule: Schedule, messages: str) -> str | None:
    """A note for a written plan some of whose SENDs ``pptl run`` will send beside compute, or None.

    Under ``sync-send`` a SEND runs on its producer's compute stream, except those that could deadlock the run
    there (:func:`pptl.run.program.held_sends`); those run beside the compute, and one that waits there for its
    receive keeps its NCCL kernel on the GPU, which slows the compute beside it 1.3-1.6x on H200s
    (``bench/gpu_spin.py``). The ranking does not time that wait, so the plan's step may be short: interleaved
    1F1B with every micro-batch in one group measured 4.5-5.5% over its rank on two shapes (docs/tune.md).
    """
    if messages != "sync-send":
        return None
    from pptl.run.program import BESIDE_WAIT, beside_compute  # the run's issue order; no torch

    beside = beside_compute(schedule)
    if not beside:
        return None
    sends = sum(1 for op in schedule.ops if op.kind == "SEND")
    return (f"pptl run sends {len(beside)} of the plan's {sends} messages beside compute (sync-send cannot hold "
            f"them on the compute stream without a deadlock); {BESIDE_WAIT}, which the ranking does not time: "
            f"the step may be short (docs/tune.md)")


def plan_result(tc: TuneConfig, result: Result, *, units: str = "unit") -> PlanResult:
    """``result``'s plan, checked (every rule) and simulated, as ``pptl plan`` would hold it."""
    from pptl.checks import Context, check_context
    from pptl.planning import PlanResult, title_of
    from pptl.tune.rank import best_schedule

    schedule = best_schedule(tc, result)
    if units != "unit":
        schedule.meta["units"] = units
    ctx = Context(schedule, costs=schedule.config.costs if schedule.config is not None else None)
    violations = check_context(ctx)
    sim = ctx.simulation
    metrics = sim.metrics()
    metrics.update({"schedule": result.structure.family, "pp": tc.pp, "vpp": result.structure.vpp,
                    "microbatches": result.structure.microbatches, "textbook_bubble": None,
                    "tune": result.to_dict()})
    metrics["violations"] = [v.to_dict() for v in violations]
    title = title_of(schedule, sim.makespan, metrics["bubble_fraction"])
    schedule.meta.setdefault("title", title)
    return PlanResult(schedule, sim, None, metrics, title, violations, ctx.order)


def write_best(tc: TuneConfig, result: Result, *, out: Path | None, csv: Path | None,
               units: str = "unit", notes: list[str] | None = None) -> Schedule:
    """Write ``result``'s plan to ``out`` (a pptl plan) and/or ``csv`` (a torch CSV); return it.

    With ``notes``, a plan torch's CSV cannot hold (DualPipe's two directions) leaves ``csv``
    unwritten and says why there: the ranking and the plan are what was asked, the CSV one form of
    the plan. Without, that raises.

    Raises:
        InputError: the plan cannot be exported (without ``notes``), or a file cannot be written.
    """
    from pptl.errors import InputError
    from pptl.fileio import atomic_write
    from pptl.planning import write_plan

    planned = plan_result(tc, result, units=units)
    text = None
    if csv is not None:
        from pptl.formats.torch_csv import export_csv

        try:
            text, _ = export_csv(planned.schedule)
        except InputError as e:
            if notes is None:
                raise
            notes.append(f"--csv: {csv} not written: the best plan ({result.label}) cannot be a torch CSV: {e}")
    if out is not None:
        write_plan(planned, out)
    if csv is not None and text is not None:
        atomic_write(csv, text.encode("utf-8") if isinstance(text, str) else text)
    return planned.schedule


def calibration_config(tc: TuneConfig, split: Split | None = None) -> Config:
    """The 1F1B plan to run for ``--costs-from``: the config's largest micro-batch count, the balanced
    split unless ``split`` is given (``workload.stage_layers`` says it, which calibration reads back).

    Why balanced: the run's ranks are then about as busy as the candidates' (most of which split so),
    and a GPU's speed depends on how busy it is in ways one run cannot tell apart (docs/tune.md,
    "Calibrate where the candidates run"); the even split leaves the first rank far less busy (0.5-0.7
    of the step against the candidates' 0.8-1.0) and every candidate on an extrapolated duty law.
    """
    from pptl.tune.candidates import Structure
    from pptl.tune.rank import config_for
    from pptl.tune.split import Split, balanced_split

    if split is None:
        split = Split("balanced", balanced_split(tc.model, tc.pp))
    return config_for(tc, Structure("1f1b", max(tc.microbatches)), split)
