"""Host memory a CPU run needs, checked before any process starts (pure: no torch).

A ``weight-update`` plan is sized like the model it updates (gigabytes), and on CPU every buffer
the executor allocates (:class:`pptl.run.weight_update.WeightUpdateExecutor`) is host memory, once
per rank: a plan of a real model then grows until the kernel's OOM killer ends a rank, a minute
in, with nothing said about memory (and the killer may pick a process that is not pptl's). Training
plans are sized by ``--hidden``/``--tokens`` and stay small; they are not counted.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pptl.errors import InputError

__all__ = ["available_bytes", "check_host_memory", "weight_update_host_bytes"]

#: Where Linux says how much memory can be taken without swapping (kB).
_MEMINFO = Path("/proc/meminfo")


def weight_update_host_bytes(schedule: Any) -> int:
    """Bytes all ranks of a CPU run of ``schedule`` (a weight-update plan) allocate together.

    Per rank: every parameter of the model (the serving copy), the IPC halves of one bucket each,
    the H2D buffer where it owns buckets and the plan keeps one, its own shard of the model (the
    host buffer), and while it makes a tensor's values three times its size (float32 normals, then
    their bf16 copy). 0 for a plan without buckets (the executor refuses it itself).
    """
    from pptl.schedules._weight_update_meta import WeightUpdateMeta

    meta = WeightUpdateMeta.of(schedule)
    buckets = meta.buckets or ()
    if not buckets:
        return 0
    model = sum(b.bytes for b in buckets)
    bucket = meta.bucket_size or max(b.bytes for b in buckets)
    halves = 2 if meta.ipc_halves is None else meta.ipc_halves
    owners = {b.owner for b in buckets}
    largest = max(b.largest or b.bytes for b in buckets)
    world = schedule.pp
    h2d = len(owners) * bucket if meta.h2d_buffer else 0
    # The shards of all owners add up to the model once.
    return int(world * (model + halves * bucket + 3 * largest) + h2d + model)


def available_bytes() -> int | None:
    """``MemAvailable`` of /proc/meminfo in bytes; None where it cannot be read (not Linux)."""
    try:
        for line in _MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_host_memory(schedule: Any, label: str, device: str) -> None:
    """Refuse a CPU run of a weight-update plan that needs more memory than this machine has free.

    Raises:
        InputError: the need and what is available, and what to change.
    """
    if device != "cpu" or schedule.family != "weight-update":
        return
    need, free = weight_update_host_bytes(schedule), available_bytes()
    if free is None or need <= free:
        return
    raise InputError(f"{label}: a CPU run of this weight-update plan needs {_gib(need)} of host memory "
                     f"({schedule.pp} ranks, each with a copy of the model and its buffers), {_gib(free)} "
                     "available here; plan a smaller options.model_size, or run it on CUDA")


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB"
