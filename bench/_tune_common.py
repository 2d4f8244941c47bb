"""What bench/gpu_tune.py and bench/tune_offline.py share: the bench's tune config, the re-timing of
one candidate from its label and stage layers, and the checks of issue 19 on measured rows."""
from __future__ import annotations

import re
from typing import Any, Sequence

#: MLP blocks pptl run executes for the embedding and for the head (a heavier first and last stage).
BLOCKS = 2


def tune_config(pp: int, micro: Sequence[int], hidden: int, tokens: int, dtype: str, *, layers: int | None = None,
                embedding: int = BLOCKS, head: int = BLOCKS) -> dict[str, Any]:
    """The bench's model: ``layers`` (default ``8 pp``) MLP layers plus an embedding of ``embedding``
    and a head of ``head`` blocks (``BLOCKS`` each by default), as ``pptl run`` executes them.

    Memory in MiB (the unit pptl run measures), as :mod:`pptl.run.footprint` counts what the run's
    block holds: W_up, W_down and biases plus their gradients; a forward keeps the block input (h) and
    the GELU input and output (4h each), 9h per token, for B and for I alike (the same autograd
    graph); from I's end to W's end the Linear inputs (5h) and output gradients (5h), 10h:
    ``w_activation`` is 10/9. ``i_working`` is 0: the run's I keeps no Linear output (a split keeps
    only what W needs), and what it makes and frees while it runs is one block's temporaries, inside
    the working memory fitted from the run. (Before pptl run's split kept only that, the description
    was 10h with ``w_activation`` 1 and ``i_working`` 0.5, the Linear outputs held through I; on the
    runtime since, that over-predicted the split families' peaks by up to 25% on 2 H200s.) The head's
    MSE loss also keeps its fp32 difference (4 bytes per element of the last block's output).
    """
    esz = 2 if dtype in ("bfloat16", "float16") else 4
    w_mib = 2 * (8 * hidden * hidden + 5 * hidden) * esz / 2**20
    a_mib = tokens * 9 * hidden * esz / 2**20
    loss_mib = tokens * hidden * 4 / 2**20
    block = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0, "activation": a_mib, "weight": w_mib}

    def part(n: int) -> dict[str, float]:  # n blocks; the durations only say "n layers' worth"
        return {"F": 1.0 * n, "B": 2.0 * n, "activation": n * a_mib, "weight": n * w_mib}

    emb = part(embedding)
    if embedding:
        # Stage 0's input is data: its first block's backward makes no input gradient, so its first
        # Linear's dX GEMM (one of the block's four in B, of two in I) is not run (pptl.run.model).
        emb.update({"B": 2.0 * embedding - 0.5, "I": 1.0 * embedding - 0.5, "W": 1.0 * embedding})
    last = {**part(head), "activation": head * a_mib + loss_mib}
    return {"pp": pp, "microbatches": list(micro),
            "model": {"layers": layers if layers is not None else 8 * pp, "layer": block, "embedding": emb,
                      "head": last,
                      "message_bytes": tokens * hidden * esz, "w_activation": 10 / 9, "i_working": 0.0,
                      # I and W from the run's F and B through the block's FLOPs and bytes
                      "work": "mlp"},
            "workload": {"hidden": hidden, "tokens": tokens, "dtype": dtype},
            "run_blocks": {"embedding": embedding, "head": head}}


_LABEL = re.compile(r"^(?P<fam>[a-z0-9-]+)(?P<pattern> pattern)?(?: vpp=(?P<vpp>\d+))?(?: G=(?P<g>\d+))?"
                    r"(?: (?P<mem>mem-limit)| inflight=(?P<inf>\d+))?(?P<ilp> ilp)? m=(?P<m>\d+)"
                    r"(?: split=(?P<split>[a-z-]+))?$")


def structure_of(label: str) -> Any:
    """The :class:`~pptl.tune.candidates.Structure` a result label names (``Result.label``)."""
    from pptl.tune.candidates import Structure

    x = _LABEL.match(label)
    if x is None:
        raise ValueError(f"not a pptl tune label: {label!r}")
    fam = "interleaved-1f1b" if x["fam"] == "interleaved" else x["fam"]  # labels before the family's full name
    vpp = int(x["vpp"]) if x["vpp"] else (2 if fam in ("zbv", "dualpipev") else 1)
    return Structure(fam, int(x["m"]), vpp, int(x["g"]) if x["g"] else None,
                     int(x["inf"]) if x["inf"] else None, "ilp" if x["ilp"] else "greedy", bool(x["pattern"]))


_OP = re.compile(r"^r\d+/compute/([FIWB]) s\d+ mb(\d+)$")


def executed_orders(timeline: dict[str, Any]) -> dict[int, list[tuple[str, int]]] | None:
    """Per rank, the (kind, micro-batch) compute order a measured one-stage-per-rank run executed
    (``meta.extra.executed``), or None."""
    ex = (timeline.get("meta", {}).get("extra") or {}).get("executed")
    if not isinstance(ex, dict):
        return None
    out: dict[int, list[tuple[str, int]]] = {}
    for r, lanes in ex.items():
        seq = []
        for op in (lanes or {}).get("compute", []):
            x = _OP.match(str(op))
            if x is None:
                return None
            seq.append((x[1], int(x[2])))
        out[int(r)] = seq
    return out


