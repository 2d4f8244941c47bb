"""How a SEND finds its RECV: the message key, defined once.

A message of flow ``F`` (activations) goes from stage ``s`` to ``s + 1`` of its direction, one of
flow ``B`` (gradients) from ``s`` to ``s - 1``. A SEND and the RECV of its data share
:func:`message_key` (flow, direction, sender's stage, mb): the training facts
(:mod:`pptl.deps`), the checker's P2P rules, the derived issue order,
``pptl run``'s channels and calibration's message latency all pair messages with it.

A leaf module (it imports nothing of pptl): the facts, the rules and the runtime all read it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, overload

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["message_key", "sender_stage"]


class _Message(Protocol):
    """A SEND or RECV: a plan's :class:`~pptl.ir.Op` or a timeline's event."""

    @property
    def kind(self) -> str: ...
    @property
    def flow(self) -> str: ...
    @property
    def direction(self) -> int: ...
    @property
    def stage(self) -> int: ...
    @property
    def mb(self) -> int: ...


@overload
def sender_stage(flow: str, receiver_stage: int) -> int: ...
@overload
def sender_stage(flow: str, receiver_stage: NDArray[Any]) -> NDArray[Any]: ...


def sender_stage(flow: str, receiver_stage: Any) -> Any:
    """The stage that sends a message of ``flow`` received at ``receiver_stage`` (an int, or a
    numpy array of them): the previous stage for activations (F), the next for gradients (B)."""
    return receiver_stage - 1 if flow == "F" else receiver_stage + 1


def message_key(op: _Message) -> tuple[str, int, int, int]:
    """(flow, direction, sender's stage, mb): the same for a SEND and the RECV of its data.

    The one definition of which SEND a RECV matches (by identity, as tags would): the checker's
    PP008 and PP030, the derived issue order, ``pptl run``'s channels and calibration's message
    latency all pair messages with it.
    """
    if op.kind == "SEND":
        return (op.flow, op.direction, op.stage, op.mb)
    return (op.flow, op.direction, sender_stage(op.flow, op.stage), op.mb)
