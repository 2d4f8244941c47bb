"""Rules of the weight-update plan (checkpoint-engine's H2D -> IPC copy -> broadcast -> reload).

Each rule reads the ops themselves (kinds H2D, COPY, BCAST, RELOAD; ``op.bucket`` and ``op.half``,
the IPC half) and, for sizes, ``schedule.meta['weight_update']`` as written by
:mod:`pptl.schedules.weight_update`. A schedule without BCAST/RELOAD ops is not a weight update:
every rule returns nothing for it.

Writes into IPC half ``h``: the owner's COPY, an H2D straight into the half (no H2D buffer, ``half``
set), and a broadcast on every receiving rank. Releases: every rank's RELOAD from that half.
"""
from __future__ import annotations

from bisect import bisect_left
from collections import Counter

from pptl.checks.base import Context, Violation
from pptl.formats._quote import counted
from pptl.ir import Op
from pptl.schedules._weight_update_meta import WeightUpdateMeta

__all__ = [
    "ipc_reuse_before_release",
    "bucket_over_buffer",
    "tensor_over_bucket",
    "broadcast_order",
    "h2d_buffer_reuse",
    "incomplete_update",
    "buffers_over_memory",
]

#: Times closer than this (relative to the makespan) count as equal.
_EPS = 1e-9


def _human_bytes(n: float) -> str:
    # The weight-update family (and with it the family registry) is imported only when a rule reports.
    from pptl.schedules.weight_update import human_bytes

    return human_bytes(n)


def _is_update(ctx: Context) -> bool:
    return "BCAST" in ctx.kinds or "RELOAD" in ctx.kinds


def _meta(ctx: Context) -> WeightUpdateMeta:
    return WeightUpdateMeta.of(ctx.schedule)


def _writes_half(op: Op) -> bool:
    if op.half < 0:
        return False
    return op.kind in ("COPY", "H2D") or (op.kind == "BCAST" and op.peer != op.rank)


def ipc_reuse_before_release(ctx: Context) -> list[Violation]:
    """PP050: an IPC half is written before every rank's reload from its previous bucket ended.

    For each bucket ``b`` written into half ``h``, the previous bucket ``b'`` in half ``h`` must be
    reloaded on every rank before any write of ``b`` starts (on the simulated timeline). Dropping the
    double buffer (every bucket in half 0 while the plan only waits for bucket ``b - 2``) is caught
    here. One violation per bucket, naming its earliest early write and the last reload it overran.

    Notes: O(ops log ops). Judged on simulated times: a write that no dependency orders after the
    reload but happens to start later is accepted.
    """
    if not _is_update(ctx):
        return []
    s, sim = ctx.schedule, ctx.simulation
    eps = _EPS * max(1.0, sim.makespan)
    release: dict[int, dict[int, int]] = {}  # half -> bucket -> op index of its last-ending reload
    for i, op in enumerate(s.ops):
        if op.kind == "RELOAD" and op.half >= 0:
            per = release.setdefault(op.half, {})
            j = per.get(op.bucket)
            if j is None or sim.end[i] > sim.end[j]:
                per[op.bucket] = i
    ordered = {h: sorted(per) for h, per in release.items()}
    early: dict[tuple[int, int], list[int]] = {}  # (bucket, half) -> early writes
    blocker: dict[tuple[int, int], int] = {}
    for i, op in enumerate(s.ops):
        if not _writes_half(op):
            continue
        buckets = ordered.get(op.half, [])
        k = bisect_left(buckets, op.bucket)
        if k == 0:
            continue
        j = release[op.half][buckets[k - 1]]
        if sim.start[i] < sim.end[j] - eps:
            early.setdefault((op.bucket, op.half), []).append(i)
            blocker[(op.bucket, op.half)] = j
    out: list[Violation] = []
    for (b, h), writes in sorted(early.items()):
        first = min(writes, key=lambda i: sim.start[i])
        j = blocker[(b, h)]
        more = f" (and {len(writes) - 1} more writes)" if len(writes) > 1 else ""
        out.append(Violation(
            "PP050", f"IPC half {h} is rewritten with bucket {b} by {s.ops[first].id} at t={sim.start[first]:g}{more} "
            f"before {s.ops[j].id} released bucket {s.ops[j].bucket} from it at t={sim.end[j]:g}: buffer reused before "
            "release (keep two IPC halves, or make the write wait for every rank's reload)",
            (s.ops[first].id, s.ops[j].id)))
    return out


