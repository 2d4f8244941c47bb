"""The checker: small rules, each one function with a stable code, over one schedule and its DAG.

A rule returns every violation it finds (code, one-line message, op ids); it never raises on an
invalid schedule. Raising is for misuse. Adding a rule is one function in a module here plus one
line in :func:`rule_table`. :mod:`pptl.checks.base` holds what the rules share.
"""
from __future__ import annotations

import functools

from pptl.checks.base import P2P_MODES, Context, Rule, Violation
from pptl.errors import InputError
from pptl.ir import Schedule

__all__ = ["Violation", "Context", "Rule", "P2P_MODES", "run_checks", "check_context", "rule_table"]


@functools.cache
def rule_table() -> tuple[Rule, ...]:
    """Every rule, by code. Adding a rule is one line here."""
    from pptl.checks import comm, family_memory, memory, moe, order, overlap, p2p, structure
    from pptl.checks import weight_update as wu

    return (
        Rule("PP001", "malformed-op", structure.malformed_ops),
        Rule("PP002", "duplicate-op", structure.duplicate_ops),
        Rule("PP003", "missing-work", structure.missing_work),
        Rule("PP004", "index-out-of-range", structure.index_out_of_range),
        Rule("PP005", "stage-on-two-ranks", structure.stage_on_two_ranks),
        Rule("PP006", "local-order", order.local_order),
        Rule("PP007", "deadlock", order.deadlock),
        Rule("PP008", "unmatched-p2p", comm.unmatched_p2p),
        Rule("PP009", "memory-over-limit", memory.memory_over_limit, needs_acyclic=True),
        Rule("PP020", "fb-self-dependency", overlap.fb_self_dependency),
        Rule("PP021", "w-fifo-order", overlap.w_fifo_order),
        Rule("PP022", "formula-assumption", overlap.formula_assumptions, needs_acyclic=True),
        Rule("PP023", "memory-formula", family_memory.memory_formula, needs_acyclic=True),
        Rule("PP030", "p2p-fifo-order", p2p.fifo_order),
        Rule("PP031", "p2p-deadlock", p2p.p2p_deadlock),
        Rule("PP032", "send-before-data", p2p.send_before_data),
        Rule("PP033", "recv-after-use", p2p.recv_after_use),
        Rule("PP040", "backward-before-onload", moe.backward_before_onload, needs_acyclic=True),
        Rule("PP041", "onload-without-offload", moe.onload_without_offload),
        Rule("PP042", "ep-a2a-order", moe.ep_a2a_order),
        Rule("PP043", "paired-self-dependency", moe.paired_self_dependency),
        Rule("PP044", "incomplete-moe-layer", moe.incomplete_layers),
        Rule("PP050", "ipc-reuse-before-release", wu.ipc_reuse_before_release, needs_acyclic=True),
        Rule("PP051", "bucket-over-buffer", wu.bucket_over_buffer),
        Rule("PP052", "tensor-over-bucket", wu.tensor_over_bucket),
        Rule("PP053", "broadcast-order", wu.broadcast_order),
        Rule("PP054", "h2d-buffer-reuse", wu.h2d_buffer_reuse, needs_acyclic=True),
        Rule("PP055", "incomplete-update", wu.incomplete_update),
        Rule("PP056", "buffers-over-memory", wu.buffers_over_memory),
    )


def run_checks(schedule: Schedule, *, memory_limit: float | None = None, p2p: str = "nccl",
               select: set[str] | None = None) -> list[Violation]:
    """Run every rule (or the codes in ``select``) and return all violations, errors first.

    Raises:
        InputError: ``p2p`` is not one of :data:`P2P_MODES`.
    """
    if p2p not in P2P_MODES:
        raise InputError(f"--p2p: got '{p2p}', expected one of {', '.join(P2P_MODES)}")
    return check_context(Context(schedule, memory_limit=memory_limit, p2p=p2p), select=select)


def check_context(ctx: Context, *, select: set[str] | None = None) -> list[Violation]:
    """Run the rules on a context whose DAG and order the caller reuses (plan, benchmarks)."""
    out: list[Violation] = []
    for rule in rule_table():
        if select is not None and rule.code not in select:
            continue
        if rule.needs_acyclic and ctx.order is None:
            continue
        out.extend(rule.fn(ctx))
    out.sort(key=lambda v: (v.severity != "error", v.code))
    return out
