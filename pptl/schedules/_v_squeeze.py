"""The squeeze of a V building-block schedule: passes of the fill and the drain move into earlier free
slots where their inputs allow and the rank's memory does not rise.

Source: the greedy reordering of Qi et al.'s repository (sail-sg/zero-bubble-pipeline-parallelism,
``zbv_greedy.py``, ``PipelineGraph.reorder``), restated: slots are the building block's time units
(F = I = W = 1), the passes are visited in slot order, and the steady state, from the first chunk-0
input gradient on rank 0 to the last micro-batch's first forward, keeps its slots.

NOTE: the repository squeezes twice (with the weight gradients placed, then once more for the drain
with them implied) and re-times the slots by an eager execution between the two. pptl squeezes once,
with the weight gradients placed, then places them again in the free slots of the squeezed grid; the
simulator's as-soon-as-possible execution then removes the idle slots that are left. Memory is that
of the pattern: a forward moves only where the rank's activations stay at or under the pattern's peak.
"""
from __future__ import annotations

from bisect import insort

__all__ = ["Slots", "squeeze", "place_weights"]

#: Per rank, per pass type, per micro-batch: the slot. Types: 0 F chunk 0, 1 F chunk 1, 2 I chunk 1,
#: 3 I chunk 0, 4 W (either chunk, in the order their I's ran).
Slots = list[list[list[int]]]

#: Memory of a pass in the slot model: a forward allocates, a weight gradient frees.
_DELTA = (1, 1, 0, 0, -1)


def place_weights(slots: list[list[int]]) -> list[int]:
    """The W slots of one rank: each free slot takes a weight gradient owed by an earlier I, the rest
    follow the last pass."""
    busy = sorted((t, ty) for ty in range(4) for t in slots[ty])
    out: list[int] = []
    owed = slot = 0
    for t, ty in busy:
        while slot < t:
            if owed:
                out.append(slot)
                owed -= 1
            slot += 1
        owed += ty >= 2
        slot = t + 1
    out += range(slot, slot + owed)
    return out


def _ready(s: Slots, r: int, ty: int, mb: int, p: int, i_sorted: list[int]) -> int:
    """The first slot a pass may take: after its inputs (the V's neighbour ranks), the rank's earlier
    pass of the same micro-batch, and the same type's previous micro-batch."""
    d = -1
    if ty in (0, 2) and r > 0:  # chunk 0 forward and chunk 1 input gradient flow down the ranks
        d = s[r - 1][ty][mb]
    elif ty in (1, 3) and r + 1 < p:  # the other two flow up
        d = s[r + 1][ty][mb]
    if 0 < ty < 4:
        d = max(d, s[r][ty - 1][mb])
    if ty == 4:  # the k-th W of a rank follows its k-th I
        d = max(d, i_sorted[mb])
    if mb > 0:
        d = max(d, s[r][ty][mb - 1])
    return d + 1


def squeeze(s: Slots, p: int, m: int) -> Slots:
    """Squeeze ``s`` (4 pass types per rank) in place and return it with the W type added.

    Notes: O(p m log(p m)) for the visit order plus the slots each moved pass travels.
    """
    for r in range(p):
        s[r].append(place_weights(s[r]))
    end = max(t for per in s for ty in per for t in ty) + 2
    prof: list[list[int]] = []
    for per in s:
        delta = [0] * end
        for ty, ts in enumerate(per):
            for t in ts:
                delta[t] += _DELTA[ty]
        cur, row = 0, []
        for x in delta:
            cur += x
            row.append(cur)
        prof.append(row)
    bound = max(max(row) for row in prof)
    occupied = [{t for ts in per for t in ts} for per in s]
    # Each rank's I slots, sorted: the k-th W waits for the k-th of them.
    i_sorted = [sorted(per[2] + per[3]) for per in s]
    visit = sorted((s[r][ty][mb], r, ty, mb) for r in range(p) for ty in range(5) for mb in range(m))
    steady = done = False
    for _, r, ty, mb in visit:
        if not steady and ty == 3 and r == 0:
            steady = True
        if steady and not done:
            done = ty == 0 and mb == m - 1
            continue
        t = s[r][ty][mb]
        lo = _ready(s, r, ty, mb, p, i_sorted[r])
        if lo >= t:
            continue
        row = prof[r]
        if _DELTA[ty] > 0:  # a forward held earlier: every slot it passes must have room for it
            k = t
            while k > lo and row[k - 1] + 1 <= bound:
                k -= 1
            lo = k
        new = next((x for x in range(lo, t) if x not in occupied[r]), None)
        if new is None:
            continue
        occupied[r].discard(t)
        occupied[r].add(new)
        s[r][ty][mb] = new
        if ty in (2, 3):
            i_sorted[r].remove(t)
            insort(i_sorted[r], new)
        for x in range(new, t):
            row[x] += _DELTA[ty]
    return s
