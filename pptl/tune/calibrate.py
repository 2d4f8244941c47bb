"""``pptl tune --costs-from``: per-layer costs (and the activation memory) from one measured run.

A run measures one duration per (stage, kind). With ``n_s`` layers on stage ``s`` (the run's
split: ``measured_split``, default the even split), the embedding on the first stage and the head
on the last, each stage's time is ``n_s * t + [s = 0] e + [s = last] h``. The middle stages give
the layer's ``t`` (their mean of time / layers); the first and last stage then give ``e`` and ``h``.
With two stages or fewer there is no middle stage, and ``e`` and ``h`` keep their ratio to ``t``
from the model description. A run of full backwards that ran each B as I then W and marked where
its I part ended (``pptl run``: ``meta.extra.b_input_ms``, :func:`pptl.planning.b_parts`) measures I and W per
stage like any other kind. An older run with only full backwards gives I and W from the model's
``work`` (:func:`split_shares`: the run's F and B fix a time per GEMM FLOP and per memory-bound
byte; W's GEMMs, which reduce over the tokens, may run at another rate than F's, which this cannot
see), or without it splits B in the model's I:W ratio (half each if the model gives neither).

Under a power cap a busy GPU clocks lower (``device.duty_exponent``, alpha: compute takes
``u ** alpha`` of its full-duty time on a rank busy a share ``u`` of the step). The run's ranks
differ in duty (1F1B's first and last ranks are the busiest), so each stage's time is first
divided by its rank's ``u ** alpha``; the costs are then full-duty costs. alpha is the config's; else 0
where the run's clock record shows no rank held by a power or thermal limit; else, where the record
gives each rank's clock, the clock law's (:data:`DEVICE_DUTY_EXPONENT`), each rank then no faster than
its clock's distance to the GPU's top clock allows (``TuneConfig.duty_floor``); else fitted
(:func:`fit_duty_exponent`): with the model's embedding and head given relative to a layer, every
stage's work is known up to the layer's cost, and the stages' times against their ranks' duty give
alpha by least squares (clamped to 0..0.5). Where the ranks' duty differs by less than
:data:`MIN_DUTY_SPREAD` alpha is the device's (:data:`DEVICE_DUTY_EXPONENT` on a CUDA run, 0 on CPU).

When the run recorded peak memory per rank (``pptl run`` on CUDA), the memory model's coefficients
are fitted to it (:func:`pptl.tune.memory.fit_memory`): the activation scale of the run's backward
kind and a working memory per rank by least squares over the ranks, the working memory then raised
to cover the worst rank; inputs and targets from what the ranks held before the first step beyond
their weights; each message held to the step's end at ``message_bytes`` (MiB, as the run measures).
"""
from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from pptl.config import Workload
from pptl.errors import InputError
from pptl.formats._quote import counted
from pptl.planning import b_parts
from pptl.power import CLOCK_DUTY_EXPONENT, clock_exponent, rank_clocks, unthrottled
from pptl.tune.model import LayerCost, MeasuredRun, ModelDesc, TuneConfig, Work
from pptl.tune.split import even_split

__all__ = ["calibrate_tune", "own_plan_note", "fit_layer_costs", "fit_duty_exponent", "rank_duty", "short_layer_note",
           "split_shares"]

