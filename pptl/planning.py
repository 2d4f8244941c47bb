"""What the CLI's plan and check commands do, as library calls (no printing here).

``make_config`` merges a file and flags; ``plan`` builds, simulates and measures a family's schedule,
``plan_from_file`` an existing one (both through one path); ``timeline_of`` is the one place a
loaded file becomes a timeline (stored, or simulated now); ``check_file`` loads any supported file
and runs the checker.
"""
from __future__ import annotations

import glob
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from pptl.checks import Violation, run_checks
from pptl.config import (
    Config,
    apply_cost_flags,
    backward_from_split,
    config_from_file,
    config_from_mapping,
    parse_cost_flags,
)
from pptl.errors import InputError, InvalidScheduleError
from pptl.fileio import atomic_write, check_json_name, check_writable, is_gz
from pptl.formats._quote import counted, shell_word
from pptl.ir import Schedule
from pptl.timeline import Timeline

if TYPE_CHECKING:
    from pptl.formats.loader import Loaded
    from pptl.schedules import Family
    from pptl.simulate import Simulation

__all__ = ["PlanResult", "FileReport", "make_config", "load_config_or_plan", "plan", "plan_config", "plan_from_file",
           "timeline_of", "load_timeline", "plain_counterpart", "write_plan", "check_file", "expand_paths",
           "calibrate_config", "calibrate", "costs_from_timeline", "b_parts", "rank_scale_of", "title_of", "github_input_error",
           "expand_paths_reporting"]


@dataclass
class PlanResult:
    schedule: Schedule
    simulation: Simulation | None
    family: Family | None
    metrics: dict
    title: str
    violations: list[Violation] = field(default_factory=list)
    order: list[int] | None = None
    """A topological order of the ops (the checker's), written into large plan files."""

    @property
    def valid(self) -> bool:
        return not any(v.severity == "error" for v in self.violations)

    @property
    def timeline(self) -> Timeline:
        return self.simulation.timeline()


def make_config(path: Path | None, flags: Mapping[str, Any], cost_flags: list[str] | None,
                comm_latency: float | None, *, data: Any = None) -> Config:
    """A config from a file (if given; ``data``, what it holds, when already read) with flags on top,
    or from flags alone."""
    from pptl.schedules import get_family  # the family registry loads only when planning
    extra_costs = parse_cost_flags(cost_flags)
    schedule = flags.get("schedule")
    if extra_costs and schedule is not None:
        _check_cost_flags(extra_costs, schedule)
    if path is not None:
        cfg = _load_config_or_plan(path, {k: v for k, v in flags.items() if v is not None}, data)
    else:
        missing = [f"--{k}" for k in ("pp", "microbatches") if flags.get(k) is None]
        if missing:
            raise InputError(f"{' and '.join(missing)} required with --schedule "
                             "(e.g. pptl plan --schedule 1f1b --pp 4 --microbatches 8)")
        cfg = config_from_mapping({k: v for k, v in flags.items() if v is not None}, source="<flags>")
    if extra_costs or comm_latency is not None:
        cfg = replace(cfg, costs=apply_cost_flags(cfg.costs, extra_costs, comm_latency))
    if extra_costs and schedule is None:
        _check_cost_flags(extra_costs, cfg.schedule)
    get_family(cfg.schedule)  # unknown names fail here, listing the known ones
    return cfg


def _check_cost_flags(costs: Mapping[str, float], schedule: str) -> None:
    """``--cost X=2`` names a cost key the family reads, or fails naming the known ones."""
    from pptl.config import TRAINING_COST_KEYS
    from pptl.schedules import get_family  # the family registry loads only when planning

    if get_family(schedule).own_costs:
        return
    unknown = sorted(set(costs) - set(TRAINING_COST_KEYS))
    if unknown:
        raise InputError(f"--cost {unknown[0]}={costs[unknown[0]]:g}: unknown cost key '{unknown[0]}'; known keys: "
                         f"{', '.join(TRAINING_COST_KEYS)} (op kinds)")


