"""DualPipeV: DualPipe's phase table on a V placement, one direction, no parameter copy.

Source: torch.distributed.pipelining ``ScheduleDualPipeV`` (based on deepseek-ai/DualPipe's
``dualpipev.py``); the "cut-in-half" DualPipe of the DualPipe README.

Placement: N ranks, 2N stages in a V: rank r holds stage r (chunk 0, phase 0) and stage 2N-1-r
(chunk 1, phase 1), so the micro-batches enter and leave at rank 0. The order is
:func:`pptl.schedules.dualpipe.steps` with h = r, H = N and C-2N+r+1 main steps (C micro-batches);
the last rank runs its first main step without overlap, as DualPipe's middle ranks do.
"""
from __future__ import annotations

from pptl.config import Config
from pptl.ir import Schedule
from pptl.schedules._common import Family, Order, assemble, overlap_metrics, require, v_rank
from pptl.schedules._pipeline_meta import PipelineMeta
from pptl.schedules.dualpipe import assumptions as _assumptions
from pptl.schedules.dualpipe import realize, steps

__all__ = ["FAMILY", "NAME", "build", "validate", "bubble", "memory", "assumptions"]

NAME = "dualpipev"


def validate(cfg: Config) -> None:
    require(cfg.vpp in (1, 2), cfg, "vpp", cfg.vpp, "expected 2 (the V placement; 1 is read as 2)")
    require(cfg.microbatches >= 2 * cfg.pp, cfg, "microbatches", cfg.microbatches,
            f"expected at least 2*pp = {2 * cfg.pp} (one per stage of the V)")


def build(cfg: Config) -> Schedule:
    validate(cfg)
    n, c = cfg.pp, cfg.microbatches
    orders: dict[int, Order] = {}
    for r in range(n):
        stages = (r, 2 * n - 1 - r)
        assert all(v_rank(s, n) == (r, k) for k, s in enumerate(stages))

        def place(phase: int, stages: tuple[int, int] = stages) -> tuple[int, int, int]:
            return stages[phase], 0, phase

        orders[r] = realize(r, steps(r, n, c - 2 * n + r + 1), place)
    meta = PipelineMeta(parameter_copies=1, weight_grad_store="rank", placement="v").to_meta()
    return assemble(cfg, NAME, orders, num_stages=2 * n, microbatches=c, meta=meta)


def bubble(cfg: Config) -> float:
    """(PP/2-1)(F&B+B-3W) with PP = 2N stages, i.e. (N-1)(F&B+B-3W) on N ranks."""
    c = cfg.costs
    return (cfg.pp - 1) * (c.lookup("FB") + c.lookup("B") - 3 * c.lookup("W"))


def assumptions(cfg: Config) -> list[str]:
    """As DualPipe's (:func:`pptl.schedules.dualpipe.assumptions`) with H = p ranks."""
    return _assumptions(cfg, half=cfg.pp)


def memory(cfg: Config) -> float:
    return float(2 * cfg.pp + 1) * cfg.activation


FAMILY = Family(
    name=NAME,
    summary="DualPipeV: DualPipe's eight steps on a V (2 stages per rank), one direction, one parameter copy",
    constraints="microbatches >= 2*pp; vpp 2 (implied)",
    validate=validate,
    build=build,
    bubble=bubble,
    bubble_formula="(p-1)(F&B+B-3W) (PP/2-1 with PP = 2p stages) on every rank when I = F >= W and F&B = F+B",
    memory=memory,
    memory_formula="2p+1 stage activations per rank (PP+1 with PP = 2p stages)",
    source="torch.distributed.pipelining ScheduleDualPipeV; deepseek-ai/DualPipe dualpipev.py",
    style="dualpipe",
    torch_schedule="DualPipeV",
    assumptions=assumptions,
    extra_metrics=overlap_metrics,
    aliases=("dual-pipe-v",),
)