#: Least spread of the run's ranks' duty (max / min) for which alpha is fitted. alpha is the stages'
#: time ratio beyond their work ratio over ln(duty ratio), so whatever makes one stage's blocks slower
#: than another's at the same duty is divided by that log. On 2 H200s that is the last stage's role, not
#: its GPU (bench/gpu_level.py, 2026-11-27: the ranks on swapped GPUs keep their ratio): 0-3.5% per
#: forward block over seven shapes, once the exponent two splits of one shape tell is taken out. At 1.4
#: a 3.5% role moves alpha by 0.1; at the 1.2 of a run at the balanced split by 0.19 (fits of 0.16 where
#: the split pair said 0.21-0.27), at 1.09 by 0.4 (the fit gave 0.70, ranking a plan with one
#: micro-batch in flight 15% too fast).
MIN_DUTY_SPREAD = 1.4
#: Largest alpha: under a power cap P ~ f**k with k >= 2, so a rank's clock, and its op time, move at
#: most as duty ** (1/2).
MAX_DUTY_EXPONENT = 0.5
#: An op's time goes with its GPU's SM clock as clock ** -CLOCK_BETA, not as 1 / clock: memory-bound kernels
#: (norms, activations between the GEMMs) do not slow with the clock. Median of 114 groups of one stage's
#: forward across candidates whose clocks differ by 8% or more, on 2 H200s (most 0.3-0.8; docs/tune.md).
CLOCK_BETA = 0.55
#: alpha under a power cap, the clock law (:data:`pptl.power.CLOCK_DUTY_EXPONENT`) times CLOCK_BETA: the clock
#: goes as duty ** -0.55 and an op's time as clock ** -0.55. It is what a run that recorded capped clocks
#: uses, each rank then no faster than at its top clock (``TuneConfig.duty_floor``), and what a CUDA run whose
#: ranks cannot show it (about equally busy, no clock record) uses; ``device.duty_exponent`` sets another GPU's.
#: Both factors were measured before it was adopted (docs/tune.md "The clock law").
DEVICE_DUTY_EXPONENT = CLOCK_DUTY_EXPONENT * CLOCK_BETA
#: A layer's full-duty forward (ms, CUDA) under which ``pptl tune`` warns that the runtime's host, which
#: the model does not time, may bound the step. On 2 H200s (pptl run's MLP blocks) the shapes of 0.12, 0.25
#: and 0.31 ms layers ran plans 3-16% slower than ranked (at 0.12 and 0.25 ms each consumer of a two-chunk plan
#: started 35-190 us after its data where the others start 3 us after it; at 0.31 ms, h2688-t1536-l6-m25,
#: interleaved 1F1B's rank 1 ran its F 14% over the model); from 0.36 ms up (h2688-t1792, h2048-t3072,
#: h2560-t2048, h2304, h4096-t1024) every family stayed within 3%. 0.35 lies between.
SHORT_LAYER_MS = 0.35


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


def rank_duty(tl: Any) -> tuple[dict[int, float], dict[int, int]]:
    """(busy share of the step per rank, rank per stage) of a measured timeline: compute-lane time
    over the makespan (first start to last end)."""
    t0 = min(e.start for e in tl.events)
    span = max(e.end for e in tl.events) - t0
    busy: dict[int, float] = {}
    rank_of: dict[int, int] = {}
    for e in tl.events:
        if e.lane == "compute":
            busy[e.rank] = busy.get(e.rank, 0.0) + e.duration
            if e.stage >= 0:
                rank_of.setdefault(e.stage, e.rank)
    return ({r: min(1.0, b / span) for r, b in busy.items()} if span > 0 else {}), rank_of