def load_config_or_plan(path: Path) -> Config:
    """The config in ``path``: a config file, or the config a plan file was made from."""
    return _load_config_or_plan(path, {})


def _load_config_or_plan(path: Path, overrides: Mapping[str, Any], data: Any = None) -> Config:
    """A config file, or a plan file's config (``pptl plan plan.json --costs-from measured.json``
    re-plans what ran, with measured costs); ``data``: the file's contents when already read."""
    from pptl.formats.structured import read_structured

    if data is None:
        data = read_structured(path)
    if isinstance(data, Mapping) and data.get("format") == "pptl-plan":
        inner = data.get("config")
        if not isinstance(inner, Mapping):
            raise InputError(f"{path}: the plan holds no config (an imported schedule); re-plan it with "
                             f"pptl plan --from {shell_word(path)}")
        given = _given_order(data)
        if given is not None:
            raise InputError(f"{path}: its order is {given}'s, which its config ({inner.get('schedule')}) does not "
                             f"build: plan it as it is with 'pptl plan {shell_word(path)}' (--cost, --memory-limit apply), "
                             f"not re-planned from its config")
        return config_from_mapping({**inner, **overrides}, source=f"{path}: config")
    return config_from_file(data, str(path), overrides)


def _given_order(data: Mapping[str, Any]) -> str | None:
    """The family of a plan file whose order its config's family does not build (``pptl tune``'s
    synthesised orders keep the config of the family whose ops they order), else None."""
    held = data.get("schedule")
    inner = data.get("config")
    if not isinstance(held, Mapping) or not isinstance(inner, Mapping):
        return None
    family = held.get("family")
    return str(family) if isinstance(family, str) and family != inner.get("schedule") else None


def _plan_file_as_it_is(data: Any, flags: Mapping[str, Any], costs_from: Path | None) -> bool:
    """``pptl plan PLAN`` (``data``, what it holds) of a plan whose order its config does not build, with
    nothing that re-plans it: plan the order it holds (as ``--from``)."""
    if costs_from is not None or any(v is not None for k, v in flags.items() if k != "memory_limit"):
        return False
    return isinstance(data, Mapping) and data.get("format") == "pptl-plan" and _given_order(data) is not None


def title_of(schedule: Schedule, makespan: float, bubble: float) -> str:
    chunks = schedule.chunks_per_rank
    vpp = f" vpp={chunks}" if chunks > 1 else ""
    from pptl.schedules import find_family  # the registry loads only when planning

    fam = find_family(schedule.family)
    unit = fam.step_unit if fam is not None else "microbatches"
    return (f"{schedule.family}: pp={schedule.pp}{vpp} {unit}={schedule.microbatches * schedule.directions} "
            f"makespan={makespan:g} bubble={100 * bubble:.1f}%")


def plan(cfg: Config, *, check: bool = True, costs_from: Path | None = None) -> PlanResult:
    """Build, check (every rule), simulate and summarise (``costs_from``: the run the costs came from).

    Raises:
        InputError: the family refuses the config.
        InvalidScheduleError: the generated order deadlocks (the violations name the cycle).
    """
    from pptl.schedules import build_schedule, get_family  # the family registry loads only when planning

    fam = get_family(cfg.schedule)
    try:
        textbook = fam.bubble(cfg)
    except Exception:  # a formula undefined for this config (e.g. missing cost key)
        textbook = None
    header = {"textbook_bubble": textbook, "schedule": fam.name, "pp": cfg.pp, "vpp": cfg.vpp,
              "microbatches": cfg.microbatches}
    schedule = build_schedule(cfg)
    _stage_costs_in_range(cfg, schedule.num_stages, costs_from)
    return _plan_schedule(schedule, family=fam, header=header, check=check, what=f"{cfg.schedule} with this config")


