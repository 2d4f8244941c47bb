"""Interleaved 1F1B (Megatron-LM virtual pipeline parallelism).

Source: Narayanan et al. 2021, and Megatron-LM ``forward_backward_pipelining_with_interleaving``
with its ``microbatch_group_size_per_vp_stage`` (G, default pp) schedule table.

Each rank holds ``vpp`` chunks (looped: stage s on rank s % pp). The k-th forward of every rank
runs the (micro-batch, chunk) at position k of the schedule table; the k-th backward runs the
same entry with chunk V-1-c. Rank r warms up with ``2(pp-r-1) + (V-1)G`` forwards (all of them
when m == pp, as Megatron does), then alternates F and B, then drains the backwards.
"""
from __future__ import annotations

from pptl.config import Config
from pptl.ir import Op, Schedule
from pptl.schedules._common import Family, assemble, backward_ops, compute_op, flush_bubble, require

__all__ = ["FAMILY", "build", "validate", "schedule_table", "warmup_count"]


def validate(cfg: Config) -> None:
    require(cfg.vpp >= 2, cfg, "vpp", cfg.vpp, "expected at least 2 chunks per rank (use 1f1b for one)")
    require(cfg.group <= cfg.microbatches, cfg, "group_size", cfg.group,
            f"expected at most microbatches={cfg.microbatches}")
    require(cfg.group >= cfg.pp, cfg, "group_size", cfg.group,
            f"expected at least pp={cfg.pp} (a smaller group makes a rank wait on its own next chunk)")


def schedule_table(m: int, v: int, g: int) -> list[tuple[int, int]]:
    """Megatron's order of (micro-batch, chunk) for forwards: groups of G micro-batches, each
    group run through chunk 0, then chunk 1, ...; the last group takes whatever is left."""
    table: list[tuple[int, int]] = []
    for lo in range(0, m, g):
        hi = m if lo + g >= m else lo + g
        table += [(mb, c) for c in range(v) for mb in range(lo, hi)]
    return table


def warmup_count(cfg: Config, rank: int) -> int:
    total = cfg.microbatches * cfg.vpp
    if cfg.microbatches == cfg.pp:
        return total
    return min(2 * (cfg.pp - rank - 1) + (cfg.vpp - 1) * cfg.group, total)


def build(cfg: Config) -> Schedule:
    validate(cfg)
    p, m, v = cfg.pp, cfg.microbatches, cfg.vpp
    table = schedule_table(m, v, cfg.group)
    total = m * v
    orders: dict[int, list[Op]] = {}
    for r in range(p):
        def fwd(k: int) -> Op:
            mb, c = table[k]
            return compute_op("F", r, c * p + r, mb, chunk=c)

        def bwd(k: int) -> list[Op]:
            mb, c = table[k]
            c = v - 1 - c
            return backward_ops(cfg, r, c * p + r, mb, chunk=c)

        w = warmup_count(cfg, r)
        order: list[Op] = []
        # Phase 1 (warmup): F_0 .. F_{w-1}
        for k in range(w):
            order.append(fwd(k))
        # Phase 2 (steady): (F_{w+k}, B_k)
        for k in range(total - w):
            order.append(fwd(w + k))
            order += bwd(k)
        # Phase 3 (cooldown): B_{total-w} .. B_{total-1}
        for k in range(total - w, total):
            order += bwd(k)
        orders[r] = order
    return assemble(cfg, "interleaved-1f1b", orders, num_stages=p * v, microbatches=m)


def bubble(cfg: Config) -> float:
    """Per rank idle with per-chunk costs F and B: (p-1)(F+B), i.e. (p-1)(F_rank+B_rank)/V."""
    return flush_bubble(cfg)


def memory(cfg: Config) -> float:
    return float(min(warmup_count(cfg, 0) + 1, cfg.microbatches * cfg.vpp)) * cfg.activation


FAMILY = Family(
    name="interleaved-1f1b",
    summary="Megatron's interleaved 1F1B: vpp chunks per rank, micro-batch groups of size G",
    constraints="vpp >= 2; pp <= group_size (default pp) <= microbatches",
    validate=validate,
    build=build,
    bubble=bubble,
    bubble_formula="(p-1)(F+B)/V with F, B of a whole rank; (p-1)(F+B) with per-chunk costs",
    memory=memory,
    memory_formula="min(2(p-1) + (V-1)G + 1, mV) chunk activations on rank 0",
    source="Narayanan et al. 2021; Megatron-LM schedules.py (get_schedule_table)",
    aliases=("interleaved", "interleaved1f1b", "vpp"),
)
