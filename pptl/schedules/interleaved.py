"""Interleaved 1F1B (Megatron-LM virtual pipeline parallelism).

Source: Narayanan et al. 2021, and Megatron-Core ``megatron/core/pipeline_parallel/schedules.py``:
``get_schedule_table`` (micro-batch groups of size G, ``microbatch_group_size_per_vp_stage``,
default pp), ``get_pp_rank_microbatches`` (the warmup count) and the group rules at the top of
``forward_backward_pipelining_with_interleaving``. torch's ``ScheduleInterleaved1F1B`` orders the
same way, with G = its micro-batches per round.

Each rank holds ``vpp`` chunks (looped: stage s on rank s % pp). The k-th forward of every rank
runs the (micro-batch, chunk) at position k of the schedule table; the k-th backward runs the
same entry with chunk V-1-c. Phase table of rank r, w = min(2(pp-r-1) + (V-1)G, mV):

    warmup    F_k               k < w
    steady    F_{w+k}, B_k      k < mV - w
    cooldown  B_k               k >= mV - w

The same w holds at m = pp: Megatron-Core dropped its "every rank runs all mV forwards first"
special case in late 2024 (commit 4295be1); torch never had it. The old order is kept for study
as ``options: {order: megatron-pre-2025}`` (it differs only at m = pp: same makespan and rank-0
peak, more activations held on the later ranks).

Group rules (Megatron-Core raises on both before it schedules anything; pptl refuses them with
one line each, naming the rule): pp <= G <= m, and the last group, m mod G micro-batches, is
either empty or at least pp long. The second rule is refused, not planned with a warning: a
last group shorter than the pipeline keeps too few micro-batches in flight for the round trip
through the ranks, so ranks wait on each other (Megatron's "dependency bubbles") and at some sizes
the order cannot run at all (pp=4 V=3 m=9 G=4 deadlocks across ranks 0 and 3, and so does
moe-1f1b-overlap at pp=4 m=10 G=4); and since Megatron never runs such an order, a plan of it
would describe no real run. G = m always fits; the message lists the group sizes that do.
"""
from __future__ import annotations

from pptl.config import Config
from pptl.errors import InputError
from pptl.ir import Schedule
from pptl.schedules._common import Family, Order, assemble, flush_assumptions, flush_bubble, phases, require

__all__ = ["FAMILY", "ORDERS", "build", "validate", "check_groups", "order_of", "schedule_table",
           "warmup_count", "group_sizes_that_fit"]

#: ``options.order`` values: Megatron-Core's order today (default), and its order before commit
#: 4295be1 (late 2024), where every rank ran all its mV forwards first when m = pp.
ORDERS = ("megatron", "megatron-pre-2025")
_OPTION_KEYS = ("order",)


def order_of(cfg: Config) -> str:
    """``options.order`` of ``cfg`` (default ``megatron``); a one-line error for anything else."""
    value = (cfg.options or {}).get("order", ORDERS[0])
    if value not in ORDERS:
        raise InputError(f"{cfg.source}: field 'options.order': got {value!r}, expected megatron (Megatron-Core's "
                         f"order, the default) or megatron-pre-2025 (all forwards first when microbatches = pp) "
                         f"for schedule '{cfg.schedule}'")
    return value


def group_sizes_that_fit(pp: int, m: int, limit: int = 4) -> list[int]:
    """The smallest ``limit`` group sizes G in pp..m that Megatron-Core accepts, and G = m."""
    out: list[int] = []
    for g in range(pp, m):
        if len(out) == limit:
            break
        if m % g == 0 or m % g >= pp:
            out.append(g)
    return out + [m] if m >= pp else out


def check_groups(cfg: Config) -> None:
    """Megatron-Core's rules on the group size G, each a one-line InputError naming the rule.

    Raises:
        InputError: G outside pp..microbatches, or a last group of 1..pp-1 micro-batches.
    """
    p, m, g = cfg.pp, cfg.microbatches, cfg.group
    if g > m and cfg.group_size is None:  # G defaults to pp: the user set the micro-batches, not G
        raise InputError(f"{cfg.source}: field 'microbatches': got {m}, expected at least pp={p} for schedule "
                         f"'{cfg.schedule}': give at least {p} micro-batches (its micro-batch group, --group-size, "
                         "is pp unless set and must lie between pp and microbatches)")
    got = g if cfg.group_size is not None else f"{g} (the default, pp)"
    require(g <= m, cfg, "group_size", got, f"expected at most microbatches={m} (Megatron-Core's group rule: "
            f"G in [pp, microbatches])")
    require(g >= p, cfg, "group_size", got, f"expected at least pp={p} (a smaller group makes a rank wait on its "
            "own next chunk; Megatron-Core's group rule: G in [pp, microbatches])")
    last = m % g
    fits = ", ".join(map(str, group_sizes_that_fit(p, m)))
    require(not 0 < last < p, cfg, "group_size", got,
            f"which leaves a last group of {m} mod {g} = {last} micro-batch{'es' if last > 1 else ''}, fewer than "
            f"pp={p} (Megatron-Core's "
            f"last-group rule: \"The remainder of M (the total micro-batches) divided by N ... should be 0, or "
            f"larger than or equal to the pipeline-parallel size\"); group sizes that fit: {fits}")


