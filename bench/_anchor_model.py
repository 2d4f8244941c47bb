"""The anchor workload of bench/torch_pp_anchor.py as importable pieces: each pipeline stage chunk is MLP
blocks (Linear h->4h, GELU, Linear 4h->h) in bf16, each micro-batch TOKENS rows of width h, and stages placed
on ranks the way torch's schedule classes expect (loop for Interleaved*, V for ZBVZeroBubble and DualPipeV)."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.nn as nn

V_SHAPED = ("ZBVZeroBubble", "DualPipeV")


class Block(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(hidden, 4 * hidden)
        self.down = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(x)))


def chunk(n_layers: int, hidden: int, dev: torch.device, dtype: torch.dtype) -> nn.Sequential:
    torch.manual_seed(1234)
    return nn.Sequential(*[Block(hidden) for _ in range(n_layers)]).to(dev, dtype)


def loss_fn(out: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    return (out.float() - tgt.float()).pow(2).mean()


def stage_ids(name: str, rank: int, world: int, v: int) -> list[int]:
    """Stages of ``rank``: V-shaped (rank, 2P-1-rank) for ZBV/DualPipeV, else looped (rank + k*P)."""
    if name in V_SHAPED:
        return [rank, 2 * world - 1 - rank]
    return [rank + k * world for k in range(v)]


def init(device: str, timeout_s: float | None = None) -> tuple[int, int, torch.device]:
    """init_process_group (nccl on cuda, gloo on cpu) from torchrun's environment: (rank, world, device)."""
    from datetime import timedelta

    kw = {"timeout": timedelta(seconds=timeout_s)} if timeout_s else {}
    dist.init_process_group("nccl" if device == "cuda" else "gloo", **kw)
    rank, world = dist.get_rank(), dist.get_world_size()
    if device == "cuda":
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
    return rank, world, dev


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