def _stage_costs_in_range(cfg: Config, num_stages: int, costs_from: Path | None = None) -> None:
    """A per-stage cost for a stage the plan has not would change nothing, silently: most often a
    stage counted from 1, or a config written for a deeper pipeline. Costs calibrated from a run
    (``costs_from``) name the run's stages: the run is named, not a config field nobody wrote."""
    for field_name, stages in (("stages", cfg.costs.stages), ("beside", cfg.costs.beside)):
        out = sorted(s for s in stages if s >= num_stages)
        if out and costs_from is not None:
            raise InputError(f"--costs-from {costs_from}: its costs are for stages 0-{max(out)}, this plan has stages "
                             f"0-{num_stages - 1}: calibrate from a run of a plan with the same stages")
        if out:
            raise InputError(f"{cfg.source}: field 'costs.{field_name}': stage {out[0]} is not in this plan "
                             f"(stages 0-{num_stages - 1})")


def plan_config(path: Path | None, flags: Mapping[str, Any], cost_flags: list[str] | None,
                comm_latency: float | None, *, costs_from: Path | None = None) -> PlanResult:
    """:func:`plan` of :func:`make_config`'s config, its costs measured by the run ``costs_from``
    wrote when one is named (the plan then speaks the run's unit). A plan file whose order its config
    does not build (a synthesised one) is planned as it is when nothing re-plans it."""
    from pptl.formats.structured import read_structured

    data = read_structured(path) if path is not None else None
    if path is not None and _plan_file_as_it_is(data, flags, costs_from):
        return plan_from_file(path, cost_flags=cost_flags, comm_latency=comm_latency,
                              memory_limit=flags.get("memory_limit"))
    try:
        cfg = make_config(path, flags, cost_flags, comm_latency, data=data)
        units = None
        if costs_from is not None:
            cfg, units = calibrate(cfg, costs_from)
        result = plan(cfg, costs_from=costs_from)
    except InputError as e:
        raise _in_flag_words(e) from None
    if units is not None and units != "unit":  # calibrated durations are in the run's unit (ms)
        result.schedule.meta["units"] = units
    return result


_FLAG_FIELD = re.compile(r"^<flags>: (?:field '(\w+)': )?")


def _in_flag_words(e: InputError) -> InputError:
    """A config error about values that came from flags, worded as the flags: ``--vpp: got 1, ...``
    rather than ``<flags>: field 'vpp': got 1, ...`` (a file's errors name the file and field)."""
    text = str(e)
    m = _FLAG_FIELD.match(text)
    if m is None:
        return e
    rest = text[m.end():]
    return InputError(f"--{m.group(1).replace('_', '-')}: {rest}" if m.group(1) else rest)


def plan_from_file(path: str | Path, *, microbatches: int | None = None, placement: str | None = None,
                   cost_flags: list[str] | None = None, comm_latency: float | None = None,
                   memory_limit: float | None = None) -> PlanResult:
    """:func:`plan` for an existing schedule (a torch CSV, a plan file) instead of a family's:
    check, simulate and summarise it, with ``--cost`` flags on top of its costs.

    Raises:
        InputError: the file holds no schedule, or a flag is bad.
        InvalidScheduleError: the schedule deadlocks (the message walks the cycle).
    """
    from pptl.formats.loader import load_any

    loaded = load_any(path, microbatches=microbatches, placement=placement)
    schedule = loaded.schedule
    if schedule is None:
        raise InputError(f"{path}: is a {loaded.kind}, not a schedule; --from takes a torch CSV, plan or config")
    cfg = schedule.config or Config(schedule=schedule.family, pp=schedule.pp, microbatches=schedule.microbatches)
    cfg = replace(cfg, costs=apply_cost_flags(cfg.costs, parse_cost_flags(cost_flags), comm_latency),
                  memory_limit=memory_limit if memory_limit is not None else cfg.memory_limit)
    header = {"schedule": schedule.family, "pp": schedule.pp, "vpp": cfg.vpp, "microbatches": schedule.microbatches,
              "textbook_bubble": None, "source": str(path), "notes": list(loaded.notes)}
    return _plan_schedule(schedule.copy_with(config=cfg), family=None, header=header, check=True,
                          what=f"{path}:")