def fit_duty_exponent(work: Sequence[float] | Sequence[Sequence[float]], times: Sequence[Sequence[float]],
                      duty: Sequence[float]) -> float | None:
    """alpha of ``time[k][s] = c_k * work[k][s] * duty[s] ** alpha`` by least squares in logs.

    ``work[s]`` (or ``work[k][s]`` per kind): stage ``s``'s work in layers (the model's embedding
    and head as their ratio to a layer, for that kind: the first stage's backward has no input
    gradient to make); ``times[k]``: per kind (F, B, ...), the measured time of every stage; ``duty[s]``: its
    rank's busy share. One alpha for every kind, one ``c_k`` per kind. None when the duty spreads
    less than :data:`MIN_DUTY_SPREAD`, a value is not positive, or alpha is within 3 standard errors
    of 0 (the times scatter more than duty explains).

    Example: work [10, 8, 8, 10], duty [0.88, 0.6, 0.59, 0.87] and times ``c * work * duty**0.3``
    give back 0.3.
    """
    import math

    per_kind: list[list[float]] = ([[float(x) for x in w] for w in work]  # type: ignore[union-attr]
                                   if work and isinstance(work[0], Sequence)
                                   else [[float(x) for x in work]] * len(times))  # type: ignore[arg-type]
    S = len(duty)
    if S < 2 or min(duty) <= 0 or max(duty) / min(duty) < MIN_DUTY_SPREAD or len(per_kind) != len(times) \
            or any(len(w) != S or min(w) <= 0 for w in per_kind):
        return None
    xs, ys, groups = [], [], []
    for k, row in enumerate(times):
        if len(row) != S or min(row) <= 0:
            return None
        for s in range(S):
            xs.append(math.log(duty[s]))
            ys.append(math.log(row[s] / per_kind[k][s]))
            groups.append(k)
    # Per kind, remove the mean (that is c_k); alpha is the pooled slope.
    num = den = 0.0
    for k in set(groups):
        idx = [i for i, g in enumerate(groups) if g == k]
        mx = sum(xs[i] for i in idx) / len(idx)
        my = sum(ys[i] for i in idx) / len(idx)
        num += sum((xs[i] - mx) * (ys[i] - my) for i in idx)
        den += sum((xs[i] - mx) ** 2 for i in idx)
    if den <= 0:
        return None
    alpha = num / den
    # The stages' times must follow their duty, not scatter around it: with more points than
    # unknowns, alpha must stand 3 standard errors clear of 0 (a noisy CPU run fits nothing).
    free = len(xs) - len(set(groups)) - 1
    # One residual (two stages, two kinds) says nothing about the error: test from two on.
    if free > 1:
        ssr = 0.0
        for k in set(groups):
            idx = [i for i, g in enumerate(groups) if g == k]
            mx = sum(xs[i] for i in idx) / len(idx)
            my = sum(ys[i] for i in idx) / len(idx)
            ssr += sum((ys[i] - my - alpha * (xs[i] - mx)) ** 2 for i in idx)
        se = math.sqrt(ssr / free / den)
        if abs(alpha) < 3 * se:
            return None
    return alpha


def _run_split(tl: Any, tc: TuneConfig, stages: int) -> tuple[int, ...] | None:
    """The layers per stage the run executed, when it says (a tuned plan's ``workload.stage_layers``
    holds them, the embedding's and head's ``run_blocks`` added to the first and last stage)."""
    ran = (tl.meta.extra.get("workload") or {}).get("stage_layers")
    if not isinstance(ran, list) or len(ran) != stages or not all(isinstance(x, int) for x in ran):
        return None
    split = list(ran)
    split[0] -= tc.run_blocks[0]
    split[-1] -= tc.run_blocks[1]
    return tuple(split) if min(split) >= 1 and sum(split) == tc.model.layers else None


def _same_model(tc: TuneConfig, tl: Any, measured: Path, stages: int, run_split: tuple[int, ...] | None) -> None:
    """Refuse a run of another model: its costs would be fitted to this model's shape silently (a run of
    hidden 2048 calibrating a model of hidden 3072 ranks every plan by the wrong layer, and its peaks fit
    an activation factor of 0.28). What the run says it executed is checked: its workload's width, rows and
    dtype where the config gives a workload, and its layers where it lists them per stage."""
    ran = tl.meta.extra.get("workload")
    if not isinstance(ran, dict):
        return
    how = "calibrate from a run of this model: 'pptl tune CONFIG --calibration-plan cal.json', then 'pptl run cal.json'"
    if tc.workload != Workload():
        mine = (tc.workload.hidden, tc.workload.tokens, tc.workload.dtype)
        theirs = (ran.get("hidden"), ran.get("tokens"), ran.get("dtype"))
        if all(x is not None for x in theirs) and theirs != mine:
            raise InputError(f"{measured}: the run executed hidden {theirs[0]}, {counted(theirs[1], 'token')}, {theirs[2]}; "
                             f"the config's workload is hidden {mine[0]}, {counted(mine[1], 'token')}, {mine[2]}: {how}")
    layers = ran.get("stage_layers")
    if tc.measured_split is None and isinstance(layers, list) and len(layers) == stages \
            and all(isinstance(x, int) for x in layers) and run_split is None:
        blocks = sum(tc.run_blocks)
        raise InputError(f"{measured}: the run executed {counted(sum(layers), 'block')} a micro-batch ({layers}); the config's "
                         f"model has {tc.model.layers + blocks} ({counted(tc.model.layers, 'layer')}"
                         + (f" and {blocks} embedding and head blocks" if blocks else "") + f"): {how}, or give "
                         f"measured_split")


