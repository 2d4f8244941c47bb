"""One NCCL call as a rank issued it, the unit every part of ``pptl diagnose`` reasons about."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

__all__ = ["NcclOp", "ranks_text", "dtypes_differ", "P2P", "sizes_may_differ", "sizes_differ", "a2a_unbalanced"]

P2P = ("send", "recv")


def _is_a2a(kind: str) -> bool:
    """all_to_all, all_to_all_single, all_to_all_v_single: each rank sends and receives its own split."""
    return kind.startswith("all_to_all")


def sizes_may_differ(kind: str) -> tuple[bool, bool]:
    """(inputs, outputs): whether members of one collective of ``kind`` may legitimately record
    different element counts there. As torchfrtrace matches them (``Op.match``): an all_to_all's splits
    differ per rank (only the group's totals in and out must agree), a scatter's input is on its root
    only, a gather's output too; the ``_v`` variants take one size per rank."""
    if _is_a2a(kind):
        return True, True
    return kind in ("scatter", "all_gather_v"), kind in ("gather", "reduce_scatter_v")


def sizes_differ(calls: "Sequence[NcclOp]") -> bool:
    """Members' calls of one kind at one sequence number move different element counts where they
    must agree (inputs, and outputs where every member records them; all_to_all: see
    :func:`a2a_unbalanced`)."""
    if not calls:
        return False
    ins, outs = sizes_may_differ(calls[0].kind)
    if not ins and len({o.numels for o in calls}) > 1:
        return True
    return not outs and all(o.out_sizes for o in calls) and len({o.out_numels for o in calls}) > 1


def a2a_unbalanced(calls: "Sequence[NcclOp]") -> tuple[int, int] | None:
    """All members' all_to_all at one sequence number: (elements sent in all, received in all) where they
    differ (torchfrtrace's "Input/output mismatch": total input numel vs total output numel), else None."""
    if not calls or not _is_a2a(calls[0].kind) or not all(o.sizes and o.out_sizes for o in calls):
        return None
    total_in, total_out = sum(sum(o.numels) for o in calls), sum(sum(o.out_numels) for o in calls)
    return (total_in, total_out) if total_in != total_out else None


@dataclass(frozen=True)
class NcclOp:
    """One NCCL call as a rank issued it."""

    rank: int
    index: int
    """Position in the rank's issue order (P2P and collectives together)."""
    group: str
    kind: str
    peer: int
    """Global rank at the other end (send/recv), else -1."""
    seq: int
    """p2p_seq_id of a send/recv, collective_seq_id of a collective."""
    nth: int
    """Send/recv: 0-based position among this rank's ops of the same kind to the same peer in the group."""
    sizes: tuple[tuple[int, ...], ...]
    state: str
    name: str = ""
    """The plan's op id (``--plan``), else empty."""
    step: int = -1
    """The plan step the op belongs to (``--plan``), else -1."""
    flow: str = ""
    """What the plan's SEND/RECV carries (``--plan``): "F" activations, "B" gradients, else empty."""
    group_desc: str = ""
    """The group's description (``pg_desc``: ``default_pg``, or what ``new_group(group_desc=...)`` gave)."""
    dtypes: tuple[str, ...] = ()
    """torch's dtype name per tensor (``Float``), as ``sizes``; empty where the dump records none."""
    epoch: int = 0
    """Collectives: how many times this rank's numbers of the group started again *after* this call (a
    group destroyed and made again under the same name numbers its calls from #1 again). Counted back
    from the newest so that the numbering a hang is in is 0 on every rank, also where a ring buffer
    that wrapped lost the older numberings."""
    out_sizes: tuple[tuple[int, ...], ...] = ()
    """Collectives: the output tensors' shapes (empty where the dump records none)."""

    @property
    def done(self) -> bool:
        return self.state == "completed"

    @property
    def group_label(self) -> str:
        """How the group is named to users: its description when it has one (``ep_dispatch``), else its id;
        after its numbers started again, which time it is (two calls "#1" of one group differ)."""
        name = self.group_desc if self.group_desc not in ("", "undefined") else self.group
        if not self.epoch:
            return name
        return f"{name}, before its numbers restarted" + (f" {self.epoch} times" if self.epoch > 1 else "")

    @property
    def match_seq(self) -> tuple[int, int]:
        """What a collective meets its group's members at: the sequence number within the same numbering
        (ordered oldest first)."""
        return (-self.epoch, self.seq)

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.kind == "send":
            return f"r{self.rank} send->{self.peer} #{self.nth + 1} (group {self.group_label})"
        if self.kind == "recv":
            return f"r{self.rank} recv<-{self.peer} #{self.nth + 1} (group {self.group_label})"
        return f"r{self.rank} {self.kind} #{self.seq} (group {self.group_label})"

    @property
    def is_p2p(self) -> bool:
        return self.kind in P2P

    @property
    def numels(self) -> tuple[int, ...]:
        """Element counts per tensor: NCCL moves counts, not shapes (torch's pipelining sends a 0-d
        tensor that the peer receives as shape [1])."""
        return tuple(math.prod(s) for s in self.sizes)

    @property
    def out_numels(self) -> tuple[int, ...]:
        """Element counts per output tensor (collectives)."""
        return tuple(math.prod(s) for s in self.out_sizes)

    @property
    def shape(self) -> str:
        """``8192x4096``, ``[]`` for none."""
        return " ".join("x".join(map(str, s)) or "[]" for s in self.sizes) or "[]"

    @property
    def dtype(self) -> str:
        """``Float``, ``Float/Long`` for tensors of several types, "" where the dump records none."""
        return "/".join(dict.fromkeys(self.dtypes))


def dtypes_differ(a: NcclOp, b: NcclOp) -> bool:
    """Both calls record their dtypes and they differ (a dump without them is no evidence)."""
    return bool(a.dtypes) and bool(b.dtypes) and a.dtypes != b.dtypes


def ranks_text(ranks: Iterable[int]) -> str:
    """``0, 1, 2, 3, 5`` -> ``0-3, 5``."""
    rs = sorted(set(ranks))
    parts: list[str] = []
    k = 0
    while k < len(rs):
        j = k
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        parts.append(f"{rs[k]}-{rs[j]}" if j - k >= 2 else ", ".join(map(str, rs[k:j + 1])))
        k = j + 1
    return ", ".join(parts)
