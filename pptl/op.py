"""One operation of a schedule (:class:`Op`): the row type of :class:`pptl.optable.OpTable`.

A leaf module: the table, the facts and the schedule (:mod:`pptl.ir`) all import it, and it
imports nothing of pptl. The vocabulary is :mod:`pptl.ir`'s.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["COMPUTE_KINDS", "COMM_KINDS", "Op"]

#: Kinds of the training families. ``FB`` is one op that runs F of one micro-batch and B of
#: another at once; its ``pair`` names the B half.
COMPUTE_KINDS = frozenset({"F", "B", "I", "W", "FB"})
COMM_KINDS = frozenset({"SEND", "RECV"})


@dataclass(frozen=True, slots=True)
class Op:
    """One unit of work on one lane of one rank.

    Fields that do not apply to a kind keep their default (``-1`` or empty).
    """

    kind: str
    """Op kind: F, B, I, W, FB, SEND, RECV, or one a family or a file format declares
    (:func:`pptl.kinds.known_kinds`)."""
    rank: int
    """The rank that runs the op."""
    lane: str
    """The serial resource on that rank."""
    stage: int = -1
    """Virtual stage index along the op's direction (for FB: the F half's stage)."""
    mb: int = -1
    """Micro-batch index (for FB: the F half's micro-batch)."""
    direction: int = 0
    """0, or 1 for the reverse flow of DualPipe."""
    chunk: int = -1
    """Which model chunk of the rank holds ``stage``."""
    pair: tuple[int, int, int] | None = None
    """FB: (stage, mb, direction) of the B half. On an F of a family that overlaps passes without
    FB ops (moe-1f1b-overlap): the backward this forward runs alongside (no training fact)."""
    peer: int = -1
    """SEND/RECV and broadcasts: the other rank (for BCAST, the source)."""
    flow: str = ""
    """SEND/RECV: what is carried, "F" (activations) or "B" (gradients)."""
    sub: int = -1
    """Layer of a MoE step (within its stage)."""
    label: str = ""
    """A family's display name for the op (``Attn``, ``EP-D``, ``Offload``...)."""
    payload: float = 0.0
    """Bytes moved, for communication and copies."""
    cost: str = ""
    """Cost key; empty means the kind."""
    bucket: int = -1
    """Weight update: the bucket's position in the broadcast order."""
    half: int = -1
    """Weight update: the IPC buffer half the op writes or reads (-1: none, such as an H2D into
    the H2D buffer)."""

    @property
    def id(self) -> str:
        """A stable, human-readable id, e.g. ``r0/compute/F s3 mb5``."""
        parts = [f"r{self.rank}/{self.lane}/{self.kind}"]
        if self.flow:
            parts[0] += f"_{self.flow}"
        if self.label:
            parts.append(self.label)
        if self.stage >= 0:
            parts.append(f"s{self.stage}")
        if self.mb >= 0:
            parts.append(f"mb{self.mb}")
        if self.direction:
            parts.append(f"d{self.direction}")
        if self.sub >= 0:
            parts.append(f"#{self.sub}")
        if self.bucket >= 0:
            parts.append(f"bucket{self.bucket}")
        if self.half >= 0:
            parts.append(f"half{self.half}")
        if self.pair is not None:
            ps, pm, pd = self.pair
            parts.append(f"+B s{ps} mb{pm}" + (f" d{pd}" if pd else ""))
        if self.peer >= 0 and self.kind in COMM_KINDS:
            parts.append(("->" if self.kind == "SEND" else "<-") + f"r{self.peer}")
        return " ".join(parts)

    @property
    def cost_key(self) -> str:
        return self.cost or self.kind

    def to_dict(self) -> dict[str, Any]:
        """Only the fields that differ from their defaults (keeps plan files small)."""
        out: dict[str, Any] = {"kind": self.kind, "rank": self.rank, "lane": self.lane}
        for name, default in _OPTIONAL_DEFAULTS.items():
            value = getattr(self, name)
            if value != default:
                out[name] = list(value) if name == "pair" else value
        return out


def _op_init(self: Op, kind: str, rank: int, lane: str, stage: int = -1, mb: int = -1, direction: int = 0,
             chunk: int = -1, pair: tuple[int, int, int] | None = None, peer: int = -1, flow: str = "",
             sub: int = -1, label: str = "", payload: float = 0.0, cost: str = "", bucket: int = -1,
             half: int = -1) -> None:
    # The generated __init__ of a frozen dataclass goes through object.__setattr__ once per field,
    # which made building a 400k-op plan spend most of its time here; the slot descriptors' own
    # setters do the same work about twice as fast. Same signature and defaults; still frozen.
    _S_KIND(self, kind)
    _S_RANK(self, rank)
    _S_LANE(self, lane)
    _S_STAGE(self, stage)
    _S_MB(self, mb)
    _S_DIRECTION(self, direction)
    _S_CHUNK(self, chunk)
    _S_PAIR(self, pair)
    _S_PEER(self, peer)
    _S_FLOW(self, flow)
    _S_SUB(self, sub)
    _S_LABEL(self, label)
    _S_PAYLOAD(self, payload)
    _S_COST(self, cost)
    _S_BUCKET(self, bucket)
    _S_HALF(self, half)


(_S_KIND, _S_RANK, _S_LANE, _S_STAGE, _S_MB, _S_DIRECTION, _S_CHUNK, _S_PAIR, _S_PEER, _S_FLOW, _S_SUB, _S_LABEL,
 _S_PAYLOAD, _S_COST, _S_BUCKET, _S_HALF) = (Op.__dict__[name].__set__ for name in Op.__slots__)
assert Op.__slots__ == ("kind", "rank", "lane", "stage", "mb", "direction", "chunk", "pair", "peer", "flow", "sub",
                        "label", "payload", "cost", "bucket", "half"), "keep _op_init in step with Op's fields"
_op_init.__qualname__ = "Op.__init__"
Op.__init__ = _op_init  # type: ignore[method-assign]

_OPTIONAL_DEFAULTS: dict[str, Any] = {
    "stage": -1, "mb": -1, "direction": 0, "chunk": -1, "pair": None, "peer": -1, "flow": "",
    "sub": -1, "label": "", "payload": 0.0, "cost": "", "bucket": -1, "half": -1,
}
