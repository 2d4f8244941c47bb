"""The duty exponent learnt from the calibrating run itself.

Under a power cap a GPU busy a share ``u`` of the step runs its ops at ``u ** alpha`` of their
full-duty time (``pptl tune``'s duty model, docs/tune.md "Duty cycle"). A run's ranks differ in
duty (1F1B's last rank is the busiest), so their op times, once divided by the work each op does,
tell alpha: per kind, ``log(time / work) = log c_kind + alpha * log u_rank`` by least squares,
one alpha for every kind. The work of an op is the GEMMs its stage's role runs
(:func:`pptl.whatif.roles.gemm_work`): the first stage's B runs one fewer, so it is not mistaken
for a faster GPU.

Where the run has stages without the loss on ranks of differing duty (a first and a middle stage,
pp >= 3), only those are fitted. Otherwise what the GEMM count leaves out stays in the fit: the
last stage's loss (elementwise, in fp32) makes its F and B longer than their GEMMs say, and reads
as duty, the more so the closer the ranks' duty (it is divided by their difference). On 2 H200s
(2026-11-26, each rank's first op of a step kept apart) B alone gives 0.20, F alone 0.77, both
0.48; on a shape whose ranks' duty differed by 10% (0.80, 0.88) B 0.48, F 0.99, both 0.74.
:func:`duty_exponent_range` gives the kinds' answers, between which each sample draws its own.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping

__all__ = ["MIN_DUTY_SPREAD", "fit_duty_exponent", "duty_exponent_range", "loss_bounded_range"]

#: Least spread of the run's ranks' duty (max / min) for which alpha is fitted, as ``pptl tune``:
#: below it the fit divides noise by almost nothing.
MIN_DUTY_SPREAD = 1.05
#: Kinds whose GEMMs :func:`pptl.whatif.roles.gemm_work` counts.
_KINDS = ("F", "B", "I", "W")


def fit_duty_exponent(times: Mapping[tuple[int, str], float], stage_rank: Mapping[int, int],
                      duty: Mapping[int, float], layers: Callable[[int], int]) -> float | None:
    """alpha from a run's mean op time per (stage, kind), clipped to 0..1.

    Args:
        times: (stage, kind) -> mean measured duration (kinds outside F, B, I, W are left out).
        stage_rank: stage -> the rank that ran it.
        duty: rank -> share of the step its compute lane was busy.
        layers: stage -> MLP blocks (a callable).

    Returns:
        alpha, or None when no kind was timed on two ranks whose duty differs by
        :data:`MIN_DUTY_SPREAD` or more.

    Example: stages 0 and 1 on ranks busy 0.5 and 1.0, F times 1.0 and 2 ** 0.3 (same work):
    alpha 0.3.

    Notes:
        O(stages x kinds).
    """
    fit = _fit(times, stage_rank, duty, layers)
    if fit is None:
        return None
    sxy = sum(a for a, _ in fit.values())
    sxx = sum(b for _, b in fit.values())
    return min(1.0, max(0.0, sxy / sxx))


def duty_exponent_range(times: Mapping[tuple[int, str], float], stage_rank: Mapping[int, int],
                        duty: Mapping[int, float], layers: Callable[[int], int]) -> tuple[float, float] | None:
    """The least and the largest alpha of the kinds fitted each alone (clipped to 0..1): how far
    the run leaves alpha open. Every kind's fit is an answer the run supports as well as the
    pooled one; they differ where the GEMM count misses part of an op's work (the last stage's
    loss weighs more in its F than in its B), and the run cannot say which is right.

    Returns:
        (low, high), or None where :func:`fit_duty_exponent` fits nothing. With one kind fitted,
        (alpha, alpha).

    Example: F times 1.0 and 2 ** 0.6, B times 2.0 and 2 * 2 ** 0.2 (same work) on ranks busy 0.5
    and 1.0: (0.2, 0.6), and the pooled alpha 0.4 in the middle.
    """
    fit = _fit(times, stage_rank, duty, layers)
    if fit is None:
        return None
    each = [min(1.0, max(0.0, a / b)) for a, b in fit.values()]
    return min(each), max(each)


def loss_bounded_range(times: Mapping[tuple[int, str], float], stage_rank: Mapping[int, int],
                       duty: Mapping[int, float], layers: Callable[[int], int]) -> tuple[float, float] | None:
    """alpha of a run whose only stages are a first and a last one (2 stages on ranks of differing
    duty), with the last stage's loss taken out as far as the run bounds it: (low, high), clipped
    to 0..1.

    For a run whose B is I then W (``meta.extra.full_backward: i-then-w``): its B's time follows its
    GEMM count (a first stage's B ran within 1% of a middle stage's per GEMM on 2 H200s, where
    autograd's B, with a gradient-accumulation kernel per parameter, ran 1-3% over), so the loss
    is all a GEMM count misses. Per GEMM the last stage's F and B over the first's are
    ``r_F = rho + L_F / F'`` and ``r_B = rho + L_B / B'``, with ``rho = (u_last / u_first) ** alpha``,
    ``F'`` and ``B'`` the first stage's F and B at the last stage's GEMMs, and ``L_F``, ``L_B`` the
    loss's forward and backward. The backward of a mean squared error passes over the same
    tensors as its forward, fewer times (its forward casts both to fp32, subtracts, squares and
    reduces; its backward scales and casts back): ``L_B = lam * L_F`` with ``0 <= lam <= 1``.
    ``lam = 0`` gives B's own fit (the high end: the loss all in F); ``lam = 1`` gives
    ``rho = (r_B - k r_F) / (1 - k)`` with ``k = F' / B'`` (the low end). The run cannot tell lam;
    these are its bounds.

    Returns:
        None where the run is not two stages (first and last) with F and B timed on both, its
        ranks' duty differs by less than :data:`MIN_DUTY_SPREAD`, or the times give no positive
        ``rho`` at ``lam = 1``.

    Example: ranks busy 0.5 and 1.0, one block a stage; F 1.0 and 2 ** 0.5 + 0.2, B 3.0 and
    4 * 2 ** 0.5 + 0.2 (alpha 0.5, the loss 0.2 in both): (0.5, 0.550). With B's loss 0 instead
    (4 * 2 ** 0.5): (0.430, 0.5).
    """
    from pptl.whatif.roles import gemm_work, role_of

    if not times or sorted({s for s, _ in times}) != [0, 1]:
        return None
    u0, u1 = duty.get(stage_rank.get(0, -1), 0.0), duty.get(stage_rank.get(1, -1), 0.0)
    if u0 <= 0 or u1 <= 0 or abs(math.log(u1 / u0)) < math.log(MIN_DUTY_SPREAD) - 1e-12:
        return None
    per: dict[tuple[int, str], float] = {}
    for s in (0, 1):
        for k in ("F", "B"):
            t, w = times.get((s, k)), gemm_work(k, role_of(s, 2), int(layers(s)))
            if t is None or not w or t <= 0:
                return None
            per[(s, k)] = t / w
    r_f, r_b = per[(1, "F")] / per[(0, "F")], per[(1, "B")] / per[(0, "B")]
    wf1, wb1 = gemm_work("F", "last", int(layers(1))), gemm_work("B", "last", int(layers(1)))
    k_fb = per[(0, "F")] * wf1 / (per[(0, "B")] * wb1)  # type: ignore[operator]
    rho_low = (r_b - k_fb * r_f) / (1.0 - k_fb) if k_fb < 1.0 else 0.0
    if rho_low <= 0:
        return None
    ls = math.log(u1 / u0)
    ends = sorted(min(1.0, max(0.0, math.log(r) / ls)) for r in (rho_low, r_b))
    return ends[0], ends[1]


def _fit(times: Mapping[tuple[int, str], float], stage_rank: Mapping[int, int], duty: Mapping[int, float],
         layers: Callable[[int], int]) -> dict[str, tuple[float, float]] | None:
    """Per kind timed on ranks of differing duty: (sum of dx dy, sum of dx dx) of its points
    (log duty, log time per GEMM) about their means; None where the run's duty spread is under
    :data:`MIN_DUTY_SPREAD` or no kind has two such points."""
    from pptl.whatif.roles import role_of

    if not times:
        return None
    n = max(s for s, _ in times) + 1
    # The last stage's loss is no GEMM: where stages without it span enough duty on their own (a
    # first and a middle stage on ranks of differing duty, pp >= 3), they alone tell the duty.
    lossless = {k: v for k, v in times.items() if role_of(k[0], n) in ("first", "middle")}
    fit = _fit_points(lossless, stage_rank, duty, layers, n)
    return fit if fit is not None else _fit_points(times, stage_rank, duty, layers, n)


def _fit_points(times: Mapping[tuple[int, str], float], stage_rank: Mapping[int, int], duty: Mapping[int, float],
                layers: Callable[[int], int], n: int) -> dict[str, tuple[float, float]] | None:
    from pptl.whatif.roles import gemm_work, role_of

    per_kind: dict[str, list[tuple[float, float]]] = {}
    for (s, k), t in times.items():
        u = duty.get(stage_rank.get(s, -1), 0.0)
        w = gemm_work(k, role_of(s, n), int(layers(s))) if k in _KINDS else None
        if w and t > 0 and u > 0:
            per_kind.setdefault(k, []).append((math.log(u), math.log(t / w)))
    out: dict[str, tuple[float, float]] = {}
    lo, hi = math.inf, -math.inf
    for k, pts in per_kind.items():
        xs = [x for x, _ in pts]
        if len(pts) < 2 or max(xs) - min(xs) < 1e-12:
            continue
        lo, hi = min(lo, min(xs)), max(hi, max(xs))
        mx = sum(xs) / len(xs)
        my = sum(y for _, y in pts) / len(pts)
        out[k] = (sum((x - mx) * (y - my) for x, y in pts), sum((x - mx) ** 2 for x in xs))
    if not out or hi - lo < math.log(MIN_DUTY_SPREAD) - 1e-12:  # a spread of exactly 1.05 counts
        return None
    return out
