"""The synthetic MoE layer ``pptl run`` executes for ``moe-1f1b-overlap`` plans, split into sub-ops.

One layer of one (EP member e, stage s), on ``T`` tokens of width ``h`` (the plan's workload)::

    h = x + Attn(x)                    Attn: Linear(h, 2h), GELU, Linear(2h, h)   ("attention-like")
    r = all_to_all(h)                  dispatch: token block j of every member goes to member j
    m = Expert_e(r)                    Expert_e: Linear(h, h), GELU, Linear(h, h) (member e's expert)
    y = h + all_to_all(m)              combine: the inverse all-to-all (equal splits: the same call)

Each sub-op is written out by hand (no autograd), so the plan's split is exact and the memory
each one holds is explicit: the forward keeps ``x, u_a`` (attention input and pre-activation) and
``r, u_e`` (expert input and pre-activation); offloading moves ``r, u_e`` (the expert's inputs,
Megatron's ``expert_fc1`` / ``moe_act``) to host memory and back. The backward splits as the plan
does: B.combine (all-to-all of dy), B.mlp (input gradient of the expert), B.dispatch (all-to-all
back), B.attn (input gradient of the attention part), and WGrad (every weight gradient of the
layer, delayed). :func:`reference_step` runs the same model in one process with autograd, for
``--verify``.

Weights come from generators seeded by (stage, layer) and (stage, layer, expert), inputs and
targets by (member, micro-batch), so every rank and the reference start from the same numbers.
The attention-like weights are replicated on every EP member (data-parallel within the group, as
in Megatron's EP); their gradients are per member (no all-reduce: a step ends at the gradients).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from pptl.config import Workload
from pptl.run.model import DTYPES, add_bias_grad, loss_of, make_input, make_target

__all__ = ["ATTN_WIDTH", "EXPERT_WIDTH", "FFN", "LayerState", "make_ffn", "ffn_forward", "ffn_input_grad",
           "ffn_weight_grad", "loss_grad", "split_tokens", "reference_step", "layer_bytes", "offload_bytes",
           "make_input", "make_target"]

#: Intermediate widths as multiples of the hidden size.
ATTN_WIDTH = 2
EXPERT_WIDTH = 1
_SEED = 20_251_126


def _gen(device: torch.device, *key: int) -> torch.Generator:
    seed = _SEED
    for k in key:
        seed = (seed * 1_000_003 + k + 11) % (2**61 - 1)
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


@dataclass
class FFN:
    """Linear(h, f), GELU, Linear(f, h): weights and their gradient buffers."""

    w1: torch.Tensor
    b1: torch.Tensor
    w2: torch.Tensor
    b2: torch.Tensor
    ones: dict[tuple[int, torch.dtype], torch.Tensor] = field(default_factory=dict)
    """The bias gradients' vectors of ones (:func:`pptl.run.model.add_bias_grad`)."""

    @property
    def params(self) -> list[torch.Tensor]:
        return [self.w1, self.b1, self.w2, self.b2]


def make_ffn(workload: Workload, width: int, device: torch.device, *key: int, grads: bool = True) -> FFN:
    h, dtype = workload.hidden, DTYPES[workload.dtype]
    f = width * h
    g = _gen(device, *key)
    w1 = (torch.randn(f, h, generator=g, device=device) * h ** -0.5).to(dtype)
    b1 = (torch.randn(f, generator=g, device=device) * 0.02).to(dtype)
    w2 = (torch.randn(h, f, generator=g, device=device) * f ** -0.5).to(dtype)
    b2 = (torch.randn(h, generator=g, device=device) * 0.02).to(dtype)
    ffn = FFN(w1, b1, w2, b2)
    if grads:
        for p in ffn.params:
            p.grad = torch.zeros_like(p)
    return ffn


@dataclass
class LayerState:
    """What one layer of one (member, stage, micro-batch) holds between its sub-ops."""

    x: torch.Tensor | None = None
    u_a: torch.Tensor | None = None
    h: torch.Tensor | None = None
    r: torch.Tensor | None = None
    u_e: torch.Tensor | None = None
    m: torch.Tensor | None = None
    dy: torch.Tensor | None = None
    dm: torch.Tensor | None = None
    du_e: torch.Tensor | None = None
    dr: torch.Tensor | None = None
    dh_e: torch.Tensor | None = None
    dh: torch.Tensor | None = None
    du_a: torch.Tensor | None = None
    host: list[torch.Tensor] = field(default_factory=list)
    """Host copies of ``r, u_e`` while offloaded."""


