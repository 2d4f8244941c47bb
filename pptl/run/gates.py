"""Gates: a receive starts on the GPU only once its sender is ready (CUDA, all ranks on one node).

Why: an NCCL receive posted early spins on the GPU until its data comes, holding SMs the whole
time, and Hopper's persistent GEMMs then wait for those SMs: on 4 H200s, F and B ran ~15% slower
on ranks with two waiting receives than on an idle GPU, and on 2 H200s an MLP block beside one
waiting receive of 512 MB took 1.3-1.6x its time (``bench/gpu_spin.py``; a waiting send the same).
torch.distributed.pipelining avoids it by waiting for each receive on the compute stream (no
overlap); pptl keeps the overlap and instead delays the receive kernel until the sending rank has
reached its send.

How: each SEND records an interprocess CUDA event on its channel stream (producer done, channel
free) and then publishes, in a small file mapped by every local rank, the step it recorded for.
The matching RECV's host waits until that step is published (so the event it waits on is this
step's, never a stale one), then makes its channel stream wait on the event, then posts the
receive. Hosts wait only on ops earlier in the plan's linear extension (see
:mod:`pptl.run.program`), so they can never wait on each other in a cycle.
"""
from __future__ import annotations

import mmap
import os
import struct
import time
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from pptl.messages import message_key
from pptl.run.program import Program

__all__ = ["Gates", "gates_path"]

_SLOT = struct.Struct("<q")


def gates_path(rundir: str | None, plan: int) -> Path:
    if rundir:
        return Path(rundir) / f"gates{plan}.bin"
    tag = f"{os.environ.get('MASTER_ADDR', 'local')}-{os.environ.get('MASTER_PORT', '0')}"
    return Path("/dev/shm") / f"pptl-gates-{tag}-{os.environ.get('TORCHELASTIC_RUN_ID', 'x')}-{plan}.bin"


class Gates:
    """The SEND events of one plan, opened by the ranks that receive them."""

    def __init__(self, program: Program, rank: int, device: torch.device, path: Path) -> None:
        """Every rank of the plan builds its Gates together (collectives inside). Failures are
        agreed on: if any rank cannot set them up, none uses them (``self.error`` says why)."""
        ops = program.schedule.ops
        sends = [i for i, op in enumerate(ops) if op.kind == "SEND"]
        self.slot = {i: k for k, i in enumerate(sends)}
        by_key = {(ops[i].rank, message_key(ops[i])): i for i in sends}
        mine = set(program.ranks[rank].issue)
        self.send_of = {i: by_key[(op.peer, message_key(op))] for i, op in enumerate(ops)
                        if op.kind == "RECV" and i in mine}
        self.error: str | None = None
        self._path, self._fd, self._map = path, -1, None
        n = max(1, len(sends))
        if rank == 0:
            self._try(lambda: path.write_bytes(_SLOT.pack(-1) * n))
        dist.barrier()
        self.local: dict[int, torch.cuda.Event] = {}
        handles: dict[int, bytes] = {}

        def setup() -> None:
            self._fd = os.open(str(path), os.O_RDWR)
            self._map = mmap.mmap(self._fd, _SLOT.size * n)
            self.local.update({i: torch.cuda.Event(interprocess=True) for i in sends if i in mine})
            handles.update({i: ev.ipc_handle() for i, ev in self.local.items()})

        self._try(setup)
        everyone: list = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, (self.error, handles))
        merged: dict[int, bytes] = {}
        for err, h in everyone:
            self.error = self.error or err
            merged.update(h)
        self.remote: dict[int, torch.cuda.Event] = {}
        if self.error is None:
            self._try(lambda: self.remote.update(
                {i: torch.cuda.Event.from_ipc_handle(device, merged[s]) for i, s in self.send_of.items()}))
        flags: list = [None] * dist.get_world_size()
        dist.all_gather_object(flags, self.error)
        self.error = next((f for f in flags if f), None)

    @property
    def enabled(self) -> bool:
        return self.error is None

    def _try(self, fn: Callable[[], object]) -> None:
        if self.error is None:
            try:
                fn()
            except Exception as e:  # agreed on by all ranks, then the run goes on without gates
                self.error = f"{type(e).__name__}: {e}"

    def open(self, send: int, step: int, stream: torch.cuda.Stream) -> None:
        """Sender: mark that ``send``'s data is ready once ``stream`` gets here, then publish it."""
        self.local[send].record(stream)
        _SLOT.pack_into(self._map, self.slot[send] * _SLOT.size, step)

    def wait(self, recv: int, step: int, stream: torch.cuda.Stream, *, timeout: float,
             on_timeout: Callable[[], None]) -> None:
        """Receiver: make ``stream`` wait until the sender of ``recv`` is ready in this step."""
        at = self.slot[self.send_of[recv]] * _SLOT.size
        deadline = None
        while _SLOT.unpack_from(self._map, at)[0] < step:
            now = time.monotonic()
            deadline = deadline or now + timeout
            if now > deadline:
                on_timeout()
            time.sleep(0.00002)
        stream.wait_event(self.remote[recv])

    def close(self, rank: int) -> None:
        if self._map is not None:
            self._map.close()
        if self._fd >= 0:
            os.close(self._fd)
        if rank == 0 and str(self._path).startswith("/dev/shm/"):
            try:
                self._path.unlink()
            except OSError:
                pass
