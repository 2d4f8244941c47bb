"""What ``pptl run`` prints about a measured timeline (pure: no torch, no printing)."""
from __future__ import annotations

from typing import Any

from pptl.timeline import Timeline

__all__ = ["summary", "summary_lines"]


def summary(tl: Timeline, out: str | None = None) -> dict[str, Any]:
    """JSON-ready numbers of a measured run (the contract of ``pptl run --output json``)."""
    x = tl.meta.extra
    return {
        "family": tl.meta.family, "pp": tl.meta.pp, "device": x.get("device"), "backend": x.get("backend"),
        "median_step_ms": x.get("median_step_ms"), "median_untimed_step_ms": x.get("median_untimed_step_ms"),
        "overhead": x.get("overhead"), "makespan_ms": tl.makespan, "bubble_fraction": tl.bubble_fraction(),
        "ranks": [{"rank": s.rank, "busy_ms": s.busy, "idle_ms": s.idle, "bubble_fraction": s.bubble_fraction}
                  for s in tl.rank_stats("compute")],
        "loss": x.get("loss"), "verify": x.get("verify"), "failed": x.get("failed"), "out": out,
        "clock": _clock(x.get("clock")),
        "gpu": x.get("gpu"),
        "sends_beside_compute": x.get("sends_beside_compute"),
        "steps_mapping": x.get("steps_mapping"),
    }


def _clock(clock: Any) -> dict[str, Any] | None:
    """The time base's tolerance and the measurement errors found on it (None: records without one)."""
    if not isinstance(clock, dict):
        return None
    return {"tolerance_ms": clock.get("tolerance_ms"), "offsets_applied": clock.get("offsets_applied"),
            "violations": clock.get("violations", 0), "first_violation": clock.get("first_violation")}


def summary_lines(tl: Timeline) -> list[str]:
    """A few lines: what ran where, the step time and instrumentation overhead, per-rank bubble."""
    s = summary(tl)
    lines = [f"{s['family']}: {s['pp']} ranks on {s['device']} ({s['backend']})"]
    if s["median_step_ms"] is not None:
        over = s["overhead"]
        step = tl.meta.extra.get("step", "-")
        n = len(tl.meta.extra.get("step_ms", []))
        untimed = s["median_untimed_step_ms"]
        lines.append(f"step {s['median_step_ms']:.3f} ms: step {step}, the median of {n} timed "
                     + (f"(untimed median {untimed:.3f} ms" if untimed is not None else "(")
                     + (f"; instrumentation overhead {100 * over:+.1f}%" if over is not None else "") + ")")
    lines.append(f"measured step {tl.meta.extra.get('step', '-')}: makespan {s['makespan_ms']:.3f} ms "
                 f"(first op start to last op end), bubble {100 * s['bubble_fraction']:.1f}%")
    for r in s["ranks"]:
        lines.append(f"  rank {r['rank']}: busy {r['busy_ms']:.3f} ms, idle {r['idle_ms']:.3f} ms "
                     f"({100 * r['bubble_fraction']:.1f}%)")
    lines.extend(_gpu_lines(s["gpu"]))
    beside = s["sends_beside_compute"]
    if isinstance(beside, list) and beside:
        lines.append(f"sync-send: {len(beside)} SEND{'s' if len(beside) != 1 else ''} ran beside compute instead of "
                     f"holding it (each one's receive comes too late: pptl.run.program.held_sends), e.g. {beside[0]}")
    mapping = s["steps_mapping"]
    if isinstance(mapping, dict) and mapping:
        lines.append("allocator: " + ", ".join(f"rank {r} mapped new GPU memory in {n} step{'s' if n != 1 else ''}"
                                               for r, n in sorted(mapping.items(), key=lambda kv: int(kv[0])))
                     + " (a cudaMalloc waits for the GPU's work, a message spinning for its peer too: a hang risk)")
    c = s["clock"]
    if c and c["violations"]:  # the rule on measured timelines failed: say so before anyone reads the numbers
        lines.append(f"measurement error: {c['violations']} event pair{'s' if c['violations'] != 1 else ''} out of "
                     f"causal order across ranks (tolerance {c['tolerance_ms']:.3g} ms), e.g. "
                     f"{str(c['first_violation']).removeprefix('measurement error: ')}")
    v = s["verify"]
    if v:
        verdict = "ok" if v["ok"] else "FAILED"
        lines.append(f"verify {verdict}: loss rel err {v['loss_rel_err']:.1e}, max gradient rel err "
                     f"{v['max_grad_rel_err']:.1e} at {v['worst']} (tolerance {v['tolerance']:g})")
    return lines


#: What a rank's record may add to its clock line (runs before the memory clock was recorded lack them).
_MORE = (("mem_mhz", "memory clock", " MHz"), ("temp_c", "GPU at", " C"))


def _gpu_lines(gpu: Any) -> list[str]:
    """Per rank, the SM clock and power over the timed steps, and how often the power cap held it."""
    if not isinstance(gpu, dict):
        return []
    out = []
    from pptl.power import rank_order

    for rank in sorted(gpu, key=rank_order):
        g = gpu[rank]
        if not isinstance(g, dict):
            continue
        limit = g.get("power_limit_w")
        capped = g.get("power_capped")
        out.append(f"  rank {rank}: SM clock {g.get('sm_mhz', 0):.0f} MHz (p10 {g.get('sm_mhz_p10', 0):.0f}, "
                   f"p90 {g.get('sm_mhz_p90', 0):.0f}), power {g.get('power_w', 0):.0f} W"
                   + (f" of {limit:.0f} W" if isinstance(limit, (int, float)) else "")
                   + (f", held by the power cap in {100 * capped:.0f}% of {g.get('samples')} samples"
                      if isinstance(capped, (int, float)) else "")
                   + "".join(f", {name} {g[key]:.0f}{unit}" for key, name, unit in _MORE
                             if isinstance(g.get(key), (int, float))))
    return out