def h2d_buffer_reuse(ctx: Context) -> list[Violation]:
    """PP054: an owner's H2D overwrites its H2D buffer before the COPY of its previous bucket read it.

    Notes: O(ops). Judged on simulated times, like PP050.
    """
    if not _is_update(ctx):
        return []
    s, sim = ctx.schedule, ctx.simulation
    eps = _EPS * max(1.0, sim.makespan)
    copies = {(op.rank, op.bucket): i for i, op in enumerate(s.ops) if op.kind == "COPY"}
    out: list[Violation] = []
    for (rank, lane), order in sorted(s.lanes.items()):
        prev = None
        for i in order:
            op = s.ops[i]
            if op.kind != "H2D" or op.half >= 0:
                continue  # an H2D with a half writes the IPC buffer (PP050's business)
            if prev is not None:
                j = copies.get((rank, s.ops[prev].bucket))
                if j is not None and sim.start[i] < sim.end[j] - eps:
                    out.append(Violation(
                        "PP054", f"{op.id} overwrites rank {rank}'s H2D buffer at t={sim.start[i]:g} before "
                        f"{s.ops[j].id} copied bucket {s.ops[j].bucket} out of it (ends t={sim.end[j]:g})",
                        (op.id, s.ops[j].id)))
            prev = i
    return out


def bucket_over_buffer(ctx: Context) -> list[Violation]:
    """PP051: a bucket holds more bytes than the buffer it goes through (``bucket_size``).

    Notes: O(ops). Needs ``meta['weight_update']['bucket_size']``; skipped without it.
    """
    limit = _meta(ctx).bucket_size
    if not _is_update(ctx) or limit is None:
        return []
    worst: dict[int, Op] = {}
    for op in ctx.schedule.ops:
        if op.kind in ("H2D", "COPY", "BCAST") and op.payload > limit and op.bucket not in worst:
            worst[op.bucket] = op
    return [Violation("PP051", f"bucket {b} is {_human_bytes(op.payload)} ({op.payload:.0f} bytes), larger than the "
                      f"{_human_bytes(limit)} buffer ({limit:.0f} bytes) it is copied and broadcast through ({op.id})",
                      (op.id,))
            for b, op in sorted(worst.items())]


def tensor_over_bucket(ctx: Context) -> list[Violation]:
    """PP052: a tensor larger than the bucket size: it cannot be packed into any bucket.

    Notes: O(buckets), from ``meta['weight_update']['buckets']``.
    """
    meta = _meta(ctx)
    limit = meta.bucket_size
    if not _is_update(ctx) or limit is None:
        return []
    out: list[Violation] = []
    for b, info in enumerate(meta.buckets or ()):
        largest = info.largest
        if largest > limit:
            out.append(Violation(
                "PP052", f"bucket {b} (owner rank {info.owner}) holds a tensor of {_human_bytes(largest)} "
                f"({largest} bytes), larger than the bucket size {_human_bytes(limit)} ({limit} bytes); raise "
                "options.bucket_size (with bucket_size: auto, options.free_memory), or use h2d_buffer: false"))
    return out