def _plan_schedule(schedule: Schedule, *, family: Family | None, header: dict[str, Any], check: bool,
                   what: str) -> PlanResult:
    """Check (every rule, unless ``check`` is off), simulate and summarise ``schedule``; ``header``
    holds the metrics that say what was planned, ``what`` names it in the deadlock error."""
    from pptl.checks import Context, check_context

    cfg = schedule.config
    ctx = Context(schedule, memory_limit=cfg.memory_limit if cfg is not None else None,
                  costs=cfg.costs if cfg is not None else None)
    violations: list[Violation] = check_context(ctx) if check else []
    if ctx.order is None:
        cycle = next((v.message for v in violations if v.code == "PP007"), "its DAG has a cycle")
        raise InvalidScheduleError(f"{what} cannot run: {cycle}")
    sim = ctx.simulation  # the rules may have simulated already; the context keeps one
    metrics = sim.metrics()
    metrics.update(header)
    metrics["vpp"] = schedule.chunks_per_rank
    if family is not None and family.memory_label != "peak act.":
        metrics["memory_label"] = family.memory_label
    if family is not None and family.extra_metrics is not None:
        metrics.update(family.extra_metrics(schedule, sim))
    title = title_of(schedule, sim.makespan, metrics["bubble_fraction"])
    schedule.meta.setdefault("title", title)
    metrics["violations"] = [v.to_dict() for v in violations]
    return PlanResult(schedule, sim, family, metrics, title, violations, ctx.order)


def timeline_of(loaded: Loaded) -> Timeline | None:
    """What a loaded file says ran or will run: its stored timeline (a plan's planned times, a
    run's measured ones), else its schedule simulated now (a config, a torch CSV), else the stored
    timeline even if empty; None when the file holds neither. ``pptl draw``, ``compare`` and
    ``export`` read files through this.

    Raises:
        InvalidScheduleError: the schedule cannot be simulated (a cycle, a missing cost).
    """
    from pptl.simulate import simulate

    stored = loaded.timeline
    if stored is not None and stored.events:
        return stored
    if loaded.schedule is not None:
        return simulate(loaded.schedule).timeline()
    return stored


def load_timeline(path: str | Path) -> Timeline:
    """The timeline of a plan or timeline file; a config or bare schedule is planned on the fly
    (what ``pptl render`` draws)."""
    from pptl.formats.loader import load_any

    tl = timeline_of(load_any(path))
    if tl is None or not tl.events:
        raise InputError(f"{path}: has no events to draw")
    return tl


def plain_counterpart(path: str | Path) -> Timeline:
    """The moe-1f1b-overlap config of ``path`` planned as plain interleaved 1F1B (no pairing, no +1
    warmup), for the comparison view.

    Raises:
        InputError: ``path`` holds no moe-1f1b-overlap config (a measured or imported timeline).
    """
    from pptl.formats.loader import load_any
    from pptl.schedules import build_schedule, get_family
    from pptl.simulate import simulate

    loaded = load_any(path)
    cfg = loaded.schedule.config if loaded.schedule is not None else None
    if cfg is None or get_family(cfg.schedule).name != "moe-1f1b-overlap":
        raise InputError(f"{path}: --compare-warmup needs a moe-1f1b-overlap config or plan (it re-plans it "
                         "as plain interleaved 1F1B)")
    return simulate(build_schedule(replace(cfg, options={**dict(cfg.options or {}), "overlap": False}))).timeline()


#: Names a plan file is not given, with where that output comes from.
_NOT_A_PLAN = {**dict.fromkeys((".png", ".svg", ".pdf", ".html", ".htm", ".jpg", ".jpeg"),
                               "draw the plan with pptl render PLAN.json -o FIGURE"),
               ".csv": "write torch's CSV with pptl export PLAN.json --to torch-csv"}


