"""The report of ``pptl diagnose``: text (the cause first, then the evidence, the pending calls per rank,
the cycle) and the JSON form with every fact as fields.
"""
from __future__ import annotations

from typing import Any

from pptl.diagnose.cause import evidence
from pptl.diagnose.counts import counts_dict
from pptl.diagnose.ops import NcclOp
from pptl.diagnose.waits import Diagnosis
from pptl.formats._quote import counted

__all__ = ["to_text", "to_dict"]


def to_text(d: Diagnosis, *, per_rank: int = 6) -> str:
    """The report: per rank the ops around its front, then the cycle and the mismatches."""
    lines: list[str] = [d.cause.text] if d.cause.text else []
    ev = evidence(d.counts, d.plan_next)
    if ev:
        lines.append("evidence:")
        lines += [f"  {t}" for t in ev]
    for r in sorted(d.ops):
        seq = d.ops[r]
        f = d.front.get(r)
        done = sum(o.done for o in seq)
        if d.no_completion and not d.cycle:
            lines.append(f"rank {r}: {counted(len(seq), 'op')}, none recorded as completed or waiting")
            continue
        if f is None:
            lines.append(f"rank {r}: {counted(len(seq), 'op')}, all completed")
            continue
        lines.append(f"rank {r}: {done} of {counted(len(seq), 'op')} completed; first not completed: {f.label} ({f.state})")
        shown = [o for o in seq[f.index:] if not o.done][:per_rank]
        for o in shown:
            lines.append(f"  {o.index:>5}  {o.state:<9}  {o.label}")
        rest = sum(1 for o in seq[f.index:] if not o.done) - len(shown)
        if rest > 0:
            lines.append(f"  ... {rest} more not completed")
    if d.cycle:
        text = " ".join(f"{n} -> ({w})" for n, w in d.cycle) + f" {d.cycle[0][0]}"
        lines.append(f"hang: wait-for cycle across ranks {', '.join(map(str, d.cycle_ranks))}: {text}")
    elif d.no_completion:
        pass  # the note says why neither a hang nor its absence is shown
    elif d.hung:
        lines.append("no wait-for cycle among the pending ops (a rank may have stopped issuing, or its dump is missing)")
    else:
        lines.append("no hang: every op completed")
    lines += [f"order: {t}" for t in d.order]
    lines += [f"blocked: {t}" for t in d.blocked]
    lines += [f"collective mismatch: {t}" for t in d.collectives]
    lines += [f"note: {t}" for t in d.notes]
    return "\n".join(lines)


def to_dict(d: Diagnosis) -> dict[str, Any]:
    """JSON-ready form (``--output json``): the cause, the evidence and every fact as fields."""

    def op(o: NcclOp) -> dict[str, Any]:
        return {"index": o.index, "kind": o.kind, "group": o.group, "group_desc": o.group_desc, "peer": o.peer, "seq": o.seq, "state": o.state,
                "sizes": [list(s) for s in o.sizes], "dtypes": list(o.dtypes), "epoch": o.epoch, "op": o.name or None, "step": o.step, "label": o.label}

    return {
        "source": d.source,
        "hung": d.hung,
        "completion_recorded": not d.no_completion,
        "ranks": {str(r): {"ops": len(v), "completed": sum(o.done for o in v),
                           "front": op(d.front[r]) if d.front.get(r) is not None else None,
                           "pending": [op(o) for o in v if not o.done]}
                  for r, v in sorted(d.ops.items())},
        "cycle": [{"node": n, "then": w} for n, w in d.cycle],
        "cycle_ranks": list(d.cycle_ranks),
        "cycle_ops": [list(n) for n in d.cycle_ops],
        "order_mismatches": list(d.order),
        "blocked": list(d.blocked),
        "collective_mismatches": list(d.collectives),
        "size_mismatches": list(d.sizes),
        "notes": list(d.notes),
        "cause": {"kind": d.cause.kind, "ranks": list(d.cause.ranks), "text": d.cause.text},
        "evidence": evidence(d.counts, d.plan_next),
        **counts_dict(d.counts, d.plan_next, op),
    }