def calibrate_tune(tc: TuneConfig, measured: Path) -> tuple[TuneConfig, str, list[str]]:
    """The config with costs from ``measured``; also its time unit and notes for the user."""
    from pptl.formats.loader import load_any
    from pptl.planning import costs_from_timeline
    from pptl.whatif.spread import measured_only

    loaded = load_any(measured)
    tl = loaded.timeline
    if tl is None or not tl.events:
        raise InputError(f"{measured}: has no events to calibrate from (expected the timeline of pptl run)")
    measured_only(measured, loaded, "--costs-from")
    data = costs_from_timeline(tl)
    stages: dict[int, dict[str, float]] = {int(k): v for k, v in (data.get("stages") or {}).items()}
    S = max(stages) + 1 if stages else 0
    if S == 0 or any(s not in stages for s in range(S)):
        raise InputError(f"{measured}: has no per-stage compute times to calibrate from")
    if any(("F" not in stages[s]) or ("B" not in stages[s]) for s in range(S)):
        raise InputError(f"{measured}: costs missing for a kind: every stage needs measured F and B (or I and W); "
                         f"the run of {tl.meta.family or 'this plan'} has {', '.join(sorted(stages[0]))}")
    ran = _run_split(tl, tc, S)
    _same_model(tc, tl, measured, S, ran)
    split = tc.measured_split or ran or even_split(tc.model.layers, S)
    if len(split) != S:
        raise InputError(f"{measured}: the run has {counted(S, 'stage')} but measured_split has {counted(len(split), 'entry', 'entries')}")
    if min(split) < 1:
        raise InputError(f"{measured}: the run has {S} stages, more than model.layers={tc.model.layers}")
    m = tc.model
    notes: list[str] = []
    # the run's B reported its I part on every stage: I and W are measured (costs_from_timeline put the
    # parts in ``stages``), not derived
    parts = b_parts(tl)
    if parts is not None and any(s not in parts for s in range(S)):
        parts = None
    tc, stages = _normalise_duty(tc, tl, split, stages, notes)
    kinds: dict[str, tuple[float, float, float]] = {}
    for k in ("F", "B", "I", "W"):
        if not all(k in stages[s] for s in range(S)):
            continue
        base = m.part_cost(m.layer, k)
        ratio = ((m.part_cost(m.embedding, k) or 0.0) / base, (m.part_cost(m.head, k) or 0.0) / base) \
            if base else (0.0, 0.0)
        kinds[k] = fit_layer_costs(m, split, [stages[s][k] for s in range(S)], ratio)
    if parts is not None:
        notes.append(f"I and W measured inside the run's B (an event between its I and W parts): a layer's I "
                     f"{kinds['I'][0]:.4g} and W {kinds['W'][0]:.4g}, {kinds['I'][0] / kinds['B'][0]:.3f} and "
                     f"{kinds['W'][0] / kinds['B'][0]:.3f} of B")
    elif not any(e.kind == "I" for e in tl.events):  # B only: I and W from the model's work, else B split in its I:W ratio
        shares = split_shares(_as_run(m, tl), kinds["F"][0], kinds["B"][0])
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
                 comm_bandwidth=float("inf") if comm is not None else tc.comm_bandwidth,
                 send_hold=_send_hold(tl, comm) if comm is not None else tc.send_hold)
    notes.append(f"costs from {measured} ({tl.meta.family}, {counted(S, 'stage')}, split {list(split)}): layer "
                 f"F={kinds['F'][0]:.4g} B={kinds['B'][0]:.4g}, embedding F={kinds['F'][1]:.4g}, head "
                 f"F={kinds['F'][2]:.4g}, message {tc.comm_latency:.4g} {tl.meta.units}"
                 + ("" if tc.send_hold is None else
                    f" (its SEND holds the producer's compute stream {tc.send_hold:.4g} of it)"))
    short = short_layer_note(kinds["F"][0], _cuda_run(tl) and tl.meta.units == "ms")
    if short:
        notes.append(short)
    from pptl.tune.spread import fit_jitter

    jitter = fit_jitter(tl.events, tl.meta.extra.get("step_ms"))
    if jitter is not None:
        tc = replace(tc, jitter=jitter)
        notes.append("per-op variation of the run (relative deviation from each stage's mean): "
                     + ", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(jitter.cv.items()))
                     + f"; step to step {100 * jitter.step_cv:.1f}%: each candidate's spread (p05..p95) carries them")
    memory = tl.meta.extra.get("memory")
    if isinstance(memory, dict) and memory:
        tc, note = _fit_memory(tc, tl.meta, split, memory)
        if note:
            notes.append(note)
    from pptl.whatif.spread import measured_steps

    steps = measured_steps(tl.meta.extra)
    if steps and tl.meta.family and tl.meta.microbatches:
        tc = replace(tc, measured_run=MeasuredRun(family=str(tl.meta.family), microbatches=int(tl.meta.microbatches),
                                                  vpp=int(tl.meta.vpp or 1), split=tuple(split),
                                                  step_p50=statistics.median(steps)))
    return tc, tl.meta.units, notes


