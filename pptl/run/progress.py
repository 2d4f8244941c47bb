"""A tiny shared board where each rank posts what it is doing, so the launcher can name the op of
a rank that died or hangs (no torch; one memory write per op).

Layout: per rank one record ``(plan, step, op index, wall time)``; op index -1 means setup (or
between steps), plan :data:`NOT_STARTED` a rank that has not begun.
"""
from __future__ import annotations

import mmap
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Board", "Post", "NOT_STARTED"]

#: ``plan`` of a rank that has not posted yet.
NOT_STARTED = -2

_REC = struct.Struct("<qqqd")


@dataclass(frozen=True)
class Post:
    plan: int
    step: int
    op: int
    time: float


class Board:
    """Posts of ``world`` ranks in a file mapped by every process."""

    def __init__(self, path: str | Path, world: int, *, create: bool = False) -> None:
        self.world = world
        size = _REC.size * world
        if create:
            Path(path).write_bytes(_REC.pack(NOT_STARTED, -1, -1, time.time()) * world)
        self._fd = os.open(str(path), os.O_RDWR)
        self._map = mmap.mmap(self._fd, size)

    def post(self, rank: int, plan: int, step: int, op: int) -> None:
        _REC.pack_into(self._map, rank * _REC.size, plan, step, op, time.time())

    def read(self, rank: int) -> Post:
        return Post(*_REC.unpack_from(self._map, rank * _REC.size))

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)
