"""``--verify``: the same model without a pipeline, in one process, against the pipelined step.

The reference runs every micro-batch of every direction through all logical stages in order and
calls ``backward`` on each loss (as DualPipe's ``examples/example_dualpipe.py`` ``ref_step``
does). The pipelined gradient of a logical stage is the sum over its copies (DualPipe keeps one
copy per direction and reduces their gradients). Errors are relative Frobenius norms.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from pptl.config import Workload
from pptl.run.model import apply_chunk, loss_of, make_chunk, make_input, make_target

__all__ = ["TOLERANCE", "VerifyResult", "reference_step", "compare_gradients"]

#: Largest relative error accepted per dtype (fp32 on CPU: 1e-5; bf16 on GPU: 1e-2).
TOLERANCE = {"float32": 1e-5, "bfloat16": 1e-2, "float16": 1e-2}


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    loss: float
    loss_ref: float
    loss_rel_err: float
    max_grad_rel_err: float
    worst: str
    """The parameter with the largest error, e.g. ``stage 3 layer 0 W_down``."""
    tolerance: float

    def to_dict(self) -> dict:
        return {"ok": self.ok, "loss": self.loss, "loss_ref": self.loss_ref, "loss_rel_err": self.loss_rel_err,
                "max_grad_rel_err": self.max_grad_rel_err, "worst": self.worst, "tolerance": self.tolerance}

    def line(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        return (f"verify {verdict}: loss {self.loss:.6g} vs reference {self.loss_ref:.6g} "
                f"(rel err {self.loss_rel_err:.1e}); max gradient rel err {self.max_grad_rel_err:.1e} "
                f"at {self.worst} (tolerance {self.tolerance:g})")


def reference_step(workload: Workload, *, num_stages: int, directions: int, microbatches: int,
                   device: torch.device) -> tuple[float, list[list[torch.Tensor]]]:
    """Loss and per-logical-stage gradients (on the CPU, fp32) of one unpipelined step."""
    chunks = [make_chunk(workload, s, device) for s in range(num_stages)]
    scale = 1.0 / (microbatches * directions)
    total = torch.zeros((), device=device, dtype=torch.float32)
    for d in range(directions):
        for mb in range(microbatches):
            h = make_input(workload, d, mb, device)
            for chunk in chunks:  # one graph through the whole model, no detached chunks
                h = apply_chunk(chunk, h)
            loss = loss_of(h, make_target(workload, d, mb, device), scale)
            loss.backward()
            total += loss.detach()
    grads = [[p.grad.detach().float().cpu() for p in c.params] for c in chunks]
    return float(total), grads


def compare_gradients(workload: Workload, loss: float, loss_ref: float, grads: list[list[torch.Tensor]] | None,
                      grads_ref: list[list[torch.Tensor]]) -> VerifyResult:
    """Loss and gradients against the reference; ``grads`` None (a forward-only plan): the loss alone."""
    tol = TOLERANCE[workload.dtype]
    names = ("W_up", "b_up", "W_down", "b_down")
    worst, worst_err = ("-", 0.0) if grads is not None else ("- (forward only: no gradients)", 0.0)
    for s, (mine, ref) in enumerate(zip(grads or [], grads_ref)):
        for k, (a, b) in enumerate(zip(mine, ref)):
            err = float((a - b).norm() / b.norm().clamp_min(1e-30))
            # A NaN compares false with everything: it would pass unseen unless it is the worst.
            if err > worst_err or worst == "-" or (math.isnan(err) and not math.isnan(worst_err)):
                worst, worst_err = f"stage {s} layer {k // 4} {names[k % 4]}", err
    loss_err = abs(loss - loss_ref) / max(abs(loss_ref), 1e-30)
    ok = loss_err <= tol and worst_err <= tol
    return VerifyResult(ok, loss, loss_ref, loss_err, worst_err, worst, tol)