def retime(tc: Any, label: str, stage_layers: Sequence[int],
           orders: dict[int, list[tuple[str, int]]] | None = None) -> Any:
    """``label``'s candidate timed under ``tc`` with the split that ran (a Result, or None when the
    structure no longer builds). synth runs ``orders`` (the order that ran) when given, else
    rebuilds its order from ``tc``'s costs and limit."""
    from pptl.schedules import get_family
    from pptl.tune.rank import _check, _time, _time_synth, config_for
    from pptl.tune.split import Split
    from pptl.tune.synth import SynthInput, build_synth

    st = structure_of(label)
    sp = Split(label.rsplit("split=", 1)[-1], tuple(stage_layers))
    if st.family == "synth" and orders is not None:
        cfg = config_for(tc, st, sp)
        x = SynthInput(pp=tc.pp, microbatches=st.microbatches, F=[], I=[], W=[], activation=[], limit=[],
                       w_activation=tc.model.w_activation, message=0.0)
        sched = build_synth(cfg, x, orders=orders)
        ctx = _check(sched)
        return None if isinstance(ctx, str) else _time(tc, st, sched, ctx, sp, cfg=cfg)
    if st.family == "synth":
        return _time_synth(tc, st, sp)
    sched = get_family(st.family).build(config_for(tc, st))
    ctx = _check(sched)
    return None if isinstance(ctx, str) else _time(tc, st, sched, ctx, sp)


def spearman(a: list[float], b: list[float]) -> float:
    def ranks(x: list[float]) -> list[float]:
        order = sorted(range(len(x)), key=x.__getitem__)
        r = [0.0] * len(x)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r

    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va and vb else float("nan")


def retest(rows: list[dict[str, Any]]) -> float | None:
    """The measurement's own Spearman: the candidates ranked by the median of their even timed steps
    against the median of their odd ones (``step_ms``), or None where fewer than three candidates
    have two steps. It bounds what any prediction can reach against one launch's medians.

    Example: steps [1, 2], [3, 4], [5, 6] give medians (1, 3, 5) and (2, 4, 6): 1.0."""
    import statistics

    halves = [(statistics.median(x["step_ms"][0::2]), statistics.median(x["step_ms"][1::2])) for x in rows
              if len(x.get("step_ms") or []) >= 2]
    if len(halves) < 3:
        return None
    return spearman([a for a, _ in halves], [b for _, b in halves])


def checks(rows: list[dict[str, Any]], limit: float, picks: dict[int, str | None]) -> dict[str, Any]:
    """Issue 19's checks over measured ``rows`` (label, microbatches, predicted_ms, measured_ms,
    predicted_peak, measured_peak, fits); ``picks``: the tuner's pick per micro-batch count."""
    out: dict[str, Any] = {}
    for m in sorted({x["microbatches"] for x in rows}):
        rs = [x for x in rows if x["microbatches"] == m]
        pick = next((x for x in rs if x["label"] == picks.get(m)), None)
        fit_meas = [x for x in rs if x["measured_peak"] is None or max(x["measured_peak"]) <= limit]
        fastest = min(fit_meas, key=lambda x: x["measured_ms"]) if fit_meas else None
        out[f"m{m}_pick_within_2pct"] = (pick is not None and fastest is not None
                                         and pick["measured_ms"] <= 1.02 * fastest["measured_ms"])
        out[f"m{m}_pick"] = picks.get(m) if pick is not None else f"{picks.get(m)} (not measured)"
        out[f"m{m}_fastest_fitting"] = fastest and fastest["label"]
        out[f"m{m}_spearman"] = spearman([x["predicted_ms"] for x in rs], [x["measured_ms"] for x in rs])
    errs = [(x["predicted_ms"] - x["measured_ms"]) / x["measured_ms"] for x in rows]
    out["max_abs_err"] = max(abs(e) for e in errs)
    out["families_within_3pct"] = all(abs(e) <= 0.03 for e in errs)
    out["fitting_over_limit"] = [x["label"] for x in rows
                                 if x["fits"] and x["measured_peak"] and max(x["measured_peak"]) > limit]
    mem = [(max(x["predicted_peak"]) - max(x["measured_peak"])) / max(x["measured_peak"])
           for x in rows if x["measured_peak"]]
    if mem:
        out["peak_err_min"], out["peak_err_max"] = min(mem), max(mem)
    return out


def pick_limit(cands: list[tuple[int, float, float]]) -> float:
    """A limit that rules out the predicted-fastest candidate of every micro-batch count (so the
    limit changes the answer) while some candidates of each count still fit: the middle of the
    widest gap between predicted peaks below the lowest of those winners' peaks. Predicted peaks
    are upper bounds, so a gap a few percent wide is enough. Without such a gap, the middle of the
    range (the older rule)."""
    best_peak = {}
    for m, step, peak in sorted(cands, key=lambda c: c[1]):
        best_peak.setdefault(m, peak)
    top = min(best_peak.values())
    peaks = sorted({round(p, 3) for _, _, p in cands})
    below = [p for p in peaks if p < top] + [top]
    gaps = [(hi / lo, (lo * hi) ** 0.5) for lo, hi in zip(below, below[1:]) if hi > lo * 1.03]
    fits_each = all(any(p < top for mm, _, p in cands if mm == m) for m in best_peak)
    if gaps and fits_each:
        return max(gaps)[1]
    mid = len(peaks) // 2
    best, score = None, None
    for i in range(len(peaks) - 1):
        lo, hi = peaks[i], peaks[i + 1]
        if hi > lo * 1.04 / 0.96 and (score is None or abs(i - mid) < score):
            best, score = (lo * 1.04 + hi * 0.96) / 2, abs(i - mid)
    return best if best is not None else peaks[-1] * 1.05
