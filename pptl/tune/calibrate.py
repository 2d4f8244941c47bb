"""``pptl tune --costs-from``: per-layer costs (and the activation memory) from one measured run.

A run measures one duration per (stage, kind). With ``n_s`` layers on stage ``s`` (the run's
split: ``measured_split``, default the even split), the embedding on the first stage and the head
on the last, each stage's time is ``n_s * t + [s = 0] e + [s = last] h``. The middle stages give
the layer's ``t`` (their mean of time / layers); the first and last stage then give ``e`` and ``h``.
With two stages or fewer there is no middle stage, and ``e`` and ``h`` keep their ratio to ``t``
from the model description. A run with only full backwards gives I and W from the model's ``work``
(:func:`split_shares`: the run's F and B fix a time per GEMM FLOP and per memory-bound byte), or
without it splits B in the model's I:W ratio (half each if the model gives neither).

When the run recorded peak memory per rank (``pptl run`` on CUDA), the model's activation memory is
scaled up (never down) so that the measured family's predicted peak covers every rank's measurement
(weights are taken as given): the model stays an upper bound.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from pptl.errors import InputError
from pptl.tune.model import LayerCost, ModelDesc, TuneConfig
from pptl.tune.split import even_split

__all__ = ["calibrate_tune", "fit_layer_costs", "split_shares"]


def split_shares(model: ModelDesc, f: float, b: float) -> tuple[float, float] | None:
    """(I / B, W / B) of a layer whose measured forward takes ``f`` and full backward ``b``.

    Each kind's time is ``flops * x + bytes * y`` (GEMMs at one rate, memory-bound kernels at
    another); F and B give ``x`` and ``y``; I and W follow from their own work. The shares need
    not sum to 1: autograd's B does work a split backward does not (see
    :func:`pptl.tune.model.mlp_block_work`). None without ``model.work``, or when the run's F
    and B fit no pair of non-negative rates (the work does not describe what ran).
    """
    w = model.work
    if w is None or b <= 0:
        return None
    wf, wb = w["F"], w["B"]
    det = wf.flops * wb.bytes - wf.bytes * wb.flops
    if abs(det) <= 1e-12 * max(1.0, abs(wf.flops * wb.bytes)):
        return None
    x = (f * wb.bytes - wf.bytes * b) / det
    y = (wf.flops * b - f * wb.flops) / det
    if x < 0 or y < 0:
        return None
    i = w["I"].flops * x + w["I"].bytes * y
    wt = w["W"].flops * x + w["W"].bytes * y
    return i / b, wt / b


def fit_layer_costs(model: ModelDesc, split: Sequence[int], per_stage: Sequence[float],
                    ratio: tuple[float, float]) -> tuple[float, float, float]:
    """(layer, embedding, head) durations from per-stage times; ``ratio`` = (e/t, h/t) of the model."""
    S = len(split)
    mids = [per_stage[s] / split[s] for s in range(1, S - 1) if split[s] > 0]
    if mids:
        t = sum(mids) / len(mids)
        e = max(0.0, per_stage[0] - split[0] * t)
        h = max(0.0, per_stage[-1] - split[-1] * t)
        if S == 1:
            e = h = 0.0
        return t, e, h
    total = sum(per_stage)
    weight = sum(split) + ratio[0] + ratio[1]
    t = total / weight if weight > 0 else 0.0
    return t, ratio[0] * t, ratio[1] * t


def calibrate_tune(tc: TuneConfig, measured: Path) -> tuple[TuneConfig, str, list[str]]:
    """The config with costs from ``measured``; also its time unit and notes for the user."""
    from pptl.formats.loader import load_any
    from pptl.planning import costs_from_timeline

    tl = load_any(measured).timeline
    if tl is None or not tl.events:
        raise InputError(f"{measured}: has no events to calibrate from (expected the timeline of pptl run)")
    data = costs_from_timeline(tl)
    stages: dict[int, dict[str, float]] = {int(k): v for k, v in (data.get("stages") or {}).items()}
    S = max(stages) + 1 if stages else 0
    if S == 0 or any(s not in stages for s in range(S)):
        raise InputError(f"{measured}: has no per-stage compute times to calibrate from")
    if any(("F" not in stages[s]) or ("B" not in stages[s]) for s in range(S)):
        raise InputError(f"{measured}: costs missing for a kind: every stage needs measured F and B (or I and W); "
                         f"the run of {tl.meta.family or 'this plan'} has {', '.join(sorted(stages[0]))}")
    split = tc.measured_split or even_split(tc.model.layers, S)
    if len(split) != S:
        raise InputError(f"{measured}: the run has {S} stages but measured_split has {len(split)} entries")
    if min(split) < 1:
        raise InputError(f"{measured}: the run has {S} stages, more than model.layers={tc.model.layers}")
    m = tc.model
    notes: list[str] = []
    kinds: dict[str, tuple[float, float, float]] = {}
    for k in ("F", "B", "I", "W"):
        if not all(k in stages[s] for s in range(S)):
            continue
        base = m.part_cost(m.layer, k)
        ratio = ((m.part_cost(m.embedding, k) or 0.0) / base, (m.part_cost(m.head, k) or 0.0) / base) \
            if base else (0.0, 0.0)
        kinds[k] = fit_layer_costs(m, split, [stages[s][k] for s in range(S)], ratio)
    measured_split_bw = not any(e.kind == "I" for e in tl.events)
    if measured_split_bw:  # B only: I and W from the model's work, else B split in its I:W ratio
        shares = split_shares(m, kinds["F"][0], kinds["B"][0])
        if shares is not None:
            share_i, share_w = shares
            how = "from the model's work and the run's F and B"
        else:
            i0, w0 = m.layer.get("I"), m.layer.get("W")
            share_i = i0 / (i0 + w0) if i0 is not None and w0 is not None and i0 + w0 > 0 else 0.5
            share_w = 1 - share_i
            how = "in the model's I:W ratio" if m.work is None else "in the model's I:W ratio (work does not fit the run)"
        kinds["I"] = tuple(v * share_i for v in kinds["B"])  # type: ignore[assignment]
        kinds["W"] = tuple(v * share_w for v in kinds["B"])  # type: ignore[assignment]
        notes.append(f"the run has no split backward: I and W take {share_i:.3f} and {share_w:.3f} of B ({how})")

    def part(idx: int, old: LayerCost) -> LayerCost:
        return replace(old, **{k: v[idx] for k, v in kinds.items()})

    model = replace(m, layer=part(0, m.layer), embedding=part(1, m.embedding), head=part(2, m.head))
    comm = data.get("comm", {}).get("latency")
    tc = replace(tc, model=model, comm_latency=comm if comm is not None else tc.comm_latency,
                 comm_bandwidth=float("inf") if comm is not None else tc.comm_bandwidth)
    notes.append(f"costs from {measured} ({tl.meta.family}, {S} stages, split {list(split)}): layer "
                 f"F={kinds['F'][0]:.4g} B={kinds['B'][0]:.4g}, embedding F={kinds['F'][1]:.4g}, head "
                 f"F={kinds['F'][2]:.4g}, message {tc.comm_latency:.4g} {tl.meta.units}")
    memory = tl.meta.extra.get("memory")
    if isinstance(memory, dict) and memory:
        tc, note = _fit_memory(tc, tl.meta, split, memory)
        if note:
            notes.append(note)
    return tc, tl.meta.units, notes


def _fit_memory(tc: TuneConfig, meta: Any, split: Sequence[int], memory: dict) -> tuple[TuneConfig, str | None]:
    from pptl.tune.candidates import Structure
    from pptl.tune.rank import _evaluate  # the same timing and memory count as the search
    from pptl.tune.split import Split

    fam = meta.family
    vpp = meta.vpp if fam == "interleaved" else (2 if fam in ("zbv", "dualpipev") else 1)
    st = Structure(fam, int(meta.microbatches), vpp, tc.pp if fam == "interleaved" else None)
    probe = replace(tc, memory_limit=None, microbatches=(st.microbatches,))
    try:
        results = [r for r in _evaluate(probe, st) if r.split is not None]
    except Exception:  # a family the model cannot rebuild: keep the given memory
        return tc, None
    chosen = next((r for r in results if r.split.layers == tuple(split)), None)
    if chosen is None:
        from pptl.schedules import get_family
        from pptl.tune.rank import _check, _time, config_for

        sched = get_family(fam).build(config_for(probe, st))
        ctx = _check(sched)
        if isinstance(ctx, str):
            return tc, None
        chosen = _time(probe, st, sched, ctx, Split("measured", tuple(split)))
    from pptl.tune.split import stage_memory

    _, weight = stage_memory(tc.model, split)
    ratios = []
    for r, pred in enumerate(chosen.peak):
        got = memory.get(str(r), {}).get("peak_mib")
        held_w = sum(weight[s] for s in range(len(split)) if _rank_holds(chosen, r, s))
        act = pred - held_w
        if got is not None and act > 0:
            ratios.append((got - held_w) / act)
    if not ratios:
        return tc, None
    # Only ever scaled up: the model stays an upper bound, so "fits" stays a promise.
    k = max(1.0, max(ratios))
    m = tc.model
    scale = lambda p: replace(p, activation=p.activation * k)  # noqa: E731
    tc = replace(tc, model=replace(m, layer=scale(m.layer), embedding=scale(m.embedding), head=scale(m.head)))
    return tc, f"activation memory scaled by {k:.3f} to match the measured peak (worst rank)"


def _rank_holds(result: Any, rank: int, stage: int) -> bool:
    sched = result.schedule
    return any(op.rank == rank and op.stage == stage and op.kind in ("F", "FB") for op in sched.ops)
