"""A V order whose every rank holds at most ``cap`` chunk activations: the controllable-memory V
schedules where the paper's building block holds more than the family promises.

Source: the memory argument of Qi et al. 2024 ("Pipeline Parallelism with Controllable Memory"):
a rank's activations are the chunks whose forward has run and whose weight gradient has not, so
the order alone (not the timing) sets the peak. The list scheduler here is the zero-bubble greedy
(an input gradient I when one is ready, else a forward F, else a weight gradient W) run in unit
slots (F = I = W = 1, messages free) on the V placement, with one rule added for memory.

The rule: a forward runs only where the rank then holds at most ``cap`` chunks, and a chunk-0
forward (a micro-batch entering the rank) only where it leaves one chunk free. That free chunk is
the oldest unfinished micro-batch's: every rank holds only its and younger micro-batches' chunk-0
activations when its chunk-1 forward arrives (chunk-1 forwards run in micro-batch order), so that
forward always finds room, its backward needs none, and its weight gradients free two. The oldest
micro-batch always finishes, so the order never stalls, and no rank holds more than ``cap``
(``cap`` >= 2: rank 0 holds both chunks of a micro-batch when its forward turns, the least any V
order can hold).

The pace: left alone, the greedy lets micro-batches in as fast as memory allows, which fills every
rank's cap early and leaves the later passes waiting (13% longer than the paper's V-Half pattern at
its own memory, p = 16). So micro-batch j may enter no earlier than slot j * pace, and of the paces
1..12 the order that ends first is kept; within 5% of the pattern there.

Assumptions: activations held from F to W (``w_activation: 1``); with less held until W a rank
holds no more. Notes: O(12 * slots * pp), slots about 6m plus the idle the cap makes (1.5 s at
p = 18, m = 512).
"""
from __future__ import annotations

from pptl.schedules._order import Order

__all__ = ["capped_orders", "MIN_CAP"]

#: Slowest pace tried: a micro-batch entering every 12 slots, two building blocks of the paper's 6.
MAX_PACE = 12

#: Chunks a V rank must be allowed: both chunks of one micro-batch (rank 0 at the turn, or any rank
#: between its two forwards and its weight gradients).
MIN_CAP = 2


def capped_orders(p: int, m: int, cap: int) -> dict[int, Order]:
    """Every rank's compute order on the V placement (rank r holds stages r and 2p-1-r) such that no
    rank holds more than ``cap`` chunk activations; ``cap`` below :data:`MIN_CAP` is raised to it.
    Of the paces 1..:data:`MAX_PACE`, the one whose unit-slot order ends first (the earliest pace on
    a tie)."""
    cap = max(cap, MIN_CAP)
    best: tuple[int, list[list[tuple[str, int, int, int, int]]]] | None = None
    for pace in range(1, MAX_PACE + 1):
        slots, rows = _greedy(p, m, cap, pace)
        if best is None or slots < best[0]:
            best = (slots, rows)
    assert best is not None
    return {r: Order.of_rows(best[1][r]) for r in range(p)}


def _greedy(p: int, m: int, cap: int, pace: int) -> tuple[int, list[list[tuple[str, int, int, int, int]]]]:
    """The unit-slot list schedule with micro-batch j entering stage 0 no earlier than slot j * pace:
    its length in slots and every rank's rows."""
    n = 2 * p
    never = 1 << 60
    f_end = [[never] * m for _ in range(n)]  # slot at whose start the pass's output is there
    i_end = [[never] * m for _ in range(n)]
    nf, ni, nw = [0] * n, [0] * n, [0] * n
    held = [0] * p  # chunks whose F ran and whose W has not
    rows: list[list[tuple[str, int, int, int, int]]] = [[] for _ in range(p)]
    left, t = 3 * n * m, 0
    while left:
        chosen = [_choose(r, n, m, t, cap, f_end, i_end, nf, ni, nw, held[r], nf[0] * pace <= t) for r in range(p)]
        if not any(chosen) and not (nf[0] < m and nf[0] * pace > t):  # nothing runs, nothing is waiting to enter
            raise RuntimeError(f"capped V order stalled at slot {t} (p={p}, m={m}, cap={cap})")
        for r, pick in enumerate(chosen):
            if pick is None:
                continue
            kind, s = pick
            chunk = 0 if s < p else 1
            if kind == "F":
                j = nf[s]
                f_end[s][j] = t + 1
                nf[s] += 1
                held[r] += 1
            elif kind == "I":
                j = ni[s]
                i_end[s][j] = t + 1
                ni[s] += 1
            else:
                j = nw[s]
                nw[s] += 1
                held[r] -= 1
            rows[r].append((kind, s, j, 0, chunk))
            left -= 1
        t += 1
    return t, rows


def _choose(r: int, n: int, m: int, t: int, cap: int, f_end: list[list[int]], i_end: list[list[int]],
            nf: list[int], ni: list[int], nw: list[int], held: int, may_enter: bool) -> tuple[str, int] | None:
    """Rank ``r``'s pass at slot ``t``: the oldest ready I (chunk 1's first: it comes first in the
    backward), else the oldest ready F that memory allows, else the oldest owed W, chunk 1's first."""
    a, b = r, n - 1 - r  # chunk 0's stage, chunk 1's stage
    best: tuple[int, int] | None = None  # (mb, stage)
    for s in (b, a):
        j = ni[s]
        if j < m and f_end[s][j] <= t and (s == n - 1 or i_end[s + 1][j] <= t):
            if best is None or j < best[0]:
                best = (j, s)
    if best is not None:
        return "I", best[1]
    for s in (b, a):
        j = nf[s]
        if j >= m or (s > 0 and f_end[s - 1][j] > t) or held + (2 if s == a else 1) > cap or (s == 0 and not may_enter):
            continue
        if best is None or j < best[0]:
            best = (j, s)
    if best is not None:
        return "F", best[1]
    for s in (b, a):
        if nw[s] < ni[s] and i_end[s][nw[s]] <= t:
            return "W", s
    return None