def write_plan(result: PlanResult, path: Path) -> None:
    """Write the plan file (JSON; gzip-compressed when the name ends in ``.json.gz``).

    Raises:
        InputError: a figure's or a CSV's name (``-o best.png`` writes no figure: ``pptl render`` does).
    """
    from pptl.formats.plan import PlanTimes, dumps, plan_to_dict

    suffix = path.suffix.lower()
    if suffix in _NOT_A_PLAN:
        raise InputError(f"{path}: a plan is written as .json (or .json.gz); {_NOT_A_PLAN[suffix]}")
    check_json_name(path, "a plan")  # every reader of plans (check, render, export, run) knows one by that name
    check_writable(path)
    sim = result.simulation
    times = PlanTimes(sim.start, sim.end, sim.timeline_meta()) if sim is not None else None
    text = dumps(plan_to_dict(result.schedule, times=times, metrics=result.metrics, topo=result.order))
    if is_gz(path):
        import gzip

        atomic_write(path, gzip.compress(text.encode("utf-8"), compresslevel=6, mtime=0))
    else:
        atomic_write(path, text)


@dataclass
class FileReport:
    path: str
    kind: str
    ops: int
    violations: list[Violation]
    notes: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return not any(v.severity == "error" for v in self.violations)

    def to_dict(self) -> dict:
        return {"path": self.path, "kind": self.kind, "ops": self.ops, "valid": self.valid,
                "notes": list(self.notes), "violations": [v.to_dict() for v in self.violations]}

    def text_lines(self) -> list[str]:
        lines = [f"{self.path}: note: {n}" for n in self.notes]
        errors = sum(v.severity == "error" for v in self.violations)
        for v in self.violations:
            where = f"{self.path}:{v.line}" if getattr(v, "line", None) else self.path
            lines.append(f"{where}: {v.code} {v.severity}: {v.message}")
        status = "ok" if self.valid else f"invalid ({errors} error{'s' if errors != 1 else ''})"
        lines.append(f"{self.path}: {status}, {counted(self.ops, 'op')} checked")
        return lines

    def github_lines(self) -> list[str]:
        def esc(s: str) -> str:
            return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

        out = []
        for v in self.violations:
            level = "error" if v.severity == "error" else "warning"
            line = getattr(v, "line", None) or 1
            out.append(f"::{level} file={_gh_prop(self.path)},line={line},title={v.code}::{esc(v.message)}")
        if not out:
            out.append(f"{self.path}: ok, {counted(self.ops, 'op')} checked")
        return out


def check_file(path: str, *, microbatches: int | None = None, memory_limit: float | None = None,
               p2p: str = "nccl", **reader_options: Any) -> FileReport:
    """Load and check one file. ``reader_options`` go to the format's reader (``placement``...).

    Readers that know lines (torch CSV) report problems in the file itself as violations and
    say which line holds each op; violations then carry the line of their first op.
    """
    from pptl.formats.loader import load_any

    opts = {k: v for k, v in reader_options.items() if v is not None}
    try:
        loaded = load_any(path, microbatches=microbatches, memory_limit=memory_limit, report_problems=True, **opts)
    except InputError:
        if not str(path) or not Path(path).is_dir():  # Path("") is the working folder
            if not str(path):
                raise InputError("'': an empty file name; pptl check takes plan, config and schedule files") from None
            raise
        # A folder is read as per-rank profiler traces (what ran, as a schedule); one that holds none
        # is most often a folder of plans.
        raise InputError(f"{path}: is a folder; pptl check takes plan, config and schedule files "
                         f"(to check every plan in it, pass '{Path(path) / '*.json'}')") from None
    measured = loaded.timeline_source() == "measured"  # validates a plan's timeline, builds no events
    if loaded.schedule is None and measured:
        from pptl.checks.measured import measured_violations

        # A measured timeline has no schedule to check, but its times must be causal across ranks.
        return FileReport(path, loaded.kind, len(loaded.timeline.events), measured_violations(loaded.timeline),
                          loaded.notes)
    if loaded.schedule is None:
        raise InputError(f"{path}: is a {loaded.kind}, not a schedule; 'pptl check' takes plans, configs and schedules")
    try:
        violations = list(getattr(loaded, "problems", ())) + run_checks(loaded.schedule, memory_limit=memory_limit,
                                                                         p2p=p2p)
        if measured:
            from pptl.checks.measured import measured_violations

            # an imported trace is the schedule that ran and its measured times: compare and explain
            # hold those times to PP090/PP091 and send the user here, so check must too
            violations += measured_violations(loaded.timeline)
    except InputError as e:  # a value the rules read from the file's metadata: name the file first
        raise InputError(str(e) if str(e).startswith(f"{path}:") else f"{path}: {e}") from None
    locate = getattr(loaded, "locate", None)
    if locate is not None:
        violations = [replace(v, line=locate(v.ops[0])) if v.line is None and v.ops else v for v in violations]
    violations.sort(key=lambda v: (v.severity != "error", v.code))
    return FileReport(path, loaded.kind, loaded.schedule.n_ops, violations, loaded.notes)


