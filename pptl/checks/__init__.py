"""The checker: small rules, each one function with a stable code, over one schedule and its DAG.

A rule returns every violation it finds (code, one-line message, op ids); it never raises on an
invalid schedule. Raising is for misuse. Adding a rule is one function in a module here plus one
line in ``RULES``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

import networkx as nx

from pptl.dag import build_dag
from pptl.errors import InputError
from pptl.ir import Schedule

__all__ = ["Violation", "Context", "Rule", "P2P_MODES", "run_checks", "check_context", "rule_table"]

P2P_MODES = ("nonblocking", "nccl", "blocking")


@dataclass(frozen=True, slots=True)
class Violation:
    code: str
    message: str
    ops: tuple[str, ...] = ()
    severity: str = "error"
    """"error" (the schedule is invalid) or "warning" (a formula's assumption fails, etc.)."""
    line: int | None = None
    """Line of the source file the violation points at (set by readers that know it, e.g. CSV)."""

    def to_dict(self) -> dict:
        out = {"code": self.code, "severity": self.severity, "message": self.message, "ops": list(self.ops)}
        if self.line is not None:
            out["line"] = self.line
        return out


@dataclass
class Context:
    """What rules read. The DAG, topological order and simulation are built once, on demand."""

    schedule: Schedule
    memory_limit: float | None = None
    p2p: str = "nccl"
    options: dict = field(default_factory=dict)

    @cached_property
    def dag(self) -> nx.DiGraph:
        return build_dag(self.schedule)

    @cached_property
    def order(self) -> list[int] | None:
        """A topological order, or None when the DAG has a cycle."""
        try:
            return list(nx.topological_sort(self.dag))
        except nx.NetworkXUnfeasible:
            return None

    @cached_property
    def simulation(self):
        from pptl.simulate import simulate

        return simulate(self.schedule, dag=self.dag, order=self.order)

    @cached_property
    def ids(self) -> list[str]:
        return [op.id for op in self.schedule.ops]


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    fn: Callable[[Context], list[Violation]]
    needs_acyclic: bool = False
    """Skip when the DAG has a cycle (the deadlock rule has reported it)."""


@functools.cache
def rule_table() -> tuple[Rule, ...]:
    """Every rule, by code. Adding a rule is one line here."""
    from pptl.checks import comm, memory, moe, order, overlap, p2p, structure
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
