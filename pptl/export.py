"""What ``pptl export`` and ``pptl plan --from`` do, as library calls (no printing here).

``export_file`` turns anything ``load_any`` reads (plan, config, torch CSV, timeline, profiler
traces) into another tool's format; ``plan_from_file`` plans an existing schedule (a torch CSV, a
plan file) instead of generating one from a family.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from pptl.errors import InputError, InvalidScheduleError

__all__ = ["EXPORT_FORMATS", "Exported", "export_file", "plan_from_file"]

EXPORT_FORMATS = ("torch-csv", "chrome")


@dataclass(frozen=True)
class Exported:
    data: bytes
    notes: tuple[str, ...]


def export_file(path: str | Path, *, to: str, comms: bool = False, gzip_output: bool = False,
                microbatches: int | None = None, placement: str | None = None) -> Exported:
    """Read ``path`` and render it as ``to`` (``torch-csv`` or ``chrome``).

    Raises:
        InputError: unknown format, an option that does not apply, or input the format cannot hold.
        InvalidScheduleError: the schedule cannot be simulated (chrome, torch-csv with comms).
    """
    from pptl.formats.loader import load_any

    if to not in EXPORT_FORMATS:
        raise InputError(f"--to: got '{to}', expected one of {', '.join(EXPORT_FORMATS)}")
    if comms and to != "torch-csv":
        raise InputError("--comms applies to --to torch-csv only")
    loaded = load_any(path, microbatches=microbatches, placement=placement)
    notes = list(loaded.notes)
    if to == "torch-csv":
        if loaded.schedule is None:
            raise InputError(f"{path}: is a {loaded.kind}, not a schedule; torch CSV needs a plan, config or schedule")
        from pptl.formats.torch_csv import export_csv

        text, more = export_csv(loaded.schedule, comms=comms)
        return Exported(text.encode("utf-8"), tuple(notes + more))
    from pptl.formats.chrome_trace import dumps_chrome

    timeline = loaded.timeline
    cfg = loaded.schedule.config if loaded.schedule is not None else None
    if timeline is None:
        from pptl.simulate import simulate

        timeline = simulate(loaded.schedule).timeline()
    act = cfg.activation if cfg is not None else 1.0
    wact = cfg.w_activation if cfg is not None else 0.0
    payloads = ({op.id: op.payload for op in loaded.schedule.ops if op.kind in ("OFFLOAD", "ONLOAD")}
                if loaded.schedule is not None else None)
    raw = dumps_chrome(timeline, activation=act, w_activation=wact, payloads=payloads).encode("utf-8")
    if gzip_output:
        import gzip

        raw = gzip.compress(raw, mtime=0)
    notes.append(f"{timeline.meta.source} timeline, {len(timeline.events)} events; open it in https://ui.perfetto.dev")
    return Exported(raw, tuple(notes))


def plan_from_file(path: str | Path, *, microbatches: int | None = None, placement: str | None = None,
                   cost_flags: list[str] | None = None, comm_latency: float | None = None,
                   memory_limit: float | None = None) -> Any:
    """Check, simulate and summarise an existing schedule; returns a :class:`pptl.planning.PlanResult`.

    Raises:
        InputError: the file holds no schedule, or a flag is bad.
        InvalidScheduleError: the schedule deadlocks (the message walks the cycle).
    """
    from pptl.checks import run_checks
    from pptl.config import Config, parse_cost_flags
    from pptl.formats.loader import load_any
    from pptl.planning import PlanResult, title_of
    from pptl.simulate import simulate

    loaded = load_any(path, microbatches=microbatches, placement=placement)
    schedule = loaded.schedule
    if schedule is None:
        raise InputError(f"{path}: is a {loaded.kind}, not a schedule; --from takes a torch CSV, plan or config")
    cfg = schedule.config or Config(schedule=schedule.family, pp=schedule.pp, microbatches=schedule.microbatches)
    extra = parse_cost_flags(cost_flags)
    costs = cfg.costs
    if extra:
        base = {**costs.base, **extra}
        if ("I" in extra or "W" in extra) and "B" not in extra:
            base["B"] = base["I"] + base["W"]
        costs = replace(costs, base=base)
    if comm_latency is not None:
        if comm_latency < 0 or comm_latency != comm_latency:
            raise InputError(f"--comm-latency: got {comm_latency}, expected a number >= 0")
        costs = replace(costs, comm_latency=comm_latency)
    cfg = replace(cfg, costs=costs, memory_limit=memory_limit if memory_limit is not None else cfg.memory_limit)
    schedule = replace(schedule, config=cfg)
    violations = run_checks(schedule, memory_limit=cfg.memory_limit)
    cycle = next((v for v in violations if v.code == "PP007"), None)
    if cycle is not None:
        raise InvalidScheduleError(f"{path}: cannot run: {cycle.message}")
    sim = simulate(schedule)
    metrics = sim.metrics()
    metrics.update({"schedule": schedule.family, "pp": schedule.pp, "vpp": cfg.vpp,
                    "microbatches": schedule.microbatches, "textbook_bubble": None, "source": str(path),
                    "notes": list(loaded.notes), "violations": [v.to_dict() for v in violations]})
    title = title_of(schedule, sim.makespan, metrics["bubble_fraction"])
    schedule.meta.setdefault("title", title)
    kw: dict[str, Any] = {"schedule": schedule, "simulation": sim, "family": None, "metrics": metrics, "title": title}
    if "violations" in {f.name for f in fields(PlanResult)}:
        kw["violations"] = violations
    return PlanResult(**kw)
