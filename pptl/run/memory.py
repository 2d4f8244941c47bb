"""A rank's activation memory measured op by op: what ``pptl run`` compares with
:func:`pptl.run.footprint.planned_peaks`.

The allocator's peak over a step less what the rank held before its first step is not the
activations' peak once a step drops its weight gradients at its start (:mod:`pptl.run.model`): a
chunk's gradients come back with its first W (or B), so a rank whose activations peak before then
(v-min's rank 0 on 2 ranks: three chunks held at the end of the first I, before any W) measures
its peak less the gradients it has not made yet, and a later, lower moment with every gradient
back wins. Message buffers and the GEMM libraries' workspaces come and go at times of their own
too.

So, on one step after the measured ones, the executor reports after every op (:class:`Probe`):
the allocator's peak since the previous op (the caching allocator counts on the host, in the order
ops are issued, which is the compute lane's order) and the tensors it holds outside the activations
at the op's start and end: the weight gradients made so far, the message buffers, the chunks'
inputs and outputs and the input gradients waiting for their consumer (what
:mod:`pptl.run.footprint` leaves out of a chunk). An op's activation is its peak less what the rank
held when the step began (weights, inputs, workspaces) and less those tensors; the rank's is the
largest over the step's ops (:func:`activation_peak`).
"""
from __future__ import annotations

import pickle
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Mapping, Sequence

if TYPE_CHECKING:
    import torch

__all__ = ["Sample", "ActivationPeak", "activation_peak", "Probe", "history"]


@dataclass(frozen=True)
class Sample:
    """One op of the memory step."""

    op: int
    """The op's index in the plan."""
    peak: int
    """The allocator's most bytes from the previous op's end to this op's end."""
    outside: int
    """Bytes of the tensors held outside the activations at the op's start or end (each storage once)."""
    at_us: int = field(default=0, compare=False)
    """Host time (microseconds) the reading was taken: where an allocator history (:func:`history`)
    splits into ops."""


@dataclass(frozen=True)
class ActivationPeak:
    """The most bytes of activations a rank held over a step, and the op it held them in."""

    bytes: int
    op: int


def activation_peak(base: int, samples: Iterable[Sample]) -> ActivationPeak | None:
    """The largest ``peak - base - outside`` over ``samples`` (the first of equals); None for none.

    Example: a rank that held 100 bytes at the step's start, then an op that reached 180 with 30 of
    them message buffers, then one that reached 170 with 50: 50 bytes, in the first op.
    """
    best: ActivationPeak | None = None
    for s in samples:
        held = s.peak - base - s.outside
        if best is None or held > best.bytes:
            best = ActivationPeak(held, s.op)
    return best


class Probe:
    """Reads a CUDA device's allocator around every op of one step (see the module's docstring).

    The executor calls :meth:`begin` once the step's own state is made and :meth:`after` when each
    op has been issued, with the storages (data pointer -> bytes) it holds outside the activations.
    Resets the allocator's peak statistics: a run reads its whole-run peak before this step.
    """

    def __init__(self, device: "torch.device") -> None:
        self.device = device
        self.base = 0
        self.samples: list[Sample] = []

    def begin(self) -> None:
        import torch

        torch.cuda.reset_peak_memory_stats(self.device)
        self.base = torch.cuda.memory_allocated(self.device)
        self.samples = []

    def after(self, op: int, outside: Mapping[int, int]) -> None:
        import torch

        peak = torch.cuda.max_memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.samples.append(Sample(op, peak, sum(outside.values()), time.time_ns() // 1000))

    def peak(self) -> ActivationPeak | None:
        return activation_peak(self.base, self.samples)


@contextmanager
def history(folder: str | None, name: str, probe: Probe, ids: Sequence[str]) -> Iterator[None]:
    """With ``folder`` (``PPTL_MEMORY_HISTORY``), record the CUDA allocator's history (every
    allocation and free with its Python stack) over the block and write it, with the probe's
    readings (each with the time it was taken), to ``folder/name.pickle``: what shows which
    tensors make an op's peak. Without, nothing. A diagnostic: the recording slows every allocation."""
    if not folder:
        yield
        return
    import torch

    torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    try:
        yield
    finally:
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        from pptl.fileio import atomic_write

        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        data = {"snapshot": snapshot, "base": probe.base,
                "samples": [(s.op, ids[s.op], s.peak, s.outside, s.at_us) for s in probe.samples]}
        atomic_write(out / f"{name}.pickle", pickle.dumps(data))