def ffn_forward(ffn: FFN, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, pre-activation u) of the block on ``x``."""
    u = F.linear(x, ffn.w1, ffn.b1)
    return F.linear(F.gelu(u), ffn.w2, ffn.b2), u


def ffn_input_grad(ffn: FFN, dout: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, du): the input gradient, and the pre-activation gradient WGrad needs."""
    du = torch.ops.aten.gelu_backward(dout @ ffn.w2, u)
    return du @ ffn.w1, du


def ffn_weight_grad(ffn: FFN, x: torch.Tensor, u: torch.Tensor, dout: torch.Tensor, du: torch.Tensor) -> None:
    """Accumulate dW2 = dout^T GELU(u), db2, dW1 = du^T x, db1 into the gradient buffers."""
    ffn.w2.grad.addmm_(dout.t(), F.gelu(u))
    add_bias_grad(ffn.b2, dout, ffn.ones)
    ffn.w1.grad.addmm_(du.t(), x)
    add_bias_grad(ffn.b1, du, ffn.ones)


def loss_grad(y: torch.Tensor, target: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, dloss/dy) of :func:`pptl.run.model.loss_of`, in closed form."""
    diff = y.float() - target.float()
    loss = diff.pow(2).mean() * scale
    return loss, (diff * (2.0 * scale / diff.numel())).to(y.dtype)


def split_tokens(tokens: int, ep: int) -> int:
    if tokens % ep:
        raise ValueError(f"workload.tokens = {tokens} is not divisible by ep = {ep}")
    return tokens // ep


def layer_bytes(workload: Workload) -> int:
    """Bytes one layer keeps for its backward: x, u_a, r, u_e."""
    t, h = workload.tokens, workload.hidden
    return t * h * (1 + ATTN_WIDTH + 1 + EXPERT_WIDTH) * DTYPES[workload.dtype].itemsize


def offload_bytes(workload: Workload) -> int:
    """Bytes one layer's Offload moves: r and u_e."""
    t, h = workload.tokens, workload.hidden
    return t * h * (1 + EXPERT_WIDTH) * DTYPES[workload.dtype].itemsize


def reference_step(workload: Workload, *, num_stages: int, ep: int, layers: int, microbatches: int,
                   device: torch.device) -> tuple[float, dict[tuple[int, int], list[torch.Tensor]]]:
    """Loss and gradients of one unpipelined step of every EP member, with autograd.

    Returns (loss summed over members, {(member, stage): [attn l0 (4), expert l0 (4), attn l1, ...]})
    with gradients on the CPU in fp32, in the order :meth:`MoEExecutor.grads` lists them.
    """
    attn = {(e, s, l): make_ffn(workload, ATTN_WIDTH, device, 1, s, l, grads=False)
            for e in range(ep) for s in range(num_stages) for l in range(layers)}
    expert = {(s, l, j): make_ffn(workload, EXPERT_WIDTH, device, 2, s, l, j, grads=False)
              for s in range(num_stages) for l in range(layers) for j in range(ep)}
    params = [p for f in list(attn.values()) + list(expert.values()) for p in f.params]
    for p in params:
        p.requires_grad_(True)
    scale = 1.0 / (microbatches * ep)

    def block(f: FFN, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.gelu(F.linear(x, f.w1, f.b1)), f.w2, f.b2)

    total = 0.0
    for mb in range(microbatches):
        xs = [make_input(workload, e, mb, device) for e in range(ep)]
        for s in range(num_stages):
            for l in range(layers):
                hs = [x + block(attn[(e, s, l)], x) for e, x in enumerate(xs)]
                parts = [h.chunk(ep) for h in hs]
                rs = [torch.cat([parts[e][j] for e in range(ep)]) for j in range(ep)]
                ms = [block(expert[(s, l, j)], r).chunk(ep) for j, r in enumerate(rs)]
                xs = [hs[e] + torch.cat([ms[j][e] for j in range(ep)]) for e in range(ep)]
        loss = sum(loss_of(x, make_target(workload, e, mb, device), scale) for e, x in enumerate(xs))
        loss.backward()
        total += float(loss.detach())
    grads = {}
    for e in range(ep):
        for s in range(num_stages):
            grads[(e, s)] = [p.grad.detach().float().cpu() for l in range(layers)
                             for f in (attn[(e, s, l)], expert[(s, l, e)]) for p in f.params]
    return total, grads