def own_plan_note(tc: TuneConfig, results: Sequence[Any], units: str) -> str | None:
    """Where the ranking timed the plan the ``--costs-from`` run ran (same family, micro-batches, chunks
    and split; one candidate only) and its step strays from the run's median step by more than
    :data:`pptl.whatif.spread.SELF_TOLERANCE`: a note saying so. The costs come from that run's ops, so
    its own plan should come out as it ran; where it does not, the run's steps held time no op did."""
    from pptl.whatif.spread import SELF_TOLERANCE

    run = tc.measured_run
    if run is None or run.step_p50 <= 0:
        return None
    own = [r for r in results if r.step is not None and r.split is not None
           and (r.structure.family, r.structure.microbatches, r.structure.vpp) == (run.family, run.microbatches, run.vpp)
           and tuple(r.split.layers) == run.split]
    if len(own) != 1:
        return None
    err = own[0].step / run.step_p50 - 1.0
    if not abs(err) > SELF_TOLERANCE:
        return None
    return (f"the run's own plan ({own[0].label}) is ranked at {own[0].step:.4g} {units}, where the run measured "
            f"{run.step_p50:.4g} ({100 * err:+.1f}%): the run's steps hold time its ops do not (a host issuing ops "
            f"no sooner than the GPU ends them, receives waiting for their issue), so every step here is likely "
            f"{'short' if err < 0 else 'long'} by about as much, and plans that issue more ops or messages a rank "
            f"more so")


def _cuda_run(tl: Any) -> bool:
    """Whether ``pptl run`` measured ``tl`` on GPUs (NCCL), as its metadata says."""
    return str(tl.meta.extra.get("backend", "")) == "nccl"


def short_layer_note(layer_f_ms: float, cuda: bool) -> str | None:
    """The warning for layers too short for the model's op times to hold (:data:`SHORT_LAYER_MS`)."""
    if not cuda or not layer_f_ms < SHORT_LAYER_MS:
        return None
    return (f"a layer's forward takes {layer_f_ms:.3g} ms, under {SHORT_LAYER_MS:g}: the host that launches each "
            f"op, which this model does not time, can fall behind the GPU after every wait for another rank; "
            f"on H200s plans with two chunks a rank (more such waits) then ran 5-16% slower than ranked, so "
            f"measure the top candidates before trusting their order (docs/tune.md \"Short layers\")")


