"""The exact version of :mod:`pptl.tune.synth`: the order of F, I and W on every rank that minimises
the step time under the memory limit, as a mixed-integer program solved by HiGHS (``highspy``,
an optional dependency: ``pip install highspy``).

Model (one stage per rank; the greedy's inputs, :class:`~pptl.tune.synth.SynthInput`):

- a start time ``S`` per op; the data dependencies of training (F after the previous stage's F,
  I after the next stage's I or the own F on the last stage, W after I), a message time between
  stages; ``C >= S + d`` for every op, minimise ``C``;
- on each rank, F, I and W each run their micro-batches in order (W in I's order, as the runtime's
  weight-gradient store), so only pairs of different kinds need an order: a binary ``y`` per pair
  and the two big-M disjunctions ``S_a + d_a <= S_b + M(1 - y)`` and ``S_b + d_b <= S_a + M y``;
- memory: a rank's activations peak when an F starts, and what it holds then is a linear sum over
  the order binaries (every F before it adds, every I and W before it frees its share), which must
  stay within the rank's limit.

``M`` and an upper bound on ``C`` come from the greedy order (a feasible solution). Sizes grow as
``3 m^2`` binaries per rank; :data:`MAX_BINARIES` bounds what is attempted. HiGHS stops at
``time_limit`` with its best order so far, or none (then the greedy order stands, with a note).
"""
from __future__ import annotations

from typing import Any

from pptl.tune.synth import SynthInput

__all__ = ["MAX_BINARIES", "ilp_orders", "order_makespan"]

#: Above this many order binaries the ILP is not attempted (the greedy order stands).
MAX_BINARIES = 4000


def _times(x: SynthInput, orders: dict[int, list[tuple[str, int]]]) -> dict[tuple[str, int, int], float]:
    """Start times of a given order under the ILP's time model (to warm-start the solver)."""
    p = x.pp
    end: dict[tuple[str, int, int], float] = {}
    start: dict[tuple[str, int, int], float] = {}
    pos, free = [0] * p, [0.0] * p
    dur = {"F": x.F, "I": x.I, "W": x.W}
    left = sum(len(v) for v in orders.values())
    while left:
        moved = False
        for r in range(p):
            while pos[r] < len(orders[r]):
                k, mb = orders[r][pos[r]]
                if k == "F":
                    dep = [("F", r - 1, mb)] if r > 0 else []
                    lag = x.message
                elif k == "I":
                    dep, lag = ([("I", r + 1, mb)], x.message) if r < p - 1 else ([("F", r, mb)], 0.0)
                else:
                    dep, lag = [("I", r, mb)], 0.0
                if any(d not in end for d in dep):
                    break
                t = max([free[r]] + [end[d] + (lag if d[1] != r else 0.0) for d in dep])
                start[(k, r, mb)] = t
                end[(k, r, mb)] = free[r] = t + dur[k][r]
                pos[r] += 1
                left -= 1
                moved = True
        if not moved:
            raise ValueError("order deadlocks")
    return start


def order_makespan(x: SynthInput, orders: dict[int, list[tuple[str, int]]]) -> float:
    """The step time of ``orders`` under the ILP's time model."""
    dur = {"F": x.F, "I": x.I, "W": x.W}
    return max(t + dur[k][r] for (k, r, _), t in _times(x, orders).items())


