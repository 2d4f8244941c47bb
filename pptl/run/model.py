"""The synthetic workload ``pptl run`` executes: one chunk of MLP blocks per (direction, stage).

Same block as bench/torch_pp_anchor.py: ``x + Linear(4h, h)(GELU(Linear(h, 4h)(x)))``, written
functionally so the backward can be split the way zero-bubble runtimes split it:

- **I** (input gradient): one ``torch.autograd.grad`` call for the chunk's input (stage 0: the
  first Linear's output). Autograd then runs only the activation-gradient kernels; no
  weight-gradient matmul runs, and the graph is freed node by node as it goes. A hook on every
  Linear's output keeps the gradient that flows through it (dU).
- **W** (weight gradient): ``dW += dU^T X`` and ``db += dU^T 1`` per Linear, from the saved
  Linear inputs X and the output gradients dU that I kept.

The Linear outputs themselves are not kept: a block's second Linear output is needed by nothing
after the residual add, and holding the outputs through I would keep every GELU input alive until
the last node ran, beside the gradients I makes (half a chunk more at I's end). What a chunk holds
when is counted in :mod:`pptl.run.footprint`.
- **B** is I then W in one op, on a forward that kept its Linear inputs: each weight gradient is
  accumulated by its own GEMM (``addmm_`` into ``.grad``). Through autograd, every parameter's
  gradient of every micro-batch would be a new tensor added to ``.grad`` by a separate kernel: on
  the anchor workload (4 blocks, hidden 4096) 1 GiB read twice and written once a micro-batch, about
  0.65 ms of a B's 7 (2x H200, 2026-11-26). A forward that kept nothing runs B through autograd.

A step starts with every ``.grad`` at None (the executor drops them, as torch's
``zero_grad(set_to_none=True)``): the first micro-batch's gradient becomes ``.grad`` as it is
(autograd hands its buffer over; W writes it with ``mm``), and only later ones add. Zeroing the
buffers instead costs a memset of every gradient and one more full read-add-write pass per step
(on the anchor workload, 1 GiB of bf16 gradients a rank: about 1 ms a step on an H200).

Weights, inputs and targets come from generators seeded by the *logical* stage (the stage index
along the data flow) and (direction, micro-batch), so every copy of a stage (DualPipe holds two)
and the single-process reference in :mod:`pptl.run.verify` start from the same numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from pptl.config import Workload

__all__ = ["DTYPES", "Chunk", "Activation", "make_chunk", "zero_grad_buffers", "make_input", "make_target", "loss_of",
           "forward", "apply_chunk", "backward_full", "backward_input", "backward_weight", "add_bias_grad"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_SEED = 20_240_611


@dataclass
class Chunk:
    """The weights of one (direction, stage) copy: per layer (W_up, b_up, W_down, b_down)."""

    stage: int
    params: list[torch.Tensor]
    ones: dict[tuple[int, torch.dtype], torch.Tensor] = field(default_factory=dict)
    """Vectors of ones for the bias gradients' GEMVs (:func:`add_bias_grad`), one per length and dtype:
    made once, gone with the chunk (a plan's executor), so nothing outlives the plan."""

    def layers(self) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
        p = self.params
        return [tuple(p[k:k + 4]) for k in range(0, len(p), 4)]  # type: ignore[misc]


@dataclass
class Activation:
    """What one forward of one (direction, stage, mb) keeps for its backward."""

    x: torch.Tensor | None
    """The chunk's input as a leaf with ``requires_grad`` (None on stage 0: no input gradient)."""
    y: torch.Tensor
    """The chunk's output (on the last stage: the scaled loss)."""
    linear_in: list[torch.Tensor] = field(default_factory=list)
    """The input of every Linear, in parameter order (for W)."""
    linear_out: list[torch.Tensor] = field(default_factory=list)
    """Stage 0 of a split backward: the first Linear's output, what I asks autograd to reach (the
    chunk's input needs no gradient there). Its GELU saves it anyway: holding it costs nothing."""
    linear_grad: list[torch.Tensor] | None = None
    """Filled during I by the hooks on every Linear's output: the gradients W consumes."""


def _gen(device: torch.device, *key: int) -> torch.Generator:
    g = torch.Generator(device=device)
    seed = _SEED
    for k in key:
        seed = (seed * 1_000_003 + k + 7) % (2**61 - 1)
    g.manual_seed(seed)
    return g


def make_chunk(workload: Workload, stage: int, device: torch.device) -> Chunk:
    """Weights of logical ``stage`` (identical for every copy), with zeroed gradient buffers (what a
    run's memory counts as its base; each step drops them and makes them again)."""
    h, dtype = workload.hidden, DTYPES[workload.dtype]
    params: list[torch.Tensor] = []
    for layer in range(workload.layers_of(stage)):
        g = _gen(device, 1, stage, layer)
        for out_f, in_f in ((4 * h, h), (h, 4 * h)):
            w = torch.randn(out_f, in_f, generator=g, device=device) * in_f ** -0.5
            b = torch.randn(out_f, generator=g, device=device) * 0.02
            params += [w.to(dtype), b.to(dtype)]
    for p in params:
        p.requires_grad_(True)
    chunk = Chunk(stage, params)
    zero_grad_buffers(chunk)
    return chunk


def zero_grad_buffers(chunk: Chunk) -> None:
    """Give every parameter a zeroed gradient buffer: what a run's memory counts as its base (``base_mib``),
    from which pptl tune subtracts the weights and their gradients."""
    for p in chunk.params:
        p.grad = torch.zeros_like(p)


def make_input(workload: Workload, direction: int, mb: int, device: torch.device) -> torch.Tensor:
    g = _gen(device, 2, direction, mb)
    return torch.randn(workload.tokens, workload.hidden, generator=g, device=device).to(DTYPES[workload.dtype])


def make_target(workload: Workload, direction: int, mb: int, device: torch.device) -> torch.Tensor:
    g = _gen(device, 3, direction, mb)
    return torch.randn(workload.tokens, workload.hidden, generator=g, device=device).to(DTYPES[workload.dtype])


def loss_of(y: torch.Tensor, target: torch.Tensor, scale: float) -> torch.Tensor:
    """Mean squared error in fp32, scaled by 1/(micro-batches in the step) so the step's loss is a mean."""
    return (y.float() - target.float()).pow(2).mean() * scale


def forward(chunk: Chunk, x: torch.Tensor, *, needs_input_grad: bool, keep_linears: bool,
            target: torch.Tensor | None = None, scale: float = 1.0) -> Activation:
    """Run the chunk on ``x`` (detached here); on the last stage pass ``target`` to get the loss."""
    leaf = x.detach().requires_grad_(needs_input_grad)
    ins: list[torch.Tensor] = []
    outs: list[torch.Tensor] = []
    h = apply_chunk(chunk, leaf, ins if keep_linears else None, outs if keep_linears else None)
    y = loss_of(h, target, scale) if target is not None else h
    if not keep_linears:
        return Activation(leaf if needs_input_grad else None, y)
    grads: list[torch.Tensor] = [None] * len(outs)  # type: ignore[list-item]
    for k, u in enumerate(outs):
        u.register_hook(_keeper(grads, k))  # the hook lives on the graph node, not on ``u``
    reach = [] if needs_input_grad else outs[:1]
    return Activation(leaf if needs_input_grad else None, y, ins, reach, grads)


def _keeper(grads: list[torch.Tensor], k: int):  # type: ignore[no-untyped-def]
    def keep(g: torch.Tensor) -> None:
        grads[k] = g
    return keep


def apply_chunk(chunk: Chunk, h: torch.Tensor, ins: list[torch.Tensor] | None = None,
                outs: list[torch.Tensor] | None = None) -> torch.Tensor:
    """The chunk's math; appends every Linear's input and output to ``ins``/``outs`` if given."""
    for w_up, b_up, w_down, b_down in chunk.layers():
        u = F.linear(h, w_up, b_up)
        a = F.gelu(u)
        d = F.linear(a, w_down, b_down)
        if ins is not None and outs is not None:
            ins += [h, a]
            outs += [u, d]
        h = h + d
    return h


def backward_full(chunk: Chunk, act: Activation, dy: torch.Tensor | None,
                  between: Callable[[], None] | None = None) -> torch.Tensor | None:
    """B: input and weight gradients (weights accumulate into ``.grad``). Returns dx.

    After a forward that kept its Linears, I then W (module docstring), with ``between`` called
    after I's work is issued and before W's (the executor marks the I part's end there); else one
    autograd pass (``between`` is not called: there is no I part to mark)."""
    if act.linear_grad is not None:
        dx = backward_input(chunk, act, dy)
        if between is not None:
            between()
        backward_weight(chunk, act)
        return dx
    inputs = list(chunk.params) + ([act.x] if act.x is not None else [])
    torch.autograd.backward(act.y, grad_tensors=dy, inputs=inputs)
    return act.x.grad if act.x is not None else None


def backward_input(chunk: Chunk, act: Activation, dy: torch.Tensor | None) -> torch.Tensor | None:
    """I: the input's gradient (the hooks keep every Linear's output gradient); frees the graph.
    Returns dx (None on stage 0)."""
    assert act.linear_grad is not None, "I of a forward that kept no Linear inputs"
    wanted = [act.x] if act.x is not None else act.linear_out
    act.linear_out = []
    (g,) = torch.autograd.grad(act.y, wanted, grad_outputs=dy)
    if act.x is None:
        act.linear_grad[0] = g  # the gradient of the output asked for (its hook may not run)
        return None
    return g


def backward_weight(chunk: Chunk, act: Activation) -> None:
    """W: accumulate dW = dU^T X and db = sum(dU) for every Linear from what I kept (the first
    micro-batch's W writes ``.grad``)."""
    assert act.linear_grad is not None, "W before I"  # the program order guarantees it
    with torch.no_grad():
        for k, (du, x) in enumerate(zip(act.linear_grad, act.linear_in)):
            w, b = chunk.params[2 * k], chunk.params[2 * k + 1]
            if w.grad is None:
                w.grad = du.t() @ x
            else:
                w.grad.addmm_(du.t(), x)
            add_bias_grad(b, du, chunk.ones)
    act.linear_grad = None
    act.linear_in = []


def add_bias_grad(b: torch.Tensor, du: torch.Tensor, ones: dict[tuple[int, torch.dtype], torch.Tensor]) -> None:
    """``b.grad += dU^T 1`` (made if None): the bias gradient of a Linear whose output gradient is
    ``du`` (rows: tokens), as a GEMV against a vector of ones taken from (or made into) ``ones``, the
    model's own cache.

    Why not ``du.sum(0)``: on CUDA that reduction over the rows stages partial sums in a temporary
    of 8 bytes per element of ``du`` (torch 2.11, H200: 32 MiB for a 1024 x 4096 bf16 ``du``, four
    times the tensor), the largest thing a W allocated and none of the plan's; the GEMV reads ``du``
    once and writes only the gradient."""
    key = (du.shape[0], du.dtype)
    v = ones.get(key)
    if v is None:
        v = ones[key] = torch.ones(du.shape[0], dtype=du.dtype, device=du.device)
    if b.grad is None:
        b.grad = du.t() @ v
    else:
        b.grad.addmv_(du.t(), v)