def broadcast_order(ctx: Context) -> list[Violation]:
    """PP053: some rank runs the broadcasts in a different order, or from different sources.

    A broadcast is a collective: every rank must issue the same (bucket, source) sequence. The
    reference is the sequence most ranks share; each other rank gets one violation at its first
    difference. Notes: O(ops).
    """
    if not _is_update(ctx):
        return []
    s = ctx.schedule
    seqs: dict[int, list[Op]] = {}
    for (rank, lane), order in s.lanes.items():
        for i in order:
            if s.ops[i].kind == "BCAST":
                seqs.setdefault(rank, []).append(s.ops[i])
    keys = {r: tuple((op.bucket, op.peer) for op in ops) for r, ops in seqs.items()}
    if len(set(keys.values())) <= 1:
        return []
    ref_key, _ = Counter(keys.values()).most_common(1)[0]
    out: list[Violation] = []
    for r in sorted(keys):
        mine = keys[r]
        if mine == ref_key:
            continue
        k = next((k for k, (a, b) in enumerate(zip(mine, ref_key)) if a != b), min(len(mine), len(ref_key)))
        got = f"bucket {mine[k][0]} from rank {mine[k][1]}" if k < len(mine) else "nothing"
        want = f"bucket {ref_key[k][0]} from rank {ref_key[k][1]}" if k < len(ref_key) else "nothing"
        ops = (seqs[r][k].id,) if k < len(mine) else ()
        out.append(Violation("PP053", f"rank {r} broadcasts {got} as its broadcast #{k}, but the other ranks "
                             f"broadcast {want} there (a collective must run in the same order on every rank)", ops))
    return out


def incomplete_update(ctx: Context) -> list[Violation]:
    """PP055: a bucket that some rank never receives or reloads, or whose source is not its owner.

    Every bucket needs an H2D (and, with an H2D buffer, a COPY) on its owner, a BCAST on every rank
    from that owner, and a RELOAD on every rank. Notes: O(ops + buckets x ranks).
    """
    if not _is_update(ctx):
        return []
    s = ctx.schedule
    meta = _meta(ctx)
    buckets = meta.buckets
    count = len(buckets) if buckets is not None else 1 + max((op.bucket for op in s.ops), default=-1)
    have: dict[tuple[str, int, int], Op] = {}
    owner: dict[int, int] = {}
    for op in s.ops:
        have.setdefault((op.kind, op.bucket, op.rank), op)
        if op.kind in ("H2D", "COPY"):
            owner.setdefault(op.bucket, op.rank)
    for b, info in enumerate(buckets or ()):
        owner[b] = info.owner
    use_copy = meta.h2d_buffer if meta.h2d_buffer is not None else "COPY" in ctx.kinds
    out: list[Violation] = []
    for b in range(count):
        o = owner.get(b)
        missing = []
        if o is None:
            missing.append("its H2D (no owner copies it to the GPU)")
        else:
            if ("H2D", b, o) not in have:
                missing.append(f"its H2D on owner rank {o}")
            if use_copy and ("COPY", b, o) not in have:
                missing.append(f"its IPC copy on owner rank {o}")
        for kind, what in (("BCAST", "broadcast"), ("RELOAD", "reload")):
            lacking = [r for r in range(s.pp) if (kind, b, r) not in have]
            if lacking:
                missing.append(f"its {what} on rank{'s' if len(lacking) > 1 else ''} {_ranks(lacking)}")
        if missing:
            out.append(Violation("PP055", f"bucket {b} is missing {'; '.join(missing)}"))
        wrong = [have[("BCAST", b, r)] for r in range(s.pp)
                 if o is not None and ("BCAST", b, r) in have and have[("BCAST", b, r)].peer != o]
        if wrong:
            out.append(Violation("PP055", f"bucket {b} belongs to rank {o} but {wrong[0].id} broadcasts it from rank "
                                 f"{wrong[0].peer}", tuple(op.id for op in wrong[:3])))
    return out


def buffers_over_memory(ctx: Context) -> list[Violation]:
    """PP056: the H2D buffer and IPC halves need more than the usable share (90%) of free memory.

    Notes: O(1), from ``meta['weight_update']``.
    """
    meta = _meta(ctx)
    size, free, n = meta.bucket_size, meta.free_memory, meta.buffers
    if not _is_update(ctx) or size is None or free is None or n is None:
        return []
    from pptl.schedules.weight_update import USABLE_FRACTION

    usable = int(free * USABLE_FRACTION)
    if n * size <= usable:
        return []
    return [Violation("PP056", f"{counted(n, 'buffer')} of {_human_bytes(size)} need {_human_bytes(n * size)} of GPU memory, more "
                      f"than the {_human_bytes(usable)} usable (90% of free_memory {_human_bytes(free)}); lower "
                      "options.bucket_size or use h2d_buffer: false")]


def _ranks(ranks: list[int]) -> str:
    text = ", ".join(map(str, ranks[:8]))
    return text + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
