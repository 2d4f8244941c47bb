"""``pptl whatif`` output: the text table and the JSON (pure: strings and dicts)."""
from __future__ import annotations

from typing import Any, Sequence

from pptl.formats._quote import counted
from pptl.whatif.spread import SELF_TOLERANCE, Spread
from pptl.whatif.study import PlanOutcome

__all__ = ["QUANTILES", "report_lines", "report_dict"]

#: The makespan quantiles every report shows.
QUANTILES = (0.5, 0.95, 0.99)


def _q(o: PlanOutcome) -> tuple[float, ...]:
    return o.samples.quantiles(QUANTILES)


def _n(v: float) -> str:
    """4 significant digits, without an exponent up to 1e9 (profiler traces are in us)."""
    return f"{v:.4g}" if abs(v) < 1e4 or abs(v) >= 1e9 else f"{v:.0f}"


def report_lines(outcomes: Sequence[PlanOutcome], spread: Spread, *, top: int = 5) -> list[str]:
    """The plans side by side (makespan quantiles), then per plan the idle spread of each rank
    and the ops most often on the critical path."""
    import numpy as np

    if not outcomes:
        return []
    n = outcomes[0].samples.makespan.size
    units = outcomes[0].units
    lines = [f"{counted(n, 'sample')}, seed {outcomes[0].samples.seed}; spread: {spread.describe()}"]
    if any(o.sends_on_compute for o in outcomes):
        hold = max(o.spread.send_hold for o in outcomes)
        held = f" for {hold:.3g} {units} (the rest of the message is its RECV's)" if hold > 0 else ""
        lines.append(f"note: the run sent on the compute stream (sync-send): each SEND holds its rank's compute "
                     f"lane{held}, as it ran")
    for o in outcomes:
        if o.beside_sends:
            from pptl.run.program import BESIDE_WAIT

            lines.append(f"note: {o.name}: pptl run sends {o.beside_sends} of its SENDs beside compute (sync-send "
                         f"cannot hold them); {BESIDE_WAIT}, which the samples do not draw: its steps may be short "
                         f"(docs/tune.md)")
    for o in outcomes:
        err = o.self_error
        if err is not None and abs(err) > SELF_TOLERANCE and o.run_p50 is not None:
            lines.append(f"note: {o.name} is the plan the run ran: sampled from the run, its median step is "
                         f"{_n(_q(o)[0])} {units}, where the run measured {_n(o.run_p50)} ({100 * err:+.1f}%): the "
                         f"run's steps hold time its ops do not (a host issuing ops no sooner than the GPU ends "
                         f"them, messages waiting for their issue), and each plan here is likely "
                         f"{'short' if err < 0 else 'long'} by about as much")
    width = max(12, *(len(o.name) for o in outcomes))
    lines.append(f"{'plan':<{width}}{'planned':>10}{'mean':>10}{'p50':>10}{'p95':>10}{'p99':>10}{'p95/p50':>9}"
                 f"   (makespan, {units})")
    for o in outcomes:
        p50, p95, p99 = _q(o)
        mean = float(o.samples.makespan.mean())
        lines.append(f"{o.name:<{width}}{_n(o.samples.planned):>10}{_n(mean):>10}{_n(p50):>10}{_n(p95):>10}"
                     f"{_n(p99):>10}{(p95 / p50 if p50 > 0 else 1.0):>9.3f}")
    for o in outcomes:
        lines.append(f"{o.name}: idle per rank, p5 / p50 / p95 ({units})")
        idle = o.samples.idle
        for r in range(idle.shape[0]):
            p5, p50, p95 = np.quantile(idle[r], (0.05, 0.5, 0.95)).tolist()
            lines.append(f"  rank {r:>2}  {_n(p5):>10} {_n(p50):>10} {_n(p95):>10}")
        crit = o.top_critical(top)
        if crit:
            lines.append(f"{o.name}: ops most often on the critical path (share of samples)")
            w = max(len(i) for i, _ in crit)
            lines += [f"  {i:<{w}}  {100 * c:5.1f}%" for i, c in crit]
    return lines


def report_dict(outcomes: Sequence[PlanOutcome], spread: Spread, *, top: int = 5) -> dict[str, Any]:
    """JSON-ready: per plan the quantiles, the idle spread per rank and the top critical ops."""
    import numpy as np

    plans = []
    for o in outcomes:
        p50, p95, p99 = _q(o)
        idle = o.samples.idle
        plans.append({
            "plan": o.name, "family": o.schedule.family, "pp": o.schedule.pp, "microbatches": o.schedule.microbatches,
            "ops": o.schedule.n_ops, "units": o.units, "planned": o.samples.planned,
            "sends_on_compute": o.sends_on_compute,
            "beside_sends": o.beside_sends,
            # where the --from run ran this plan: its measured median step, and the samples' median over it less 1
            "run_p50": o.run_p50, "self_error": o.self_error,
            "makespan": {"mean": float(o.samples.makespan.mean()), "std": float(o.samples.makespan.std()),
                         "p50": p50, "p95": p95, "p99": p99,
                         "p25": float(np.quantile(o.samples.makespan, 0.25)),
                         "p75": float(np.quantile(o.samples.makespan, 0.75))},
            "idle": [{"rank": r, **dict(zip(("p5", "p50", "p95"), np.quantile(idle[r], (0.05, 0.5, 0.95)).tolist()))}
                     for r in range(idle.shape[0])],
            "critical": [{"op": i, "share": c} for i, c in o.top_critical(top)],
        })
    first = outcomes[0].samples if outcomes else None
    return {"samples": int(first.makespan.size) if first is not None else 0,
            "seed": first.seed if first is not None else 0, "spread": spread.describe(), "plans": plans}