def validate(cfg: Config) -> None:
    require(cfg.vpp >= 2, cfg, "vpp", cfg.vpp, "expected at least 2 chunks per rank (use 1f1b for one)")
    extra = sorted(str(k) for k in (cfg.options or {}) if k not in _OPTION_KEYS)
    if extra:
        raise InputError(f"{cfg.source}: field 'options.{extra[0]}' is unknown for schedule '{cfg.schedule}'; "
                         f"known: {', '.join(_OPTION_KEYS)}")
    order_of(cfg)
    check_groups(cfg)


def schedule_table(m: int, v: int, g: int) -> list[tuple[int, int]]:
    """Megatron's order of (micro-batch, chunk) for forwards: groups of G micro-batches, each
    group run through chunk 0, then chunk 1, ...; the last group takes whatever is left."""
    table: list[tuple[int, int]] = []
    for lo in range(0, m, g):
        hi = m if lo + g >= m else lo + g
        table += [(mb, c) for c in range(v) for mb in range(lo, hi)]
    return table


def warmup_count(cfg: Config, rank: int) -> int:
    """Forwards rank ``rank`` runs before its first backward is due: 2(pp-r-1) + (V-1)G, at most mV."""
    total = cfg.microbatches * cfg.vpp
    if cfg.microbatches == cfg.pp and order_of(cfg) == "megatron-pre-2025":
        return total
    return min(2 * (cfg.pp - rank - 1) + (cfg.vpp - 1) * cfg.group, total)


def build(cfg: Config) -> Schedule:
    validate(cfg)
    p, m, v = cfg.pp, cfg.microbatches, cfg.vpp
    table = schedule_table(m, v, cfg.group)
    total = m * v
    mbs = [mb for mb, _ in table]
    chunks = [c for _, c in table]
    back_chunks = [v - 1 - c for c in chunks]
    back_kinds = ("I", "W") if cfg.split_backward else ("B",)
    nb = len(back_kinds)
    orders: dict[int, Order] = {}
    for r in range(p):
        # F_k and B_k for every k (B_k runs table[k] on chunk V-1-c), laid out by the phase table
        # (pptl.schedules._order.phases) one column at a time.
        w = warmup_count(cfg, r)
        stages = [c * p + r for c in chunks]
        back_stages = [c * p + r for c in back_chunks]
        orders[r] = Order(kind=phases(["F"] * total, [[k] * total for k in back_kinds], w),
                          stage=phases(stages, [back_stages] * nb, w), mb=phases(mbs, [mbs] * nb, w),
                          direction=[0] * (total * (1 + nb)), chunk=phases(chunks, [back_chunks] * nb, w))
    return assemble(cfg, "interleaved-1f1b", orders, num_stages=p * v, microbatches=m)


def bubble(cfg: Config) -> float:
    """Per rank idle with per-chunk costs F and B: (p-1)(F+B), i.e. (p-1)(F_rank+B_rank)/V."""
    return flush_bubble(cfg)


def memory(cfg: Config) -> float:
    return float(min(warmup_count(cfg, 0) + 1, cfg.microbatches * cfg.vpp)) * cfg.activation


FAMILY = Family(
    name="interleaved-1f1b",
    summary="Megatron's interleaved 1F1B: vpp chunks per rank, micro-batch groups of size G",
    constraints="vpp >= 2; pp <= group_size (default pp) <= microbatches; microbatches mod group_size is 0 or "
                ">= pp (Megatron-Core's group rules); options: order (megatron | megatron-pre-2025)",
    validate=validate,
    build=build,
    bubble=bubble,
    bubble_formula="(p-1)(F+B) with F, B of one chunk (as costs are given), i.e. (p-1)(F+B)/V of a whole rank",
    assumptions=flush_assumptions,
    memory=memory,
    memory_formula="min(2(p-1) + (V-1)G + 1, mV) chunk activations on rank 0",
    source="Narayanan et al. 2021; Megatron-Core schedules.py (get_schedule_table, get_pp_rank_microbatches)",
    aliases=("interleaved", "interleaved1f1b", "vpp"),
    takes_options=True,
)