def github_input_error(path: str, error: Exception) -> str:
    """A GitHub Actions error annotation for a file pptl could not read (line from "path:N: ...")."""
    text = str(error)
    line = 1
    head = f"{path}:"
    if text.startswith(head):
        rest = text[len(head):]
        num = rest.split(":", 1)[0]
        if num.isdigit():
            line, text = int(num), rest.split(":", 1)[1].strip()
        else:
            text = rest.strip()
    return f"::error file={_gh_prop(path)},line={line},title=input::{_gh_msg(text)}"


def _gh_msg(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(s: str) -> str:
    return _gh_msg(s).replace(":", "%3A").replace(",", "%2C")


def expand_paths_reporting(patterns: list[str]) -> tuple[list[str], list[tuple[str, InputError]]]:
    """:func:`expand_paths` that goes on past a missing file or a glob matching nothing: the paths
    found, and an error per pattern that found none (so every input is reported, one by one)."""
    paths: list[str] = []
    missing: list[tuple[str, InputError]] = []
    for pat in patterns:
        try:
            paths.extend(expand_paths([pat]))
        except InputError as e:
            missing.append((pat, e))
    return paths, missing


def expand_paths(patterns: list[str]) -> list[str]:
    """Expand globs (for shells and CI that pass them quoted); a pattern matching nothing is an error."""
    paths: list[str] = []
    for pat in patterns:
        if any(ch in pat for ch in "*?["):
            hits = sorted(glob.glob(pat, recursive=True))
            if not hits:
                raise InputError(f"{pat}: no file matches")
            paths.extend(hits)
        else:
            if not Path(pat).exists():
                raise InputError(f"{pat}: no such file")
            paths.append(pat)
    return paths


def costs_from_timeline(timeline: Timeline) -> dict[str, Any]:
    """Mean measured duration per op kind (base) and per (stage, kind) (overrides).

    Only compute lanes calibrate F/B/I/W/FB; SEND times give the P2P latency. Ranks that share a
    stage get their speed relative to each other (``rank_scale``, :func:`rank_scale_of`).
    """
    sums: dict[tuple[int, str], list[float]] = {}
    base: dict[str, list[float]] = {}
    for e in timeline.events:
        if e.lane == "compute":
            key = e.kind
            sums.setdefault((e.stage, key), []).append(e.duration)
            base.setdefault(key, []).append(e.duration)
    means = {k: sum(v) / len(v) for k, v in base.items()}
    stages: dict[int, dict[str, float]] = {}
    for (stage, key), vals in sums.items():
        if stage >= 0:
            stages.setdefault(stage, {})[key] = sum(vals) / len(vals)
    part_sums = _b_part_sums(timeline)
    if part_sums is not None and "I" not in means and "W" not in means:
        # B ran as I then W and marked where I ended: its parts, not halves of B (_fill_split's default).
        n = sum(a[2] for a in part_sums.values())
        means["I"] = sum(a[0] for a in part_sums.values()) / n
        means["W"] = sum(a[1] for a in part_sums.values()) / n
        for s, part in _part_means(part_sums).items():
            stages[s] = {**stages.get(s, {}), **part}
    costs: dict[str, Any] = _fill_split(means)
    # Families whose ops name cost keys other than their kinds (MoE sub-ops, weight-update copies):
    # `pptl run` stores the measured mean per cost key with the timeline.
    keyed = timeline.meta.extra.get("cost_means")
    if isinstance(keyed, dict):
        costs.update(keyed.get("base", {}))
        for s, v in keyed.get("stages", {}).items():
            stages.setdefault(int(s), {}).update(v)
    from pptl.contexts import measure_compute_contexts

    found = measure_compute_contexts(*_compute_spans(timeline))  # once: rank speeds and the beside rates
    beside = _compute_contexts(found, keyed, stages)
    if beside:
        costs["beside"] = beside
    if stages:
        costs["stages"] = {s: _fill_split(v) for s, v in sorted(stages.items())}
    context = keyed.get("context") if isinstance(keyed, dict) else None
    if not isinstance(context, dict):
        context = _contexts_by_kind(timeline)
    if context:
        costs["context"] = context
    if found.rank_scale:
        costs["rank_scale"] = found.rank_scale
    latency = _message_latency(timeline)
    if latency is not None:
        costs["comm"] = {"latency": latency}
    return costs


def b_parts(tl: Timeline) -> dict[int, dict[str, float]] | None:
    """Per stage, the mean time of its B's I part and W part (``{"I": ms, "W": ms}``), from a run
    whose B ran as I then W and reported where its I part ended (``meta.extra.b_input_ms``: B's op
    id -> ms from its start); None unless every B of the run has a part inside its own duration.
    The two parts of a stage sum to its mean B; :func:`costs_from_timeline` takes them for I and W."""
    sums = _b_part_sums(tl)
    return None if sums is None else _part_means(sums)


def _part_means(sums: dict[int, list[float]]) -> dict[int, dict[str, float]]:
    """Per stage, its I and W means from :func:`_b_part_sums`' sums and count."""
    return {s: {"I": a[0] / a[2], "W": a[1] / a[2]} for s, a in sums.items()}


def _b_part_sums(tl: Timeline) -> dict[int, list[float]] | None:
    """Per stage: [sum of its B's I parts, sum of their W parts, Bs] (:func:`b_parts`); the record is
    input from a file, each value checked to lie inside its own B."""
    raw = tl.meta.extra.get("b_input_ms") if isinstance(tl.meta.extra, dict) else None
    if not isinstance(raw, dict) or tl.meta.extra.get("full_backward") != "i-then-w":
        return None
    sums: dict[int, list[float]] = {}
    for e in tl.events:
        if e.lane != "compute" or e.kind != "B" or e.stage < 0:
            continue
        v = raw.get(e.op)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= e.duration:
            return None
        acc = sums.setdefault(e.stage, [0.0, 0.0, 0.0])
        acc[0] += v
        acc[1] += e.duration - v
        acc[2] += 1
    return sums or None


def rank_scale_of(timeline: Timeline) -> dict[int, float]:
    """Per rank that shares a stage with others (expert- or data-parallel members): its measured
    compute time alone (no side-lane op beside it) over what its stage's mean durations alone give
    for the same ops (:attr:`Costs.rank_scale`, :func:`pptl.contexts.measure_compute_contexts`).

    One factor per rank, over all its shared ops weighted by their time, rather than one per cost
    key: a GPU's clock slows all its kernels, and on 4 H200s under a 700 W cap (2026-11-26) the
    per-kind ratios of one rank moved from launch to launch by more than the overall one (ATTN
    0.946, WGRAD 0.932, MLP 1.008 between the two members of a stage), so per key they would
    fit noise. Alone only: beside an all-to-all's copy kernel the faster member computed no faster
    than its partner (``Costs.beside`` times that). Ranks alone on their stages are left out:
    their stage's costs are their own (1).

    Notes:
        O(events log events).
    """
    from pptl.contexts import measure_compute_contexts

    spans, keys, stages = _compute_spans(timeline)
    return measure_compute_contexts(spans, keys, stages).rank_scale


def _compute_spans(timeline: Timeline) -> tuple[list[Any], list[str | None], list[int]]:
    from pptl.contexts import Span

    spans = [Span(e.rank, e.lane, e.kind, e.start, e.end) for e in timeline.events]
    keys = [e.kind if e.lane == "compute" else None for e in timeline.events]
    return spans, keys, [e.stage for e in timeline.events]


def _compute_contexts(found: Any, keyed: Any, stages: dict[int, dict[str, float]]) -> dict[int, dict[str, float]]:
    """``Costs.beside`` per stage and compute cost key, and in ``stages`` (updated) the alone mean
    of each key that has one (the rank factors are relative to it). From ``cost_means.compute_context``
    where the run stored it (cost keys other than kinds), else ``found``, measured from the timeline by kind."""
    stored = keyed.get("compute_context") if isinstance(keyed, dict) else None
    if isinstance(stored, dict):
        alone, beside = stored.get("alone", {}), stored.get("beside", {})
    else:
        alone, beside = found.alone, found.beside
    out: dict[int, dict[str, float]] = {}
    for s, row in beside.items():
        if not isinstance(row, dict):
            continue
        for k, b in row.items():
            a = (alone.get(s) or alone.get(str(s)) or {}).get(k) if isinstance(alone, dict) else None
            if a is None:
                continue
            stages.setdefault(int(s), {})[k] = a
            out.setdefault(int(s), {})[k] = b
    return out


def _contexts_by_kind(timeline: Timeline) -> dict[str, dict[str, float]]:
    """Side-lane ops' mean duration per context (:mod:`pptl.contexts`), keyed by kind: the cost key
    of every family whose run does not store its own (``cost_means.context``). Messages are left
    out (their time is the send-to-receive latency)."""
    from pptl.contexts import measure_contexts

    spans, _, _ = _compute_spans(timeline)
    keys = [None if e.lane == "compute" or e.kind in ("SEND", "RECV") else e.kind for e in timeline.events]
    return measure_contexts(spans, keys)


def _message_latency(timeline: Timeline) -> float | None:
    """Median time a message takes once both sides are there: from the later of its SEND's and its
    RECV's start to the RECV's end (the data is there), over all messages.

    That is what the simulator's SEND duration stands for: the plan already makes a RECV wait for
    its lane (a receiver still busy with other work posts it late), so the time a SEND spent
    before its RECV was posted would be counted twice (measured on 4 H200s, 2026-11-26: a median
    of 1.09 ms from the SEND's start against 0.3 ms once both are posted, 5% on an MoE plan's
    makespan). A measured SEND alone can last much longer (it ends when the transport reports it,
    e.g. at the end of a gloo step), so it is used only for timelines without the RECV side.
    """
    from pptl.messages import message_key

    recv: dict[tuple[str, int, int, int], tuple[float, float]] = {}
    for e in timeline.events:
        if e.kind == "RECV":
            recv[message_key(e)] = (e.start, e.end)
    gaps = sorted(recv[k][1] - max(e.start, recv[k][0]) for e in timeline.events if e.kind == "SEND"
                  for k in [message_key(e)] if k in recv)
    if not gaps:
        gaps = sorted(e.duration for e in timeline.events if e.kind == "SEND")
    if not gaps:
        return None
    return max(0.0, gaps[len(gaps) // 2])


def _fill_split(means: dict[str, float]) -> dict[str, float]:
    """Complete B/I/W from what a run measured, so a plan of another family reads sane values:
    a run with only full backwards gives I = W = B/2 (the default split); one with only I and W
    gives B = I + W."""
    out = dict(means)
    if "B" in out and "I" not in out and "W" not in out:
        out["I"] = out["W"] = out["B"] / 2
    return backward_from_split(out, means)


def calibrate_config(cfg: Config, measured: Path) -> Config:
    """Replace the config's costs with the measured means of ``measured`` (a timeline or a plan)."""
    return calibrate(cfg, measured)[0]


def calibrate(cfg: Config, measured: Path) -> tuple[Config, str]:
    """:func:`calibrate_config`, plus the unit the new costs are in (the timeline's, e.g. "ms")."""
    from pptl.config import costs_from_mapping
    from pptl.formats.loader import load_any

    timeline = load_any(measured).timeline
    if timeline is None or not timeline.events:
        raise InputError(f"{measured}: has no events to calibrate from")
    data = costs_from_timeline(timeline)
    costs = costs_from_mapping(data, source=str(measured))
    return replace(cfg, costs=costs), timeline.meta.units
