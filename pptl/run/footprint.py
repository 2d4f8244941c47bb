"""What one chunk of ``pptl run``'s MLP holds between its passes, in bytes (pure: no torch).

A block is ``h + Linear(4h, h)(GELU(Linear(h, 4h)(h)))`` on a ``tokens x hidden`` input (one
"unit": ``tokens * hidden`` elements). Counting the tensors :mod:`pptl.run.model` keeps:

- **F to its backward** (autograd's saved tensors): per block the first Linear's input ``h`` (1
  unit), the GELU's input ``u`` (4) and the second Linear's input ``a`` (4): 9 units. The chunk's
  input is not counted (the step holds it to its end anyway: a micro-batch's input on stage 0, a
  received message elsewhere), nor its output (the next chunk's input or a sent message). The last
  stage's loss saves the float32 residual ``y - target``: one unit at 4 bytes an element.
- **I's end to W's end**: per block the two Linear inputs (``h``, ``a``: 5 units) and the two
  output gradients (``du``: 4, ``dd``: 1): 10 units. Again less the chunk's input, and on every
  stage but the last less the last block's ``dd``, which is the gradient the chunk received (the
  residual add passes it on unchanged).

So a chunk waiting for its W holds *more* than its forward did: I frees ``u`` (4 units per block)
and makes ``du`` and ``dd`` (5). The plan's memory model says this with ``w_activation`` =
until_w / forward (above 1 here: 78/71 for 8 blocks); the weight gradients' inputs are what the
split keeps, whatever share of the forward's tensors they are.

- **While a full backward (B) runs**, beyond the forward's tensors: B is I then W
  (:mod:`pptl.run.model`). I frees a block's saved tensors as it leaves it and keeps, for W, each
  block's ``du`` (4 units) and ``dd`` (1): a unit a block net of the GELU input ``u`` (4) it frees.
  It is busiest in the last block it visits (the chunk's first), where the ``da`` and ``du`` it makes
  (4 units each) sit beside what it kept from the ``L - 1`` blocks above: ``L + 7`` units. W adds each
  weight gradient into ``.grad`` by its GEMM and makes no tensor of that size. On the last stage the
  loss comes first: the mean's gradient, ``r ** 1``, ``2 r`` and their product with the gradient, four
  ``tokens x hidden`` float32 tensors beside the residual ``r``; then ``r`` goes and the output's
  gradient (1 unit) arrives, and the blocks' peak sits on that. B holds the larger of the two,
  and so does an I of a split backward while it runs: B's busiest moment is in its I.

Not counted: the GEMM libraries' workspaces (cuBLAS and cuBLASLt keep one per handle and stream for
the life of the process), 0-dim scalars, the message buffers (``pptl run`` keeps every SEND and RECV
tensor to the step's end), and the weight gradients: a step drops them at its start and a chunk's
first W (or B) makes them again, so they come and go at times of their own, and ``pptl run``
measures the activations without them (:mod:`pptl.run.memory`).

NOTE: the CPU allocator frees what autograd frees, in its order, and matches ``full_backward`` byte
for byte (``tests/test_run_footprint.py``, 1 to 4 blocks). Before B ran as I then W it was one
autograd pass, busiest where the second Linear's backward returned ``da``, its weight gradient
(``4h x h``) and bias gradient at once (4 units and a weight): on an H200 (torch 2.11) that B's peak
was 64-72 MiB above the count at hidden 2048, measured by ``bench/gpu_backward_peak.py``
(docs/benchmarks.md). Read op by op on 2 H200s (:mod:`pptl.run.memory`, 2026-11-27), the I then W
ops peaked in a W, 16 units (tokens x hidden) above this count at hidden 1024 and 2048 alike: the
CUDA reduction of the first Linear's bias gradient (``dU.sum(0)``) staged 8 bytes per element of
its 4-unit ``dU``, which the CPU kernel does not. W now makes bias gradients by a GEMV
(:func:`pptl.run.model.add_bias_grad`), with no temporary on either device.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pptl.config import Workload
from pptl.ir import Schedule
from pptl.op import COMPUTE_KINDS

__all__ = ["Footprint", "chunk_footprint", "planned_peaks", "ELEMENT_BYTES"]

ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

#: Units (tokens x hidden elements) a block saves for its backward: h, u (4h wide), a (4h wide).
_SAVED = 1 + 4 + 4
#: Units a block holds from I to W: Linear inputs h and a, output gradients du and dd.
_UNTIL_W = 1 + 4 + 4 + 1


@dataclass(frozen=True)
class Footprint:
    """Bytes one chunk (one stage, one micro-batch) holds, beyond its input and output."""

    forward: int
    """From F's end to the end of its backward (B), or of I."""
    until_w: int
    """From I's end to W's end (split backward)."""
    full_backward: int = 0
    """Held on top of ``forward`` at the busiest moment of a full backward (B)."""

    @property
    def w_activation(self) -> float:
        """``until_w`` as a share of ``forward``: the plan's ``w_activation`` for this chunk."""
        return self.until_w / self.forward if self.forward else 0.0


