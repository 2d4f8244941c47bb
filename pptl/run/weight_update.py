"""Run ``weight-update`` plans: pinned host buckets, H2D buffer, two-half IPC buffer, broadcast, reload.

What each rank holds (sizes from the plan: the tensors of ``options``, packed into its buckets):

- **host**: the tensors it owns, in one pinned buffer (the trainer's shard), bucket after bucket;
- **parameters**: every tensor of the model (the serving engine's copy), bf16 on the device;
- **H2D buffer** (owners, unless the plan's fallback mode drops it) and the **IPC buffer**: two
  halves of one bucket each.

Per bucket g of owner o (lanes as the plan's, one stream each): ``H2D`` copies the bucket from
host memory into the H2D buffer (fallback: straight into IPC half g % 2); ``COPY`` (o's ``ipc``
lane) copies it into the half; ``BCAST`` is ``dist.broadcast`` of the half from o on every rank's
``comm`` stream, in its own communicator; ``RELOAD`` copies each tensor of the bucket from the
half into its parameter. The plan's cross-rank orderings are carried by the broadcast itself and
by local waits (:func:`pptl.run.families.remote_hop_waits`): rank r's broadcast of bucket g waits
for rank r's reload of g-2 (it overwrites that half).

Correctness: each step first zeroes every parameter; after the run every rank compares each
parameter, bit for bit, with the host copy (the owner's pinned buffer itself for its own tensors;
the same seeded generator, on the same kind of device, for the others), and a mismatch fails the
run naming the tensor. Host data is generated on the device and copied to pinned memory, so
gigabytes take milliseconds to make.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

from pptl.errors import RunError
from pptl.run.executor import Executor
from pptl.run.family_program import cost_means, refine, remote_hop_waits
from pptl.run.program import Program
from pptl.schedules._weight_update_meta import WeightUpdateMeta

__all__ = ["WeightUpdateExecutor", "Layout", "layout_of"]

_SEED = 20_251_127


@dataclass(frozen=True)
class Layout:
    """Tensors and buckets of a plan, as the executor places them."""

    sizes: tuple[int, ...]
    """Bytes of every tensor, in the order the buckets are broadcast (tensor id = position)."""
    owner_of: tuple[int, ...]
    buckets: tuple[tuple[int, int, int, int, int, tuple[tuple[int, int, int], ...]], ...]
    """Per bucket g: (owner, half, bytes, offset in the owner's host buffer, bucket's first tensor,
    ((tensor id, offset in the bucket, bytes), ...))."""
    bucket_size: int
    halves: int
    h2d_buffer: bool

    def host_bytes(self, owner: int) -> int:
        return sum(s for s, o in zip(self.sizes, self.owner_of) if o == owner)


def layout_of(schedule: Any) -> Layout:
    """The tensors of each bucket: the plan's buckets (owner, bytes, tensor count) over the config's
    tensor sizes; one tensor per bucket where the plan carries no config."""
    meta = WeightUpdateMeta.of(schedule)
    rows = meta.buckets or ()
    owners_sizes: list[list[int]] | None = None
    if schedule.config is not None:
        from pptl.schedules.weight_update import spec_from_config

        owners_sizes = [list(t) for t in spec_from_config(schedule.config).owners]
    sizes: list[int] = []
    owner_of: list[int] = []
    next_tensor: dict[int, int] = {}
    host_off: dict[int, int] = {}
    buckets = []
    for b in rows:
        o, n, count = b.owner, b.bytes, b.tensors
        k = next_tensor.get(o, 0)
        mine = owners_sizes[o][k:k + count] if owners_sizes is not None else []
        if sum(mine) != n or len(mine) != count:
            mine = [n]  # no config (or another packing): the bucket is one tensor
        next_tensor[o] = k + count
        first = len(sizes)
        parts, off = [], 0
        for size in mine:
            parts.append((len(sizes), off, size))
            sizes.append(size)
            owner_of.append(o)
            off += size
        buckets.append((o, b.half, n, host_off.get(o, 0), first, tuple(parts)))
        host_off[o] = host_off.get(o, 0) + n
    # runnable() has refused a plan without buckets and bucket_size; the others have their defaults
    return Layout(tuple(sizes), tuple(owner_of), tuple(buckets), meta.bucket_size or 0,
                  2 if meta.ipc_halves is None else meta.ipc_halves, bool(meta.h2d_buffer))


def _values(tensor: int, nbytes: int, device: torch.device) -> torch.Tensor:
    """The bytes of tensor ``tensor`` (bf16 normals from a seeded generator, as uint8)."""
    g = torch.Generator(device=device)
    g.manual_seed(_SEED * 1_000_003 + tensor)
    return torch.randn(nbytes // 2, generator=g, device=device).to(torch.bfloat16).view(torch.uint8)


class WeightUpdateExecutor(Executor):
    """One rank of a ``weight-update`` plan."""

    message_modes = ("overlap",)  # its messages have their own ordering
    full_backward = None  # copies and broadcasts, no B
    measures_activations = False  # its own model and steps: buffers and state outside() does not name
    primes = False  # its own model: Executor.prime runs the training model's stages

    def __init__(self, program: Program, rank: int, device: torch.device, channels: dict[Any, Any],
                 **kw: Any) -> None:
        self.layout = layout_of(program.schedule)
        self.bgroup = _broadcast_group(channels, program.world, device)
        program = refine(program, waits=remote_hop_waits(program.schedule))
        super().__init__(program, rank, device, channels, **kw)

    def _setup_model(self) -> None:
        lay, dev = self.layout, self.device
        self.chunks = {}  # no gradients
        self.inputs, self.targets = {}, {}
        self.params = [torch.zeros(n // 2, dtype=torch.bfloat16, device=dev) for n in lay.sizes]
        self.ipc = [torch.empty(lay.bucket_size, dtype=torch.uint8, device=dev) for _ in range(lay.halves)]
        owns = any(b[0] == self.rank for b in lay.buckets)
        self.h2d = (torch.empty(lay.bucket_size, dtype=torch.uint8, device=dev)
                    if owns and lay.h2d_buffer else None)
        self.host = torch.empty(lay.host_bytes(self.rank), dtype=torch.uint8, pin_memory=dev.type == "cuda")
        self.host_at: dict[int, int] = {}  # tensor id -> offset in the host buffer
        off = 0
        for t, (size, o) in enumerate(zip(lay.sizes, lay.owner_of)):
            if o == self.rank:
                self.host[off:off + size].copy_(_values(t, size, dev))
                self.host_at[t] = off
                off += size

    def _zero_grads(self) -> None:
        # Nothing to zero but the parameters themselves, so that a reload that never happened shows.
        with torch.no_grad(), (torch.cuda.stream(self.compute) if self.cuda else _Null()):
            for p in self.params:
                p.zero_()

    def _action(self, i: int) -> Callable[[Any], None]:
        op = self.ops[i]
        owner, half, n, host_off, _first, parts = self.layout.buckets[op.bucket]
        ipc = self.ipc[half][:n]
        if op.kind == "H2D":
            dst = self.h2d[:n] if self.h2d is not None else ipc
            src = self.host[host_off:host_off + n]
            return lambda st: dst.copy_(src, non_blocking=True)
        if op.kind == "COPY":
            h2d = self.h2d[:n]
            return lambda st: ipc.copy_(h2d, non_blocking=True)
        if op.kind == "BCAST":
            def bcast(st: Any) -> None:
                work = dist.broadcast(ipc, src=owner, group=self.bgroup, async_op=self.cuda)
                if self.cuda:
                    work.wait()  # the comm stream waits; the host goes on
            return bcast
        views = [(self.params[t].view(torch.uint8), ipc[off:off + size]) for t, off, size in parts]

        def reload(st: Any) -> None:
            for dst, src in views:
                dst.copy_(src, non_blocking=True)
        return reload

    def report(self) -> dict[str, Any]:
        """Check every parameter against the host copy, bit for bit (raises RunError on a mismatch)."""
        if self.cuda:
            torch.cuda.synchronize(self.device)
        checked = 0
        for t, (size, o) in enumerate(zip(self.layout.sizes, self.layout.owner_of)):
            got = self.params[t].view(torch.uint8)
            if o == self.rank:
                off = self.host_at[t]
                want = self.host[off:off + size].to(self.device)
            else:
                want = _values(t, size, self.device)
            if not torch.equal(got, want):
                bad = int((got != want).nonzero()[0, 0])
                raise RunError(f"rank {self.rank}: reloaded tensor {t} (owner {o}, {size} bytes) differs from the "
                               f"host copy at byte {bad}")
            checked += size
        return {"bitexact": True, "tensors": len(self.layout.sizes), "bytes_checked": checked}

    @staticmethod
    def verify(program: Program, gathered: list[dict[str, Any]], device: torch.device) -> Any:
        """``--verify``: no gradients here; every rank's bit-for-bit check (a failed one stops the run)."""
        from pptl.run.verify import VerifyResult

        ok = all(p.get("report", {}).get("bitexact") for p in gathered) if all("report" in p for p in gathered) \
            else True
        return VerifyResult(ok, 0.0, 0.0, 0.0, 0.0, "reloaded parameters vs host copy, bit for bit", 0.0)

    @staticmethod
    def finish_timeline(schedule: Any, timeline: Any) -> Any:
        """Add GB/s per stage (bytes moved / measured time) and the per-cost-key means (calibration)."""
        x = timeline.meta.extra
        x["cost_means"] = cost_means(schedule, timeline.events,
                                     lambda op: ("BCAST", op.bucket) if op.kind == "BCAST" else None)
        by_id = {op.id: op for op in schedule.ops}
        rates: dict[str, list[float]] = {}
        totals: dict[str, list[float]] = {}
        for e in timeline.events:
            op = by_id.get(e.op)
            if op is None or e.duration <= 0:
                continue
            name = op.kind
            if op.kind == "BCAST":  # a receiver's broadcast also waits for the source to be ready
                name = "BCAST src" if op.peer == op.rank else "BCAST dst"
            rates.setdefault(name, []).append(op.payload / (e.duration * 1e-3) / 1e9)
            t = totals.setdefault(name, [0.0, 0.0])
            t[0] += op.payload
            t[1] += e.duration * 1e-3
        x["weight_update"] = {
            "update_ms": timeline.makespan,
            "gbps_median": {k: statistics.median(v) for k, v in sorted(rates.items())},
            "gbps_total": {k: b / s / 1e9 for k, (b, s) in sorted(totals.items()) if s > 0},
            "bitexact": all(r.get("bitexact") for r in x.get("reports", {}).values()) if x.get("reports") else None,
        }
        return timeline


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _broadcast_group(channels: dict[Any, Any], world: int, device: torch.device) -> Any:
    """One communicator of every rank for the broadcasts (kept with the channels across plans)."""
    key = ("bcast", world)
    if key not in channels:
        options = dist.ProcessGroupNCCL.Options(is_high_priority_stream=True) if device.type == "cuda" else None
        channels[key] = dist.new_group(list(range(world)), pg_options=options)
        t = torch.zeros(1, device=device)
        dist.broadcast(t, src=0, group=channels[key])  # set up the communicator outside any step
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return channels[key]