def ilp_orders(x: SynthInput, horizon: float, *, time_limit: float = 2.0,
               warm: dict[int, list[tuple[str, int]]] | None = None
               ) -> tuple[dict[int, list[tuple[str, int]]] | None, str]:
    """Per rank, the (kind, micro-batch) order, and a note; None with the reason when there is none.
    ``warm`` (the greedy order) starts the search from a feasible solution."""
    p, m = x.pp, x.microbatches
    if 3 * m * m * p > MAX_BINARIES:
        return None, (f"synth ILP skipped: {3 * m * m * p} order binaries (pp={p}, m={m}) exceed {MAX_BINARIES}; "
                      "greedy order used")
    try:
        import highspy
    except ImportError:
        return None, "synth ILP skipped: highspy is not installed (pip install highspy); greedy order used"
    h = _quiet_highs(highspy)
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("threads", 1)
    M = horizon * 1.01 + 1.0
    dur = {"F": x.F, "I": x.I, "W": x.W}
    S: dict[tuple[str, int, int], Any] = {}
    for r in range(p):
        for k in ("F", "I", "W"):
            for mb in range(m):
                S[(k, r, mb)] = h.addVariable(lb=0.0, ub=M)
    C = h.addVariable(lb=0.0, ub=M)
    msg = x.message
    for r in range(p):
        for mb in range(m):
            f, i, w = S[("F", r, mb)], S[("I", r, mb)], S[("W", r, mb)]
            if r > 0:
                h.addConstr(f >= S[("F", r - 1, mb)] + x.F[r - 1] + msg)
            if r < p - 1:
                h.addConstr(i >= S[("I", r + 1, mb)] + x.I[r + 1] + msg)
            else:
                h.addConstr(i >= f + x.F[r])
            h.addConstr(w >= i + x.I[r])
            h.addConstr(C >= w + x.W[r])
            if mb > 0:  # each kind in micro-batch order on its rank (no overlap within a kind)
                for k in ("F", "I", "W"):
                    h.addConstr(S[(k, r, mb)] >= S[(k, r, mb - 1)] + dur[k][r])
    before: dict[tuple[str, int, str, int, int], Any] = {}  # (a, i, b, j, r) -> y (1: a_i before b_j)
    for r in range(p):
        for a, b in (("F", "I"), ("F", "W"), ("I", "W")):
            for i in range(m):
                for j in range(m):
                    # Data order fixes some pairs: I_j after F_j, W_j after I_j (and so after F_j).
                    if (a, b) in (("F", "I"), ("F", "W")) and i <= j:
                        before[(a, i, b, j, r)] = 1
                        continue
                    if (a, b) == ("I", "W") and i <= j:
                        before[(a, i, b, j, r)] = 1
                        continue
                    y = h.addBinary()
                    sa, sb = S[(a, r, i)], S[(b, r, j)]
                    h.addConstr(sa + dur[a][r] <= sb + M * (1 - y))
                    h.addConstr(sb + dur[b][r] <= sa + M * y)
                    before[(a, i, b, j, r)] = y
    for r in range(p):
        act, lim, share = x.activation[r], x.limit[r], x.w_activation
        if act <= 0 or lim == float("inf"):
            continue
        for k in range(1, m):
            # Held when F_k starts: F_0..F_k (in order), minus what the I and W before it freed.
            freed = 0
            for j in range(m):
                yi = before[("F", k, "I", j, r)]  # 1 when F_k is before I_j
                yw = before[("F", k, "W", j, r)]
                freed = freed + (1 - yi) * act * (1 - share) + (1 - yw) * act * share
            h.addConstr((k + 1) * act - freed <= max(lim, act))
    h.changeColCost(C.index, 1.0)  # minimise C; set before the start solution (minimize() resets it)
    if warm is not None:
        t = _times(x, warm)
        horizon = max(t[key] + dur[key[0]][key[1]] for key in t)
        values = [0.0] * h.getNumCol()
        for key, var in S.items():
            values[var.index] = t[key]
        values[C.index] = horizon
        for (a, i, b, j, r), y in before.items():
            if not isinstance(y, int):
                values[y.index] = 1.0 if t[(a, r, i)] < t[(b, r, j)] else 0.0
        sol0 = highspy.HighsSolution()
        sol0.col_value = values
        sol0.value_valid = True
        h.setSolution(sol0)
    h.run()
    status = h.getModelStatus()
    sol = h.getSolution()
    if not sol.value_valid:
        return None, f"synth ILP found no order within {time_limit:g} s ({h.modelStatusToString(status)}); greedy order used"
    vals = sol.col_value
    orders: dict[int, list[tuple[str, int]]] = {}
    for r in range(p):
        ops = [(vals[S[(k, r, mb)].index], "FIW".index(k), k, mb) for k in ("F", "I", "W") for mb in range(m)]
        ops.sort()
        orders[r] = [(k, mb) for _, _, k, mb in ops]
    optimal = h.modelStatusToString(status) == "Optimal"
    note = "synth ILP: optimal order" if optimal else f"synth ILP: time limit {time_limit:g} s reached, best order found used"
    return orders, note


def _quiet_highs(highspy: Any) -> Any:
    """A Highs instance; its start-up banner goes to file descriptor 1, which would corrupt
    ``--output json``, so that descriptor points at /dev/null while it is made."""
    import os
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            return highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