def chunk_footprint(workload: Workload, stage: int, *, last: bool) -> Footprint:
    """The bytes of :class:`Footprint` for ``stage`` of ``workload`` (``last``: the loss is here)."""
    layers = workload.layers_of(stage)
    unit = workload.tokens * workload.hidden
    e = ELEMENT_BYTES[workload.dtype]
    # The loss's backward: four float32 tokens x hidden tensors (see the module's docstring).
    loss = 4 * 4 * unit if last else 0
    if layers == 0:
        return Footprint(4 * unit if last else 0, 0, loss)
    forward = (_SAVED * layers - 1) * unit * e + (4 * unit if last else 0)
    until_w = (_UNTIL_W * layers - 1 - (0 if last else 1)) * unit * e
    # I in the chunk's first block: its da and du beside a unit kept net for each block above.
    block = (layers + 7) * unit * e
    if last:  # the float32 residual has gone and the output's gradient (1 unit) has come
        block += unit * e - 4 * unit
    return Footprint(forward, until_w, max(loss, block))


def planned_peaks(schedule: Schedule, start: Sequence[float], end: Sequence[float]) -> dict[int, int]:
    """Per rank, the most bytes of chunk activations the plan's timing (``start``, ``end``: a
    simulation's) says ``pptl run`` holds: F adds its stage's ``forward`` at its start, B holds its
    ``full_backward`` while it runs and frees both at its end, I holds the same ``full_backward``
    while it runs (B's busiest moment is in its I) and trades ``forward`` for ``until_w`` at its
    end, and W frees that at its end (at equal times a free comes first, as in
    :func:`pptl.simulate.memory_events_of`). FB is its F and its pair's B at once. A plan without
    backwards holds none: the run builds no graph for it."""
    workload = schedule.config.workload if schedule.config is not None else Workload()
    last = schedule.num_stages - 1
    if not any(op.kind in ("B", "I", "W", "FB") for op in schedule.ops):
        return {r: 0 for r in range(schedule.pp)}
    fps = {st: chunk_footprint(workload, st, last=st == last) for st in range(schedule.num_stages)}
    events: dict[int, list[tuple[float, int, int]]] = {r: [] for r in range(schedule.pp)}
    for i, op in enumerate(schedule.ops):
        if op.kind not in COMPUTE_KINDS:
            continue
        fp, ev = fps[op.stage], events[op.rank]
        if op.kind in ("F", "FB"):
            ev.append((start[i], 1, fp.forward))
        if op.kind == "B":
            ev.append((start[i], 1, fp.full_backward))
            ev.append((end[i], 0, -fp.forward - fp.full_backward))
        if op.kind == "FB":  # its backward half is the pair's (stage, micro-batch)
            pair = fps[op.pair[0]]  # type: ignore[index]
            ev.append((start[i], 1, pair.full_backward))
            ev.append((end[i], 0, -pair.forward - pair.full_backward))
        if op.kind == "I":
            ev.append((start[i], 1, fp.full_backward))
            ev.append((end[i], 0, fp.until_w - fp.forward - fp.full_backward))
        if op.kind == "W":
            ev.append((end[i], 0, -fp.until_w))
    peaks = {}
    for r, ev in events.items():
        cur = best = 0
        for _, _, delta in sorted(ev):
            cur += delta
            best = max(best, cur)
        peaks[r] = best
    return peaks