def _send_hold(tl: Any, message: float | None = None) -> float | None:
    """Median time a SEND of a ``sync-send`` run took on its producer's compute stream (where it
    runs; the next compute op waits for it), at most the whole ``message``, or None for a run that
    sent beside compute.

    A CPU run records ``sync-send`` too, but gloo has no streams (only the issue order changes,
    :mod:`pptl.run.executor`): its SEND is the host waiting for the transfer, which can outlast the
    message it sends (2.8 ms of 1.6 on 10 CPU ranks), while the rank computes on. So its hold is 0:
    the message is the SEND's, the producer is not held, as ``pptl whatif --from`` samples such a
    run (:func:`pptl.whatif.study.load_measured`); its median SEND put the whole message on the
    producer.
    """
    extra = tl.meta.extra
    if extra.get("messages") != "sync-send":
        return None
    if extra.get("device") == "cpu":
        return 0.0
    held = sorted(e.duration for e in tl.events if e.kind == "SEND")
    if not held:
        return None
    return held[len(held) // 2] if message is None else min(held[len(held) // 2], message)


def _normalise_duty(tc: TuneConfig, tl: Any, split: Sequence[int], stages: dict[int, dict[str, float]],
                    notes: list[str]) -> tuple[TuneConfig, dict[int, dict[str, float]]]:
    """The config with its duty exponent (given, fitted or 0) and the stages' times at full duty."""
    duty, rank_of = rank_duty(tl)
    S = len(split)
    if any(s not in rank_of or rank_of[s] not in duty for s in range(S)):
        return replace(tc, duty_exponent=tc.duty_exponent or 0.0), stages
    u = [duty[rank_of[s]] for s in range(S)]
    shown = ", ".join(f"{duty[r]:.2f}" for r in sorted(duty))
    alpha = tc.duty_exponent
    gpu = tl.meta.extra.get("gpu")
    free = unthrottled(gpu, len(duty)) if alpha is None else None
    if free is not None:
        alpha = 0.0
        notes.append(f"duty exponent 0: the run's GPUs were not held by a power or thermal limit ({free}), so an "
                     "op's speed does not depend on how busy its rank is (set device.duty_exponent to override)")
    clocks = rank_clocks(gpu, sorted(duty)) if free is None else None
    if clocks is not None and alpha is None:
        alpha = DEVICE_DUTY_EXPONENT
        slope = clock_exponent(gpu, duty)
        notes.append(f"duty exponent {alpha:.3f} from the clock law: under its power cap a GPU clocks as "
                     f"duty^-{CLOCK_DUTY_EXPONENT:g} and an op takes clock^-{CLOCK_BETA:g}"
                     + (f"; this run's ranks, busy {shown} of the step, clocked as duty^-{slope[1]:.2f}"
                        if slope is not None and slope[0] >= 1.05 else "")
                     + " (set device.duty_exponent to fix it)")
    if alpha is None:
        m = tc.model
        ran = {e.kind for e in tl.events}  # a run of full backwards reports I and W as halves of B: not data
        kinds = [k for k in ("F", "B", "I", "W") if k in ran and all(k in stages[s] for s in range(S))]
        works = []
        for k in kinds:  # each kind's own ratios: the embedding's backward need not scale as its forward
            base = m.part_cost(m.layer, k) or 0.0
            re = (m.part_cost(m.embedding, k) or 0.0) / base if base else 0.0
            rh = (m.part_cost(m.head, k) or 0.0) / base if base else 0.0
            works.append([split[s] + (re if s == 0 else 0.0) + (rh if s == S - 1 else 0.0) for s in range(S)])
        work = works[0] if works else []
        fitted = fit_duty_exponent(works, [[stages[s][k] for s in range(S)] for k in kinds], u)
        if fitted is None:
            cuda = _cuda_run(tl)
            alpha = DEVICE_DUTY_EXPONENT if cuda else 0.0
            notes.append(f"duty exponent {alpha:g}: the run's ranks (busy {shown} of the step) do not show how speed "
                         f"depends on duty (too alike, or their times scatter more than duty explains); "
                         + ("the clock law's, H200s at their power cap (set device.duty_exponent for another GPU)" if cuda
                            else "not a GPU run"))
        else:
            alpha = min(MAX_DUTY_EXPONENT, max(0.0, fitted))
            notes.append(f"duty exponent {alpha:.3f} fitted (least squares {fitted:.3f}, clamped to "
                         f"0..{MAX_DUTY_EXPONENT}): ranks busy {shown} of the step, stage work "
                         f"{[round(w, 2) for w in work]} layers (the model's embedding and head relative to a layer); "
                         f"compute takes duty^{alpha:.3f} of its full-duty time (set device.duty_exponent to fix it, "
                         f"0 to turn it off)")
    elif alpha > 0 and tc.duty_exponent is not None:
        notes.append(f"duty exponent {alpha:.3f} (device.duty_exponent): ranks busy {shown} of the step")
    if alpha <= 0:
        return replace(tc, duty_exponent=0.0), stages
    full = {s: {k: v / u[s] ** alpha for k, v in stages[s].items()} for s in range(S)}
    if clocks is None:
        return replace(tc, duty_exponent=alpha), full
    # The run timed each rank at its clock; at its top clock the rank's ops take (clock / top) ** CLOCK_BETA
    # of that, which no duty under the run's gives them: relative to full duty, that times u ** alpha.
    floor = {r: (mhz / top) ** CLOCK_BETA * duty[r] ** alpha for r, (mhz, top) in clocks.items()}
    notes.append("each rank no faster than at its top clock: " + ", ".join(
        f"rank {r} ran at {mhz:.0f} of {top:.0f} MHz (its ops at least x{floor[r]:.3f} of their full-duty time)"
        for r, (mhz, top) in sorted(clocks.items())))
    return replace(tc, duty_exponent=alpha, duty_floor=floor), full


def _fit_memory(tc: TuneConfig, meta: Any, split: Sequence[int], memory: dict) -> tuple[TuneConfig, str | None]:
    """The config with :class:`~pptl.tune.memory.MemoryModel` coefficients fitted to the run's
    measured peaks (``memory``: per rank ``peak_mib``, and ``base_mib`` before the first step)."""
    from pptl.schedules import get_family
    from pptl.tune.candidates import Structure
    from pptl.tune.memory import MemoryModel, data_count, fit_memory
    from pptl.tune.rank import _check, _timing, config_for
    from pptl.tune.split import Split, stage_memory

    fam = meta.family
    vpp = meta.vpp if fam == "interleaved-1f1b" else (2 if fam in ("zbv", "dualpipev") else 1)
    # The plan that ran, at the run's rank count: the peaks are its ranks'. The config's pp may
    # differ (costs carry over per layer); rebuilt at that pp, another plan was fitted to a subset
    # of the ranks (fewer) or failed to build and the memory fit was silently dropped (more).
    run_pp = meta.pp if isinstance(meta.pp, int) and meta.pp > 0 else len(split) // vpp
    st = Structure(fam, int(meta.microbatches), vpp, run_pp if fam == "interleaved-1f1b" else None)
    probe = replace(tc, pp=run_pp, memory_limit=None, microbatches=(st.microbatches,))
    sp = Split("measured", tuple(split))
    try:  # the same timing and memory count as the search, on the split that ran
        sched = get_family(fam).build(config_for(probe, st))
        ctx = _check(sched)
        if isinstance(ctx, str):
            return tc, None
        tm = _timing(probe, st, sched, ctx, sp)
        start, end = tm.start, tm.end
    except Exception:  # a family the model cannot rebuild: keep the given memory
        return tc, None
    peaks: dict[int, float] = {}
    bases: dict[int, float] = {}
    for k, v in memory.items():
        if not (isinstance(k, str) and k.isdigit() and isinstance(v, dict)):
            continue
        p, b = v.get("peak_mib"), v.get("base_mib")
        if isinstance(p, (int, float)) and not isinstance(p, bool) and 0 <= p < 1e12:
            peaks[int(k)] = float(p)
        if isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1e12:
            bases[int(k)] = float(b)
    act, weight = stage_memory(tc.model, split)
    copies = {(op.rank, op.direction, op.stage) for op in sched.ops if op.kind in ("F", "FB")}
    held: dict[int, float] = {}
    for r, _, s in copies:  # DualPipe holds two copies of each stage
        held[r] = held.get(r, 0.0) + weight[s]
    # Inputs and targets: what the ranks hold before the first step beyond their weights, per
    # micro-batch input or target they hold.
    count = data_count(sched)
    per = [(bases[r] - held.get(r, 0.0)) / count[r] for r in bases if count.get(r)]
    data = max(0.0, max(per)) if per else 0.0
    short = sorted(r for r in bases if bases[r] < held.get(r, 0.0) - 1e-6)
    # pptl run keeps every message buffer until the step ends (memory in MiB, as the run measures it).
    message = tc.model.message_bytes / 2**20
    fit = fit_memory(sched, start, end, act, weight, peaks, pp=run_pp, w_activation=tc.model.w_activation,
                     i_working=tc.model.i_working, base=MemoryModel(message=message, data=data))
    if fit is None:
        return tc, None
    mm = fit.model
    temp = None if meta.extra.get("full_backward") == "i-then-w" else _fresh_weight_grad(tc)
    if fit.kind == "full" and temp is not None:
        mm = replace(mm, split_working=max(0.0, mm.working - temp))
    other = "split" if fit.kind == "full" else "full"
    whose = "1 rank's" if fit.ranks == 1 else f"{fit.ranks} ranks'"  # a pp-1 run has one
    note = (f"memory fitted to the {whose} peaks of the {fam} run: activation x{getattr(mm, fit.kind + '_scale'):.3f} "
            f"for micro-batches with a {fit.kind} backward (least squares {fit.scale:.3f}), x"
            f"{getattr(mm, other + '_scale'):.3f} for {other} (not measured: never below the model), "
            f"working memory {mm.working:.4g} per rank (the worst rank, {fit.residual:.3g} above the fit, covered twice), "
            f"{message:.4g} per message held to the step's end, {data:.4g} per input or target"
            + ("" if mm.split_working is None else
               f"; a rank of split backwards only: working memory {mm.split_working:.4g} (less the {temp:.4g} of "
               f"one Linear's weight gradient, which B writes to a fresh tensor and W adds in place)"))
    if short:  # a base that cannot hold the weights counted: the inputs' and targets' size read from it is not theirs
        r = short[0]
        note += (f"; warning: rank {r} held {bases[r]:.5g} before its first step, less than the {held[r]:.5g} of "
                 "weights (and their gradients) the model counts for its stages, so the size of an input or target "
                 "read from it is not to be trusted (was the run's base measured without its gradient buffers?)")
    return replace(tc, memory=mm), note


def _as_run(model: ModelDesc, tl: Any) -> ModelDesc:
    """``model`` with its B's work as the run ran B: a timeline that says ``full_backward:
    i-then-w`` (``pptl run`` since its B accumulates each weight gradient by its GEMM) did I's and
    W's work and no more, where ``work``'s B is autograd's (:func:`pptl.tune.model.mlp_block_work`:
    a read-read-write pass over the weight gradients on top)."""
    w = model.work
    if w is None or tl.meta.extra.get("full_backward") != "i-then-w" or "I" not in w or "W" not in w:
        return model
    b = Work(w["I"].flops + w["W"].flops, w["I"].bytes + w["W"].bytes)
    return replace(model, work={**w, "B": b})


def _fresh_weight_grad(tc: TuneConfig) -> float | None:
    """MiB of the largest weight gradient autograd's B makes as a fresh tensor (one Linear(h, 4h) of
    ``pptl run``'s block, ``4 h^2`` elements), when the model's work is that block (``work: mlp``)."""
    from pptl.tune.model import mlp_block_work

    w = tc.workload
    esz = {"float32": 4, "bfloat16": 2, "float16": 2}.get(w.dtype, 4)
    if tc.model.work is None or dict(tc.model.work) != mlp_block_work(w.hidden, w.tokens, esz):
        return None
    return 4 * w.hidden * w.hidden * esz / 2**20

